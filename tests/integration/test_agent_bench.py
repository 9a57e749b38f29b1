"""The agent bench end to end on superfluid alone (no llama-server): `--quick` sessions on both
real models write the report and the raw JSON, superfluid's forced calls are all valid, and
superfluid auto's greedy replies and calls equal off's turn by turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import agent_bench
from bench.agent_bench import AUTO, PLAIN, CellFigures, Results, identity

pytestmark = pytest.mark.slow


def test_quick_sessions_write_the_report_and_auto_answers_as_off_does(
    tmp_path: Path, demo_gguf: Path, instruct_gguf: Path
) -> None:
    out = tmp_path / "report"
    agent_bench.main(
        [
            "--quick",
            "--models",
            f"{instruct_gguf},{demo_gguf}",
            "--systems",
            f"{AUTO},{PLAIN}",
            "--out",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ]
    )
    page = (out / "README.md").read_text()
    results = Results.load(out / "agent_bench.raw.json")
    assert [run.name for run in results.models] == [instruct_gguf.name, demo_gguf.name]
    for run in results.models:
        assert f"## {run.name}" in page
        cells = {c.system: c for c in results.cells if c.model == run.name}
        assert set(cells) == {AUTO, PLAIN}
        for cell in cells.values():
            figures = CellFigures.of(cell)
            assert figures.failed == 0 and len(figures.sessions) == 1
            # Forced calls are grammar lanes: every call turn calls, with valid arguments.
            calls, turns = figures.called.split("/")
            assert calls == turns != "0"
            valid, made = figures.valid_calls.split("/")
            assert valid == made
        same = identity(cells[AUTO], cells[PLAIN])
        assert same is not None and same.compared == 4  # 2 cycles of a call and an edit
        assert same.same == same.compared and same.beyond == 0, same.text()
