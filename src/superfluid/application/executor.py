"""The executor: lanes and ticks, one packed runtime step per tick.

A tick ends cancelled requests, admits waiting ones and runs one round of every lane
(`Executor._round`): each lane proposes its feed (a prompt chunk while it prefills, the pending
token alone when it decodes plainly, the pending token and a draft when it speculates), one
packed step runs them all, and each lane's rows are verified, its accepted draft tokens counted,
its rejected draft cells cut off the KV and its committed tokens reported. The math lives in the
domain (sampling, verification, prompt lookup); the gates decide per tick whether drafting pays
at this lane count, and how deep each lane drafts by how sure its drafter is (the draft's match
class).

Invariant per lane: `history` is every committed token (prompt + output); the KV holds all of
it but the last committed token, which is `pending` and is fed first in the next round.

Lanes take their sequences from a `SequencePool` (sequence_pool.py), which parks a finished
lane's KV for a later prompt that starts the same way (prefix reuse).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from superfluid.application.events import Committed, Finish, SpecStats, TickReport
from superfluid.application.ports import (
    Drafter,
    DraftState,
    Feed,
    Logits,
    MatchedDraftState,
    Runtime,
    SampledDraftState,
    SpeculationPolicy,
)
from superfluid.application.requests import GenerationRequest
from superfluid.application.sequence_pool import SequencePool
from superfluid.domain.constrained import sample_allowed
from superfluid.domain.gates.depth import match_class
from superfluid.domain.gates.policy import PLAIN, TickPlan
from superfluid.domain.logprobs import TokenLogprob, token_logprob
from superfluid.domain.verification import RoundResult, verify_by_matching, verify_by_rejection

#: Prompt tokens fed per lane per tick: long prompts are chunked so decoding lanes keep moving.
PREFILL_CHUNK = 512

DraftDistributions = npt.NDArray[np.float64]

#: Depth used when no policy is given (prompt-lookup's default, docs/contract.md §4).
DEFAULT_DEPTH = 4


@dataclass(eq=False)
class _Lane:
    request: GenerationRequest
    seq: int
    history: list[int]
    draft_state: DraftState | None
    #: The tokens that end the lane: the model's end-of-sequence tokens and the request's stops.
    stops: frozenset[int]
    prefilled: int = 0  # prompt tokens already in the KV
    pending: int | None = None  # last committed token, not yet in the KV
    generated: int = 0
    proposed: int = 0
    accepted: int = 0
    finish: Finish | None = None
    out: list[int] = field(default_factory=list)
    out_logprobs: list[TokenLogprob] = field(default_factory=list)  # aligned with `out`

    @property
    def kv_len(self) -> int:
        return len(self.history) - 1 if self.pending is not None else self.prefilled

    @property
    def stats(self) -> SpecStats:
        return SpecStats(self.proposed, self.accepted)


@dataclass(frozen=True, slots=True)
class _Plan:
    """One lane's part of a round: its feed and the draft in it."""

    lane: _Lane
    feed: Feed
    draft: list[int]
    prefill: bool
    #: The distributions a sampled draft was drawn from: verified by rejection sampling.
    q: DraftDistributions | None = None
    #: The draft's match class (`TickPlan.by_class`), reported with its round.
    klass: int = 0
    #: The depth the tick's plan asked of this draft (the yield floor scales by it).
    asked: int = 0


class Executor:
    """Runs requests on one runtime; single-threaded: call `tick()` from one worker."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        max_lanes: int,
        clock: Callable[[], float],
        drafter: Drafter | None = None,
        policy: SpeculationPolicy | None = None,
        reuse_prefixes: bool = True,
    ) -> None:
        caps = runtime.capabilities
        self._runtime = runtime
        self._caps = caps
        self._max_lanes = max(1, min(max_lanes, caps.max_sequences))
        self._clock = clock
        self._drafter = drafter if caps.truncate_partial else None
        self._policy = policy
        self._waiting: collections.deque[GenerationRequest] = collections.deque()
        self._lanes: list[_Lane] = []
        self._pool = SequencePool(runtime, reuse=reuse_prefixes)
        self._ticks = 0
        self._reused_this_tick = 0
        self.last_tick: TickReport | None = None

    @property
    def max_lanes(self) -> int:
        return self._max_lanes

    @property
    def active_lanes(self) -> int:
        return len(self._lanes)

    @property
    def waiting(self) -> int:
        """Requests submitted and waiting for a lane."""
        return len(self._waiting)

    @property
    def kv_usage(self) -> float:
        """The share of the lanes' KV cells the running requests hold, 0..1 (parked KV of
        finished requests is not counted: any request may take its cells)."""
        held = sum(lane.kv_len for lane in self._lanes)
        return held / (self._max_lanes * self._caps.context_size)

    @property
    def idle(self) -> bool:
        return not self._lanes and not self._waiting

    def submit(self, request: GenerationRequest) -> None:
        self._waiting.append(request)

    @property
    def reuses_prefixes(self) -> bool:
        return self._pool.reuses

    def release_parked(self) -> None:
        """Free every parked sequence (before the runtime serves another executor)."""
        self._pool.release_parked()

    def parked(self) -> dict[int, list[int]]:
        """Each parked sequence and the tokens its KV holds."""
        return self._pool.parked()

    def take_waiting(self) -> list[GenerationRequest]:
        """Every request still waiting for a lane, removed from the queue (a draining server
        hands them back so a router can send them elsewhere)."""
        taken = list(self._waiting)
        self._waiting.clear()
        return taken

    def abort_all(self) -> None:
        """Drop every lane and waiting request, freeing their sequences (after a failure)."""
        for lane in self._lanes:
            lane.finish = Finish.ERROR
        self._release_finished()
        self._waiting.clear()
        self.release_parked()

    def tick(self) -> list[Committed]:
        """End cancelled requests, admit waiting ones to free lanes, run one round of every
        lane, and free the lanes that ended; returns the tick's events."""
        events: list[Committed] = []
        self._ticks += 1
        self._reused_this_tick = 0
        self._drop_cancelled(events)
        self._admit(events)
        if self._lanes:
            self._round(events)
        self._release_finished()
        return events

    def _round(self, events: list[Committed]) -> None:
        """One round of every lane in one packed step: propose, verify, accept, cut back, commit,
        report.

        A lane proposes a prompt chunk while it prefills, else its pending token and a draft as
        deep as the tick's plan asks for the draft's match class (ADR 0013); an empty draft is
        plain decoding, verified by the same rules. `domain/verification.py` holds the math that
        turns a lane's rows into its committed tokens (the plain-decode tokens, whatever the
        draft) and the KV length to cut back to.
        """
        decoding = sum(1 for lane in self._lanes if lane.pending is not None)
        started = self._clock()  # drafting and verifying are part of what speculation costs
        tick = self._tick_plan(decoding)  # one plan per tick: the gates answer per lane count
        plans = [self._propose(lane, tick) for lane in self._lanes]
        if tick.fill:
            plans = self._fill(plans)
        rows = self._step(plans, events)
        if rows is None:
            return  # the step failed, and so did its lanes
        verified: list[RoundResult] = []
        for plan, lane_rows in zip(plans, rows, strict=True):
            try:
                result = self._verify(plan, lane_rows, events)
                if result is None:
                    continue  # the lane has more prompt to feed, or it has ended
                if plan.draft:
                    self._count_accepted(plan, result, decoding)
                    if not self._cut_back(plan, result, events):
                        continue  # the KV did not cut: the lane has ended, nothing is committed
                self._commit(plan, result, lane_rows, events)
                verified.append(result)
            except Exception as error:  # one lane's fault (a sampler bug, a bad row) is its own
                self._finish(plan.lane, Finish.ERROR, events, error=f"decoding failed: {error}")
        self._report(plans, verified, decoding, self._clock() - started)

    # -- one round, step by step -------------------------------------------------------------

    def _tick_plan(self, decoding: int) -> TickPlan:
        """This tick's draft depths for the lanes that may draft; depth 0 decodes plainly."""
        if self._drafter is None or decoding == 0:
            return PLAIN
        if decoding > 1 and not self._caps.verify_batches:
            return PLAIN
        if not any(
            lane.draft_state is not None and lane.pending is not None for lane in self._lanes
        ):
            return PLAIN  # no lane here drafts: do not ask (or wake) the gates
        if self._policy is None:
            return TickPlan(DEFAULT_DEPTH)
        return self._policy.plan(decoding)

    def _propose(self, lane: _Lane, tick: TickPlan) -> _Plan:
        """The lane's feed: its next prompt chunk while it prefills, else its pending token and a
        draft as deep as the tick's plan asks for the draft's match class."""
        if lane.pending is None:
            chunk = lane.request.prompt[lane.prefilled : lane.prefilled + PREFILL_CHUNK]
            return _Plan(lane, Feed(lane.seq, chunk, lane.prefilled), [], prefill=True)
        klass = self._match_class(lane, tick)
        return self._drafted(lane, klass, tick.depth_for(klass))

    @staticmethod
    def _match_class(lane: _Lane, tick: TickPlan) -> int:
        """The match class of the lane's next draft (0 for a drafter without match lengths).

        Asked whenever the tick speculates, even when every class drafts at one depth: the
        round is learnt under this class, and a class's learning rounds are kept from the
        throughput gate and the yield floor."""
        state = lane.draft_state
        if not tick.speculate or not isinstance(state, MatchedDraftState):
            return 0
        return match_class(state.match_length())

    def _drafted(self, lane: _Lane, klass: int, asked: int) -> _Plan:
        """The lane's pending token followed by a draft of at most `asked` tokens."""
        assert lane.pending is not None
        draft, q = self._draft(lane, asked)
        tokens = [lane.pending, *draft]
        return _Plan(
            lane,
            Feed(lane.seq, tokens, lane.kv_len, all_rows=bool(draft)),
            draft,
            False,
            q,
            klass,
            asked,
        )

    def _draft(self, lane: _Lane, depth: int) -> tuple[list[int], DraftDistributions | None]:
        """Up to `depth` draft tokens, with the distributions a sampled draft was drawn from;
        none when the lane does not draft, the gates hold its request back, or no room is left."""
        state = lane.draft_state
        if state is None or depth <= 0:
            return [], None
        if self._policy is not None and not self._policy.may_draft(lane.request.id):
            return [], None
        # A round commits up to len(draft) + 1 tokens: keep within max_tokens, the context
        # (the pending token takes a cell too) and the rows the runtime verifies at once.
        budget = lane.request.max_tokens - lane.generated
        room = self._caps.context_size - lane.kv_len - 1
        k = min(depth, budget - 1, room, self._caps.max_verify_rows - 1)
        if k <= 0:
            return [], None
        params = lane.request.params
        if not params.is_greedy and isinstance(state, SampledDraftState):
            tokens, q = state.propose_sampled(k, params, lane.generated)
            return tokens, (q if tokens else None)
        return state.propose(k), None

    def _fill(self, plans: list[_Plan]) -> list[_Plan]:
        """Lanes whose class was asked for no draft draft up to the tick's widest draft
        (`TickPlan.fill`): the runtime pads them to that width anyway."""
        widest = max(len(plan.draft) for plan in plans)
        if widest == 0:
            return plans
        return [
            self._drafted(plan.lane, plan.klass, widest)
            if not plan.prefill and plan.asked == 0
            else plan
            for plan in plans
        ]

    def _step(self, plans: list[_Plan], events: list[Committed]) -> list[Logits] | None:
        """Every lane's rows from one packed step; None when the step failed, which ends the
        lanes of the step, never the server."""
        try:
            return self._runtime.step([plan.feed for plan in plans])
        except Exception as error:
            for plan in plans:
                self._finish(plan.lane, Finish.ERROR, events, error=f"runtime step failed: {error}")
            return None

    def _verify(self, plan: _Plan, rows: Logits, events: list[Committed]) -> RoundResult | None:
        """The tokens the lane's rows commit, by the plain sampler's rules: a grammar lane samples
        among its allowed tokens, a sampled draft is verified by rejection, any other draft (an
        empty one too) by matching. None when the rows commit nothing: the lane has more prompt
        to feed, or it has ended."""
        lane = plan.lane
        if lane.finish is not None:
            return None
        if plan.prefill:
            lane.prefilled += len(plan.feed.tokens)
            if lane.prefilled < len(lane.request.prompt):
                return None  # more prompt to feed next tick
        request = lane.request
        budget = min(
            request.max_tokens - lane.generated, self._caps.context_size - len(lane.history)
        )
        if budget <= 0:
            self._finish(lane, Finish.LENGTH, events)
            return None
        if request.constraint is not None:
            token = sample_allowed(
                rows[-1], request.params, lane.history, lane.generated, request.constraint.allowed
            )
            if token is None:
                self._finish(lane, Finish.ERROR, events, error="the grammar allows no token here")
                return None
            request.constraint.commit(token)
            return RoundResult(0, (token,), token in lane.stops or budget <= 1, 0)
        if plan.q is not None:
            return verify_by_rejection(
                rows,
                plan.q,
                plan.draft,
                request.params,
                lane.history,
                lane.generated,
                lane.stops,
                budget,
            )
        return verify_by_matching(
            rows, plan.draft, request.params, lane.history, lane.generated, lane.stops, budget
        )

    def _count_accepted(self, plan: _Plan, result: RoundResult, decoding: int) -> None:
        """Count the draft and its accepted tokens on the lane, and tell the gates, under the
        draft's match class and the depth the tick's plan asked of it."""
        lane = plan.lane
        drafted = len(plan.draft)
        lane.proposed += drafted
        lane.accepted += result.accepted
        if self._policy is not None:
            self._policy.record_round(
                lane.request.id,
                decoding,
                drafted=drafted,
                accepted=result.accepted,
                klass=plan.klass,
                asked=plan.asked,
            )

    def _cut_back(self, plan: _Plan, result: RoundResult, events: list[Committed]) -> bool:
        """Cut the rejected draft cells off the lane's KV (`RoundResult.keep_length`). False when
        the cut failed: the lane ends, since it never decodes on from a KV that did not cut."""
        lane = plan.lane
        if result.keep_length < plan.feed.start + len(plan.feed.tokens):
            try:
                self._runtime.cut(lane.seq, result.keep_length)
            except Exception as error:
                self._finish(
                    lane, Finish.ERROR, events, error=f"cutting the KV back failed: {error}"
                )
                return False
        return True

    def _commit(
        self, plan: _Plan, result: RoundResult, rows: Logits, events: list[Committed]
    ) -> None:
        """Append a verified round to the lane and report its tokens, ending the lane at a stop
        token, a complete grammar, max_tokens or the context window."""
        lane = plan.lane
        request = lane.request
        tokens = result.tokens
        lane.history.extend(tokens)
        lane.generated += len(tokens)
        lane.pending = tokens[-1]
        if lane.draft_state is not None:
            lane.draft_state.commit(tokens)
        stopped = tokens[-1] in lane.stops
        emitted = tokens[:-1] if stopped else tokens
        if request.logprobs is not None:
            # Token i of a round was sampled from row i (a plain round has one of each), and the
            # stop token is not emitted, so it gets no entry.
            try:
                entries = [
                    token_logprob(row, token, request.logprobs)
                    for token, row in zip(emitted, rows, strict=False)
                ]
            except ValueError as error:  # a row that is no distribution fails its lane only
                self._finish(
                    lane, Finish.ERROR, events, error=f"computing logprobs failed: {error}"
                )
                return
            lane.out_logprobs.extend(entries)
        lane.out.extend(emitted)
        if stopped or (request.constraint is not None and request.constraint.complete):
            self._finish(lane, Finish.STOP, events)
        elif result.finished or len(lane.history) >= self._caps.context_size:
            self._finish(lane, Finish.LENGTH, events)
        elif lane.out:
            events.append(
                Committed(
                    request.id, tuple(lane.out), lane.stats, logprobs=tuple(lane.out_logprobs)
                )
            )
            lane.out = []
            lane.out_logprobs = []

    def _report(
        self, plans: list[_Plan], verified: list[RoundResult], decoding: int, seconds: float
    ) -> None:
        """Report the tick (`last_tick`) and, when it measured speculation cleanly, tell the
        gates what a speculative or a plain tick at this lane count committed and cost."""
        committed = sum(len(result.tokens) for result in verified)
        accepted = sum(result.accepted for result in verified)
        accepted_at = [0] * max((len(plan.draft) for plan in plans), default=0)
        for result in verified:
            for position in range(result.accepted):
                accepted_at[position] += 1
        prefill = sum(len(plan.feed.tokens) for plan in plans if plan.prefill)
        drafted = sum(len(plan.draft) for plan in plans)
        self.last_tick = TickReport(
            len(plans),
            decoding,
            prefill,
            committed,
            drafted,
            accepted,
            seconds,
            tuple(accepted_at),
            self._reused_this_tick,
        )
        # Gate measurements are clean only when no prefill shared the step, and they say
        # something about speculation only when a lane could have drafted.
        if self._policy is None or not decoding or prefill or not self._may_draft(plans):
            return
        if drafted:
            rows = 1 + max(len(plan.draft) for plan in plans)
            self._policy.record_spec_tick(
                decoding, drafted=drafted, committed=committed, seconds=seconds, rows=rows
            )
        else:
            self._policy.record_plain_tick(decoding, committed=committed, seconds=seconds)

    def _may_draft(self, plans: list[_Plan]) -> bool:
        """Whether a decoding lane of this tick was free to draft. A tick of grammar lanes,
        forced calls, logprobs or logit-bias lanes only, or of requests the yield floor stopped,
        is neither a plain sample against speculation nor a tick of a probe's deadline: the
        gates never see it (docs/contract.md §7)."""
        assert self._policy is not None
        return any(
            not plan.prefill
            and plan.lane.draft_state is not None
            and self._policy.may_draft(plan.lane.request.id)
            for plan in plans
        )

    # -- admission and release -------------------------------------------------------------

    def _admit(self, events: list[Committed]) -> None:
        while self._waiting and len(self._lanes) < self._max_lanes:
            request = self._waiting.popleft()
            if request.cancelled:
                events.append(Committed(request.id, (), SpecStats(), Finish.CANCELLED))
                continue
            if not request.prompt or len(request.prompt) >= self._caps.context_size:
                why = (
                    f"the prompt ({len(request.prompt)} tokens) does not fit the context window"
                    f" ({self._caps.context_size} tokens)"
                    if request.prompt
                    else "the prompt is empty"
                )
                events.append(Committed(request.id, (), SpecStats(), Finish.ERROR, why))
                continue
            speculates = request.may_draft and self._drafter is not None
            seq, reused = self._pool.acquire(request.prompt)
            self._reused_this_tick += reused
            lane = _Lane(
                request=request,
                seq=seq,
                prefilled=reused,
                history=list(request.prompt),
                stops=self._caps.eos_tokens | request.stop_tokens,
                draft_state=self._drafter.open(request.prompt, seq=seq)
                if speculates and self._drafter
                else None,
            )
            if self._policy is not None and lane.draft_state is not None:
                self._policy.request_started(request.id)
            self._lanes.append(lane)

    def _drop_cancelled(self, events: list[Committed]) -> None:
        for lane in self._lanes:
            if lane.request.cancelled:
                self._finish(lane, Finish.CANCELLED, events)
        self._release_finished()
        # A waiting request whose client left ends now, not when a lane frees: its place in
        # the queue goes to the next client.
        if any(request.cancelled for request in self._waiting):
            waiting: collections.deque[GenerationRequest] = collections.deque()
            for request in self._waiting:
                if request.cancelled:
                    events.append(Committed(request.id, (), SpecStats(), Finish.CANCELLED))
                else:
                    waiting.append(request)
            self._waiting = waiting

    def _finish(
        self, lane: _Lane, finish: Finish, events: list[Committed], error: str | None = None
    ) -> None:
        lane.finish = finish
        events.append(
            Committed(
                lane.request.id,
                tuple(lane.out),
                lane.stats,
                finish,
                error,
                logprobs=tuple(lane.out_logprobs),
            )
        )
        lane.out = []
        lane.out_logprobs = []

    def _release_finished(self) -> None:
        keep: list[_Lane] = []
        for lane in self._lanes:
            if lane.finish is None:
                keep.append(lane)
                continue
            # A lane that failed may have left its KV in any state: only a clean one is kept.
            clean = lane.finish is not Finish.ERROR
            self._pool.release(
                lane.seq, lane.history[: lane.kv_len] if clean else None, now=self._ticks
            )
            if self._policy is not None and lane.draft_state is not None:
                self._policy.request_finished(lane.request.id)
        self._lanes = keep
