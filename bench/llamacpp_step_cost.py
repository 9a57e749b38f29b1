"""What does one packed step cost on the llamacpp runtime, by rows and by lanes?

The adaptive depth gate (docs/contract.md §7) picks k from c(r), the cost of a verify step with r
rows. This times a step feeding r = 1, 2, 4, 8, 16 tokens with a row after each (one lane), and
2 and 4 lanes feeding one token each, relative to one lane and one row, on the served
(batch-invariant) kernels, on the served kernels without one weight kernel (repacking, the tiled
K-quant kernel) or with the tiled kernel forced, and on llama.cpp's defaults. Shapes are
interleaved rep by rep; the median is what a busy machine gives, the minimum what a quiet one
does.

    .venv/bin/python -m bench.llamacpp_step_cost [--model PATH] [--threads N] [--reps N]
        [--context TOKENS] [--only served,served-unrepacked,llama.cpp-defaults] [--grid]
    .venv/bin/python -m bench.llamacpp_step_cost --logit-rows [--reps N]

`--grid` times c(rows, lanes) instead: 1, 2, 4, 8, 16, 32, 64 and 65 rows per lane, every row with
logits, on 1, 2, 4 and 8 lanes (the depths a draft of up to 64 tokens needs).

`--logit-rows` times, on the served kernels only, one lane feeding r = 1..17 tokens that all ask
for logits, and n = 1..8 lanes feeding one token each, as llama.cpp computes them ("raw": no
throwaway rows) and as the runtime runs them (rounding the logits rows up with
`cheap_logit_rows`, ADR 0013).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from superfluid.adapters.llamacpp import runtime as runtime_module
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.kernels import BATCH_INVARIANT, LLAMACPP_DEFAULT
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle. " * 4


SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (1, 16), (2, 1), (4, 1), (4, 4))  # (lanes, rows per lane)
#: `--grid`: c(rows, lanes) up to the deepest verify step a draft of 64 tokens makes, 8 lanes wide.
GRID = tuple((lanes, rows) for lanes in (1, 2, 4, 8) for rows in (1, 2, 4, 8, 16, 32, 64, 65))


def step_once(rt: LlamaCppRuntime, seqs: list[int], held: int, lanes: int, rows: int) -> float:
    """Seconds of one step feeding `rows` tokens to each of `lanes` sequences, then cut back."""
    tokens = [(1000 + 7 * i) % 5000 + 300 for i in range(rows)]
    feeds = [Feed(s, tokens, held, all_rows=True) for s in seqs[:lanes]]
    began = time.perf_counter()
    rt.step(feeds)
    elapsed = time.perf_counter() - began
    for s in seqs[:lanes]:
        rt.cut(s, held)
    return elapsed


def measure(
    rt: LlamaCppRuntime,
    seqs: list[int],
    held: int,
    reps: int,
    shapes: tuple[tuple[int, int], ...] = SHAPES,
) -> dict[tuple[int, int], list[float]]:
    """Shapes interleaved rep by rep, so a burst of load elsewhere hits them all alike."""
    samples: dict[tuple[int, int], list[float]] = {shape: [] for shape in shapes}
    for shape in shapes:  # warm-up: allocates the output buffer and graph for each shape
        step_once(rt, seqs, held, *shape)
    for _ in range(reps):
        for shape in shapes:
            samples[shape].append(step_once(rt, seqs, held, *shape))
    return samples


KERNELS = {
    "served": BATCH_INVARIANT,
    "served-unrepacked": BATCH_INVARIANT.without_repacking(),
    "served-untiled": BATCH_INVARIANT.without_tiled_kquants(),
    # What an AVX-512 VNNI build serves (no tiled K-quants there), with tinyBLAS's stock Q0
    # tiles instead of patch 0006's (scripts/patches/0006-*: the same values, slower).
    "served-sign-trick": dataclasses.replace(
        BATCH_INVARIANT.without_tiled_kquants(), offset_dot=False
    ),
    # What an AVX-512 VNNI build serves, with tinyBLAS's Q0 tiles leaving the weights to the
    # hardware prefetcher (scripts/patches/0007-*: the same values, small steps dearer).
    "served-no-prefetch": dataclasses.replace(
        BATCH_INVARIANT.without_tiled_kquants(), q0_prefetch=False
    ),
    "served-tiled-forced": dataclasses.replace(
        BATCH_INVARIANT, tiled_row_order=False, tiled_kquants_forced=True
    ),
    "llama.cpp-defaults": LLAMACPP_DEFAULT,
    # One knob at a time between the two, to find which one a shape's cost follows (not exact).
    "served-vec-attention": dataclasses.replace(BATCH_INVARIANT, tiled_attention=False),
    "served-unified-cache": dataclasses.replace(
        BATCH_INVARIANT, stream_per_sequence=False, tiled_attention=False
    ),
    "defaults-streams": dataclasses.replace(LLAMACPP_DEFAULT, stream_per_sequence=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--kernels",
        choices=sorted(KERNELS),
        help="measure one configuration in this process (default: each in a subprocess, in turn)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="subprocess rounds per configuration")
    parser.add_argument(
        "--context", type=int, default=None, help="tokens of context (default: one short prompt)"
    )
    parser.add_argument("--only", help="comma-separated configurations (default: all)")
    parser.add_argument(
        "--grid",
        action="store_true",
        help="c(rows, lanes): 1..65 rows per lane (every row with logits) on 1, 2, 4 and 8 lanes",
    )
    parser.add_argument(
        "--logit-rows", action="store_true", help="cost by logits rows, raw and as the runtime pads"
    )
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    if args.logit_rows:
        logit_rows(model, args.reps, args.threads)
        return
    if args.kernels is None:
        # llama.cpp's tiled-matmul switch is per process: one subprocess per configuration,
        # alternated, so load elsewhere on the machine hits both alike.
        names = args.only.split(",") if args.only else list(KERNELS)
        for _ in range(args.rounds):
            for name in names:
                command = [sys.executable, "-m", "bench.llamacpp_step_cost", "--kernels", name]
                command += ["--model", str(model), "--reps", str(args.reps)]
                if args.threads:
                    command += ["--threads", str(args.threads)]
                if args.context:
                    command += ["--context", str(args.context)]
                if args.grid:
                    command.append("--grid")
                subprocess.run(command, check=True)
        return
    with LlamaCppRuntime.load(
        model,
        ctx_size=max(1024, (args.context or 0) + 80),
        max_sequences=8 if args.grid else 4,
        n_threads=args.threads,
        kernels=KERNELS[args.kernels],
    ) as rt:
        prompt = rt.tokenize(PROMPT, add_special=True)
        if args.context:
            prompt = rt.tokenize(PROMPT * (args.context // 8), add_special=True)[: args.context]
        seqs = [rt.new_sequence() for _ in range(8 if args.grid else 4)]
        for s in seqs:
            rt.step([Feed(s, prompt, 0)])
        print(f"\n== {args.kernels}: {model.name}, {len(prompt)}-token context ==")
        samples = measure(rt, seqs, len(prompt), args.reps, GRID if args.grid else SHAPES)
        base_median = statistics.median(samples[(1, 1)])
        base_min = min(samples[(1, 1)])
        print(f"{'shape':>18} {'median ms':>10} {'x':>6} {'min ms':>8} {'x':>6}")
        for (lanes, rows), times in samples.items():
            med, low = statistics.median(times), min(times)
            shape = f"{lanes} lane{'s' if lanes > 1 else ''} x {rows} row{'s' if rows > 1 else ''}"
            print(
                f"{shape:>18} {med * 1e3:>10.2f} {med / base_median:>6.2f}"
                f" {low * 1e3:>8.2f} {low / base_min:>6.2f}"
            )
        for s in seqs:
            rt.free_sequence(s)


def logit_rows(model: Path, reps: int, threads: int | None) -> None:
    """The cost of a pass by its logits rows, raw and padded (minimum of `reps`, interleaved)."""
    padded = runtime_module.cheap_logit_rows
    with LlamaCppRuntime.load(model, ctx_size=1024, max_sequences=8, n_threads=threads) as rt:
        prompt = rt.tokenize(PROMPT, add_special=True)
        seqs = [rt.new_sequence() for _ in range(8)]
        for s in seqs:
            rt.step([Feed(s, prompt, 0)])
        held = len(prompt)
        shapes = [(1, r) for r in range(1, 18)] + [(n, 1) for n in range(2, 9)]
        samples: dict[tuple[str, int, int], list[float]] = {}
        for _ in range(reps + 1):  # the first round warms every shape up and is dropped
            for how, rounding in (("raw", lambda rows: rows), ("padded", padded)):
                runtime_module.cheap_logit_rows = rounding
                for lanes, rows in shapes:
                    took = step_once(rt, seqs, held, lanes, rows)
                    samples.setdefault((how, lanes, rows), []).append(took)
        runtime_module.cheap_logit_rows = padded
        base = min(samples[("raw", 1, 1)][1:])
        print(f"\n== served kernels: {model.name}, {held}-token context, minimum of {reps} ==")
        print(f"{'shape':>18} {'logits rows':>11} {'raw x':>7} {'padded x':>9}")
        for lanes, rows in shapes:
            raw = min(samples[("raw", lanes, rows)][1:]) / base
            pad = min(samples[("padded", lanes, rows)][1:]) / base
            shape = f"{lanes} lane{'s' if lanes > 1 else ''} x {rows} row{'s' if rows > 1 else ''}"
            print(f"{shape:>18} {lanes * rows:>11} {raw:>7.2f} {pad:>9.2f}")


if __name__ == "__main__":
    main()
