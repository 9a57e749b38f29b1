"""How many prompt-lookup tokens to verify per round, replayed without timing noise.

    .venv/bin/python -m bench.draft_length_sim [--tokens 128] [--refresh]
        [--costs intel|epyc-avx2|epyc-avx512]

Greedy speculation commits exactly the plain-greedy continuation (batch-invariant kernels, ADR
0008), so a drafting rule can be judged offline: replay each bench prompt's continuation through
prompt-lookup, let the rule choose k each round, accept the draft's common prefix with the
continuation, and charge the round the cost of a verify step of k + 1 rows. The figure is
committed tokens per one-row step (plain decoding = 1), with the served kernels' one-lane costs
to 65 rows (`GRIDS`: the Intel grid of
docs/benchmarks/verify-step-cost-8-lanes-65-rows/README.md, or the AMD EPYC machine the HTTP
benches run on, on either build). The prompts are the HTTP bench's first
fresh copy-heavy, long-prompt and open-ended ones; their continuations are decoded once with the
demo model and kept in `~/.cache/superfluid/draft-length-sim.json` (`--refresh` decodes them
again). Rules, all within the contract's draft content (docs/contract.md §4):

- **served**: `DepthController` with match classes, power-of-two row candidates up to the cap
  and skipping, warmed up over one pass of the prompts; at cap 15 (the upstream CLI's) and 64;
- **a fourth match class** for long copies (from 16, 32 or 48 tokens of match);
- **at most N after a miss**: a lane whose last draft missed drafts at most N tokens next;
- **served, cut at the first miss**: the served rule, each draft cut (by a clairvoyant) where
  it will first be rejected: what the served depths would give if a failed draft cost only its
  accepted rows (the controller still learns from the uncut draft);
- **best k**: k chosen knowing how much of the draft will be accepted (an upper bound for any
  depth rule);
- **oracle**: every round drafts 15, 31 or 63 tokens of the continuation, all accepted.

ADR 0014 has the figures this printed when the depth cap was raised.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.http_workloads import COPY_HEAVY, LONG_PROMPT, OPEN_ENDED
from superfluid.domain.gates.depth import (
    AcceptanceModel,
    DepthController,
    power_of_two_rows,
)
from superfluid.domain.gates.step_cost import StepCosts
from superfluid.domain.prompt_lookup import NGRAM_SIZES, PromptLookupIndex

#: One lane's verify step of r rows, every row with logits, relative to one row, linear between
#: the measured counts. The runtime rounds logits rows up to counts the head runs cheaply
#: (`cheap_logit_rows`), so the measured even counts are what a step of any count between them
#: costs. "intel": the served kernels' grid of
#: docs/benchmarks/verify-step-cost-8-lanes-65-rows/README.md (1 lane, 66-token context).
#: "epyc-avx2" and "epyc-avx512": the AMD EPYC 2-core machine of the HTTP benches,
#: 300-token context, on the AVX2 build and on the AVX-512 build scripts/llama_cpp_cpu_flags.sh
#: picks there (`bench.llamacpp_step_cost --kernels served[-untiled] --grid --reps 3 --context
#: 300`, medians, 2026-12-04; 65 rows measured below 64 on AVX2: taken as 64's). On AVX2 there a
#: row past the first costs about 0.35 of a one-row step, not 0.2 (ADR 0017).
GRIDS = {
    "intel": {1: 1.00, 2: 1.22, 4: 1.67, 8: 2.53, 16: 3.94, 32: 6.88, 64: 13.08, 65: 13.41},
    "epyc-avx2": {1: 1.00, 2: 1.76, 4: 2.40, 8: 4.07, 16: 6.88, 32: 12.18, 64: 23.60, 65: 23.60},
    "epyc-avx512": {1: 1.00, 2: 1.86, 4: 2.23, 8: 3.33, 16: 6.14, 32: 10.60, 64: 16.96, 65: 18.86},
}


def _interpolated(points: dict[int, float], rows: int) -> float:
    below = max(r for r in points if r <= rows)
    above = min(r for r in points if r >= rows)
    if below == above:
        return points[below]
    return points[below] + (rows - below) / (above - below) * (points[above] - points[below])


#: The cost of a step of each row count on the grid `main` chose (`use_grid`).
COST: dict[int, float] = {}


def use_grid(name: str) -> None:
    COST.clear()
    COST.update({rows: _interpolated(GRIDS[name], rows) for rows in range(1, 66)})


use_grid("intel")
DEPTH = 64
CACHE = Path.home() / ".cache" / "superfluid" / "draft-length-sim.json"
#: Prompts replayed per workload: the fresh prompts the HTTP bench sends first.
PROMPTS = {"copy-heavy": 24, "long-prompt": 12, "open-ended": 12}

# A rule: (index of the lane's history, its state dict) -> k; told (drafted, accepted) after.
Rule = tuple[Callable[[PromptLookupIndex, dict], int], Callable[[dict, int, int], None]]


def continuations(tokens: int, refresh: bool) -> dict[str, dict[str, list[int]]]:
    """Each replayed prompt's tokens and plain-greedy continuation, decoded once and cached."""
    wanted = {
        f"{workload.name}/{n}": workload
        for workload in (COPY_HEAVY, LONG_PROMPT, OPEN_ENDED)
        for n in range(PROMPTS[workload.name])
    }
    if CACHE.is_file() and not refresh:
        cached = json.loads(CACHE.read_text())
        if cached.get("tokens") == tokens and set(cached["prompts"]) == set(wanted):
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
    for name, workload in wanted.items():
        variant = workload.variant(0, int(name.rsplit("/", 1)[1]))
        prompt = runtime.tokenize(workload.raw_prompt(variant), add_special=True)
        executor.submit(GenerationRequest(prompt, SamplingParams(temperature=0.0), tokens))
        out: list[int] = []
        while not executor.idle:
            out.extend(t for event in executor.tick() for t in event.tokens)
        prompts[name] = {"prompt": prompt, "out": out}
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_text(json.dumps({"tokens": tokens, "prompts": prompts}))
    return prompts


def replay(prompt: list[int], out: list[int], rule: Rule, *, knows: bool = False) -> float:
    """Committed tokens per one-row step; `knows`: the draft is cut to what will be accepted
    (the rule is still told how much it drafted)."""
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
        offered = len(draft)
        if knows:
            draft = draft[:accepted]
        committed = out[position : position + accepted + 1]
        index.extend(committed)
        position += len(committed)
        cost += COST[len(draft) + 1]
        told(state, offered, accepted)
    return (len(out) - 1) / cost


def agreement(history: list[int], limit: int) -> int | None:
    """How many tokens the continuations of the tail's two most recent earlier occurrences
    (the n-gram prompt-lookup matched: 3, else 2) share, up to `limit`; None when the tail
    occurs earlier only once. The draft comes from the latest; where the one before it went
    elsewhere, the text has forked there before."""
    length = len(history)
    for n in NGRAM_SIZES:
        if length <= n:
            continue
        tail = history[length - n :]
        starts = [i for i in range(length - n - 1, -1, -1) if history[i : i + n] == tail][:2]
        if not starts:
            continue
        if len(starts) < 2:
            return None
        a, b = starts[0] + n, starts[1] + n
        shared = 0
        while shared < limit and a + shared < length and history[a + shared] == history[b + shared]:
            shared += 1
        return shared
    return None


def learnt(
    controller: DepthController,
    starts: tuple[int, ...],
    cap_after_miss: int | None,
    fork_floor: int | None = None,
) -> Rule:
    """The served policy's depth choice with match classes starting at `starts`; with
    `cap_after_miss`, a lane whose last draft missed drafts at most that deep next round; with
    `fork_floor`, a draft is cut where the tail's two latest continuations fork (`agreement`),
    but not below that many tokens."""

    def choose(index: PromptLookupIndex, state: dict) -> int:
        length = index.match_length()
        state["class"] = sum(1 for start in starts if length >= start)
        k = controller.choose(state["class"]) if length else 0
        if cap_after_miss is not None and state.get("missed"):
            k = min(k, cap_after_miss)
        if fork_floor is not None and k > fork_floor:
            shared = agreement(index._history, k)  # the replay's own index, read directly
            if shared is not None:
                k = max(min(k, shared), fork_floor)
        return k

    def told(state: dict, drafted: int, accepted: int) -> None:
        if drafted:
            controller.record_round(drafted, accepted, klass=state["class"])
            state["missed"] = accepted < drafted
        controller.record_step(drafted + 1, COST[drafted + 1])

    return choose, told


def served(
    prompts: list[dict[str, list[int]]],
    cap: int,
    starts: tuple[int, ...],
    cap_after_miss: int | None = None,
    *,
    cut_at_miss: bool = False,
    fork_floor: int | None = None,
) -> float:
    """The served policy at depth cap `cap`, warmed up over one pass of the prompts; with
    `cut_at_miss`, each draft is cut where it will first be rejected."""
    controller = DepthController(
        default_depth=4,
        max_depth=cap,
        costs=StepCosts(),
        acceptance=AcceptanceModel(cap, classes=len(starts) + 1),
        candidates=power_of_two_rows(cap),
        may_skip=True,
    )
    rule = learnt(controller, starts, cap_after_miss, fork_floor)
    for _ in range(2):  # the first pass warms the controller up, as a server's first requests
        runs = [replay(p["prompt"], p["out"], rule, knows=cut_at_miss) for p in prompts]
    return sum(runs) / len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--refresh", action="store_true", help="decode the continuations again")
    parser.add_argument(
        "--costs", choices=sorted(GRIDS), default="intel", help="the step-cost grid"
    )
    args = parser.parse_args()
    use_grid(args.costs)
    prompts = continuations(args.tokens, args.refresh)
    workloads = tuple(PROMPTS)

    def mine(workload: str) -> list[dict[str, list[int]]]:
        return [p for name, p in prompts.items() if name.startswith(workload + "/")]

    def best_k(workload: str) -> float:
        def always(index: PromptLookupIndex, state: dict) -> int:
            return DEPTH

        runs = [
            replay(p["prompt"], p["out"], (always, lambda *a: None), knows=True)
            for p in mine(workload)
        ]
        return sum(runs) / len(runs)

    rows: dict[str, Callable[[str], float]] = {
        "served before: cap 15, classes 3/8": lambda w: served(mine(w), 15, (3, 8)),
        "cap 64, classes 3/8 (served)": lambda w: served(mine(w), 64, (3, 8)),
        "cap 64, classes 3/8/16": lambda w: served(mine(w), 64, (3, 8, 16)),
        "cap 64, classes 3/8/32": lambda w: served(mine(w), 64, (3, 8, 32)),
        "cap 64, classes 3/8/48": lambda w: served(mine(w), 64, (3, 8, 48)),
        "cap 64, classes 3/8, 7 after a miss": lambda w: served(mine(w), 64, (3, 8), 7),
        "cap 64, classes 3/8, 15 after a miss": lambda w: served(mine(w), 64, (3, 8), 15),
        "cap 64, classes 3/8, 31 after a miss": lambda w: served(mine(w), 64, (3, 8), 31),
        "cap 64, classes 3/8, cut where the key forked, at least 0": lambda w: served(
            mine(w), 64, (3, 8), fork_floor=0
        ),
        "cap 64, classes 3/8, cut where the key forked, at least 1": lambda w: served(
            mine(w), 64, (3, 8), fork_floor=1
        ),
        "cap 64, classes 3/8, cut where the key forked, at least 3": lambda w: served(
            mine(w), 64, (3, 8), fork_floor=3
        ),
        "served, each draft cut at its first miss": lambda w: served(
            mine(w), 64, (3, 8), cut_at_miss=True
        ),
        "best k (knows the acceptance), cap 64": best_k,
        "oracle, depth 15": lambda w: 16 / COST[16],
        "oracle, depth 31": lambda w: 32 / COST[32],
        "oracle, depth 63": lambda w: 64 / COST[64],
    }
    counts = ", ".join(f"{len(mine(w))} {w}" for w in workloads)
    print(
        f"{counts} prompts, {args.tokens} tokens each, {args.costs} step costs; "
        "committed tokens per one-row step\n"
    )
    print("| rule | " + " | ".join(workloads) + " |")
    print("|---|" + "---|" * len(workloads))
    for name, figure in rows.items():
        print(f"| {name} | " + " | ".join(f"{figure(w):.2f}" for w in workloads) + " |")


if __name__ == "__main__":
    main()
