"""What do prefill and deep verify steps cost on each kernel configuration (ADR 0008's table)?

Times, on the llamacpp runtime and the demo model, a 1,000-token prefill alone and four at once
(one step, four lanes), a 4 x 65-row verify step and a one-row decode after a 1,000-token
context, for the served kernels, the BF16 configuration an unpatched llama.cpp is served with,
llama.cpp's defaults, the served kernels with a weight kernel left as it was before its patch,
the served kernels with one weight-kernel knob turned back to llama.cpp's stock kernel (to
price what those knobs cost), and the served kernels on the model's widened copy, its Q5_0
weights as Q8_0 (what `superfluid serve` loads on x86, ADR 0018). Each configuration runs in
its own subprocess (llama.cpp's switches are per process); rounds walk the configurations
forwards then backwards, and the ratios are of medians over all rounds, so drift on the machine
falls on every configuration alike.

    .venv/bin/python -m bench.llamacpp_prefill_cost [--model PATH] [--rounds N] [--reps N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.kernels import (
    BATCH_INVARIANT,
    BF16_BATCH_INVARIANT,
    LLAMACPP_DEFAULT,
    Kernels,
)
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed

#: None: the kernels `superfluid serve` picks for this build of the library (`served_kernels`);
#: "served" above them is the AVX2 build's set, which an AVX-512 build refuses (ADR 0017).
CONFIGURATIONS: dict[str, Kernels | None] = {
    "served": BATCH_INVARIANT,
    "served with K-quants untiled (before)": BATCH_INVARIANT.without_tiled_kquants(),
    "served unrepacked and untiled (first revision)": (
        BATCH_INVARIANT.without_repacking().without_tiled_kquants()
    ),
    "BF16 (unpatched llama.cpp)": BF16_BATCH_INVARIANT,
    "llama.cpp defaults": LLAMACPP_DEFAULT,
    "served + stock repacked kernels": dataclasses.replace(BATCH_INVARIANT, repacked_gemm=False),
    "served + stock tiled row order": dataclasses.replace(BATCH_INVARIANT, tiled_row_order=False),
    "served + tiled K-quant matmul at every row count": dataclasses.replace(
        BATCH_INVARIANT, tiled_row_order=False, tiled_kquants_forced=True
    ),
}
#: Configurations that load the model's widened copy (Q5_0 as Q8_0) instead of the file.
WIDENED = {"as served on this build on Q5_0 widened to Q8_0": None}
CONFIGURATIONS.update({"as served on this build": None, **WIDENED})
BASELINE = "llama.cpp defaults"
PROMPT_TOKENS = 1000
VERIFY_ROWS = 65
TEXT = (
    "The committee met on Tuesday to review the harbour plan. Members asked how the new quay "
    "would change the tides, who would pay for dredging, and whether the fishing fleet could "
    "keep its moorings during the works. The engineer answered each question in turn. "
)


def shapes(rt: LlamaCppRuntime, prompts: list[list[int]]) -> dict[str, float]:
    """Seconds for each measured shape, once."""
    out: dict[str, float] = {}
    seqs = [rt.new_sequence() for _ in range(4)]
    began = time.perf_counter()
    rt.step([Feed(seqs[0], prompts[0], 0)])
    out["prefill 1 x 1000"] = time.perf_counter() - began
    rt.cut(seqs[0], 0)
    began = time.perf_counter()
    rt.step([Feed(s, p, 0) for s, p in zip(seqs, prompts, strict=True)])
    out["prefill 4 x 1000"] = time.perf_counter() - began
    held = PROMPT_TOKENS
    draft = prompts[0][:VERIFY_ROWS]
    began = time.perf_counter()
    rt.step([Feed(s, draft, held, all_rows=True) for s in seqs])
    out["verify 4 x 65 rows"] = time.perf_counter() - began
    for s in seqs:
        rt.cut(s, held)
    began = time.perf_counter()
    rt.step([Feed(seqs[0], draft[:1], held)])
    out["decode 1 x 1 row"] = time.perf_counter() - began
    for s in seqs:
        rt.free_sequence(s)
    return out


def run_configuration(name: str, model: Path, reps: int, threads: int | None) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="widened-") as scratch,
        LlamaCppRuntime.load(
            model,
            ctx_size=2048,
            max_sequences=4,
            n_threads=threads,
            kernels=CONFIGURATIONS[name],
            weights_cache=Path(scratch) if name in WIDENED else None,
        ) as rt,
    ):
        base = rt.tokenize(TEXT * 40, add_special=False)
        # Four different prompts, so nothing is shared between lanes.
        prompts = [[rt.vocab.bos, *base[i * 7 : i * 7 + PROMPT_TOKENS - 1]] for i in range(4)]
        shapes(rt, prompts)  # warm-up: graphs and buffers for each shape
        samples: dict[str, list[float]] = {}
        for _ in range(reps):
            for shape, seconds in shapes(rt, prompts).items():
                samples.setdefault(shape, []).append(seconds)
    print(json.dumps(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2, help="walks over the configurations")
    parser.add_argument("--reps", type=int, default=3, help="measurements per subprocess")
    parser.add_argument("--only", help="comma-separated configuration names")
    parser.add_argument("--configuration", help=argparse.SUPPRESS)
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    if args.configuration:
        run_configuration(args.configuration, model, args.reps, args.threads)
        return
    names = args.only.split(",") if args.only else list(CONFIGURATIONS)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            command = [sys.executable, "-m", "bench.llamacpp_prefill_cost"]
            command += ["--configuration", name, "--model", str(model), "--reps", str(args.reps)]
            if args.threads:
                command += ["--threads", str(args.threads)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            for shape, times in json.loads(out.splitlines()[-1]).items():
                samples[name].setdefault(shape, []).extend(times)
    shape_names = list(next(iter(samples.values())))
    print(f"model: {model.name}; {args.rounds} rounds x {args.reps} reps; median seconds\n")
    print("| configuration | " + " | ".join(shape_names) + " |")
    print("|---|" + "---|" * len(shape_names))
    base = samples.get(BASELINE)
    for name in names:
        cells = []
        for shape in shape_names:
            med = statistics.median(samples[name][shape])
            ratio = f" ({med / statistics.median(base[shape]):.2f}x)" if base else ""
            cells.append(f"{med:.3f}{ratio}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
