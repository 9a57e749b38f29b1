"""Sampling under a constraint (grammar lanes): the plain sampler restricted to allowed tokens.

Greedy takes the highest-scoring allowed token. Sampling draws from the plain sampler's
distribution and redraws, with fresh counter-RNG streams, while the token is not allowed: that
is rejection sampling, so the result follows the plain distribution restricted to the allowed
tokens. The first draw uses the plain stream, so where the grammar does not bite a grammar lane
draws exactly what a plain lane draws. After `MAX_REDRAWS` refusals it settles for the best
allowed token (a bounded cost per token, at a bias only a near-impossible grammar can see).

Checking a token is the caller's (it costs a grammar step), so candidates are offered best
first and the full vocabulary is walked only if the top slice has nothing allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from superfluid.domain.rng import STREAM_SAMPLE, uniform
from superfluid.domain.sampling import Logits, SamplingParams, adjusted_logits, sample

#: Redraws before falling back to the best allowed token.
MAX_REDRAWS = 32
#: Counter-RNG streams for redraws start here (the first draw is STREAM_SAMPLE).
STREAM_REDRAW = 16
_TOP_SLICE = 256


def sample_allowed(
    logits: Logits,
    params: SamplingParams,
    history: Sequence[int],
    pos: int,
    allowed: Callable[[int], bool],
) -> int | None:
    """The token for stream position `pos`, or None if the constraint allows no token at all."""
    if not params.is_greedy:
        for attempt in range(MAX_REDRAWS):
            stream = STREAM_SAMPLE if attempt == 0 else STREAM_REDRAW + attempt
            token = sample(logits, params, history, uniform(params.seed, pos, stream))
            if allowed(token):
                return token
    return best_allowed(adjusted_logits(logits, params, history), allowed)


def best_allowed(scores: Logits, allowed: Callable[[int], bool]) -> int | None:
    """The highest-scoring allowed token (lowest index among equals), or None."""
    size = scores.shape[0]
    top = min(_TOP_SLICE, size)
    head = np.argpartition(-scores, top - 1)[:top] if top < size else np.arange(size)
    for index in _by_score(scores, head):
        if allowed(index):
            return index
    if top == size:
        return None
    rest = np.setdiff1d(np.arange(size), head, assume_unique=True)
    return next((index for index in _by_score(scores, rest) if allowed(index)), None)


def _by_score(scores: Logits, ids: np.ndarray) -> list[int]:
    order = np.lexsort((ids, -scores[ids]))  # score descending, then index ascending
    return [int(i) for i in ids[order]]
