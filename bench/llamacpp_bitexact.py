"""How far do batched logits rows stay equal to one-at-a-time rows on the llamacpp runtime?

Speculative verification feeds a lane's pending token plus k drafts in one pass and reads k+1
rows; plain decoding reads one row per pass. The output is token-for-token the plain output only
while those rows agree. For N = 1..16 this feeds N tokens at once after a shared prompt and
compares every row with the row one-at-a-time decoding gives at that position, in three
configurations: the default; bit-exact mode's kernels (flash attention on, no weight repacking,
BF16 KV cache) with the whole step in one decode; and bit-exact mode as shipped (at most
BITEXACT_ROWS tokens per decode). Each after a short context and after one past 512 KV cells.
A second table checks lane invariance: lane 0's rows alone versus packed with other lanes.

    .venv/bin/python -m bench.llamacpp_bitexact [--model PATH] [--threads N]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from superfluid.adapters.llamacpp import LlamaCppRuntime, demo_model_path
from superfluid.application.ports import Feed, Logits

PROMPT = (
    "The river runs past the old mill, under the stone bridge and out to the sea. "
    "Every spring the water rises and the miller checks the wheel."
)
CONTINUATION = (
    " In the summer the children swim near the bridge while the miller mends nets and sings"
)
MAX_N = 16
# Past 512 KV cells a one-token decode on several threads takes llama.cpp's split-KV path.
LONG = 700


def rows_of(rt: LlamaCppRuntime, seq: int, held: int, tokens: list[int]) -> tuple[Logits, Logits]:
    """(rows fed one at a time, rows fed all at once) after `held` positions; cut back after."""
    single = np.stack([rt.step([Feed(seq, [t], held + i)])[0][0] for i, t in enumerate(tokens)])
    rt.cut(seq, held)
    packed = rt.step([Feed(seq, tokens, held, all_rows=True)])[0]
    rt.cut(seq, held)
    return single, packed


def row_table(rt: LlamaCppRuntime, prompt: list[int], tokens: list[int]) -> int:
    """Print the N table; return the largest N up to which every row is bit-identical."""
    seq = rt.new_sequence()
    try:
        rt.step([Feed(seq, prompt, 0)])
        reference, _ = rows_of(rt, seq, len(prompt), tokens)
        print(f"{'N':>3} {'max |diff|':>11} {'argmax agree':>13} {'identical rows':>15}")
        exact_up_to, still_exact = 0, True
        for n in range(1, len(tokens) + 1):
            rows = rt.step([Feed(seq, tokens[:n], len(prompt), all_rows=True)])[0]
            rt.cut(seq, len(prompt))
            diffs = [float(np.max(np.abs(rows[i] - reference[i]))) for i in range(n)]
            agree = sum(int(np.argmax(rows[i]) == np.argmax(reference[i])) for i in range(n))
            identical = sum(int(d == 0.0) for d in diffs)
            still_exact = still_exact and identical == n
            exact_up_to = n if still_exact else exact_up_to
            print(f"{n:>3} {max(diffs):>11.6f} {agree:>6}/{n:<6} {identical:>8}/{n:<6}")
        return exact_up_to
    finally:
        rt.free_sequence(seq)


def lane_table(rt: LlamaCppRuntime, prompt: list[int], tokens: list[int]) -> None:
    """Lane 0's rows for 1 and 4 tokens, alone and packed with 1..3 other lanes doing the same."""
    seqs = [rt.new_sequence() for _ in range(4)]
    try:
        held = [len(prompt) - 3 * i for i in range(4)]
        for seq, n in zip(seqs, held, strict=True):
            rt.step([Feed(seq, prompt[:n], 0)])
        print(f"{'lanes':>5} {'rows/lane':>9} {'max |diff| vs alone':>20} {'argmax agree':>13}")
        for per_lane in (1, 4):
            feed = tokens[:per_lane]
            alone = rt.step([Feed(seqs[0], feed, held[0], all_rows=True)])[0]
            rt.cut(seqs[0], held[0])
            for lanes in range(2, 5):
                feeds = [Feed(s, feed, held[i], all_rows=True) for i, s in enumerate(seqs[:lanes])]
                packed = rt.step(feeds)[0]
                for i, s in enumerate(seqs[:lanes]):
                    rt.cut(s, held[i])
                diff = float(np.max(np.abs(packed - alone)))
                agree = int((packed.argmax(axis=1) == alone.argmax(axis=1)).all())
                print(f"{lanes:>5} {per_lane:>9} {diff:>20.6f} {agree:>13}")
    finally:
        for seq in seqs:
            rt.free_sequence(seq)


CONFIGS = (
    ("default", False, False),
    ("bit-exact kernels, whole step in one decode", True, True),
    ("bit-exact as shipped", True, False),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    home = Path(os.environ.get("SUPERFLUID_HOME", "~/.superfluid")).expanduser()
    model = args.model or demo_model_path(home)
    for label, bitexact, one_decode in CONFIGS:
        with LlamaCppRuntime.load(
            model, ctx_size=1024, max_sequences=4, bitexact=bitexact, n_threads=args.threads
        ) as rt:
            if one_decode:
                rt.tokens_per_decode = 512
            tokens = rt.tokenize(CONTINUATION, add_special=False)[:MAX_N]
            long_prompt = rt.tokenize((PROMPT + " ") * 30, add_special=True)[:LONG]
            for prompt in (rt.tokenize(PROMPT, add_special=True), long_prompt):
                print(f"\n== {label}: {model.name}, {len(prompt)}-token context ==")
                exact = row_table(rt, prompt, tokens)
                print(f"rows bit-identical to one-at-a-time decoding for N <= {exact}")
                lane_table(rt, prompt, tokens)


if __name__ == "__main__":
    main()
