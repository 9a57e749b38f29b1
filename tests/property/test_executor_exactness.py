"""The executor's promise on a batch-invariant runtime: speculation never changes output."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from superfluid.application.executor import Executor
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.depth import MATCH_CLASSES
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from tests.fakes import ClassPlan, FakeModel, FakeRuntime

prompts = st.lists(st.lists(st.integers(1, 11), min_size=1, max_size=24), min_size=1, max_size=6)
params = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.7]),
    top_k=st.sampled_from([0, 1, 5]),
    top_p=st.sampled_from([1.0, 0.9, 0.5]),
    min_p=st.sampled_from([0.0, 0.05]),
    repeat_penalty=st.sampled_from([1.0, 1.3]),
    presence_penalty=st.sampled_from([0.0, 0.5]),
    frequency_penalty=st.sampled_from([0.0, 0.4]),
    seed=st.integers(-(2**63), 2**64),
)


def generate(model, requests, *, speculate, max_lanes, depth, adaptive):
    policy = SpecPolicy(SpecSettings(adaptive=adaptive), default_depth=depth)
    return generate_with(model, requests, max_lanes=max_lanes, policy=policy if speculate else None)


def generate_with(model, requests, *, max_lanes, policy):
    """Each request's tokens and finish; prompt-lookup drafts under `policy` (None: plain)."""
    runtime = FakeRuntime(model, context_size=64)
    executor = Executor(
        runtime,
        max_lanes=max_lanes,
        clock=itertools.count(0, 0.01).__next__,
        drafter=PromptLookupDrafter() if policy is not None else None,
        policy=policy,
    )
    for request in requests:
        executor.submit(request)
    out = {request.id: [] for request in requests}
    finish = {}
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
            if event.finish:
                finish[event.request_id] = event.finish
    assert runtime.kv == executor.parked()
    return [(out[r.id], finish[r.id]) for r in requests]


def workload(prompt_list, sampling, salt, max_tokens):
    """A fake model picked by `salt`, and a maker of fresh requests for the prompts."""
    model = FakeModel(vocab=12, order=1 + salt % 2, peak=4.0, salt=salt)

    def requests():
        return [GenerationRequest(list(p), sampling, max_tokens) for p in prompt_list]

    return model, requests


@given(
    prompts,
    params,
    st.integers(1, 4),
    st.integers(1, 8),
    st.booleans(),
    st.integers(0, 3),
    st.integers(1, 30),
)
def test_speculative_output_equals_plain_output_for_any_prompts_lanes_and_sampler(
    prompt_list, sampling, max_lanes, depth, adaptive, salt, max_tokens
):
    model, requests = workload(prompt_list, sampling, salt, max_tokens)

    plain = generate(
        model, requests(), speculate=False, max_lanes=max_lanes, depth=depth, adaptive=adaptive
    )
    spec = generate(
        model, requests(), speculate=True, max_lanes=max_lanes, depth=depth, adaptive=adaptive
    )
    assert spec == plain


def converse(model, openings, follow_ups, sampling, *, reuse, speculate, max_lanes, max_tokens):
    """Conversations in turns: each turn's prompt is the last prompt, its reply and a new line;
    every conversation's next turn is submitted together once the previous turns finished."""
    runtime = FakeRuntime(model, context_size=256, max_sequences=max_lanes)
    executor = Executor(
        runtime,
        max_lanes=max_lanes,
        clock=itertools.count(0, 0.01).__next__,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=SpecPolicy(SpecSettings(), default_depth=4) if speculate else None,
        reuse_prefixes=reuse,
    )
    prompts = [list(p) for p in openings]
    replies = []
    for line in follow_ups:
        requests = [GenerationRequest(list(p), sampling, max_tokens) for p in prompts]
        for request in requests:
            executor.submit(request)
        out = {r.id: [] for r in requests}
        while not executor.idle:
            for event in executor.tick():
                out[event.request_id].extend(event.tokens)
        replies.append([out[r.id] for r in requests])
        prompts = [p + out[r.id] + line for p, r in zip(prompts, requests, strict=True)]
    assert runtime.kv == executor.parked()
    return replies


@given(
    prompts,
    st.lists(st.lists(st.integers(1, 11), min_size=1, max_size=5), min_size=1, max_size=3),
    params,
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 3),
    st.integers(1, 12),
)
def test_a_reused_prefix_changes_no_token(
    openings, follow_ups, sampling, max_lanes, speculate, salt, max_tokens
):
    model = FakeModel(vocab=12, order=1 + salt % 2, peak=4.0, salt=salt)
    kwargs = {"speculate": speculate, "max_lanes": max_lanes, "max_tokens": max_tokens}
    fresh = converse(model, openings, follow_ups, sampling, reuse=False, **kwargs)
    reused = converse(model, openings, follow_ups, sampling, reuse=True, **kwargs)
    assert reused == fresh


@given(
    prompts,
    params,
    st.integers(1, 6),
    st.lists(st.integers(0, 9), min_size=MATCH_CLASSES, max_size=MATCH_CLASSES).filter(any),
    st.booleans(),
    st.integers(0, 3),
    st.integers(1, 30),
)
def test_filled_and_per_class_drafts_commit_what_plain_decoding_does(
    prompt_list, sampling, max_lanes, by_class, fill, salt, max_tokens
):
    model, requests = workload(prompt_list, sampling, salt, max_tokens)

    spec = generate_with(model, requests(), max_lanes=max_lanes, policy=ClassPlan(by_class, fill))
    assert spec == generate_with(model, requests(), max_lanes=max_lanes, policy=None)
