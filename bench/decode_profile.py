"""Where one-lane plain decoding spends its time, per token, on the llamacpp runtime.

    .venv/bin/python -m bench.decode_profile [--model PATH] [--contexts 100,1000]
        [--steps 300] [--rounds 3] [--threads N]

For each configuration, in its own process (llama.cpp reads its kernel switches once per
process), a prompt of C tokens is prefilled and then decoded one token at a time, greedy, and
each step is timed:

- **step**: `LlamaCppRuntime.step` on one row, with the argmax of its logits (llama_decode, the
  batch laid out in numpy, the logits row copied out);
- **tick**: a plain request through the `Executor` (the tick's bookkeeping, the sampler, the
  committed event around the same step), on the served kernels only; a reply that ends early
  (an end-of-generation token) gives fewer ticks.

Configurations: the served kernels (`served_kernels`), the served kernels with llama.cpp's own
attention (not exact: it shows what the tiled attention costs), and llama.cpp's defaults (one
unified cache, stock kernels: what llama-server runs). Rounds alternate the configurations, so
the machine's drift falls on each alike; the table has the median over rounds of each round's
median step, in milliseconds, and the ratio to the defaults. What the HTTP server adds on top
(the event loop, streaming) is `bench.http_bench`'s `off / raw loop`.

`perf record -g .venv/bin/python -m bench.decode_profile --only served ...` gives the kernel
shares (docs/benchmarks/decode-profile-gemma3-smollm2-1-lane/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.http_workloads import HARBOUR
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.kernels import LLAMACPP_DEFAULT, Kernels, served_kernels
from superfluid.adapters.llamacpp.native import llama
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.executor import Executor
from superfluid.application.ports import Feed
from superfluid.application.requests import GenerationRequest
from superfluid.domain.sampling import SamplingParams

CONFIGURATIONS = ("served", "served, llama.cpp's attention", "llama.cpp defaults")


def kernels_for(name: str) -> Kernels:
    served = served_kernels(llama())
    return {
        "served": served,
        "served, llama.cpp's attention": dataclasses.replace(served, tiled_attention=False),
        "llama.cpp defaults": LLAMACPP_DEFAULT,
    }[name]


def prompt_tokens(rt: LlamaCppRuntime, length: int) -> list[int]:
    """`length` tokens of English prose (the bench's harbour story, repeated as needed)."""
    text = HARBOUR
    while len(tokens := rt.tokenize(text, add_special=True)) < length:
        text += "\n\n" + HARBOUR
    return tokens[:length]


def step_times(rt: LlamaCppRuntime, context: int, steps: int) -> list[float]:
    seq = rt.new_sequence()
    rt.step([Feed(seq, prompt_tokens(rt, context), 0)])
    held, token, times = context, 400, []
    for _ in range(steps):
        began = time.perf_counter()
        rows = rt.step([Feed(seq, [token], held)])
        token = int(np.argmax(rows[0][-1]))
        times.append(time.perf_counter() - began)
        held += 1
    rt.free_sequence(seq)
    return times


def tick_times(rt: LlamaCppRuntime, context: int, steps: int) -> list[float]:
    executor = Executor(rt, max_lanes=1, clock=time.perf_counter)
    request = GenerationRequest(
        prompt_tokens(rt, context), SamplingParams(temperature=0.0), steps + 1
    )
    executor.submit(request)
    executor.tick()  # the prefill
    times = []
    while not executor.idle:
        began = time.perf_counter()
        executor.tick()
        times.append(time.perf_counter() - began)
    executor.release_parked()
    return times


def run_configuration(
    name: str, model: Path, contexts: list[int], steps: int, threads: int | None
) -> None:
    kernels = kernels_for(name)
    ctx_size = max(contexts) + steps + 8
    with LlamaCppRuntime.load(
        model, ctx_size=ctx_size, max_sequences=4, n_threads=threads, kernels=kernels
    ) as rt:
        step_times(rt, 32, 16)  # warm the caches and the threads
        result: dict[str, float] = {}
        for context in contexts:
            result[f"step {context}"] = statistics.median(step_times(rt, context, steps))
            if name == "served":
                result[f"tick {context}"] = statistics.median(tick_times(rt, context, steps))
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--contexts", default="100,1000")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--only", help="one configuration, in this process (for perf)")
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.only:
        run_configuration(args.only, model, contexts, args.steps, args.threads)
        return
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGURATIONS}
    for round_ in range(args.rounds):
        order = CONFIGURATIONS if round_ % 2 == 0 else CONFIGURATIONS[::-1]
        for name in order:
            command = [sys.executable, "-m", "bench.decode_profile", "--only", name]
            command += ["--model", str(model), "--contexts", args.contexts]
            command += ["--steps", str(args.steps)]
            if args.threads:
                command += ["--threads", str(args.threads)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[name].append(json.loads(out.splitlines()[-1]))
            print(f"round {round_ + 1}: {name}: {results[name][-1]}", file=sys.stderr)
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    defaults = medians["llama.cpp defaults"]
    print(f"model: {model.name}; {args.rounds} rounds of {args.steps} one-row steps\n")
    print(
        "| configuration | "
        + " | ".join(f"context {c}: ms / token (/ defaults)" for c in contexts)
        + " |"
    )
    print("|---|" + "---|" * len(contexts))
    for name, figures in medians.items():
        cells = []
        for c in contexts:
            step = figures[f"step {c}"]
            cell = f"{step * 1e3:.2f} ({step / defaults[f'step {c}']:.2f}×)"
            if f"tick {c}" in figures:
                tick = figures[f"tick {c}"]
                cell += f"; through the executor {tick * 1e3:.2f} (+{(tick - step) * 1e3:.2f})"
            cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
