"""Sampled acceptance of `draft-model:` on the basert fixtures: argmax drafts against q drafts.

At temperature > 0 a draft of the draft model's argmax is accepted only where the target's draw
matches it; a draft drawn from the draft model's own distribution q, verified by rejection
sampling, is accepted with probability Σ min(p, q). This runs the fixture target with the
fixture draft model on the fixture workload, once drafting the argmax (what draft-model did
before it drew from q) and once drafting from q, over several seeds, and prints acceptance
(accepted / proposed draft tokens) for each.

    .venv/bin/python -m bench.draft_model_acceptance [--temperature 0.7] [--seeds 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from superfluid.adapters.basert.runtime import BaseRTRuntime
from superfluid.adapters.fixtures.basert import make_fixtures
from superfluid.application.executor import Executor
from superfluid.application.ports import Drafter, DraftState
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from superfluid.domain.strategies import Strategy

TEXTS = [
    "The quick brown fox",
    "Once upon a time there was",
    "Here is a list of colors: red, green,",
    "The server starts, loads the model, and",
    "for i in range(10):\n    if i % 2 == 0:",
]


class ArgmaxOnly:
    """Hides `propose_sampled`: every lane drafts the argmax and is verified by matching."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.strategy = inner.strategy

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        state = self.inner.open(prompt, seq=seq)

        class _Argmax:
            propose = state.propose
            commit = state.commit

        return _Argmax()


def acceptance(
    runtime: BaseRTRuntime, drafter: Drafter, prompts: list[list[int]], params: SamplingParams
) -> tuple[int, int]:
    settings = SpecSettings(throughput_gate=False, min_yield=0.0, adaptive=False)
    policy = SpecPolicy(settings, default_depth=4, depth_cap=15)
    executor = Executor(
        runtime, max_lanes=2, clock=time.perf_counter, drafter=drafter, policy=policy
    )
    for prompt in prompts:
        executor.submit(GenerationRequest(list(prompt), params, 64))
    proposed = accepted = 0
    while not executor.idle:
        for event in executor.tick():
            if event.finish is not None:
                proposed += event.spec.proposed
                accepted += event.spec.accepted
    executor.release_parked()
    return proposed, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundles = make_fixtures(Path(tmp))
        runtime = BaseRTRuntime.load(bundles["target"], ctx_size=512, max_sequences=2)
        prompts = [runtime.tokenize(text, add_special=True) for text in TEXTS]
        totals = {"argmax drafts (before)": [0, 0], "drafts from q (after)": [0, 0]}
        for seed in range(args.seeds):
            params = SamplingParams(temperature=args.temperature, top_k=args.top_k, seed=seed)
            drafter = runtime.drafter(Strategy.DRAFT_MODEL, bundles["draft"])
            for name, chosen in (
                ("argmax drafts (before)", ArgmaxOnly(drafter)),
                ("drafts from q (after)", drafter),
            ):
                proposed, accepted = acceptance(runtime, chosen, prompts, params)
                totals[name][0] += proposed
                totals[name][1] += accepted
    print(
        f"draft-model on the basert fixtures, T={args.temperature} top_k={args.top_k},"
        f" {args.seeds} seeds x {len(TEXTS)} prompts x 64 tokens, depth 4:"
    )
    for name, (proposed, accepted) in totals.items():
        print(f"  {name:24} acceptance {accepted / max(proposed, 1):6.1%}  ({accepted}/{proposed})")


if __name__ == "__main__":
    main()
