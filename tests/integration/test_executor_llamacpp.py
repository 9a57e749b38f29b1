"""The executor on the real demo model: batched lanes, prompt-lookup that accepts, exactness."""

from __future__ import annotations

import time

import pytest

from superfluid.application.drafting import PromptLookupDrafter
from superfluid.application.executor import Executor
from superfluid.application.requests import Finish, GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0)
PASSAGE = (
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n"
)
COPY_PROMPT = f"Here is some code:\n\n{PASSAGE}\nThe same code again, copied exactly:\n\n"
OPEN_PROMPTS = [
    "The history of the lighthouse begins",
    "My favourite recipe for soup is",
    "In the year 2400, the ships",
    "Dear diary, today I",
]


def policy_that_always_drafts(depth: int) -> SpecPolicy:
    settings = SpecSettings(throughput_gate=False, min_yield=0.0, adaptive=False)
    return SpecPolicy(settings, default_depth=depth, depth_cap=depth)


def generate(runtime, prompts, *, speculate, max_tokens=48, depth=4, lanes=4, params=GREEDY):
    executor = Executor(
        runtime,
        max_lanes=lanes,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=policy_that_always_drafts(depth) if speculate else None,
    )
    requests = [
        GenerationRequest(runtime.tokenize(p, add_special=True), params, max_tokens)
        for p in prompts
    ]
    for request in requests:
        executor.submit(request)
    out = {r.id: [] for r in requests}
    last = {}
    widest = 0
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
            if event.finish is not None:
                last[event.request_id] = event
        widest = max(widest, executor.last_tick.decoding if executor.last_tick else 0)
    return [out[r.id] for r in requests], [last[r.id] for r in requests], widest


@pytest.fixture(scope="module")
def runtime(demo_gguf):
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    with LlamaCppRuntime.load(demo_gguf, ctx_size=1024, max_sequences=4) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def exact_runtime(demo_gguf):
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    with LlamaCppRuntime.load(demo_gguf, ctx_size=1024, max_sequences=4, bitexact=True) as loaded:
        yield loaded


def test_four_lanes_decode_together_and_all_finish(runtime):
    outs, lasts, widest = generate(runtime, OPEN_PROMPTS, speculate=False, max_tokens=16)
    assert widest == 4, "the lanes never decoded in one step"
    assert all(
        len(out) == 16 or last.finish is Finish.STOP for out, last in zip(outs, lasts, strict=True)
    )
    assert runtime.detokenize(outs[0]).decode("utf-8", "replace").strip()


def test_prompt_lookup_accepts_drafts_on_a_copy_heavy_prompt(runtime):
    _, (last,), _ = generate(runtime, [COPY_PROMPT], speculate=True, lanes=1)
    assert last.spec.proposed > 0
    assert last.spec.accepted > 0


def test_in_bitexact_mode_speculative_greedy_equals_plain_greedy(exact_runtime):
    depth = exact_runtime.capabilities.max_verify_rows - 1
    prompts = [COPY_PROMPT, *OPEN_PROMPTS[:3]]
    plain, _, _ = generate(exact_runtime, prompts, speculate=False, max_tokens=40)
    spec, lasts, _ = generate(exact_runtime, prompts, speculate=True, max_tokens=40, depth=depth)
    assert spec == plain
    assert sum(last.spec.accepted for last in lasts) > 0


def test_default_mode_agreement_with_plain_greedy_is_measured(runtime, record_property):
    # Without bitexact, batched rows may differ from single rows in the last bits, and greedy
    # can flip on a near-tie. Record the agreement; require only that the copy is mostly kept.
    (plain,), _, _ = generate(runtime, [COPY_PROMPT], speculate=False, lanes=1, max_tokens=40)
    (spec,), _, _ = generate(runtime, [COPY_PROMPT], speculate=True, lanes=1, max_tokens=40)
    agree = next(
        (i for i, (a, b) in enumerate(zip(plain, spec, strict=False)) if a != b),
        min(len(plain), len(spec)),
    )
    record_property("default_mode_agreeing_prefix", f"{agree}/{len(plain)}")
    print(
        f"default mode: speculative greedy agrees with plain greedy for {agree}/{len(plain)} tokens"
    )
    assert agree >= len(plain) // 2
