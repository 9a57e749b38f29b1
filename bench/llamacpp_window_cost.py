"""What exact cuts cost a one-row decode on a sliding-window model: the full SWA cache, in pairs.

Gemma 3 attends over a 512-token window in five layers of six. llama.cpp's own servers keep only
that window's cells for those layers (`swa_full` off); superfluid keeps every cell
(`swa_full=True`), because cutting a rejected draft off a window-sized cache cannot give back
cells it already dropped (the llamacpp runtime refuses to speculate without it). This times one
decoded row at a long context on the served kernels with the full cache and with the window
only, and with one sequence against the served eight (one KV stream each), all loaded in one
process and alternated rep by rep (machine drift hits every configuration alike). The ratio is
the median over reps of each configuration's time over the served one's in the same rep.

    .venv/bin/python -m bench.llamacpp_window_cost [--model PATH] [--context 1200] [--reps 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed

PROMPT = "The committee met on Tuesday to review the quarterly figures and the hiring plan. " * 8

#: name -> (swa_full, sequences); the first is what `superfluid serve` runs (ADR 0008).
CONFIGURATIONS = {
    "served (full SWA cache, 8 sequences)": (True, 8),
    "full SWA cache, 1 sequence": (True, 1),
    "window-only SWA cache, 1 sequence": (False, 1),
    "window-only SWA cache, 8 sequences": (False, 8),
}


def decode_rows(rt: LlamaCppRuntime, prompt: list[int], rows: int) -> float:
    """Seconds per row of `rows` one-row steps after prefilling `prompt` into a new sequence."""
    seq = rt.new_sequence()
    try:
        rt.step([Feed(seq, prompt, 0)])
        token, position = prompt[-1], len(prompt)
        began = time.perf_counter()
        for _ in range(rows):
            rt.step([Feed(seq, [token], position)])
            position += 1
        return (time.perf_counter() - began) / rows
    finally:
        rt.free_sequence(seq)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--context", type=int, default=1200, help="tokens before the timed rows")
    parser.add_argument("--rows", type=int, default=32, help="one-row steps timed per rep")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    runtimes = {
        name: LlamaCppRuntime.load(
            model,
            ctx_size=args.context + args.rows + 64,
            max_sequences=sequences,
            swa_full=swa_full,
            n_threads=args.threads,
        )
        for name, (swa_full, sequences) in CONFIGURATIONS.items()
    }
    try:
        any_rt = next(iter(runtimes.values()))
        prompt = any_rt.tokenize(PROMPT * (args.context // 16 + 1), add_special=True)
        prompt = prompt[: args.context]
        for rt in runtimes.values():  # warm every context once, unmeasured
            decode_rows(rt, prompt[:64], 4)
        seconds: dict[str, list[float]] = {name: [] for name in runtimes}
        for rep in range(args.reps):
            order = list(runtimes) if rep % 2 == 0 else list(reversed(runtimes))
            for name in order:
                seconds[name].append(decode_rows(runtimes[name], prompt, args.rows))
        served = seconds[next(iter(CONFIGURATIONS))]
        print(
            f"{model.name}, {len(prompt)}-token context, {args.rows} rows x {args.reps} reps,"
            f" window {any_rt.sliding_window()} tokens"
        )
        print(f"{'configuration':>38} {'median ms':>10} {'x served (median, range)':>28}")
        for name, times in seconds.items():
            ratios = [t / s for t, s in zip(times, served, strict=True)]
            print(
                f"{name:>38} {statistics.median(times) * 1e3:>10.2f}"
                f" {statistics.median(ratios):>10.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
            )
    finally:
        for rt in runtimes.values():
            rt.close()


if __name__ == "__main__":
    main()
