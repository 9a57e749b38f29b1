"""Prompt-lookup against plain decoding, through the executor, on the demo model.

    .venv/bin/python -m bench.executor_speed [--model PATH] [--tokens 128] [--repeats 3]
        [--kernels served|llama.cpp-defaults|compare]

Prints a markdown table: decode tokens/s (after the first token, so prefill is not counted) and
end-to-end tokens/s (prefill included), the ratio to plain decoding measured in the same run, and
acceptance. `--kernels compare` runs the served (batch-invariant) kernels and llama.cpp's
defaults in alternating subprocesses, so their figures share the machine's state. The open-ended workload
runs several requests on one policy so the gates settle; its figure is the settled requests'.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.http_workloads import INTERVALS
from superfluid.adapters.llamacpp.demo_model import demo_model_path
from superfluid.adapters.llamacpp.kernels import BATCH_INVARIANT, LLAMACPP_DEFAULT
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.executor import Executor
from superfluid.application.ports import Runtime
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings, default_depth
from superfluid.domain.strategies import Strategy

CODE = INTERVALS  # the same passage the HTTP bench copies

KERNELS = {"served": BATCH_INVARIANT, "llama.cpp-defaults": LLAMACPP_DEFAULT}

WORKLOADS = {
    "copy-heavy": (
        "Here is a Python module:\n\n```python\n"
        + CODE
        + "```\n\nHere is the same module again, copied exactly:\n\n```python\n"
    ),
    "open-ended": "The old lighthouse keeper had not spoken to anyone in eleven years, and",
}


@dataclass
class Run:
    tokens: int
    seconds: float
    proposed: int
    accepted: int
    total_seconds: float = 0.0  # from submission, prefill included

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def end_to_end(self) -> float:
        return (self.tokens + 1) / self.total_seconds if self.total_seconds > 0 else 0.0


def generate(
    executor: Executor, runtime: Runtime, prompts: list[str], max_tokens: int
) -> list[Run]:
    """Run prompts concurrently; per request, decode time from its first token to its end."""
    requests = [
        GenerationRequest(
            runtime.tokenize(p, add_special=True), SamplingParams(temperature=0.0), max_tokens
        )
        for p in prompts
    ]
    submitted = time.perf_counter()
    for request in requests:
        executor.submit(request)
    first: dict[int, float] = {}
    counts = {r.id: 0 for r in requests}
    runs: dict[int, Run] = {}
    while not executor.idle:
        for event in executor.tick():
            now = time.perf_counter()
            if event.tokens and event.request_id not in first:
                first[event.request_id] = now
                counts[event.request_id] -= 1  # the first token came with the prefill
            counts[event.request_id] += len(event.tokens)
            if event.finish is not None:
                start = first.get(event.request_id, now)
                runs[event.request_id] = Run(
                    counts[event.request_id],
                    now - start,
                    event.spec.proposed,
                    event.spec.accepted,
                    now - submitted,
                )
    executor.release_parked()
    return [runs[r.id] for r in requests]


def make_executor(runtime: LlamaCppRuntime, speculate: bool, lanes: int) -> Executor:
    if not speculate:
        return Executor(runtime, max_lanes=lanes, clock=time.perf_counter)
    policy = SpecPolicy(
        SpecSettings(),
        default_depth=default_depth(Strategy.PROMPT_LOOKUP),
        depth_cap=runtime.capabilities.max_verify_rows - 1,
        match_classes=PromptLookupDrafter.match_classes,
    )
    return Executor(
        runtime,
        max_lanes=lanes,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter(),
        policy=policy,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", choices=[*KERNELS, "compare"], default="served")
    parser.add_argument("--rounds", type=int, default=2, help="subprocess rounds with compare")
    args = parser.parse_args()
    model = args.model or demo_model_path(Path.home() / ".superfluid")
    if args.kernels == "compare":
        for _ in range(args.rounds):
            for name in KERNELS:
                command = [sys.executable, "-m", "bench.executor_speed", "--kernels", name]
                command += ["--model", str(model), "--tokens", str(args.tokens)]
                subprocess.run([*command, "--repeats", str(args.repeats)], check=True)
        return
    runtime = LlamaCppRuntime.load(
        model, ctx_size=2048, max_sequences=4, kernels=KERNELS[args.kernels]
    )
    print(f"\nmodel: {model.name}  kernels: {args.kernels}  tokens/request: {args.tokens}\n")
    print(
        "| workload | lanes | plain tok/s | prompt-lookup tok/s | ratio"
        " | plain end to end | prompt-lookup end to end | ratio | acceptance |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, prompt in WORKLOADS.items():
        plain_exec = make_executor(runtime, False, 1)
        spec_exec = make_executor(runtime, True, 1)
        plain_rates, spec_rates, proposed, accepted = [], [], 0, 0
        plain_e2e, spec_e2e = [], []
        # Warm-up requests let the gates settle on open-ended text, as a live server's would.
        settle = 4 if name == "open-ended" else 0
        for _ in range(settle):
            generate(spec_exec, runtime, [prompt], args.tokens)
        for _ in range(args.repeats):
            (plain,) = generate(plain_exec, runtime, [prompt], args.tokens)
            (spec,) = generate(spec_exec, runtime, [prompt], args.tokens)
            plain_rates.append(plain.rate)
            spec_rates.append(spec.rate)
            plain_e2e.append(plain.end_to_end)
            spec_e2e.append(spec.end_to_end)
            proposed += spec.proposed
            accepted += spec.accepted
        p, s = statistics.median(plain_rates), statistics.median(spec_rates)
        pe, se = statistics.median(plain_e2e), statistics.median(spec_e2e)
        rate = f"{accepted / proposed:.0%}" if proposed else "-"
        print(
            f"| {name} | 1 | {p:.1f} | {s:.1f} | {s / p:.2f}x"
            f" | {pe:.1f} | {se:.1f} | {se / pe:.2f}x | {rate} |"
        )
    for workload, lanes, speculate in (
        ("open-ended", 1, False),
        ("open-ended", 4, False),
        ("copy-heavy", 4, False),
        ("copy-heavy", 4, True),
    ):
        executor = make_executor(runtime, speculate, lanes)
        started = time.perf_counter()
        runs = generate(executor, runtime, [WORKLOADS[workload]] * lanes, args.tokens)
        elapsed = time.perf_counter() - started
        total = sum(r.tokens + 1 for r in runs)
        how = "prompt-lookup" if speculate else "plain"
        print(
            f"\n{workload}, {how}, {lanes} lane(s): {total / elapsed:.1f} tok/s aggregate end to end"
        )


if __name__ == "__main__":
    main()
