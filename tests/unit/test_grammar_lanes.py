import itertools
import json

import pytest

from superfluid.application.events import Finish
from superfluid.application.executor import Executor
from superfluid.application.grammar import JsonObjectConstraint, TokenPieces
from superfluid.application.requests import GenerationRequest
from superfluid.domain.constrained import best_allowed, sample_allowed
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from tests.fakes import EOS, FakeModel, FakeRuntime

# A JSON-friendly vocabulary for the fake model (token 0 is EOS).
PIECES = [
    b"",
    b"{",
    b"}",
    b'"',
    b":",
    b",",
    b"a",
    b"b",
    b"1",
    b"2",
    b" ",
    b"[",
    b"]",
    b"true",
    b"null",
    b'"k"',
    b"\xc3",
    b"\xa9",
]
PIECES += [b"x" * (i % 3 + 1) for i in range(48 - len(PIECES))]


def pieces(token):
    return PIECES[token]


def run_json_lane(params, *, speculate=False):
    runtime = FakeRuntime(FakeModel(vocab=48, order=2, peak=2.0))
    executor = Executor(
        runtime,
        max_lanes=2,
        clock=itertools.count().__next__,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=SpecPolicy(SpecSettings(throughput_gate=False, min_yield=0.0), default_depth=4)
        if speculate
        else None,
    )
    request = GenerationRequest(
        [1, 3, 6, 3, 4, 8, 2, 1, 3, 6, 3, 4],
        params,
        200,
        constraint=JsonObjectConstraint(pieces, frozenset({EOS})),
    )
    executor.submit(request)
    out, finish, proposed = [], None, 0
    while not executor.idle:
        for event in executor.tick():
            out.extend(event.tokens)
            if event.finish:
                finish, proposed = event.finish, event.spec.proposed
    assert not any(feed.all_rows for step in runtime.steps for feed in step), (
        "a grammar lane drafted"
    )
    return b"".join(pieces(t) for t in out), finish, proposed


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
def test_a_json_lane_emits_a_json_object_and_stops_when_it_closes(temperature, seed):
    text, finish, proposed = run_json_lane(
        SamplingParams(temperature=temperature, seed=seed), speculate=True
    )
    if finish is Finish.STOP:
        assert isinstance(json.loads(text.decode("utf-8", "replace")), dict)
    else:
        assert finish is Finish.LENGTH and text.startswith(b"{")
    assert proposed == 0


def test_the_constraint_refuses_tokens_that_break_the_object_and_eos_until_it_closes():
    constraint = JsonObjectConstraint(pieces, frozenset({EOS}))
    assert not constraint.allowed(PIECES.index(b"}"))
    assert not constraint.allowed(EOS)
    assert constraint.allowed(PIECES.index(b"{"))
    for piece in (b"{", b'"k"', b":", b"1", b"}"):
        constraint.commit(PIECES.index(piece))
    assert constraint.complete and constraint.allowed(EOS)
    assert not constraint.allowed(PIECES.index(b","))


def test_greedy_takes_the_best_allowed_token_and_sampling_keeps_the_plain_first_draw():
    import numpy as np

    scores = np.array([5.0, 4.0, 3.0, 2.0], dtype=np.float32)
    assert best_allowed(scores, lambda t: t >= 2) == 2
    assert best_allowed(scores, lambda t: False) is None
    params = SamplingParams(temperature=1.0, seed=9)
    unconstrained = sample_allowed(scores, params, [], 3, lambda t: True)
    from superfluid.domain.rng import uniform
    from superfluid.domain.sampling import sample

    assert unconstrained == sample(scores, params, [], uniform(9, 3))
    assert sample_allowed(scores, params, [], 3, lambda t: t == 3) == 3


def test_token_pieces_are_computed_once_per_token():
    calls = []
    piece = TokenPieces(lambda tokens: calls.append(tuple(tokens)) or b"x")
    assert piece(5) == piece(5) == b"x"
    assert calls == [(5,)]
