"""Which llama.cpp kernel configurations keep a row's logits independent of its batch?

Speculative greedy output is plain greedy output only if the k+1 rows of a verify step equal,
bit for bit, the rows one-at-a-time decoding computes. For each candidate configuration (one
knob away from the served one, plus llama.cpp's defaults) this checks, after a short context
and after one past 512 KV cells:

- rows: N tokens fed at once against the same tokens fed one at a time, N = 1..16, 31..33 and
  63..65 (llama.cpp's attention switches kernels at 64 queries);
- prefill: the last row of a whole prompt fed in one step (512-token decodes) against the
  one-at-a-time row;
- lanes: the rows of 1, 4, 9 and 65 tokens packed with 1, 3 or 7 other lanes against alone;
- cells: a lane whose neighbour cut its tail (freeing cells) against the lane alone.

Each candidate runs in a subprocess, since llama.cpp's tiled-matmul switch is per process.

    .venv/bin/python -m bench.llamacpp_bitexact [--model PATH] [--threads N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.kernels import (
    BF16_BATCH_INVARIANT,
    LLAMACPP_DEFAULT,
    Kernels,
    served_kernels,
)
from superfluid.adapters.llamacpp.native import llama
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed, Logits

PROMPT = (
    "The river runs past the old mill, under the stone bridge and out to the sea. "
    "Every spring the water rises and the miller checks the wheel."
)
CONTINUATION = (
    " In the summer the children swim near the bridge while the miller mends nets and sings"
)
MAX_N = 65
ROWS_CHECKED = [*range(1, 17), 31, 32, 33, 63, 64, 65]
OTHER_LANES = 7
# Past 512 KV cells a one-token decode on several threads takes llama.cpp's split-KV path.
LONG = 700


def candidates() -> dict[str, Kernels]:
    """The served kernels of this build (`served_kernels`), each one knob away from them, and
    llama.cpp's defaults. A knob the build cannot turn (the tiled kernel's row order off
    AVX2-without-VNNI builds) leaves its candidates out."""
    served = served_kernels(llama())
    found = {
        "served (batch-invariant)": served,
        "BF16 KV cache (unpatched llama.cpp)": BF16_BATCH_INVARIANT,
        "F16 KV cache, stock attention": dataclasses.replace(served, tiled_attention=False),
        "K-quants untiled": served.without_tiled_kquants(),
        "weights not repacked": served.without_repacking(),
        "stock repacked kernels (gemv below 4 rows)": dataclasses.replace(
            served, repacked_gemm=False
        ),
        "one unified KV cache": dataclasses.replace(served, stream_per_sequence=False),
        "llama.cpp defaults": LLAMACPP_DEFAULT,
    }
    if served.tiled_row_order:
        found["tiled K-quant, stock row order"] = dataclasses.replace(served, tiled_row_order=False)
    return found


def one_at_a_time(rt: LlamaCppRuntime, seq: int, held: int, tokens: list[int]) -> Logits:
    rows = np.stack([rt.step([Feed(seq, [t], held + i)])[0][0] for i, t in enumerate(tokens)])
    rt.cut(seq, held)
    return rows


def check(rt: LlamaCppRuntime, prompt: list[int], tokens: list[int]) -> dict[str, object]:
    held = len(prompt)
    # The other lanes' cells come first, so cells they free lie before this lane's.
    others = [rt.new_sequence() for _ in range(OTHER_LANES)]
    starts = [held - 3 * (i + 1) for i in range(OTHER_LANES)]
    for other, start in zip(others, starts, strict=True):
        rt.step([Feed(other, prompt[:start], 0)])
    seq = rt.new_sequence()
    rt.step([Feed(seq, prompt, 0)])
    reference = one_at_a_time(rt, seq, held, tokens)
    differing = []
    for n in ROWS_CHECKED:
        rows = rt.step([Feed(seq, tokens[:n], held, all_rows=True)])[0]
        rt.cut(seq, held)
        if not np.array_equal(rows, reference[:n]):
            differing.append(n)
    rt.cut(seq, 0)
    last = rt.step([Feed(seq, prompt + tokens, 0)])[0][0]
    prefill = bool(np.array_equal(last, reference[-1]))
    rt.cut(seq, held)
    lanes_differing = []
    for per_lane in (1, 4, 9, 65):
        for lanes in (2, 4, 8):
            feeds = [Feed(seq, tokens[:per_lane], held, all_rows=True)]
            feeds += [
                Feed(o, tokens[:per_lane], s, all_rows=True)
                for o, s in zip(others[: lanes - 1], starts, strict=False)
            ]
            rows = rt.step(feeds)[0]
            for feed in feeds:
                rt.cut(feed.seq, feed.start)
            if not np.array_equal(rows, reference[:per_lane]):
                lanes_differing.append(f"{lanes}x{per_lane}")
    # Cells: a neighbour whose cells lie before this lane's cuts half of them off, then this
    # lane decodes on (a shared cache puts its new tokens into the freed cells).
    rt.cut(others[0], starts[0] // 2)
    rows = np.stack([rt.step([Feed(seq, [t], held + i)])[0][0] for i, t in enumerate(tokens)])
    cells = bool(np.array_equal(rows, reference))
    for s in (seq, *others):
        rt.free_sequence(s)
    return {
        "rows differing at N": differing,
        "prefill identical": prefill,
        "lanes differing": lanes_differing,
        "after a neighbour's cut": cells,
    }


def check_model(
    model: Path, kernels: Kernels, threads: int | None = None
) -> dict[str, dict[str, object]]:
    """`check` on `model` with `kernels`, after the short prompt and after `LONG` tokens."""
    with LlamaCppRuntime.load(
        model, ctx_size=1024, max_sequences=OTHER_LANES + 1, n_threads=threads, kernels=kernels
    ) as rt:
        tokens = (rt.tokenize(CONTINUATION, add_special=False) * 2)[:MAX_N]
        return {
            "short": check(rt, rt.tokenize(PROMPT, add_special=True), tokens),
            "long": check(rt, rt.tokenize((PROMPT + " ") * 30, add_special=True)[:LONG], tokens),
        }


def run_candidate(name: str, model: Path, threads: int | None) -> None:
    print(json.dumps(check_model(model, candidates()[name], threads)))


def runs_text(ns: list[int]) -> str:
    """1, 2, 3, 31, 32 -> "1..3, 31..32", for the table."""
    runs: list[list[int]] = []
    for n in ns:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--candidate", help=argparse.SUPPRESS)
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    if args.candidate:
        run_candidate(args.candidate, model, args.threads)
        return
    print(f"model: {model.name}; contexts of {len(PROMPT.split())} words and {LONG} tokens\n")
    print("| configuration | context | rows differ at N | prefill | lanes differ | after a cut |")
    print("|---|---|---|---|---|---|")
    for name in candidates():
        command = [sys.executable, "-m", "bench.llamacpp_bitexact", "--candidate", name]
        command += ["--model", str(model)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        for context, result in json.loads(out.splitlines()[-1]).items():
            differing = result["rows differing at N"]
            rows = runs_text(differing) or "none"
            print(
                f"| {name} | {context} | {rows} | "
                f"{'same' if result['prefill identical'] else 'differs'} | "
                f"{', '.join(result['lanes differing']) or 'none'} | "
                f"{'same' if result['after a neighbour' + chr(39) + 's cut'] else 'differs'} |"
            )


if __name__ == "__main__":
    main()
