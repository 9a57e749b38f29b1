"""With counter uniforms, sample-and-match speculation emits the plain sampled tokens exactly.

Any seed, temperature, top-k, top-p, min-p and penalties: the token at stream position pos meets
the same uniform whether it is decoded plainly or verified inside a draft, and matching uses the
plain sampler, so no drafter can change a single token.
"""

from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.sampling import SamplingParams
from tests.property.test_greedy_equality import (
    DRAFTER_KINDS,
    Model,
    decoding_cases,
    make_drafter,
    plain_decode,
    speculative_decode,
)


@st.composite
def sampling_params(draw: st.DrawFn, vocab: int) -> SamplingParams:
    # Weighted towards real randomness: a filter that leaves one token makes the draw moot.
    return SamplingParams(
        temperature=draw(st.one_of(st.just(0.0), st.floats(0.2, 2.0)), label="temperature"),
        top_k=draw(st.integers(0, vocab + 1), label="top_k"),
        top_p=draw(st.one_of(st.just(1.0), st.floats(0.3, 1.0)), label="top_p"),
        min_p=draw(st.one_of(st.just(0.0), st.floats(0.0, 0.5)), label="min_p"),
        repeat_penalty=draw(st.one_of(st.just(1.0), st.floats(0.5, 2.0)), label="repeat"),
        presence_penalty=draw(st.floats(-1.0, 1.0), label="presence"),
        frequency_penalty=draw(st.floats(-1.0, 1.0), label="frequency"),
        penalty_window=draw(st.integers(-1, 8), label="window"),
        seed=draw(st.integers(-(2**70), 2**70), label="seed"),
    )


@given(
    case=decoding_cases(),
    kind=st.sampled_from(DRAFTER_KINDS),
    drafter_seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_speculative_sampling_emits_exactly_the_plain_sampled_tokens(
    case: tuple[Model, list[int], frozenset[int], int, int, int],
    kind: str,
    drafter_seed: int,
    data: st.DataObject,
) -> None:
    model, prompt, stops, budget, depth, stop = case
    vocab = model(prompt).shape[0]
    params = data.draw(sampling_params(vocab), label="params")
    drafter = make_drafter(kind, model, params, vocab, stop, depth, drafter_seed)
    expected = plain_decode(model, prompt, params, stops, budget)
    accepted_all = {"right": True}.get(kind)
    got = speculative_decode(model, prompt, params, stops, budget, drafter, accepted_all)
    assert got == expected
