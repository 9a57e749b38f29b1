"""The executor on the real demo model: batched lanes, prompt-lookup that accepts, exactness."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superfluid.application.events import Finish
from superfluid.application.executor import Executor
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from tests.fakes import ClassPlan

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


def generate(
    runtime, prompts, *, speculate, max_tokens=48, depth=4, lanes=4, params=GREEDY, policy=None
):
    executor = Executor(
        runtime,
        max_lanes=lanes,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=(policy or policy_that_always_drafts(depth)) if speculate else None,
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
    executor.release_parked()
    return [out[r.id] for r in requests], [last[r.id] for r in requests], widest


@pytest.fixture(scope="module")
def runtime(demo_gguf):
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    with LlamaCppRuntime.load(demo_gguf, ctx_size=1024, max_sequences=4) as loaded:
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


# Exactness: greedy output with speculation is plain greedy output, token for token, whatever
# the depth, the lane count and what the other lanes do (kernels.py says why it holds).

SENTENCES = [
    "The committee met on Tuesday to review the budget for the new library wing.",
    "def total(items):\n    return sum(item.price * item.count for item in items)\n",
    "Rain fell over the harbour while the fishing boats waited for the tide.",
    "Step 3: remove the cover, disconnect the battery and wait ten seconds.",
    "The invoice lists 12 chairs, 3 tables and a lamp, shipped to the Leeds office.",
    "She wrote that the experiment failed twice before the sensor was recalibrated.",
    "<tr><td>Oslo</td><td>Norway</td><td>709,037</td></tr>\n",
    "Users report that the export button freezes when the file is larger than 2 GB.",
]


def long_conversation(turns: int) -> str:
    """A multi-turn, copy-heavy prompt of roughly 160 tokens a turn."""
    parts = []
    for turn in range(turns):
        picked = [SENTENCES[(turn * 3 + i) % len(SENTENCES)] for i in range(4)]
        parts.append(f"<user> Turn {turn}: please repeat these notes.\n" + " ".join(picked))
        parts.append("<assistant> " + " ".join(picked))
    return "\n".join(parts) + "\n<user> Repeat the notes of turn 2 once more.\n<assistant>"


@pytest.fixture(scope="module")
def long_runtime(demo_gguf):
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    with LlamaCppRuntime.load(demo_gguf, ctx_size=2048, max_sequences=4) as loaded:
        yield loaded


def plain_reference(runtime, prompts, max_tokens):
    """Each prompt decoded alone, one token a step: the output every other run must equal."""
    return [
        generate(runtime, [p], speculate=False, lanes=1, max_tokens=max_tokens)[0][0]
        for p in prompts
    ]


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_speculative_greedy_equals_plain_greedy_at_every_depth_and_lane_count(runtime, lanes):
    prompts = [COPY_PROMPT, *OPEN_PROMPTS[:3]]
    plain = plain_reference(runtime, prompts, 40)
    for depth in (3, 8, 15, 31, 64):  # up to 65 rows a lane (contract §4)
        spec, lasts, _ = generate(
            runtime, prompts, speculate=True, max_tokens=40, depth=depth, lanes=lanes
        )
        assert spec == plain, f"depth {depth}, {lanes} lane(s)"
        assert sum(last.spec.accepted for last in lasts) > 0


def test_on_long_contexts_speculation_and_load_change_no_token(long_runtime):
    prompts = [long_conversation(turns) for turns in (10, 11, 12, 10)]
    sizes = [len(long_runtime.tokenize(p, add_special=True)) for p in prompts]
    assert min(sizes) > 1500, sizes
    assert max(sizes) + 48 < 2048, sizes
    plain = assert_load_and_speculation_change_no_token(long_runtime, prompts)
    assert all(len(out) == 48 for out in plain)


def assert_load_and_speculation_change_no_token(runtime, prompts):
    """Four lanes at once, plainly and with depth-15 drafts, decode each prompt's plain greedy
    continuation alone (returned), and some drafts are accepted."""
    plain = plain_reference(runtime, prompts, 48)
    together, _, widest = generate(runtime, prompts, speculate=False, max_tokens=48)
    spec, lasts, _ = generate(runtime, prompts, speculate=True, max_tokens=48, depth=15)
    assert widest == 4
    assert together == plain
    assert spec == plain
    assert sum(last.spec.accepted for last in lasts) > 0
    return plain


def test_with_the_default_gates_greedy_output_is_plain_greedy(long_runtime):
    # The gates pick depths per tick and each lane drafts as deep as its match class allows: any depth
    # sequence must leave the output alone.
    prompts = [COPY_PROMPT, long_conversation(6), *OPEN_PROMPTS[:2]]
    plain = plain_reference(long_runtime, prompts, 64)
    executor = Executor(
        long_runtime,
        max_lanes=4,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter(),
        policy=SpecPolicy(
            SpecSettings(),
            default_depth=4,
            depth_cap=15,
            match_classes=PromptLookupDrafter.match_classes,
        ),
    )
    requests = [
        GenerationRequest(long_runtime.tokenize(p, add_special=True), GREEDY, 64) for p in prompts
    ]
    for request in requests:
        executor.submit(request)
    out = {r.id: [] for r in requests}
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
    executor.release_parked()
    assert [out[r.id] for r in requests] == plain


def test_drafts_that_fill_a_padded_step_decode_as_plain_greedy(runtime):
    # Only matches of 8+ tokens are asked to draft; the other lanes fill the ticks one drafts in
    # (TickPlan.fill), so the real model's steps are padded and filled: output stays plain's.
    prompts = [COPY_PROMPT, *OPEN_PROMPTS[:3]]
    plain = plain_reference(runtime, prompts, 40)
    policy = ClassPlan((0, 0, 7), fill=True)
    spec, _, widest = generate(runtime, prompts, speculate=True, max_tokens=40, policy=policy)
    assert widest == 4
    assert spec == plain
    assert any(klass < 2 and drafted for klass, drafted, _ in policy.rounds), "nothing filled"


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    picks=st.lists(st.integers(0, len(SENTENCES) - 1), min_size=2, max_size=6),
    repeat=st.integers(0, 3),
    depth=st.sampled_from([2, 5, 15]),
)
def test_prompts_hypothesis_chooses_decode_the_same_with_and_without_drafts(
    runtime, picks, repeat, depth
):
    body = " ".join(SENTENCES[i] for i in picks)
    prompt = f"Notes:\n{body}\n\nThe notes again:\n" + " ".join(
        SENTENCES[i] for i in picks[:repeat]
    )
    plain = plain_reference(runtime, [prompt], 32)
    spec, _, _ = generate(runtime, [prompt], speculate=True, lanes=1, max_tokens=32, depth=depth)
    assert spec == plain


def converse(runtime, openings, lines, params, *, reuse, speculate):
    """Turn by turn: each prompt is the last prompt, its reply and a new user line."""
    executor = Executor(
        runtime,
        max_lanes=4,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=policy_that_always_drafts(8) if speculate else None,
        reuse_prefixes=reuse,
    )
    prompts = [runtime.tokenize(p, add_special=True) for p in openings]
    replies, reused = [], 0
    for line in lines:
        requests = [GenerationRequest(p, params, 24) for p in prompts]
        for request in requests:
            executor.submit(request)
        out = {r.id: [] for r in requests}
        while not executor.idle:
            for event in executor.tick():
                out[event.request_id].extend(event.tokens)
            reused += executor.last_tick.reused_tokens if executor.last_tick else 0
        replies.append([out[r.id] for r in requests])
        extra = runtime.tokenize(line, add_special=False)
        prompts = [p + out[r.id] + extra for p, r in zip(prompts, requests, strict=True)]
    executor.release_parked()
    return replies, reused


@pytest.mark.parametrize(
    "params",
    [GREEDY, SamplingParams(temperature=0.8, top_k=40, seed=11)],
    ids=["greedy", "seeded"],
)
def test_a_reused_prefix_changes_no_token_on_the_real_model(long_runtime, params):
    openings = [long_conversation(3), COPY_PROMPT, OPEN_PROMPTS[0]]
    lines = ["\n<user> Go on.\n<assistant>", "\n<user> And then?\n<assistant>", "\n"]
    fresh, none = converse(long_runtime, openings, lines, params, reuse=False, speculate=True)
    again, reused = converse(long_runtime, openings, lines, params, reuse=True, speculate=True)
    plain, _ = converse(long_runtime, openings, lines, params, reuse=True, speculate=False)
    assert none == 0 and reused > 500
    assert again == fresh
    if params.is_greedy:
        assert plain == fresh


@pytest.fixture(scope="module")
def instruct_runtime(instruct_gguf):
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    with LlamaCppRuntime.load(instruct_gguf, ctx_size=2048, max_sequences=4) as loaded:
        yield loaded


def test_on_the_instruct_model_speculation_and_load_change_no_token(instruct_runtime):
    # SmolLM2: 3 K/V heads for 9 query heads, head size 64, Q4_1 weights, a tied Q8_0 head. The
    # long prompts pass several 256-cell KV segments, so plain one-row steps split them over the
    # threads while verify steps and prefill fold them in their own loops.
    prompts = [COPY_PROMPT, long_conversation(8), long_conversation(9), OPEN_PROMPTS[0]]
    sizes = [len(instruct_runtime.tokenize(p, add_special=True)) for p in prompts]
    assert max(sizes) > 1000, sizes
    assert_load_and_speculation_change_no_token(instruct_runtime, prompts)
