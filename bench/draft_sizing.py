"""Draft length: the per-lane ramp against sizing each draft by what its n-gram earned last time.

    .venv/bin/python -m bench.draft_sizing [--model PATH] [--tokens 128] [--depth 15]

Runs the HTTP bench's copy-heavy prompts (and the multi-turn workload's first turns) through the
executor, one lane, greedy, with the gates held at one depth so that the two rules are the only
difference. Greedy output is the same either way (asserted); what differs is how many rows each
round verifies. The figure of merit is committed tokens per modelled step cost, with the cost of
an r-row step from the step-cost table below (one row = 1) — modelled, because wall-clock rates
on a shared 2-core machine move by ±10–15% from run to run, more than the effect measured here.
Wall-clock decode rates are printed beside it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.http_workloads import COPY_HEAVY, MULTI_TURN
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.drafting import PromptLookupDrafter
from superfluid.application.executor import Executor
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings

#: Cost of an r-row verify step over a one-row step on the demo model (2 threads, measured
#: with bench/llamacpp_step_cost.py and the worker profiles in docs/benchmarks/profile.md).
ROWS = np.array([1, 2, 3, 5, 9, 16])
COST = np.array([1.0, 1.2, 2.0, 2.7, 4.1, 6.0])


def cost(rows: int) -> float:
    return float(np.interp(rows, ROWS, COST))


def run(runtime: LlamaCppRuntime, prompt: list[int], tokens: int, depth: int, sized: bool):
    settings = SpecSettings(throughput_gate=False, min_yield=0.0, adaptive=False)
    executor = Executor(
        runtime,
        max_lanes=1,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter(sized_by_match=sized),
        policy=SpecPolicy(settings, default_depth=depth, depth_cap=depth),
        reuse_prefixes=False,
    )
    executor.submit(GenerationRequest(prompt, SamplingParams(temperature=0.0), tokens))
    out: list[int] = []
    modelled = decode_seconds = 0.0
    committed = 0
    while not executor.idle:
        out.extend(t for e in executor.tick() for t in e.tokens)
        report = executor.last_tick
        if report is None or report.prefill_tokens or not report.decoding:
            continue
        modelled += cost(1 + report.drafted)
        committed += report.committed
        decode_seconds += report.seconds
    return out, committed, modelled, decode_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=15)
    args = parser.parse_args()
    model = args.model or demo_model_path(Path.home() / ".superfluid")
    runtime = LlamaCppRuntime.load(model, ctx_size=2048, max_sequences=1)
    prompts = {
        v.name: COPY_HEAVY.raw_prompt(v) for v in (*COPY_HEAVY.variants, *MULTI_TURN.variants)
    }
    print(f"model: {model.name}  depth: {args.depth}  tokens/request: {args.tokens}\n")
    print("| prompt | rule | tokens per modelled step | decode tok/s (wall) |")
    print("|---|---|---|---|")
    totals = {False: [0, 0.0], True: [0, 0.0]}
    for name, text in prompts.items():
        prompt = runtime.tokenize(text, add_special=True)
        outputs = []
        for sized in (False, True):
            out, committed, modelled, seconds = run(runtime, prompt, args.tokens, args.depth, sized)
            outputs.append(out)
            totals[sized][0] += committed
            totals[sized][1] += modelled
            rule = "match history" if sized else "ramp"
            print(f"| {name} | {rule} | {committed / modelled:.2f} | {committed / seconds:.1f} |")
        assert outputs[0] == outputs[1], "the draft length changed greedy output"
    ramp = totals[False][0] / totals[False][1]
    match = totals[True][0] / totals[True][1]
    print(f"\nall prompts: ramp {ramp:.3f}, match history {match:.3f} ({match / ramp:.3f}x)")


if __name__ == "__main__":
    main()
