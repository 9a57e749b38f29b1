"""`superfluid drafters`: what a directive resolves to for a model, and why."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from superfluid.application.serving import Explanation


def as_json(explanation: Explanation) -> str:
    """The explanation as a JSON document."""
    doc: dict[str, Any] = {
        "model": explanation.model,
        "runtime": explanation.runtime,
        "directive": explanation.directive,
        "resolved": None if explanation.resolved is None else str(explanation.resolved),
        "note": explanation.note,
    }
    if explanation.auto is not None:
        doc["head"] = explanation.auto.has_head
        doc["candidates"] = [
            {
                "directive": str(c.pick),
                "path": c.path,
                "kind": c.kind.value,
                "paired": c.catalog_paired,
                "rank": c.speculator_rank,
                "named_for_target": c.named_for_target,
                "same_quantisation": c.same_quantisation,
                "created": c.created,
            }
            for c in explanation.auto.candidates
        ]
        doc["skipped"] = [{"path": s.path, "reason": s.reason} for s in explanation.auto.skipped]
        doc["searched"] = list(explanation.auto.searched)
    return json.dumps(doc, indent=2)


def as_text(explanation: Explanation) -> str:
    """The explanation as the lines `superfluid drafters` prints."""
    lines = [
        f"model      {explanation.model} ({explanation.runtime} runtime)",
        f"directive  {explanation.directive}",
        f"registers  {explanation.resolved or 'nothing: decoding plainly'}",
    ]
    if explanation.note:
        lines.append(f"note       {explanation.note}")
    auto = explanation.auto
    if auto is None:
        return "\n".join(lines)
    lines.append("")
    if auto.has_head:
        lines.append("head       the target carries an MTP head: auto tries mtp-head first")
    if auto.candidates:
        lines.append("candidates, in the order auto tries them:")
        header = ("#", "directive", "paired", "rank", "named", "kind", "same quant", "created")
        rows = [
            (
                str(i),
                str(c.pick),
                _yes(c.catalog_paired),
                "-" if c.speculator_rank is None else str(c.speculator_rank),
                _yes(c.named_for_target),
                c.kind.value,
                _yes(c.same_quantisation),
                _date(c.created),
            )
            for i, c in enumerate(auto.candidates, 1)
        ]
        lines.extend(_table(header, rows))
    else:
        lines.append("candidates: none")
    if auto.skipped:
        lines.append("")
        lines.append("looked at and skipped:")
        lines.extend(f"  {s.path}: {s.reason}" for s in auto.skipped)
    lines.append("")
    lines.append("searched   " + ", ".join(auto.searched))
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _date(created: float) -> str:
    return "-" if created <= 0 else datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%d")


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
