"""Speculative greedy decoding emits exactly the plain greedy tokens, whatever the drafter does.

The target is a deterministic toy model: the last few tokens seed a generator that writes a small
logits row (optionally with many ties). Drafters range from random to adversarial (always
wrong), oracular (always right), partly right, and ones that slip a stop token in.
"""

from collections.abc import Callable
from functools import lru_cache

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.rng import uniform
from superfluid.domain.sampling import SamplingParams, sample
from superfluid.domain.verification import verify_by_matching

GREEDY = SamplingParams(temperature=0.0)
DRAFTER_KINDS = ("random", "wrong", "right", "partly-right", "with-stop")

Model = Callable[[list[int]], np.ndarray]
Drafter = Callable[[list[int], int], list[int]]


@lru_cache(maxsize=4096)
def _toy_row(model_seed: int, vocab: int, ties: bool, tail: tuple[int, ...]) -> np.ndarray:
    generator = np.random.default_rng([model_seed, len(tail), *tail])
    if ties:
        return generator.integers(0, 3, vocab).astype(np.float32)
    return generator.standard_normal(vocab).astype(np.float32)


def toy_model(model_seed: int, vocab: int, ties: bool) -> Model:
    def logits(context: list[int]) -> np.ndarray:
        return _toy_row(model_seed, vocab, ties, tuple(context[-3:]))

    return logits


def plain_decode(
    model: Model, prompt: list[int], params: SamplingParams, stops: frozenset[int], budget: int
) -> list[int]:
    context, output = list(prompt), []
    while len(output) < budget:
        token = sample(model(context), params, context, uniform(params.seed, len(output)))
        context.append(token)
        output.append(token)
        if token in stops:
            break
    return output


def speculative_decode(
    model: Model,
    prompt: list[int],
    params: SamplingParams,
    stops: frozenset[int],
    budget: int,
    drafter: Drafter,
    accepted_all: bool | None = None,
) -> list[int]:
    """The executor's loop in miniature, with a list standing in for the KV cache.

    `accepted_all`: True checks that every draft is accepted (unless the lane ends first),
    False that no draft token ever is, None checks neither.
    """
    context, output = list(prompt), []
    kv = context[:-1]  # the last committed token is pending: fed by the next pass
    while len(output) < budget:
        draft = drafter(context, len(output))
        rows = [model(context + draft[:i]) for i in range(len(draft) + 1)]
        kv = [*kv, context[-1], *draft]
        result = verify_by_matching(
            rows, draft, params, context, len(output), stops, budget - len(output)
        )
        assert 1 <= len(result.tokens) <= len(draft) + 1
        assert result.tokens[: result.accepted] == tuple(draft[: result.accepted])
        if accepted_all is True:
            assert result.accepted == len(draft) or result.finished
        if accepted_all is False:
            assert result.accepted == 0
        kv = kv[: result.keep_length]
        context += result.tokens
        output += result.tokens
        assert kv == context[:-1], "keep_length must leave exactly the committed tokens but one"
        assert result.finished == (output[-1] in stops or len(output) == budget)
        if result.finished:
            break
    return output


def make_drafter(
    kind: str,
    model: Model,
    params: SamplingParams,
    vocab: int,
    stop: int,
    depth: int,
    drafter_seed: int,
) -> Drafter:
    generator = np.random.default_rng(drafter_seed)

    def oracle(context: list[int], position: int, length: int, shift: int) -> list[int]:
        """What plain decoding would emit next, each token shifted by `shift` (0 = right)."""
        extended: list[int] = []
        for i in range(length):
            seen = context + extended
            u = uniform(params.seed, position + i)
            extended.append((sample(model(seen), params, seen, u) + shift) % vocab)
        return extended

    def draft(context: list[int], position: int) -> list[int]:
        length = int(generator.integers(0, depth + 1))
        if kind == "random":
            return [int(t) for t in generator.integers(0, vocab, length)]
        if kind == "wrong":
            # Wrong at every position, given that the earlier (wrong) tokens were accepted.
            return oracle(context, position, length, shift=1)
        truth = oracle(context, position, length, shift=0)
        if kind == "right":
            return truth
        right = int(generator.integers(0, length + 1))
        tail = [int(t) for t in generator.integers(0, vocab, length - right)]
        if kind == "with-stop" and tail:
            tail[int(generator.integers(0, len(tail)))] = stop
        return truth[:right] + tail

    return draft


@st.composite
def decoding_cases(draw: st.DrawFn) -> tuple[Model, list[int], frozenset[int], int, int, int]:
    vocab = draw(st.integers(2, 7), label="vocab")
    model = toy_model(draw(st.integers(0, 2**32)), vocab, draw(st.booleans(), label="ties"))
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
    stop = draw(st.integers(0, vocab - 1), label="stop")
    stops = draw(st.sampled_from([frozenset(), frozenset({stop})]), label="stops")
    budget = draw(st.integers(1, 16), label="max tokens")
    depth = draw(st.integers(1, 6), label="depth")
    return model, prompt, stops, budget, depth, stop


@given(
    case=decoding_cases(),
    kind=st.sampled_from(DRAFTER_KINDS),
    drafter_seed=st.integers(0, 2**32),
)
def test_speculative_greedy_decoding_emits_exactly_the_plain_greedy_tokens(
    case: tuple[Model, list[int], frozenset[int], int, int, int], kind: str, drafter_seed: int
) -> None:
    model, prompt, stops, budget, depth, stop = case
    vocab = model(prompt).shape[0]
    drafter = make_drafter(kind, model, GREEDY, vocab, stop, depth, drafter_seed)
    expected = plain_decode(model, prompt, GREEDY, stops, budget)
    accepted_all = {"right": True, "wrong": False}.get(kind)
    got = speculative_decode(model, prompt, GREEDY, stops, budget, drafter, accepted_all)
    assert got == expected
