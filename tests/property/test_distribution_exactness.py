"""Rejection sampling is distribution-exact, checked by exact integration, never by sampling.

`verify_by_rejection` takes its randomness from an explicit uniform source, and each uniform it
draws only matters through which decision region it falls in: below or above the acceptance
probability for the accept coin, between which cumulative breakpoints for a draw. `law_of` runs
the real implementation once per combination of regions and weights the outcome by the product
of the region widths: the exact output law. The uniform fed for a region sits at a drawn fraction
of its width — near its low edge, its middle or its high edge — so an implementation whose
decision boundary is not where the maths puts it lands on the wrong side and is caught.
"""

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator
from functools import cache, lru_cache
from itertools import pairwise, product
from typing import TypeVar

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.rng import STREAM_ACCEPT, STREAM_RESIDUAL, STREAM_SAMPLE
from superfluid.domain.sampling import SamplingParams, token_distribution
from superfluid.domain.verification import (
    acceptance_probability,
    residual_distribution,
    verify_by_rejection,
)

Outcome = TypeVar("Outcome", bound=Hashable)
Region = tuple[float, float]  # (low edge, width)
RAW = SamplingParams(penalty_window=0)
TOLERANCE = 1e-9
NEGLIGIBLE = 1e-13
# Where inside its region a fed uniform sits; edges are probed 1e-6 of a width in, well clear of
# the ~1e-16 by which the implementation's arithmetic and this file's may place an edge apart.
PROBE_FRACTIONS = st.sampled_from([1e-6, 0.5, 1 - 1e-6]) | st.floats(1e-6, 1 - 1e-6)


def coin_regions(chance: float) -> list[Region]:
    return [(0.0, chance), (chance, 1 - chance)]


def draw_regions(distribution: np.ndarray) -> list[Region]:
    edges = np.concatenate([[0.0], np.cumsum(distribution)])
    return [(lo, hi - lo) for lo, hi in pairwise(edges)]


class ScriptedUniforms:
    """A uniform source that answers a point inside a chosen region for each successive draw.

    Draws beyond the script take their first region and queue every sibling choice in `pending`.
    """

    def __init__(
        self,
        script: tuple[int, ...],
        regions: Callable[[int, int], list[Region]],
        pending: list[tuple[int, ...]],
        fraction: float,
    ) -> None:
        self.script, self.regions, self.pending = script, regions, pending
        self.fraction = fraction
        self.choices: list[int] = []
        self.weight = 1.0

    def __call__(self, stream: int, pos: int) -> float:
        # Regions narrower than rounding noise hold no real mass (and may sit on 1.0).
        options = [r for r in self.regions(stream, pos) if r[1] > NEGLIGIBLE]
        depth = len(self.choices)
        if depth < len(self.script):
            choice = self.script[depth]
        else:
            choice = 0
            self.pending.extend((*self.choices, other) for other in range(1, len(options)))
        self.choices.append(choice)
        low, width = options[choice]
        self.weight *= width
        return low + self.fraction * width


def law_of(
    run: Callable[[Callable[[int, int], float]], Outcome],
    regions: Callable[[int, int], list[Region]],
    fraction: float,
) -> dict[Outcome, float]:
    """The exact law of `run`'s outcome when every uniform it draws is independent U[0, 1)."""
    law: dict[Outcome, float] = defaultdict(float)
    pending: list[tuple[int, ...]] = [()]
    while pending:
        source = ScriptedUniforms(pending.pop(), regions, pending, fraction)
        outcome = run(source)
        law[outcome] += source.weight
    return law


def probability_vectors(vocab: int) -> st.SearchStrategy[np.ndarray]:
    weights = st.lists(st.integers(0, 6), min_size=vocab, max_size=vocab).filter(any)
    return weights.map(lambda w: np.asarray(w, dtype=np.float64) / sum(w))


def logits_of(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


@st.composite
def target_and_draft(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    vocab = draw(st.integers(2, 6), label="vocab")
    return draw(probability_vectors(vocab), label="p"), draw(probability_vectors(vocab), label="q")


@given(pq=target_and_draft(), fraction=PROBE_FRACTIONS)
def test_one_rejection_step_outputs_exactly_the_target_distribution(
    pq: tuple[np.ndarray, np.ndarray], fraction: float
) -> None:
    p, q = pq
    logits = logits_of(p)
    np.testing.assert_allclose(token_distribution(logits, RAW, []), p, atol=1e-12)
    output = np.zeros_like(p)
    for x in np.flatnonzero(q > 0.0):
        # The regions are computed from p and q directly, not from the implementation.
        residual = np.maximum(p - q, 0.0)
        residual = residual / residual.sum() if residual.sum() > 0 else p

        def regions(
            stream: int, pos: int, x: int = int(x), residual: np.ndarray = residual
        ) -> list[Region]:
            assert pos == 0
            if stream == STREAM_ACCEPT:
                return coin_regions(min(1.0, p[x] / q[x]))
            assert stream == STREAM_RESIDUAL
            return draw_regions(residual)

        def one_step(source: Callable[[int, int], float], x: int = int(x)) -> int:
            rows = [logits, logits]
            result = verify_by_rejection(rows, [q], [x], RAW, [0], 0, frozenset(), 1, source)
            assert len(result.tokens) == 1
            return result.tokens[0]

        for token, chance in law_of(one_step, regions, fraction).items():
            output[token] += q[x] * chance
    np.testing.assert_allclose(output, p, atol=TOLERANCE)

    # The same law in closed form, from the implementation's one-step helpers:
    # P(x) = q(x)·min(1, p(x)/q(x)) + (1 − Σ_y q(y)·min(1, p(y)/q(y)))·residual(x).
    drafted = np.flatnonzero(q > 0.0)
    accepted = np.zeros_like(p)
    accepted[drafted] = [q[x] * acceptance_probability(p[x], q[x]) for x in drafted]
    rejected_mass = 1.0 - accepted.sum()
    closed_form = accepted + rejected_mass * residual_distribution(p, q)
    np.testing.assert_allclose(closed_form, p, atol=TOLERANCE)


# --- A whole round: k draft tokens from prefix-dependent q, against the plain (k+1)-token joint.


@lru_cache(maxsize=8192)
def _toy_row(seed: int, vocab: int, tail: tuple[int, ...], draft: bool) -> np.ndarray:
    """A target logits row (with -inf: impossible tokens) or a draft distribution (with zeros)."""
    generator = np.random.default_rng([seed, int(draft), len(tail), *tail])
    values = generator.standard_normal(vocab) * 2
    values[generator.random(vocab) < 0.3] = -np.inf
    values[generator.integers(0, vocab)] = generator.standard_normal()
    if not draft:
        return values
    exps = np.exp(values - values.max())
    return exps / exps.sum()


@st.composite
def round_setups(draw: st.DrawFn) -> tuple[int, int, int, list[int], SamplingParams]:
    vocab = draw(st.integers(2, 3), label="vocab")
    depth = draw(st.integers(2, 3), label="k")
    seed = draw(st.integers(0, 2**32), label="models")
    history = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3), label="history")
    params = SamplingParams(
        temperature=draw(st.sampled_from([0.0, 0.5, 1.0, 1.7]), label="temperature"),
        top_k=draw(st.integers(0, vocab), label="top_k"),
        top_p=draw(st.sampled_from([1.0, 0.9, 0.6]), label="top_p"),
        min_p=draw(st.sampled_from([0.0, 0.2]), label="min_p"),
        repeat_penalty=draw(st.sampled_from([1.0, 1.3, 0.8]), label="repeat"),
        presence_penalty=draw(st.sampled_from([0.0, 0.4]), label="presence"),
        penalty_window=draw(st.sampled_from([0, 2, -1]), label="window"),
    )
    return vocab, depth, seed, history, params


def sequences(vocab: int, length: int) -> Iterator[tuple[int, ...]]:
    return product(range(vocab), repeat=length)


@given(setup=round_setups(), fraction=PROBE_FRACTIONS)
def test_a_k_token_round_commits_tokens_with_the_plain_joint_distribution(
    setup: tuple[int, int, int, list[int], SamplingParams], fraction: float
) -> None:
    vocab, depth, seed, history, params = setup

    def target_row(context: tuple[int, ...]) -> np.ndarray:
        return _toy_row(seed, vocab, context[-2:], False)

    def draft_q(context: tuple[int, ...]) -> np.ndarray:
        return _toy_row(seed, vocab, context[-2:], True)

    plain_cache: dict[tuple[int, ...], np.ndarray] = {}

    def plain(context: tuple[int, ...]) -> np.ndarray:
        """The plain sampler's law for the next token: what every committed token must follow."""
        if context not in plain_cache:
            plain_cache[context] = token_distribution(target_row(context), params, context)
        return plain_cache[context]

    @cache
    def continuation_chance(context: tuple[int, ...], tokens: tuple[int, ...]) -> float:
        """The chance plain decoding continues `context` with `tokens`."""
        if not tokens:
            return 1.0
        first = float(plain(context)[tokens[0]])
        return first * continuation_chance((*context, tokens[0]), tokens[1:]) if first else 0.0

    start = tuple(history)
    # Plain decoding's joint law of the next k+1 tokens.
    expected = {seq: continuation_chance(start, seq) for seq in sequences(vocab, depth + 1)}

    got: dict[tuple[int, ...], float] = defaultdict(float)
    for draft in sequences(vocab, depth):
        draft_chance = 1.0
        for i, token in enumerate(draft):
            draft_chance *= draft_q((*start, *draft[:i]))[token]
        if draft_chance == 0.0:
            continue  # a drafter never proposes what its own q rules out
        rows = [target_row((*start, *draft[:i])) for i in range(depth + 1)]
        q_rows = [draft_q((*start, *draft[:i])) for i in range(depth)]

        def regions(stream: int, pos: int, draft: tuple[int, ...] = draft) -> list[Region]:
            p = plain((*start, *draft[:pos]))
            if stream == STREAM_SAMPLE:
                assert pos == depth
                return draw_regions(p)
            q = draft_q((*start, *draft[:pos]))
            if stream == STREAM_ACCEPT:
                return coin_regions(min(1.0, p[draft[pos]] / q[draft[pos]]))
            excess = np.maximum(p - q, 0.0)
            return draw_regions(excess / excess.sum() if excess.sum() > 0 else p)

        def one_round(
            source: Callable[[int, int], float],
            rows: list[np.ndarray] = rows,
            q_rows: list[np.ndarray] = q_rows,
            draft: tuple[int, ...] = draft,
        ) -> tuple[int, ...]:
            result = verify_by_rejection(
                rows, q_rows, list(draft), params, start, 0, frozenset(), 99, source
            )
            assert result.keep_length == len(start) + len(result.tokens) - 1
            return result.tokens

        for committed, chance in law_of(one_round, regions, fraction).items():
            # Let plain decoding finish the k+1 tokens after a short round.
            context = (*start, *committed)
            for rest in sequences(vocab, depth + 1 - len(committed)):
                extended = (*committed, *rest)
                got[extended] += draft_chance * chance * continuation_chance(context, rest)

    for seq, chance in expected.items():
        assert abs(got[seq] - chance) < TOLERANCE, (seq, got[seq], chance)
    assert abs(sum(got.values()) - 1.0) < TOLERANCE
