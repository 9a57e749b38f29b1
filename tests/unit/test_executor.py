import itertools

import numpy as np
import pytest

from superfluid.application.events import Finish
from superfluid.application.executor import Executor
from superfluid.application.ports import RuntimeFault
from superfluid.application.requests import GenerationRequest
from superfluid.application.sequence_pool import start_of_longest_run
from superfluid.domain.gates.policy import TickPlan
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from tests.fakes import EOS, FakeModel, FakeRuntime

GREEDY = SamplingParams(temperature=0.0)


class FixedDepth:
    """A policy that always drafts at one depth and records what it is told."""

    def __init__(self, depth=4):
        self._depth = depth
        self.rounds = []
        self.ticks = []
        self.open = set()

    def plan(self, lane_count):
        return TickPlan(self._depth)

    def may_draft(self, request_id):
        return True

    def request_started(self, request_id):
        self.open.add(request_id)

    def request_finished(self, request_id):
        self.open.remove(request_id)

    def record_round(self, request_id, lane_count, *, drafted, accepted, klass=0, asked=None):
        self.rounds.append((lane_count, drafted, accepted))

    def record_spec_tick(self, lane_count, *, drafted, committed, seconds, rows):
        self.ticks.append((lane_count, committed, drafted))

    def record_plain_tick(self, lane_count, *, committed, seconds):
        self.ticks.append((lane_count, committed, 0))


def run(runtime, requests, *, speculate, depth=4, max_lanes=4, policy=None):
    policy = policy or FixedDepth(depth)
    executor = Executor(
        runtime,
        max_lanes=max_lanes,
        clock=itertools.count().__next__,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=policy if speculate else None,
    )
    for request in requests:
        executor.submit(request)
    out = {r.id: [] for r in requests}
    finish = {}
    events = []
    for _ in range(10_000):
        if executor.idle:
            break
        for event in executor.tick():
            events.append(event)
            out[event.request_id].extend(event.tokens)
            if event.finish is not None:
                finish[event.request_id] = event.finish
    assert executor.idle, "the executor did not drain"
    assert runtime.kv == executor.parked(), "a sequence leaked, or a parked one holds other tokens"
    return [out[r.id] for r in requests], [finish[r.id] for r in requests], events


def requests_for(prompts, params=GREEDY, max_tokens=40, **kw):
    return [GenerationRequest(list(p), params, max_tokens, **kw) for p in prompts]


PROMPTS = [[5, 6, 7, 8, 5, 6, 7], [9, 3], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [11] * 6, [7, 19, 23]]


def test_speculative_greedy_output_equals_plain_greedy_output():
    plain, plain_finish, _ = run(FakeRuntime(), requests_for(PROMPTS), speculate=False)
    spec, spec_finish, events = run(FakeRuntime(), requests_for(PROMPTS), speculate=True)
    assert spec == plain
    assert spec_finish == plain_finish
    assert sum(e.spec.accepted for e in events if e.finish) > 0, "nothing was accepted"


@pytest.mark.parametrize("seed", [0, 1, 2**40 + 7])
def test_seeded_sampled_output_equals_plain_sampled_output(seed):
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.95, repeat_penalty=1.1, seed=seed)
    plain, _, _ = run(FakeRuntime(), requests_for(PROMPTS, params), speculate=False)
    spec, _, _ = run(FakeRuntime(), requests_for(PROMPTS, params), speculate=True)
    assert spec == plain


def test_a_model_that_repeats_itself_accepts_drafts_and_rolls_rejections_back():
    runtime = FakeRuntime(FakeModel(order=1, peak=6.0, eos=False))
    (out,), _, events = run(runtime, requests_for([[3, 4, 5]], max_tokens=60), speculate=True)
    final = events[-1].spec
    assert final.proposed > 0 and 0 < final.accepted <= final.proposed
    assert len(out) == 60


def test_the_kv_always_holds_the_history_but_the_pending_token():
    runtime = FakeRuntime()
    policy = FixedDepth(6)
    executor = Executor(
        runtime, max_lanes=2, clock=lambda: 0.0, drafter=PromptLookupDrafter(), policy=policy
    )
    request = GenerationRequest([1, 2, 3, 1, 2, 3, 1, 2], GREEDY, 50)
    executor.submit(request)
    produced = []
    while not executor.idle:
        for event in executor.tick():
            produced.extend(event.tokens)
        for cells in runtime.kv.values():
            lane_history = request.prompt + produced
            assert cells == lane_history[: len(cells)]
            assert len(cells) == len(lane_history) - 1


def test_max_tokens_is_never_exceeded_even_by_an_accepted_draft():
    for max_tokens in range(1, 12):
        outs, finishes, _ = run(
            FakeRuntime(FakeModel(order=1, peak=8.0)),
            requests_for([[4, 4, 4, 4]], max_tokens=max_tokens),
            speculate=True,
            depth=8,
        )
        assert len(outs[0]) <= max_tokens
        assert finishes[0] in (Finish.LENGTH, Finish.STOP)


def test_eos_inside_a_draft_ends_the_lane_at_that_token():
    # A prompt whose repeat predicts EOS: the model is forced to emit EOS after token 9.
    model = FakeModel(order=1, peak=0.0)
    model._cache[(9,)] = model.logits([9]).copy()
    model._cache[(9,)][EOS] = 100.0
    runtime = FakeRuntime(model)
    prompt = [9, EOS, 2, 3, 9]
    plain, plain_finish, _ = run(FakeRuntime(model), requests_for([prompt]), speculate=False)
    spec, spec_finish, _ = run(runtime, requests_for([prompt]), speculate=True)
    assert spec == plain == [[]]
    assert spec_finish == plain_finish == [Finish.STOP]


def test_the_context_window_is_never_overrun():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False), context_size=24)
    outs, finishes, _ = run(
        runtime, requests_for([[1, 2, 3, 1, 2, 3]], max_tokens=500), speculate=True, depth=8
    )
    assert len(outs[0]) + 6 <= 24
    assert finishes == [Finish.LENGTH]


def test_a_prompt_that_does_not_fit_the_context_fails_with_a_reason():
    runtime = FakeRuntime(context_size=8)
    executor = Executor(runtime, max_lanes=1, clock=lambda: 0.0)
    executor.submit(GenerationRequest(list(range(1, 12)), GREEDY, 4))
    (event,) = executor.tick()
    assert event.finish is Finish.ERROR
    assert "does not fit the context window (8 tokens)" in event.error


def test_all_lanes_decode_in_one_packed_step_per_tick():
    runtime = FakeRuntime()
    reqs = requests_for(PROMPTS[:4], max_tokens=10)
    run(runtime, reqs, speculate=True, max_lanes=4)
    assert max(len(step) for step in runtime.steps) == 4
    assert len(runtime.steps) < 4 * 11, "lanes were stepped one at a time"


def test_lanes_beyond_max_lanes_wait_for_a_free_one():
    runtime = FakeRuntime()
    _, finishes, _ = run(runtime, requests_for(PROMPTS, max_tokens=5), speculate=True, max_lanes=2)
    assert max(len(step) for step in runtime.steps) == 2
    assert all(f in (Finish.LENGTH, Finish.STOP) for f in finishes)


def test_a_cancelled_request_frees_its_lane_and_sequence_at_the_next_tick():
    runtime = FakeRuntime()
    executor = Executor(runtime, max_lanes=1, clock=lambda: 0.0)
    first, second = requests_for([[1, 2, 3], [4, 5, 6]], max_tokens=1000)
    executor.submit(first)
    executor.submit(second)
    executor.tick()
    assert executor.active_lanes == 1 and len(runtime.kv) == 1
    first.cancel()
    events = executor.tick()
    assert any(e.request_id == first.id and e.finish is Finish.CANCELLED for e in events)
    assert executor.active_lanes == 1  # the second request took the freed lane
    second.cancel()
    executor.tick()
    assert runtime.kv == executor.parked() and executor.idle


def test_a_runtime_fault_fails_only_the_lanes_of_that_step():
    runtime = FakeRuntime()
    executor = Executor(runtime, max_lanes=1, clock=lambda: 0.0)
    first, second = requests_for([[1, 2, 3], [4, 5, 6]], max_tokens=5)
    executor.submit(first)
    executor.submit(second)
    runtime.fail_next_step = True
    events = executor.tick()
    assert [(e.request_id, e.finish) for e in events] == [(first.id, Finish.ERROR)]
    assert "injected fault" in events[0].error
    done = {}
    while not executor.idle:
        for e in executor.tick():
            if e.finish:
                done[e.request_id] = e.finish
    assert done[second.id] in (Finish.LENGTH, Finish.STOP)


def test_lanes_that_may_not_speculate_never_draft():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0))
    reqs = requests_for([[1, 2, 1, 2, 1, 2]], max_tokens=30, speculate=False)
    _, _, events = run(runtime, reqs, speculate=True)
    assert events[-1].spec.proposed == 0
    assert all(not feed.all_rows for step in runtime.steps for feed in step)


def test_a_model_that_cannot_cut_never_drafts():
    runtime = FakeRuntime(
        FakeModel(order=1, peak=8.0), cut_refusal="recurrent state cuts only at its head"
    )
    _, _, events = run(runtime, requests_for([[1, 2, 1, 2, 1, 2]], max_tokens=30), speculate=True)
    assert events[-1].spec.proposed == 0 and runtime.cuts == 0


def test_without_batched_verification_only_a_lone_lane_drafts():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False), verify_batches=False)
    short, long = requests_for([[1, 2, 1, 2, 1, 2]] * 2, max_tokens=30)
    short.max_tokens = 3
    run(runtime, [short, long], speculate=True, max_lanes=2)
    for step in runtime.steps:
        if len(step) > 1:
            assert not any(feed.all_rows for feed in step)
    assert any(feed.all_rows for step in runtime.steps for feed in step)


def test_each_tick_reports_what_it_drafted_accepted_and_committed():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False))
    executor = Executor(
        runtime,
        max_lanes=2,
        clock=itertools.count().__next__,
        drafter=PromptLookupDrafter(),
        policy=FixedDepth(4),
    )
    executor.submit(GenerationRequest([1, 2, 1, 2, 1, 2], GREEDY, 40))
    totals = {"drafted": 0, "accepted": 0, "committed": 0, "prefill": 0}
    generated = 0
    while not executor.idle:
        generated += sum(len(e.tokens) for e in executor.tick())
        report = executor.last_tick
        assert sum(report.accepted_at) == report.accepted <= report.drafted
        assert list(report.accepted_at) == sorted(report.accepted_at, reverse=True)
        totals["drafted"] += report.drafted
        totals["accepted"] += report.accepted
        totals["committed"] += report.committed
        totals["prefill"] += report.prefill_tokens
    assert totals["prefill"] == 6
    assert totals["committed"] == generated == 40
    assert 0 < totals["accepted"] <= totals["drafted"]


class ModelDrafter:
    """A drafter that samples from the target's own distribution (p == q): rejection must
    accept every sampled token; greedy drafts are its argmax tokens."""

    strategy = "test-model"

    def __init__(self, model):
        self.model = model

    def open(self, prompt, *, seq):
        return _ModelDraftState(self.model, list(prompt))


class _ModelDraftState:
    def __init__(self, model, history):
        self.model, self.history, self.sampled_rounds = model, history, 0

    def propose(self, k):
        context, out = list(self.history), []
        for _ in range(k):
            token = int(np.argmax(self.model.logits(context)))
            out.append(token)
            context.append(token)
        return out

    def propose_sampled(self, k, params, pos):
        from superfluid.domain.rng import STREAM_DRAFT, uniform
        from superfluid.domain.sampling import draw_index, token_distribution

        self.sampled_rounds += 1
        context, out, rows = list(self.history), [], []
        for i in range(k):
            q = token_distribution(self.model.logits(context), params, context)
            token = draw_index(q, uniform(params.seed, pos + i, STREAM_DRAFT))
            out.append(token)
            rows.append(q)
            context.append(token)
        return out, np.stack(rows)

    def commit(self, tokens):
        self.history.extend(tokens)


def test_a_sampled_draft_is_verified_by_rejection_and_a_perfect_drafter_is_always_accepted():
    model = FakeModel(order=2, peak=1.0, eos=False)
    runtime = FakeRuntime(model)
    executor = Executor(
        runtime,
        max_lanes=1,
        clock=itertools.count().__next__,
        drafter=ModelDrafter(model),
        policy=FixedDepth(3),
    )
    params = SamplingParams(temperature=1.0, seed=11)  # no filters or penalties: q is exactly p
    executor.submit(GenerationRequest([5, 6, 7], params, 30))
    last = None
    while not executor.idle:
        for event in executor.tick():
            last = event
    assert last.spec.proposed > 0
    assert last.spec.accepted == last.spec.proposed


def test_a_model_drafter_on_a_greedy_lane_keeps_plain_greedy_output():
    model = FakeModel(order=2, peak=1.0, eos=False)
    plain, _, _ = run(FakeRuntime(model), requests_for(PROMPTS), speculate=False)
    executor = Executor(
        FakeRuntime(model),
        max_lanes=4,
        clock=itertools.count().__next__,
        drafter=ModelDrafter(model),
        policy=FixedDepth(3),
    )
    reqs = requests_for(PROMPTS)
    for r in reqs:
        executor.submit(r)
    out = {r.id: [] for r in reqs}
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
    assert [out[r.id] for r in reqs] == plain


def test_a_fault_while_committing_one_lane_fails_only_that_lane():
    runtime = FakeRuntime(FakeModel(eos=False))
    executor = Executor(runtime, max_lanes=2, clock=itertools.count().__next__)

    class Exploding(SamplingParams):
        @property
        def is_greedy(self):
            raise ArithmeticError("boom")

    bad = GenerationRequest([1, 2, 3], Exploding(temperature=0.0), 5)
    good = GenerationRequest([4, 5, 6], GREEDY, 5)
    executor.submit(bad)
    executor.submit(good)
    finishes, errors = {}, {}
    while not executor.idle:
        for event in executor.tick():
            if event.finish:
                finishes[event.request_id], errors[event.request_id] = event.finish, event.error
    assert finishes == {bad.id: Finish.ERROR, good.id: Finish.LENGTH}
    assert "boom" in errors[bad.id]
    assert runtime.kv == executor.parked()
    # Admitted in order, the bad lane took sequence 0 and the good one 1.
    assert list(executor.parked()) == [1], "the failed lane's sequence is freed, not parked"


class FirstCutFails(FakeRuntime):
    """A runtime whose first KV cut fails."""

    def __init__(self, model):
        super().__init__(model)
        self.failed_seq = None

    def cut(self, seq, length):
        if self.failed_seq is None:
            self.failed_seq = seq
            raise RuntimeFault("the cut did not hold")
        super().cut(seq, length)


def test_a_kv_that_does_not_cut_back_ends_its_lane_and_commits_nothing_of_that_round():
    model = FakeModel(order=1, peak=3.0, eos=False)
    prompts = [[3, 4, 5, 3, 4], [1, 2, 1, 2, 1]]
    params = SamplingParams(temperature=1.0, seed=3)  # sampled: some drafts are rejected

    def requests():
        return requests_for(prompts, params, max_tokens=60)

    plain, _, _ = run(FakeRuntime(model), requests(), speculate=False)
    runtime = FirstCutFails(model)
    spec = requests()
    outs, finishes, events = run(runtime, spec, speculate=True)
    assert runtime.failed_seq is not None, "no round was cut back"
    failed = finishes.index(Finish.ERROR)
    last = [e for e in events if e.request_id == spec[failed].id][-1]
    assert last.finish is Finish.ERROR and last.tokens == ()
    assert "the cut did not hold" in last.error
    # What the lane reported before that round is plain output; the round itself adds nothing.
    assert outs[failed] == plain[failed][: len(outs[failed])]
    assert outs[1 - failed] == plain[1 - failed] and finishes[1 - failed] is Finish.LENGTH


# -- prefix reuse --------------------------------------------------------------------------


def converse(executor, prompt, max_tokens=12):
    request = GenerationRequest(list(prompt), GREEDY, max_tokens)
    executor.submit(request)
    out, reports = [], []
    while not executor.idle:
        out.extend(t for e in executor.tick() for t in e.tokens)
        reports.append(executor.last_tick)
    return out, reports


def test_a_later_turn_prefills_only_what_follows_the_earlier_turn_s_kv():
    runtime = FakeRuntime()
    executor = Executor(runtime, max_lanes=2, clock=lambda: 0.0)
    first = list(range(1, 41))
    reply, _ = converse(executor, first)
    second = first + reply + [7, 8, 9]
    again, reports = converse(executor, second)
    fed = sum(r.prefill_tokens for r in reports if r)
    reused = sum(r.reused_tokens for r in reports if r)
    # The last reply token never reached the KV (it was pending), so it is fed with the new line.
    assert reused == len(first) + len(reply) - 1
    assert fed == len(second) - reused
    fresh = Executor(FakeRuntime(), max_lanes=2, clock=lambda: 0.0, reuse_prefixes=False)
    assert converse(fresh, second)[0] == again
    assert runtime.kv == executor.parked()


def test_a_prompt_inside_the_parked_kv_still_feeds_its_last_token():
    runtime = FakeRuntime()
    executor = Executor(runtime, max_lanes=1, clock=lambda: 0.0)
    prompt = list(range(1, 41))
    first, _ = converse(executor, prompt)
    again, reports = converse(executor, prompt)
    assert again == first
    assert sum(r.prefill_tokens for r in reports if r) == 1
    assert sum(r.reused_tokens for r in reports if r) == len(prompt) - 1


def test_parked_sequences_are_freed_least_recently_used_first():
    runtime = FakeRuntime(max_sequences=2)
    executor = Executor(runtime, max_lanes=2, clock=lambda: 0.0)
    a, b, c = (list(range(s, s + 30)) for s in (1, 101, 201))
    converse(executor, a)
    converse(executor, b)
    assert len(executor.parked()) == 2
    converse(executor, c)  # needs a sequence: a's, parked first, goes
    held = [tokens[:30] for tokens in executor.parked().values()]
    assert sorted(held) == sorted([b, c])
    _, reports = converse(executor, [*b, 5])
    assert sum(r.reused_tokens for r in reports if r) == 30


def test_a_short_shared_prefix_does_not_take_a_parked_sequence_while_one_is_free():
    runtime = FakeRuntime(max_sequences=4)
    executor = Executor(runtime, max_lanes=4, clock=lambda: 0.0)
    converse(executor, list(range(1, 31)))
    _, reports = converse(executor, [1, 2, 3, *range(500, 530)])
    assert sum(r.reused_tokens for r in reports if r) == 0
    assert len(executor.parked()) == 2


def converse_together(executor, prompts, max_tokens=12):
    for prompt in prompts:
        executor.submit(GenerationRequest(list(prompt), GREEDY, max_tokens))
    reports = []
    while not executor.idle:
        executor.tick()
        reports.append(executor.last_tick)
    return reports


def test_a_template_s_few_shared_tokens_take_no_parked_sequence_even_when_none_is_free():
    # Four requests a round, eight sequences: every prompt opens with the same 20 tokens (a chat
    # template's), 20% of it. Taking a parked sequence for them would land lanes on scattered
    # ids; freeing the least recently parked instead keeps a round's lanes on consecutive ids.
    runtime = FakeRuntime(max_sequences=8)
    executor = Executor(runtime, max_lanes=4, clock=lambda: 0.0)
    template = list(range(1, 21))
    for round_ in range(4):
        prompts = [
            [*template, *range(1000 * (4 * round_ + i), 1000 * (4 * round_ + i) + 80)]
            for i in range(4)
        ]
        before = len(runtime.steps)
        reports = converse_together(executor, prompts)
        assert sum(r.reused_tokens for r in reports if r) == 0
        for feeds in runtime.steps[before:]:
            if len(feeds) == 4:
                ids = sorted(feed.seq for feed in feeds)
                assert ids == list(range(ids[0], ids[0] + 4)), ids


def test_lanes_admitted_together_get_consecutive_ids_after_rounds_of_other_sizes():
    # The bench's order on one server: rounds of 1, 1, 2 and 2 lanes park sequences 0-5; a
    # round of 4 then found one free id (7 after 6 went): the lowest free id and the least
    # recently parked gave lanes 7, 0, 1, 2, a gap in every step. Then rounds of 4 and 8.
    runtime = FakeRuntime(max_sequences=8)
    executor = Executor(runtime, max_lanes=8, clock=lambda: 0.0)
    template = list(range(1, 21))
    for round_, lanes in enumerate((1, 1, 2, 2, 1, 4, 4, 4, 8, 4, 2, 4)):
        prompts = [
            [*template, *range(1000 * (8 * round_ + i), 1000 * (8 * round_ + i) + 80)]
            for i in range(lanes)
        ]
        before = len(runtime.steps)
        converse_together(executor, prompts)
        widest = max(runtime.steps[before:], key=len)
        ids = sorted(feed.seq for feed in widest)
        assert len(ids) == lanes and ids == list(range(ids[0], ids[0] + lanes)), (round_, ids)


def test_a_long_shared_prefix_is_reused_even_when_it_is_a_small_share_of_the_prompt():
    runtime = FakeRuntime(context_size=2048)
    executor = Executor(runtime, max_lanes=1, clock=lambda: 0.0)
    system = list(range(1, 301))  # a long system prompt, a fifth of each request
    converse(executor, [*system, *range(5000, 6200)], max_tokens=2)
    _, reports = converse(executor, [*system, *range(7000, 8200)], max_tokens=2)
    assert sum(r.reused_tokens for r in reports if r) == len(system)


def test_a_runtime_that_refuses_reuse_frees_every_sequence():
    runtime = FakeRuntime(reuse_refusal="its KV depends on the batch")
    executor = Executor(runtime, max_lanes=2, clock=lambda: 0.0)
    assert not executor.reuses_prefixes
    converse(executor, list(range(1, 41)))
    assert runtime.kv == {} == executor.parked()


class ClassDepths(FixedDepth):
    """A policy whose depth depends on the draft's match class (bare bigrams never draft)."""

    def __init__(self, by_class):
        super().__init__(max(by_class))
        self._by_class = tuple(by_class)
        self.asked = []

    def plan(self, lane_count):
        return TickPlan(max(self._by_class), self._by_class)

    def record_round(self, request_id, lane_count, *, drafted, accepted, klass=0, asked=None):
        self.rounds.append((klass, drafted, accepted))
        self.asked.append((klass, asked))


def test_each_lane_drafts_as_deep_as_its_drafts_match_class_allows():
    by_class = (0, 1, 7)
    policy = ClassDepths(by_class)
    looping = FakeModel(eos=False)  # an order-2 model loops: its replies copy themselves
    requests = requests_for(PROMPTS, max_tokens=60)
    plain, _, _ = run(FakeRuntime(looping), requests, speculate=False)
    spec, _, _ = run(
        FakeRuntime(looping), requests_for(PROMPTS, max_tokens=60), speculate=True, policy=policy
    )
    assert spec == plain
    assert policy.rounds, "nothing was drafted"
    assert all(0 < drafted <= by_class[klass] for klass, drafted, _ in policy.rounds)
    assert {klass for klass, _, _ in policy.rounds} >= {1, 2}
    assert max(drafted for klass, drafted, _ in policy.rounds if klass == 2) > 1
    # Each round is reported with the depth its class was asked for (the yield floor's scale).
    assert all(asked == by_class[klass] for klass, asked in policy.asked)


class FillingClassDepths(ClassDepths):
    """Per-class depths with `TickPlan.fill`, as the policy plans from four lanes on."""

    def plan(self, lane_count):
        return TickPlan(max(self._by_class), self._by_class, fill=True)


def test_a_class_that_does_not_draft_fills_a_tick_in_which_another_lane_drafts():
    policy = FillingClassDepths((1, 7, 0))
    looping = FakeModel(eos=False)
    plain, _, _ = run(FakeRuntime(looping), requests_for(PROMPTS, max_tokens=60), speculate=False)
    spec, _, _ = run(
        FakeRuntime(looping), requests_for(PROMPTS, max_tokens=60), speculate=True, policy=policy
    )
    assert spec == plain
    filled = [drafted for klass, drafted, _ in policy.rounds if klass == 2]
    assert filled and all(drafted > 0 for drafted in filled), "class 2 never filled a tick"
    # A filled lane is asked for the tick's widest draft (never 0, never past the deepest
    # class's depth), and its round is reported with that.
    asked_of_filled = [asked for klass, asked in policy.asked if klass == 2]
    assert all(0 < asked <= 7 for asked in asked_of_filled)
    assert all(drafted <= asked for drafted, asked in zip(filled, asked_of_filled, strict=True))


def test_without_fill_a_class_that_does_not_draft_never_drafts():
    policy = ClassDepths((1, 7, 0))
    looping = FakeModel(eos=False)
    run(FakeRuntime(looping), requests_for(PROMPTS, max_tokens=60), speculate=True, policy=policy)
    assert policy.rounds and all(klass != 2 for klass, _, _ in policy.rounds)


def test_a_round_is_reported_under_its_match_class_even_when_every_class_drafts_alike():
    policy = ClassDepths((4, 4, 4))
    policy.plan = lambda lane_count: TickPlan(4)  # one depth for all: no per-class depths
    looping = FakeModel(eos=False)
    run(FakeRuntime(looping), requests_for(PROMPTS, max_tokens=60), speculate=True, policy=policy)
    assert {klass for klass, _, _ in policy.rounds} >= {1, 2}


def test_the_first_lane_of_a_round_starts_the_longest_run_of_free_ids():
    assert start_of_longest_run({0, 4, 5, 6, 7}) == 4
    assert start_of_longest_run({1, 2, 5, 6}) == 1  # a tie: the lower run
    assert start_of_longest_run(set()) is None


def test_ticks_on_which_no_lane_may_draft_never_reach_the_gates():
    # Lanes that never draft (here: with logprobs; grammar lanes and logit biases alike) say
    # nothing about speculation: their ticks are neither plain samples nor deadline ticks.
    policy = FixedDepth(4)
    undraftable = requests_for(PROMPTS[:2], logprobs=0)
    run(FakeRuntime(), undraftable, speculate=True, policy=policy)
    assert policy.ticks == []
    # Beside a lane that may draft, the tick is the gates' to measure.
    mixed = [*requests_for(PROMPTS[:1], logprobs=0), *requests_for(PROMPTS[2:3])]
    run(FakeRuntime(), mixed, speculate=True, policy=policy)
    assert policy.ticks


class YieldFloorStopped(FixedDepth):
    def may_draft(self, request_id):
        return False


def test_ticks_of_requests_the_yield_floor_stopped_never_reach_the_gates():
    policy = YieldFloorStopped(4)
    run(FakeRuntime(), requests_for(PROMPTS), speculate=True, policy=policy)
    assert policy.ticks == []
