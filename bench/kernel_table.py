"""What exactness costs per weight type: served kernels against llama.cpp's defaults, same build.

For each weight type, on the larger random-weight models of `bench/synthetic_gguf.py` (4 layers
of 1,024-wide rows, about 50M weights, so weights dominate a step; a dense llama and an
eight-expert qwen3moe), three shapes of step:

- **prefill**: a fresh 1,000-token prompt (two llama.cpp decodes of 512 and 488 tokens);
- **decode**: one token at a time, 32 tokens after the prompt;
- **verify**: 4 lanes x 16 rows in one step, after each lane's 64-token prompt.

The served kernels (ADR 0008) and llama.cpp's defaults run in alternating subprocesses (llama.cpp
reads its switches once per process), `--rounds` of each, each round timing every shape several
times; a cell is the fastest served time over the fastest default time (lower is better, 1.00 is
llama.cpp's speed). `--write` writes the Markdown.

    .venv/bin/python -m bench.kernel_table [--type NAME ...] [--rounds 2] [--write docs/benchmarks/kernel-cost-per-weight-type/README.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import synthetic_gguf
from bench.llamacpp_bitexact import candidates

SERVED, DEFAULTS = "served (batch-invariant)", "llama.cpp defaults"
#: The exact fallback of a build without the tiled kernel's row mode: K-quants on the dot product.
FALLBACK = "K-quants untiled"
#: The types that fallback moves (the tiled kernel's types in the matrix).
TILED = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "IQ4_XS"}
#: The types the common recipes use first, then the rest of the matrix's.
COMMON = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "IQ4_NL", "F16", "BF16"]
OTHERS = ["Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "IQ4_XS", "F32"]
SHAPES = ("prefill", "decode", "verify")
PROMPT_TOKENS, DECODED, LANES, VERIFY_ROWS, REPEATS = 1000, 32, 4, 16, 5


def _tokens(n: int, seed: int) -> list[int]:
    """Token ids past the control tokens, different for every prompt (no reuse between them)."""
    return [260 + (seed * 7919 + i * 104729) % 240 for i in range(n)]


def measure(arch: str, weights: str, candidate: str) -> dict[str, list[float]]:
    """Seconds per prefill, per decoded token and per verify step, `REPEATS` times each."""
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
    from superfluid.application.ports import Feed

    model = synthetic_gguf.model(arch, weights, size="bench")
    times: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    with LlamaCppRuntime.load(
        model, ctx_size=1100, max_sequences=LANES, kernels=candidates()[candidate]
    ) as rt:
        seqs = [rt.new_sequence() for _ in range(LANES)]
        rt.step([Feed(seqs[0], _tokens(64, 99), 0)])  # warm the threads and caches
        rt.cut(seqs[0], 0)
        for r in range(REPEATS):
            prompt = _tokens(PROMPT_TOKENS, r)
            start = time.perf_counter()
            rt.step([Feed(seqs[0], prompt, 0)])
            times["prefill"].append(time.perf_counter() - start)
            start = time.perf_counter()
            for i in range(DECODED):
                rt.step([Feed(seqs[0], [prompt[i]], PROMPT_TOKENS + i)])
            times["decode"].append((time.perf_counter() - start) / DECODED)
            rt.cut(seqs[0], 0)
            for lane, seq in enumerate(seqs):
                rt.step([Feed(seq, _tokens(64, 10 * r + lane), 0)])
            rows = [
                Feed(seq, _tokens(VERIFY_ROWS, 50 + lane), 64, all_rows=True)
                for lane, seq in enumerate(seqs)
            ]
            start = time.perf_counter()
            rt.step(rows)
            times["verify"].append(time.perf_counter() - start)
            for seq in seqs:
                rt.cut(seq, 0)
    return times


def _in_subprocess(arch: str, weights: str, candidate: str) -> dict[str, list[float]]:
    command = [sys.executable, "-m", "bench.kernel_table", "--measure", arch, weights, candidate]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{arch} {weights} on {candidate}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def ratios(arch: str, weights: str, rounds: int) -> dict[str, tuple[float, float]]:
    """Per shape: (served / defaults, the defaults' fastest milliseconds); for the tiled types
    also "fallback": the dot-product fallback's prefill over the defaults'."""
    configurations = [SERVED, DEFAULTS] + ([FALLBACK] if weights in TILED else [])
    pooled: dict[str, dict[str, list[float]]] = {c: {s: [] for s in SHAPES} for c in configurations}
    for r in range(rounds):
        # Alternate the order: the machine drifts within minutes.
        for candidate in configurations if r % 2 == 0 else configurations[::-1]:
            for shape, seconds in _in_subprocess(arch, weights, candidate).items():
                pooled[candidate][shape] += seconds
    # The fastest repetition: this machine's noise only ever adds time.
    out = {}
    for shape in SHAPES:
        served = min(pooled[SERVED][shape])
        default = min(pooled[DEFAULTS][shape])
        out[shape] = (served / default, default * 1000)
    if FALLBACK in pooled:
        fallback = min(pooled[FALLBACK]["prefill"])
        out["fallback"] = (fallback / min(pooled[DEFAULTS]["prefill"]), 0.0)
    return out


HEADER = """# Kernel cost per weight type: served kernels against llama.cpp's defaults

Generated by `.venv/bin/python -m bench.kernel_table --rounds 3 --write docs/benchmarks/kernel-cost-per-weight-type/README.md` on the
benchmarks' machine (2-core AMD EPYC, AVX-512 VNNI build of llama.cpp as `scripts/install.sh` builds
it). Each cell is the served kernels' time over llama.cpp's defaults' on the same build
(lower is better; 1.00 is llama.cpp's speed): the fastest of 5 repetitions in each of 3
subprocesses per configuration, the configurations alternating (this machine's noise only adds
time); in brackets the defaults' milliseconds. Models: `bench/synthetic_gguf.py`'s larger random-weight llama
(4 layers, 1,024 wide, about 50M weights) and, for the expert path, its qwen3moe (8 experts of
768, 2 per token). prefill: 1,000 fresh tokens; decode: one token after them; verify: one step of
4 lanes x 16 rows. This machine drifts 10-25% within minutes; a cell within about ±0.05 of 1.00
is level. "dot-product fallback": the
prefill of the served kernels with K-quants on the one-row dot product at every row count
(what a build without the tiled kernel's row mode serves, with a startup line naming the types)
over the defaults'.

| model | weights | prefill | decode | verify 4x16 | dot-product fallback, prefill |
|---|---|---|---|---|---|
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--type", action="append", choices=list(synthetic_gguf.WEIGHT_TYPES))
    parser.add_argument(
        "--arch", action="append", choices=sorted(synthetic_gguf.BENCH_ARCHITECTURES)
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    lines = []
    for arch in args.arch or ["llama", "qwen3moe"]:
        types = args.type or (COMMON + OTHERS if arch == "llama" else COMMON)
        for weights in types:
            found = ratios(arch, weights, args.rounds)
            cells = " | ".join(f"{found[s][0]:.2f} ({found[s][1]:.1f} ms)" for s in SHAPES)
            fallback = f"{found['fallback'][0]:.2f}" if "fallback" in found else "-"
            line = f"| {arch} | {weights} | {cells} | {fallback} |"
            print(line, flush=True)
            lines.append(line)
    if args.write:
        args.write.write_text(HEADER + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
