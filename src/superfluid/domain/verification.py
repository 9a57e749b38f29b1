"""Verification of a draft against the target's logits rows: exact, never approximate.

Invariant: the tokens a lane commits have the distribution plain decoding gives them, whatever
the drafter proposes; and with a deterministic drafter the committed tokens are the plain-decode
tokens themselves, greedy and sampled. A poor draft costs speed, never output.

Two ways to verify the k drafted tokens, both over the k+1 rows of one forward pass (row i is the
target's logits after history + draft[:i]; row k yields the bonus token):

- `verify_by_matching` (deterministic drafts: prompt-lookup, greedy-drafted models): each row is
  sampled with exactly the plain sampler and the uniform plain decoding would use at that stream
  position, `uniform(params.seed, start_pos + i)`. The sampled token is committed; the round goes
  on while it equals the draft token. The committed tokens are the plain-decode tokens.
- `verify_by_rejection` (drafts sampled from a distribution q): with p the plain sampler's
  distribution for the row, draft[i] is accepted with probability min(1, p(x)/q(x)); on rejection
  a token is drawn from normalise(max(0, p − q)); if all k are accepted the bonus is drawn from p.
  Each committed token is then distributed exactly as p given the tokens before it.
  Uniforms, at stream position pos = start_pos + i: the accept coin is (STREAM_ACCEPT, pos), the
  residual draw (STREAM_RESIDUAL, pos), the bonus draw (STREAM_SAMPLE, pos) — the very draw plain
  decoding makes there. A drafter must sample its proposal from an independent stream
  (STREAM_DRAFT): rejection sampling is exact only when the coins are independent of the draft.
  A drafted x always has q(x) > 0 because it was drawn from q; a row that says otherwise is a
  drafter bug and raises ValueError. Tokens with q = 0 and p > 0 are reached through the residual.
  With temperature 0 p is one-hot, so rejection reduces to matching; it is delegated to
  `verify_by_matching` and consumes no randomness.

Both end the round early: a token in `stops` is committed and ends the lane, and the round never
commits more than `budget` tokens (what max_tokens and the context window still allow).

KV contract (`RoundResult.keep_length`): `history` is the lane's whole committed sequence (prompt
and output) and the KV mirrors it. The verify pass fed the last committed token and the draft, so
the KV then held len(history) + k entries: history followed by draft. After the round the first
len(history) + len(tokens) − 1 of them stay valid — history plus the accepted draft tokens that
are followed by another committed token. The last committed token is not kept (even when it was an
accepted draft token): it is the next round's first input, exactly as in plain decoding. Cut the
KV back to `keep_length`.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from superfluid.domain.rng import (
    STREAM_ACCEPT,
    STREAM_RESIDUAL,
    STREAM_SAMPLE,
    UniformSource,
    counter_uniforms,
    uniform,
)
from superfluid.domain.sampling import (
    Logits,
    SamplingParams,
    draw_index,
    penalty_tail,
    sample,
    token_distribution,
)

Rows = Sequence[Logits] | npt.NDArray[np.floating[Any]]


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What one verified round commits.

    accepted: draft tokens accepted (they form a prefix of the draft and of `tokens`).
    tokens: every token committed this round, 1..k+1 of them: the accepted draft tokens and, unless
        a stop or the budget came first, one more (the correction or the bonus).
    finished: the lane ends here — the last token is a stop token or the budget is spent.
    keep_length: the KV length to cut back to, len(history) + len(tokens) − 1 (module docstring).
    """

    accepted: int
    tokens: tuple[int, ...]
    finished: bool
    keep_length: int


def acceptance_probability(p_x: float, q_x: float) -> float:
    """min(1, p(x)/q(x)): the chance of keeping a draft token x that was drawn from q."""
    if not q_x > 0.0:
        raise ValueError(f"a drafted token must have positive draft probability, got q = {q_x}")
    return min(1.0, p_x / q_x)


def residual_distribution(
    p: npt.NDArray[np.floating[Any]], q: npt.NDArray[np.floating[Any]]
) -> npt.NDArray[np.float64]:
    """normalise(max(0, p − q)): where a rejected draft's token is redrawn from.

    The residual is empty only when p ≤ q everywhere, i.e. p = q, and then nothing is ever
    rejected; should rounding still reject, p itself is the right law and is returned.
    """
    excess: npt.NDArray[np.float64] = np.maximum(np.subtract(p, q, dtype=np.float64), 0.0)
    mass = float(excess.sum())
    if not mass > 0.0:
        return np.asarray(p, dtype=np.float64)
    excess /= mass
    return excess


def verify_by_matching(
    rows: Rows,
    draft: Sequence[int],
    params: SamplingParams,
    history: Sequence[int],
    start_pos: int,
    stops: frozenset[int],
    budget: int,
) -> RoundResult:
    """Sample each row with the plain sampler; continue while the sample equals the draft.

    `start_pos` is the stream position of the token row 0 predicts. With an empty draft this
    is one step of plain decoding.
    """
    _check_round(rows, draft, budget)
    committed: list[int] = []
    accepted = 0
    for i in range(len(draft) + 1):
        # Greedy ignores u; skipping the hash keeps greedy free of any randomness.
        u = 0.0 if params.is_greedy else uniform(params.seed, start_pos + i)
        token = sample(rows[i], params, _history_at(history, committed, params), u)
        committed.append(token)
        matched = i < len(draft) and token == draft[i]
        accepted += matched
        if token in stops or len(committed) >= budget or not matched:
            break
    return _result(history, committed, accepted, stops, budget)


def verify_by_rejection(
    rows: Rows,
    q_rows: Rows,
    draft: Sequence[int],
    params: SamplingParams,
    history: Sequence[int],
    start_pos: int,
    stops: frozenset[int],
    budget: int,
    u_source: UniformSource | None = None,
) -> RoundResult:
    """Rejection-sample a draft drawn from q against the target's rows.

    `rows` are the target's logits (k+1 rows, as for matching); p for row i is
    `token_distribution(rows[i], params, history + tokens committed so far)`. `q_rows[i]` is the
    probability vector draft[i] was drawn from (k rows, same length as a logits row).
    `u_source(stream, pos)` supplies the uniforms; the default is `counter_uniforms(params.seed)`.
    A coin whose outcome is certain (acceptance probability 0 or 1) is not drawn.
    """
    if len(q_rows) != len(draft):
        raise ValueError(f"{len(draft)} draft tokens need {len(draft)} q rows, got {len(q_rows)}")
    if params.is_greedy:
        return verify_by_matching(rows, draft, params, history, start_pos, stops, budget)
    _check_round(rows, draft, budget)
    draw = counter_uniforms(params.seed) if u_source is None else u_source
    committed: list[int] = []
    accepted = 0
    for i in range(len(draft) + 1):
        pos = start_pos + i
        seen = _history_at(history, committed, params)
        if i == len(draft):
            # The bonus is a plain draw from p: the plain sampler with plain decoding's uniform.
            committed.append(sample(rows[i], params, seen, draw(STREAM_SAMPLE, pos)))
            break
        p = token_distribution(rows[i], params, seen)
        token = draft[i]
        q = np.asarray(q_rows[i], dtype=np.float64)
        chance = acceptance_probability(float(p[token]), float(q[token]))
        keep = chance >= 1.0 or (chance > 0.0 and draw(STREAM_ACCEPT, pos) < chance)
        if not keep:
            token = draw_index(residual_distribution(p, q), draw(STREAM_RESIDUAL, pos))
        committed.append(token)
        accepted += keep
        if token in stops or len(committed) >= budget or not keep:
            break
    return _result(history, committed, accepted, stops, budget)


def _check_round(rows: Rows, draft: Sequence[int], budget: int) -> None:
    if len(rows) != len(draft) + 1:
        raise ValueError(f"{len(draft)} draft tokens need {len(draft) + 1} rows, got {len(rows)}")
    if budget < 1:
        raise ValueError(f"a round needs a budget of at least one token, got {budget}")


def _history_at(
    history: Sequence[int], committed: list[int], params: SamplingParams
) -> Sequence[int]:
    """The committed history a row sees: `history` plus this round's tokens so far.

    Only the penalty window is ever read, so only that tail is copied.
    """
    if not committed or not params.has_penalties:
        return history
    return [*penalty_tail(history, params), *committed]


def _result(
    history: Sequence[int],
    committed: list[int],
    accepted: int,
    stops: frozenset[int],
    budget: int,
) -> RoundResult:
    return RoundResult(
        accepted=accepted,
        tokens=tuple(committed),
        finished=committed[-1] in stops or len(committed) >= budget,
        keep_length=len(history) + len(committed) - 1,
    )
