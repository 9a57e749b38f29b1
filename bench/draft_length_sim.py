"""How many prompt-lookup tokens to verify per round, replayed without timing noise.

    .venv/bin/python -m bench.draft_length_sim [--tokens 128] [--refresh]

Greedy speculation commits exactly the plain-greedy continuation (batch-invariant kernels, ADR
0008), so a drafting rule can be judged offline: replay each bench prompt's continuation through
prompt-lookup, let the rule choose k each round, accept the draft's common prefix with the
continuation, and charge the round the cost of a verify step of k + 1 rows. The figure is
committed tokens per one-row step (plain decoding = 1), with the step costs as llama.cpp computes
them ("raw") and as the runtime runs them, logits rows rounded up by `cheap_logit_rows`
("padded"). The continuations are decoded once with the demo model and kept in
`~/.cache/superfluid/draft-length-sim.json` (`--refresh` decodes them again); the cost table is
the one-lane table of ADR 0013 (the served kernels, 2 cores; run `python -m
bench.llamacpp_step_cost --logit-rows` for this machine's). Rules, all within the contract's
draft content (docs/contract.md §4):

- **ramp d15**: session 3's per-lane ramp (2 after a miss, then ×4 up to 15);
- **match length**: no draft from a bare two-token match, 7 from 3–7 tokens, 15 from 8+;
- **per class, learnt**: the served policy, `DepthController` with match classes, power-of-two
  row candidates and skipping, warmed up over two passes of the prompts;
- **best k**: k chosen knowing how much of the draft will be accepted (with padded costs, an
  upper bound for any rule);
- **oracle**: every round drafts 15 tokens of the continuation and all are accepted.

ADR 0013 has the figures this printed when the policy was chosen.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.http_workloads import COPY_HEAVY, OPEN_ENDED
from superfluid.domain.gates.depth import (
    DepthController,
    match_class,
    power_of_two_rows,
)
from superfluid.domain.gates.step_cost import StepCosts
from superfluid.domain.prompt_lookup import PromptLookupIndex

#: Cost of a one-lane verify step of r rows, all with logits, relative to one row, as llama.cpp
#: computes it (no rounding of the logits rows; ADR 0013's first table).
RAW_COST = {
    1: 1.00, 2: 2.11, 3: 3.32, 4: 2.63, 5: 3.78, 6: 3.14, 7: 4.39, 8: 3.11,
    9: 4.27, 10: 3.93, 11: 5.12, 12: 4.59, 13: 5.76, 14: 5.20, 15: 6.42, 16: 5.79,
}  # fmt: skip
PADDED_COST = {
    rows: min(RAW_COST[r] for r in range(rows, 17) if r >= rows) for rows in RAW_COST
}  # what rounding the logits rows up can reach (cheap_logit_rows takes one such count)
DEPTH = 15
CACHE = Path.home() / ".cache" / "superfluid" / "draft-length-sim.json"

# A rule: (index of the lane's history, its state dict) -> k; told (drafted, accepted) after.
Rule = tuple[Callable[[PromptLookupIndex, dict], int], Callable[[dict, int, int], None]]


def continuations(tokens: int, refresh: bool) -> dict[str, dict[str, list[int]]]:
    if CACHE.is_file() and not refresh:
        cached = json.loads(CACHE.read_text())
        if cached.get("tokens") == tokens:
            return cached["prompts"]
    from superfluid.adapters.llamacpp.demo_model import demo_model_path
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
    from superfluid.application.executor import Executor
    from superfluid.application.requests import GenerationRequest
    from superfluid.domain.sampling import SamplingParams

    runtime = LlamaCppRuntime.load(
        demo_model_path(Path.home() / ".superfluid"), ctx_size=2048, max_sequences=1
    )
    prompts: dict[str, dict[str, list[int]]] = {}
    executor = Executor(runtime, max_lanes=1, clock=time.perf_counter, reuse_prefixes=False)
    for workload in (COPY_HEAVY, OPEN_ENDED):
        for variant in workload.variants:
            prompt = runtime.tokenize(workload.raw_prompt(variant), add_special=True)
            executor.submit(GenerationRequest(prompt, SamplingParams(temperature=0.0), tokens))
            out: list[int] = []
            while not executor.idle:
                out.extend(t for event in executor.tick() for t in event.tokens)
            prompts[f"{workload.name}/{variant.name}"] = {"prompt": prompt, "out": out}
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_text(json.dumps({"tokens": tokens, "prompts": prompts}))
    return prompts


def replay(
    prompt: list[int], out: list[int], rule: Rule, costs: dict[int, float], *, knows: bool = False
) -> float:
    """Committed tokens per one-row step; `knows`: k is cut to what will be accepted."""
    choose, told = rule
    index = PromptLookupIndex([*prompt, out[0]])
    state: dict = {}
    position, cost = 1, 0.0
    while position < len(out):
        k = min(choose(index, state), len(out) - position - 1, DEPTH)
        draft = index.draft(k) if k > 0 else []
        accepted = 0
        while accepted < len(draft) and draft[accepted] == out[position + accepted]:
            accepted += 1
        if knows:
            draft = draft[:accepted]
        committed = out[position : position + accepted + 1]
        index.extend(committed)
        position += len(committed)
        cost += costs[len(draft) + 1]
        told(state, len(draft), accepted)
    return (len(out) - 1) / cost


def ramp() -> Rule:
    def choose(index: PromptLookupIndex, state: dict) -> int:
        cap = state.get("cap")
        return DEPTH if cap is None else cap

    def told(state: dict, drafted: int, accepted: int) -> None:
        if drafted:
            cap = state.get("cap")
            state["cap"] = 2 if accepted < drafted else (None if cap is None else min(cap * 4, 15))

    return choose, told


def by_match_length() -> Rule:
    def choose(index: PromptLookupIndex, state: dict) -> int:
        length = index.match_length()
        return 0 if length < 3 else 7 if length < 8 else 15

    return choose, lambda state, drafted, accepted: None


def learnt(controller: DepthController, costs: dict[int, float]) -> Rule:
    def choose(index: PromptLookupIndex, state: dict) -> int:
        length = index.match_length()
        state["class"] = match_class(length)
        return controller.choose(state["class"]) if length else 0

    def told(state: dict, drafted: int, accepted: int) -> None:
        if drafted:
            controller.record_round(drafted, accepted, klass=state["class"])
        controller.record_step(drafted + 1, costs[drafted + 1])

    return choose, told


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--refresh", action="store_true", help="decode the continuations again")
    args = parser.parse_args()
    prompts = continuations(args.tokens, args.refresh)
    workloads = ("copy-heavy", "open-ended")

    def mean(rule: Callable[[], Rule], costs: dict[int, float], workload: str, **kw: bool) -> float:
        runs = [
            replay(p["prompt"], p["out"], rule(), costs, **kw)
            for name, p in prompts.items()
            if name.startswith(workload)
        ]
        return sum(runs) / len(runs)

    def served(costs: dict[int, float], workload: str) -> float:
        controller = DepthController(
            default_depth=4,
            max_depth=DEPTH,
            costs=StepCosts(),
            candidates=power_of_two_rows(DEPTH),
            may_skip=True,
        )
        mine = [p for name, p in prompts.items() if name.startswith(workload)]
        for _ in range(2):  # the first pass warms the controller up, as a server's first requests
            runs = [replay(p["prompt"], p["out"], learnt(controller, costs), costs) for p in mine]
        return sum(runs) / len(runs)

    rows: dict[str, Callable[[dict[int, float], str], float]] = {
        "ramp d15 (session 3)": lambda costs, w: mean(ramp, costs, w),
        "match length (2: none, 3-7: 7, 8+: 15)": lambda costs, w: mean(by_match_length, costs, w),
        "per class, learnt (served)": served,
        "best k (knows the acceptance)": lambda costs, w: mean(
            lambda: (lambda index, state: DEPTH, lambda *a: None), costs, w, knows=True
        ),
        f"oracle, depth {DEPTH}": lambda costs, w: (DEPTH + 1) / costs[DEPTH + 1],
    }
    print(f"{len(prompts)} prompts, {args.tokens} tokens each; tokens per one-row step\n")
    print("| rule | copy-heavy raw | copy-heavy padded | open-ended raw | open-ended padded |")
    print("|---|---|---|---|---|")
    for name, figure in rows.items():
        cells = [figure(c, w) for w in workloads for c in (RAW_COST, PADDED_COST)]
        print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in cells) + " |")


if __name__ == "__main__":
    main()
