"""Log-probabilities of a committed token and of the most likely alternatives, from one row.

Which distribution: the model's RAW one, `log_softmax(logits)` of the row exactly as the runtime
returned it — before penalties, logit bias, temperature, top-k/top-p/min-p or a grammar mask.
This is what vLLM reports by default and what clients comparing servers expect: the number says
how likely the model found the token, not how likely this request's sampler made it. A token
the sampler picked can therefore carry a low (even -inf) raw log-probability, and `top` can list
tokens the sampler would never have drawn (a grammar lane's forbidden ones, say).

Numerics: the row is shifted by its maximum, so every exponent is <= 0 and `exp` never
overflows however large the logits are (a difference too large for float32 becomes -inf, whose
exp is the 0 it should be); the normaliser is one logsumexp whose terms are summed in float64.
The terms themselves are evaluated in the row's own precision (float32 for a runtime's rows):
float32 `exp` costs a fraction of float64's on a vocabulary-sized row, and its relative error
(~1e-7 per term) is far below anything a reported log-probability resolves. The reported
numbers — `logit - max - log(sum)` — are then formed in float64 from the exact logits.
On a large vocabulary only the `top_n` best are ever sorted: one partition finds the value of
the n-th best, and only the ids at or above it are ordered (highest first, ties by lower id,
the order the sampler's top-p uses too). Ranking uses the raw logits, never shifted ones, which
could round two distinct logits to one value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: OpenAI's limit on `top_logprobs`; text completions allow 5 of them.
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One committed token's log-probability and the `top_n` most likely tokens at its step."""

    token: int
    logprob: float
    #: (token id, log-probability) pairs, highest first, ties by lower id.
    top: tuple[tuple[int, float], ...] = ()


def token_logprob(logits: npt.NDArray[np.floating[Any]], token: int, top_n: int) -> TokenLogprob:
    """`token`'s log-probability under `log_softmax(logits)`, and the `top_n` most likely.

    `top_n` may exceed the vocabulary (every token is then listed). Raises ValueError for a
    token outside the row, a negative `top_n`, or a row with no finite maximum (NaN, +inf or
    all -inf): such a row is not a distribution, and no number reported for it would mean much.
    """
    row = np.asarray(logits).reshape(-1)
    if row.dtype != np.float64:
        row = row.astype(np.float32, copy=False)  # float16/bfloat16 widen exactly
    vocab = row.shape[0]
    if not 0 <= token < vocab:
        raise ValueError(f"token {token} is outside a row of {vocab} logits")
    if top_n < 0:
        raise ValueError(f"top_n must be 0 or more, got {top_n}")
    peak = row.max()
    if not math.isfinite(peak):
        raise ValueError(f"the logits row has no finite maximum ({peak}); it is not a distribution")
    with np.errstate(over="ignore"):  # -3e38 - 3e38 is -inf in float32, and exp(-inf) is right
        terms = np.exp(row - peak)
    log_total = math.log(float(terms.sum(dtype=np.float64)))  # >= log(1): the peak's own term
    top = _top(row, float(peak), log_total, min(top_n, vocab))
    return TokenLogprob(token, _logprob(row, token, float(peak), log_total), top)


def _logprob(
    row: npt.NDArray[np.floating[Any]], token: int, peak: float, log_total: float
) -> float:
    return (float(row[token]) - peak) - log_total


def _top(
    row: npt.NDArray[np.floating[Any]], peak: float, log_total: float, n: int
) -> tuple[tuple[int, float], ...]:
    if n <= 0:
        return ()
    vocab = row.shape[0]
    # The n-th largest logit comes in linear time; every id at or above it is a candidate, so
    # ties at the boundary are all seen and the lowest ids among them win (argpartition alone
    # would pick among tied ids arbitrarily).
    threshold = np.partition(row, vocab - n)[vocab - n]
    candidates = np.flatnonzero(row >= threshold)
    # lexsort's last key is the primary one: logit descending, then id ascending.
    order = candidates[np.lexsort((candidates, -row[candidates]))][:n]
    return tuple((int(i), _logprob(row, int(i), peak, log_total)) for i in order)
