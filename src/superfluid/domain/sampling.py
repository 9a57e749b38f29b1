"""The plain-decode sampler: one logits row, the committed history and one uniform make a token.

Rule: `sample(logits, params, history, u)` is the inverse CDF, at `u`, of
`token_distribution(logits, params, history)` taken over token ids in ascending order; with
temperature 0 it is the lowest-index argmax and ignores `u` (greedy never consumes randomness).
Verification (`superfluid.domain.verification`) calls exactly these functions on every row, which
is what makes speculative output equal plain output.

The pipeline, in order:

1. Penalties over the last `penalty_window` committed tokens (llama.cpp's `penalty_last_n`:
   N > 0 the last N, 0 none, -1 the whole history). A penalised id with count c and logit l
   becomes `(l / r if l > 0 else l * r) - c * frequency_penalty - presence_penalty`, where r is
   `repeat_penalty` (llama.cpp's repeat penalty, OpenAI's presence and frequency penalties).
   Ids outside the row are ignored.
2. Temperature 0: greedy, done. Otherwise the logits are divided by the temperature.
3. top-k (0 = off): keep every token whose logit is at least the k-th largest. Ties at the
   boundary are all kept, so the kept set depends on values, never on index order.
4. top-p (1 = off): order tokens by probability, highest first, ties by lower id, and keep the
   shortest prefix whose mass reaches `top_p` of the remaining mass.
5. min-p (0 = off): keep tokens whose probability is at least `min_p` times the largest.
6. Renormalise what is kept; draw by inverse CDF over the kept ids in ascending id order.

Temperature is applied before the filters (the order the request fields are documented in by
OpenAI-style servers), not last as llama.cpp's default chain does.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from superfluid.domain.errors import SamplingParamsError

Logits: TypeAlias = npt.NDArray[np.floating[Any]]
Weights: TypeAlias = npt.NDArray[np.float64]
TokenIds: TypeAlias = npt.NDArray[np.intp]

# Below this many candidates top-p sorts them all; above it, it sorts a growing top slice only.
_FULL_SORT_LIMIT = 4096
_NUCLEUS_FIRST_SLICE = 256
# Above this many weights the inverse CDF walks blocks of this size instead of one running sum.
_BLOCK_WALK_LIMIT = 16384
_DRAW_BLOCK = 4096


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How a lane turns logits into tokens; the defaults sample the raw distribution."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int = 64
    seed: int = 0
    #: (token id, bias) pairs added to the logits before anything else (OpenAI's logit_bias).
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0.0):
            raise SamplingParamsError(
                f"temperature must be a finite number >= 0, got {self.temperature}"
            )
        if self.top_k < 0:
            raise SamplingParamsError(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SamplingParamsError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise SamplingParamsError(f"min_p must be in [0, 1], got {self.min_p}")
        if not (math.isfinite(self.repeat_penalty) and self.repeat_penalty > 0.0):
            raise SamplingParamsError(
                f"repeat_penalty must be a finite number > 0, got {self.repeat_penalty}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise SamplingParamsError(f"{name} must be finite, got {getattr(self, name)}")
        if self.penalty_window < -1:
            raise SamplingParamsError(
                f"penalty_window must be -1 (whole history), 0 (off) or positive, "
                f"got {self.penalty_window}"
            )

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        """Whether any penalty can change a logit (a window and a non-neutral penalty)."""
        return self.penalty_window != 0 and (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )


def penalty_tail(history: Sequence[int], params: SamplingParams) -> Sequence[int]:
    """The committed tokens the penalties look at: the last `penalty_window` of `history`."""
    if not params.has_penalties:
        return ()
    if params.penalty_window < 0:
        return history
    return history[-params.penalty_window :]


def apply_penalties(logits: Logits, params: SamplingParams, history: Sequence[int]) -> Logits:
    """The penalised row. Returns `logits` itself when nothing is penalised; never mutates it."""
    tail = penalty_tail(history, params)
    if len(tail) == 0:
        return logits
    ids, counts = np.unique(np.asarray(tail, dtype=np.int64), return_counts=True)
    inside = (ids >= 0) & (ids < logits.shape[0])
    ids, counts = ids[inside], counts[inside]
    if ids.size == 0:
        return logits
    # The copy keeps the row's float width (float16 widens): only the penalised ids change.
    penalised = np.array(logits, dtype=np.result_type(logits.dtype, np.float32))
    original = penalised[ids]
    values = original
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if params.repeat_penalty != 1.0:
            # llama.cpp's rule: shrink a positive logit, push a non-positive one further down.
            values = np.where(
                values > 0.0, values / params.repeat_penalty, values * params.repeat_penalty
            )
        values = values - (counts * params.frequency_penalty + params.presence_penalty)
    # A penalty at the edge of the float range (5e-324 is 0 in float32, 1e300 is inf) must not
    # turn a finite logit into inf or nan: such a row cannot be sampled. Clamp it instead.
    overflowed = ~np.isfinite(values) & np.isfinite(original)
    if overflowed.any():
        limit = np.finfo(penalised.dtype).max
        clamped = np.clip(np.nan_to_num(values, nan=0.0), -limit, limit)
        values = np.where(overflowed, clamped, values)
    penalised[ids] = values
    return penalised


def apply_logit_bias(logits: Logits, params: SamplingParams) -> Logits:
    """The row with `logit_bias` added (ids outside the row ignored); `logits` when unbiased."""
    if not params.logit_bias:
        return logits
    biased = np.array(logits, dtype=np.result_type(logits.dtype, np.float32))
    for token, bias in params.logit_bias:
        if 0 <= token < biased.shape[0]:
            biased[token] += bias
    return biased


def adjusted_logits(logits: Logits, params: SamplingParams, history: Sequence[int]) -> Logits:
    """What the sampler draws from: logit bias first, then penalties (llama.cpp's order)."""
    return apply_penalties(apply_logit_bias(logits, params), params, history)


def sample(logits: Logits, params: SamplingParams, history: Sequence[int], u: float) -> int:
    """The token the plain sampler commits for this row, history and uniform `u` in [0, 1)."""
    scores = adjusted_logits(logits, params, history)
    if params.is_greedy:
        return int(np.argmax(scores))
    ids, weights = _kept_weights(scores, params)
    index = draw_index(weights, u)
    return index if ids is None else int(ids[index])


def token_distribution(
    logits: Logits, params: SamplingParams, history: Sequence[int]
) -> npt.NDArray[np.float64]:
    """The probability vector `sample` draws from (one-hot on the argmax when greedy)."""
    scores = adjusted_logits(logits, params, history)
    probabilities = np.zeros(scores.shape[0], dtype=np.float64)
    if params.is_greedy:
        probabilities[int(np.argmax(scores))] = 1.0
        return probabilities
    ids, weights = _kept_weights(scores, params)
    normalised: Weights = weights / float(weights.sum())
    if ids is None:
        return normalised
    probabilities[ids] = normalised
    return probabilities


def draw_index(weights: npt.NDArray[np.floating[Any]], u: float) -> int:
    """Inverse CDF in index order: the first index whose cumulative weight exceeds u · total.

    Zero-weight indices are never drawn. `weights` need not be normalised. A long vector is
    walked in blocks (block sums, then a running sum inside one block) so a 262k vocabulary
    costs one summing pass instead of a full running sum; the breakpoints are the same up to
    rounding.
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"a uniform draw must lie in [0, 1), got {u}")
    if weights.size <= _BLOCK_WALK_LIMIT:
        running = np.cumsum(weights, dtype=np.float64)
        return _first_exceeding(running, u * _positive_total(running), weights)
    starts = np.arange(0, weights.size, _DRAW_BLOCK)
    block_running = np.cumsum(np.add.reduceat(weights, starts, dtype=np.float64))
    target = u * _positive_total(block_running)
    block = min(int(np.searchsorted(block_running, target, side="right")), starts.size - 1)
    before = float(block_running[block - 1]) if block else 0.0
    if block_running[block] <= before:
        # Rounding pushed the target past the last block with mass: draw its last token.
        block = int(np.flatnonzero(np.diff(block_running, prepend=0.0) > 0.0)[-1])
        before = float(block_running[block - 1]) if block else 0.0
    start = int(starts[block])
    inside = weights[start : start + _DRAW_BLOCK]
    running = np.cumsum(inside, dtype=np.float64)
    return start + _first_exceeding(running, target - before, inside)


def _positive_total(running: npt.NDArray[np.float64]) -> float:
    total = float(running[-1]) if running.size else 0.0
    if not total > 0.0:
        raise ValueError("cannot draw from weights with no positive mass")
    return total


def _first_exceeding(
    running: npt.NDArray[np.float64], target: float, weights: npt.NDArray[np.floating[Any]]
) -> int:
    """The first index whose running sum exceeds `target` (the last one with mass if none)."""
    index = int(np.searchsorted(running, target, side="right"))
    if index >= running.size:
        # target rounded up to the total: the draw belongs to the last token with mass.
        index = int(np.flatnonzero(np.asarray(weights) > 0.0)[-1])
    return index


def _kept_weights(scores: Logits, params: SamplingParams) -> tuple[TokenIds | None, Weights]:
    """Unnormalised weights of the kept tokens, ids ascending (`None` = every id, in order)."""
    vocabulary = scores.shape[0]
    ids: TokenIds | None = None
    values: Logits = scores
    if 0 < params.top_k < vocabulary:
        # argpartition finds the k-th largest in linear time; a full sort is never needed.
        top = np.argpartition(scores, vocabulary - params.top_k)[vocabulary - params.top_k :]
        ids = np.flatnonzero(scores >= scores[top].min())
        values = scores[ids]
    peak = float(values.max())
    if not math.isfinite(peak):
        raise ValueError(f"a logits row needs a finite maximum, got {peak}")
    # Subtract the peak before dividing so a tiny temperature cannot overflow.
    weights = np.subtract(values, peak, dtype=np.float64)
    if params.temperature != 1.0:
        # A tiny temperature sends every non-peak weight to -inf (then 0): intended, not a fault.
        with np.errstate(over="ignore"):
            weights /= params.temperature
    np.exp(weights, out=weights)
    if params.top_p < 1.0:
        kept = _nucleus(weights, params.top_p)
        ids, weights = (kept if ids is None else ids[kept]), weights[kept]
    if params.min_p > 0.0:
        kept = np.flatnonzero(weights >= params.min_p * weights.max())
        ids, weights = (kept if ids is None else ids[kept]), weights[kept]
    return ids, weights


def _nucleus(weights: Weights, top_p: float) -> TokenIds:
    """Positions (ascending) of the shortest highest-first prefix holding `top_p` of the mass."""
    target = top_p * float(weights.sum())
    order = _highest_first_covering(weights, target)
    cumulative = np.cumsum(weights[order])
    cut = min(int(np.searchsorted(cumulative, target, side="left")), order.size - 1)
    return np.sort(order[: cut + 1])


def _highest_first_covering(weights: Weights, target: float) -> TokenIds:
    """Positions by weight descending (ties: lower position first), at least covering `target`.

    Nucleus mass usually sits in a few hundred tokens of a 262k vocabulary, so this partitions
    out a top slice and grows it only when it does not yet hold the target mass. A slice takes
    every position tied with its smallest weight, so it is always a prefix of the full order.
    """
    size = weights.size
    slice_size = _NUCLEUS_FIRST_SLICE
    while size > _FULL_SORT_LIMIT and slice_size < size:
        top = np.argpartition(weights, size - slice_size)[size - slice_size :]
        candidates = np.flatnonzero(weights >= weights[top].min())
        order = candidates[np.argsort(-weights[candidates], kind="stable")]
        if float(np.cumsum(weights[order])[-1]) >= target:
            return order
        slice_size *= 8
    return np.argsort(-weights, kind="stable")
