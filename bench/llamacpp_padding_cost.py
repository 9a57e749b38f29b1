"""Pad a verify step's shorter feeds into one pass, or let llama.cpp split it? (ADR 0008)

With one KV stream per sequence, llama.cpp runs the lanes of a step in one pass only while they
feed equally many tokens; lanes that draft different depths make it split the step into several
passes, each reading every weight again. The runtime can instead pad the shorter feeds with
throwaway tokens (no logits row, cut off after the decode), which costs rows but saves passes.
`PADDING_ROWS_PER_PASS` says how many padding rows a saved pass is worth. This times steps of
four lanes with unequal feeds both ways, at one context length, interleaved rep by rep, and
prints which way was cheaper next to what the runtime's rule picks.

    .venv/bin/python -m bench.llamacpp_padding_cost [--context TOKENS] [--reps N] [--model PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from superfluid.adapters.llamacpp import runtime as runtime_module
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed

#: Four lanes' feed widths (pending token + draft): equal ones for reference, then the unequal
#: shapes a tick whose lanes draft different depths makes.
CASES = (
    (1, 1, 1, 1),
    (4, 4, 4, 4),
    (8, 8, 8, 8),
    (4, 2, 4, 4),
    (4, 1, 1, 1),
    (4, 4, 1, 1),
    (8, 8, 8, 1),
    (8, 8, 4, 4),
    (8, 4, 4, 1),
    (8, 4, 8, 1),
    (4, 2, 8, 4),
    (8, 4, 4, 4),
    (8, 8, 1, 1),
    (8, 1, 1, 1),
    (16, 4, 4, 4),
    (16, 8, 8, 8),
)

NEVER, ALWAYS = 0, 1_000_000  # PADDING_ROWS_PER_PASS values that force each way


def step_once(
    rt: LlamaCppRuntime, seqs: list[int], held: int, widths: tuple[int, ...], rows_per_pass: int
) -> float:
    runtime_module.PADDING_ROWS_PER_PASS = rows_per_pass
    feeds = [
        Feed(seq, [300 + 7 * j for j in range(width)], held, all_rows=True)
        for seq, width in zip(seqs, widths, strict=True)
    ]
    began = time.perf_counter()
    rt.step(feeds)
    elapsed = time.perf_counter() - began
    for seq in seqs:
        rt.cut(seq, held)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1000, help="tokens each lane holds")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the demo model)")
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    rule = runtime_module.PADDING_ROWS_PER_PASS
    rt = LlamaCppRuntime.load(args.model or demo_model_path(home), ctx_size=2048, max_sequences=8)
    seqs = [rt.new_sequence() for _ in range(4)]
    prompt = [rt.vocab.bos] + [100 + i % 500 for i in range(args.context - 1)]
    for seq in seqs:
        rt.step([Feed(seq, prompt, 0)])
    times: dict[tuple[tuple[int, ...], int], list[float]] = {}
    for _ in range(args.reps):
        for widths in CASES:
            for way in (NEVER, ALWAYS):
                times.setdefault((widths, way), []).append(
                    step_once(rt, seqs, args.context, widths, way)
                )
    runtime_module.PADDING_ROWS_PER_PASS = rule
    unit = statistics.median(times[(CASES[0], NEVER)])
    print(
        f"four lanes at {args.context} tokens each; cost relative to four lanes x one row "
        f"({1000 * unit:.1f} ms), median of {args.reps}; the rule: PADDING_ROWS_PER_PASS = {rule}"
    )
    print()
    print("| feeds | padding rows | split | padded | cheaper | the rule pads |")
    print("|---|---|---|---|---|---|")
    for widths in CASES:
        split = statistics.median(times[(widths, NEVER)]) / unit
        padded = statistics.median(times[(widths, ALWAYS)]) / unit
        feeds = [Feed(seq, [0] * w, args.context) for seq, w in zip(seqs, widths, strict=True)]
        pads = rt._padded_widths(feeds) != list(widths)  # the rule under test
        added = max(widths) * len(widths) - sum(widths)
        cheaper = "–" if not added else ("padded" if padded < split else "split")
        shown = "–" if not added else ("yes" if pads else "no")
        print(
            f"| {'/'.join(map(str, widths))} | {added} | {split:.2f} | {padded:.2f} | {cheaper} | {shown} |"
        )
    rt.close()


if __name__ == "__main__":
    main()
