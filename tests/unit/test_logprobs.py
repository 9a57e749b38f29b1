"""Log-probabilities: the domain function against a reference, the executor's events, the reply
entries the HTTP layer builds from them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superfluid.application.events import Committed, Finish, SpecStats
from superfluid.application.executor import Executor
from superfluid.application.ports import Feed, Logits
from superfluid.application.requests import GenerationRequest
from superfluid.domain.logprobs import TokenLogprob, token_logprob
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.entrypoints.http.generation import LogprobTrail
from superfluid.entrypoints.http.intake import logprobs_wanted
from superfluid.entrypoints.http.replies import (
    LOGPROB_FLOOR,
    LogprobEntry,
    ReplyFrame,
    TopEntry,
    chat_logprobs,
    completion_logprobs,
)
from superfluid.entrypoints.http.schemas import ChatCompletionBody, CompletionBody
from tests.fakes import FakeModel, FakeRuntime
from tests.unit.test_executor import FixedDepth

GREEDY = SamplingParams(temperature=0.0)


def reference_log_softmax(row: Sequence[float]) -> np.ndarray:
    """The textbook definition, in float64: x - log(sum(exp(x - max))) - max."""
    x = np.asarray(row, dtype=np.float64)
    peak = x.max()
    return x - peak - np.log(np.sum(np.exp(x - peak)))


def reference_top(row: Sequence[float], n: int) -> list[int]:
    """Ids by log-probability, highest first, ties by lower id: a full stable sort."""
    x = np.asarray(row, dtype=np.float64)
    return sorted(range(len(x)), key=lambda i: (-x[i], i))[:n]


# -- the domain function --------------------------------------------------------------------------

rows = st.lists(
    st.floats(min_value=-60.0, max_value=60.0, allow_nan=False, width=32), min_size=1, max_size=80
)


@settings(max_examples=200, deadline=None)
@given(row=rows, data=st.data())
def test_logprobs_equal_a_float64_log_softmax_of_the_raw_row(row, data):
    logits = np.asarray(row, dtype=np.float32)
    token = data.draw(st.integers(0, len(row) - 1))
    top_n = data.draw(st.integers(0, 25))
    result = token_logprob(logits, token, top_n)
    expected = reference_log_softmax(logits)
    assert result.token == token
    assert result.logprob == pytest.approx(expected[token], abs=1e-6)
    assert result.logprob <= 0.0
    assert [i for i, _ in result.top] == reference_top(logits, top_n)
    for i, value in result.top:
        assert value == pytest.approx(expected[i], abs=1e-6)


def test_the_top_list_is_highest_first_and_ties_go_to_the_lower_id():
    row = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 2.0, -1.0], dtype=np.float32)
    result = token_logprob(row, 6, 4)
    # 1 and 3 tie for first; 2, 4 and 5 tie at the boundary, and the lowest id (2) gets the seat.
    assert [i for i, _ in result.top] == [1, 3, 2, 4]
    values = [v for _, v in result.top]
    assert values == sorted(values, reverse=True)
    assert values[0] == values[1] and values[2] == values[3]


def test_an_all_equal_row_is_uniform_and_lists_the_lowest_ids():
    result = token_logprob(np.zeros(1000, dtype=np.float32), 999, 5)
    assert result.logprob == pytest.approx(-math.log(1000))
    assert [i for i, _ in result.top] == [0, 1, 2, 3, 4]


def test_top_n_zero_lists_nothing_and_past_the_vocabulary_lists_everything():
    row = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    assert token_logprob(row, 0, 0).top == ()
    assert [i for i, _ in token_logprob(row, 0, 20).top] == [1, 0, 2]


def test_huge_logits_stay_finite_and_normalised():
    row = np.array([3.0e38, 2.9e38, -3.0e38, 0.0], dtype=np.float32)
    result = token_logprob(row, 1, 4)
    assert result.logprob == pytest.approx(float(row[1]) - float(row[0]))  # exp(-1e37) ~ 0
    assert token_logprob(row, 0, 0).logprob == pytest.approx(0.0)
    assert all(math.isfinite(v) or v == -math.inf for _, v in result.top)
    near = np.array([1e4, 1e4 + 1.0, 1e4 - 2.0], dtype=np.float32)
    total = sum(math.exp(token_logprob(near, i, 0).logprob) for i in range(3))
    assert total == pytest.approx(1.0, abs=1e-6)


def test_masked_tokens_get_minus_infinity_and_rank_last():
    row = np.array([-np.inf, 1.0, -np.inf, 0.0], dtype=np.float32)
    assert token_logprob(row, 0, 0).logprob == -math.inf
    assert [i for i, _ in token_logprob(row, 1, 4).top] == [1, 3, 0, 2]


def test_a_large_vocabulary_agrees_with_the_reference():
    rng = np.random.default_rng(7)
    row = rng.normal(scale=4.0, size=262_144).astype(np.float32)
    row[[10, 20_000, 262_143]] = 40.0  # a three-way tie at the top
    result = token_logprob(row, 123, 20)
    expected = reference_log_softmax(row)
    assert result.logprob == pytest.approx(expected[123], abs=1e-6)
    assert [i for i, _ in result.top] == reference_top(row, 20)
    assert [i for i, _ in result.top[:3]] == [10, 20_000, 262_143]


@pytest.mark.parametrize(
    ("row", "token", "top_n", "words"),
    [
        ([0.0, 1.0], 2, 0, "outside a row of 2"),
        ([0.0, 1.0], -1, 0, "outside a row of 2"),
        ([0.0, 1.0], 0, -1, "top_n must be 0 or more"),
        ([0.0, np.nan], 0, 0, "no finite maximum"),
        ([-np.inf, -np.inf], 0, 0, "no finite maximum"),
        ([np.inf, 0.0], 0, 0, "no finite maximum"),
    ],
)
def test_a_row_that_is_no_distribution_or_a_bad_token_is_refused(row, token, top_n, words):
    with pytest.raises(ValueError, match=words):
        token_logprob(np.asarray(row, dtype=np.float32), token, top_n)


# -- the executor ---------------------------------------------------------------------------------


def drain(executor: Executor) -> list[Committed]:
    events: list[Committed] = []
    for _ in range(10_000):
        if executor.idle:
            break
        events.extend(executor.tick())
    assert executor.idle, "the executor did not drain"
    return events


def speculating_executor(runtime: FakeRuntime, policy: FixedDepth) -> Executor:
    return Executor(
        runtime,
        max_lanes=4,
        clock=itertools.count().__next__,
        drafter=PromptLookupDrafter(),
        policy=policy,
    )


def test_events_carry_one_logprob_per_emitted_token_from_the_raw_row():
    model = FakeModel(order=1, peak=8.0, eos=False)
    runtime = FakeRuntime(model)
    prompt = [1, 2, 1, 2, 1, 2]
    request = GenerationRequest(prompt, GREEDY, 30, logprobs=3)
    executor = speculating_executor(runtime, FixedDepth(4))
    executor.submit(request)
    events = drain(executor)
    out: list[int] = []
    for event in events:
        assert len(event.logprobs) == len(event.tokens)
        for token, entry in zip(event.tokens, event.logprobs, strict=True):
            row = model.logits(prompt + out)
            expected = reference_log_softmax(row)
            assert entry.token == token
            assert entry.logprob == pytest.approx(expected[token], abs=1e-6)
            assert [i for i, _ in entry.top] == reference_top(row, 3)
            # Greedy picks the argmax, so the chosen token heads its own top list.
            assert entry.top[0] == (token, entry.logprob)
            out.append(token)
    assert len(out) == 30 and events[-1].finish is Finish.LENGTH


def test_a_logprobs_lane_never_drafts_even_with_a_drafter_and_a_policy():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False))
    policy = FixedDepth(4)
    executor = speculating_executor(runtime, policy)
    # speculate=True on purpose: the executor itself must refuse to draft for this lane.
    executor.submit(GenerationRequest([1, 2, 1, 2, 1, 2], GREEDY, 30, speculate=True, logprobs=0))
    events = drain(executor)
    assert events[-1].spec.proposed == 0
    assert all(not feed.all_rows and len(feed.tokens) == 1 for feed in runtime.steps[-1])
    assert all(not feed.all_rows for step in runtime.steps for feed in step)
    assert policy.rounds == [] and policy.open == set()
    assert all(len(e.logprobs) == len(e.tokens) <= 1 for e in events)


def test_the_stop_token_that_ends_a_lane_gets_no_entry():
    model = FakeModel(order=1, peak=8.0, eos=False)
    plain = GenerationRequest([5, 6, 7], GREEDY, 20)
    executor = Executor(FakeRuntime(model), max_lanes=1, clock=lambda: 0.0)
    executor.submit(plain)
    full = [t for e in drain(executor) for t in e.tokens]
    stop = full[4]
    cut = full.index(stop)
    request = GenerationRequest([5, 6, 7], GREEDY, 20, stop_tokens=frozenset({stop}), logprobs=2)
    executor = Executor(FakeRuntime(model), max_lanes=1, clock=lambda: 0.0)
    executor.submit(request)
    events = drain(executor)
    assert events[-1].finish is Finish.STOP
    tokens = [t for e in events for t in e.tokens]
    entries = [entry for e in events for entry in e.logprobs]
    assert tokens == full[:cut]
    assert [entry.token for entry in entries] == tokens


def test_lanes_without_logprobs_carry_none_while_a_neighbour_does():
    runtime = FakeRuntime(FakeModel(order=1, peak=8.0, eos=False))
    executor = speculating_executor(runtime, FixedDepth(4))
    with_lp = GenerationRequest([3, 4, 3, 4, 3, 4], GREEDY, 20, logprobs=1)
    without = GenerationRequest([3, 4, 3, 4, 3, 4], GREEDY, 20)
    executor.submit(with_lp)
    executor.submit(without)
    events = drain(executor)
    assert all(e.logprobs == () for e in events if e.request_id == without.id)
    mine = [e for e in events if e.request_id == with_lp.id]
    assert sum(len(e.logprobs) for e in mine) == 20
    # The neighbour still speculates: a logprobs lane only opts itself out.
    assert [e for e in events if e.request_id == without.id][-1].spec.proposed > 0


class PoisonedRuntime(FakeRuntime):
    """Returns a row with a NaN for one sequence once its KV passes a length."""

    def __init__(self, poisoned_seq: int, after: int) -> None:
        super().__init__(FakeModel(order=1, peak=8.0, eos=False))
        self._poisoned, self._after = poisoned_seq, after

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        out = super().step(feeds)
        for i, feed in enumerate(feeds):
            if feed.seq == self._poisoned and len(self.kv[feed.seq]) > self._after:
                out[i] = out[i].copy()
                out[i][-1, 5] = np.nan
        return out


def test_a_row_that_is_no_distribution_fails_only_its_logprobs_lane():
    runtime = PoisonedRuntime(poisoned_seq=0, after=5)  # the first lane admitted takes 0
    executor = Executor(runtime, max_lanes=2, clock=lambda: 0.0)
    poisoned = GenerationRequest([1, 2, 3], GREEDY, 20, logprobs=0)
    healthy = GenerationRequest([1, 2, 3], GREEDY, 20, logprobs=0)
    executor.submit(poisoned)
    executor.submit(healthy)
    events = drain(executor)
    last = {e.request_id: e for e in events if e.finish is not None}
    assert last[poisoned.id].finish is Finish.ERROR
    assert "computing logprobs failed" in (last[poisoned.id].error or "")
    assert last[healthy.id].finish is Finish.LENGTH
    assert runtime.kv == executor.parked()


def test_a_request_asking_for_too_many_top_logprobs_is_refused():
    with pytest.raises(ValueError, match="ask for 0 to 20"):
        GenerationRequest([1], GREEDY, 4, logprobs=21)


# -- reply entries --------------------------------------------------------------------------------


def pieces(token: int) -> bytes:
    return {1: b"ab", 2: b"\xc3", 3: b"\xa9", 4: b"", 5: b"c"}[token]


def lp(token: int, value: float, *top: tuple[int, float]) -> TokenLogprob:
    return TokenLogprob(token, value, tuple(top))


def test_an_entry_waits_until_its_text_is_shown_and_offsets_count_characters():
    trail = LogprobTrail(pieces)
    trail.push([1, 2], [lp(1, -0.1), lp(2, -0.2)])
    # "ab" is shown; token 2 opened a character not shown yet.
    (first,) = trail.release(2)
    assert (first.text, first.data, first.offset) == ("ab", b"ab", 0)
    trail.push([3, 4, 5], [lp(3, -0.3), lp(4, -0.4), lp(5, -0.5, (5, -0.5), (1, -1.0))])
    released = trail.release(4)  # "é" and "c" are out
    # Both halves of "é" start where it does; the empty token starts where "c" does.
    assert [(e.data, e.offset) for e in released] == [
        (b"\xc3", 2),
        (b"\xa9", 2),
        (b"", 3),
        (b"c", 3),
    ]
    # A token holding half a character shows U+FFFD; its bytes are exact.
    assert released[0].text == "\ufffd" and released[1].text == "\ufffd"
    assert released[3].top == (TopEntry("c", b"c", -0.5), TopEntry("ab", b"ab", -1.0))


def test_entries_whose_text_starts_past_what_was_shown_are_held_back():
    trail = LogprobTrail(pieces)
    trail.push([1, 5, 1], [lp(1, -0.1), lp(5, -0.2), lp(1, -0.3)])
    # A stop string "ca" cut the text after "ab": only the first token's text was shown.
    assert [e.offset for e in trail.release(2)] == [0]
    assert trail.release(2) == ()
    # Only the end of the reply releases the rest (a stop string's never comes: they are dropped).
    assert [e.offset for e in trail.release(None)] == [2, 3]


def entry(text: str, value: float, *top: tuple[str, float], offset: int = 0) -> LogprobEntry:
    tops = tuple(TopEntry(t, t.encode(), v) for t, v in top)
    return LogprobEntry(text, text.encode(), value, tops, offset)


def test_chat_entries_have_openais_shape_and_minus_infinity_is_floored():
    shaped = chat_logprobs([entry("é", -math.inf, ("é", -0.5), ("x", -math.inf))])
    assert shaped == {
        "content": [
            {
                "token": "é",
                "logprob": LOGPROB_FLOOR,
                "bytes": [0xC3, 0xA9],
                "top_logprobs": [
                    {"token": "é", "logprob": -0.5, "bytes": [0xC3, 0xA9]},
                    {"token": "x", "logprob": LOGPROB_FLOOR, "bytes": [0x78]},
                ],
            }
        ]
    }


def test_completion_entries_have_the_legacy_shape_and_keep_the_likelier_of_two_same_texts():
    shaped = completion_logprobs(
        [
            entry("a", -0.1, ("a", -0.1), ("b", -2.0), offset=0),
            entry("b", -0.7, ("x", -0.3), ("x", -0.6), ("b", -0.7), offset=1),
        ]
    )
    assert shaped == {
        "tokens": ["a", "b"],
        "token_logprobs": [-0.1, -0.7],
        "top_logprobs": [{"a": -0.1, "b": -2.0}, {"x": -0.3, "b": -0.7}],
        "text_offset": [0, 1],
    }


def test_replies_say_null_unless_logprobs_were_asked_for():
    frame = ReplyFrame(model="m", chat=True)
    usage = {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}
    assert frame.reply("", "stop", usage, SpecStats())["choices"][0]["logprobs"] is None
    asked = frame.reply("", "stop", usage, SpecStats(), [])
    assert asked["choices"][0]["logprobs"] == {"content": []}
    assert frame.chunk("x")["choices"][0]["logprobs"] is None


def test_each_api_asks_for_logprobs_in_its_own_words():
    def chat_body(**fields):
        return ChatCompletionBody.model_validate(
            {"messages": [{"role": "user", "content": "hi"}], **fields}
        )

    assert logprobs_wanted(chat_body()) is None
    assert logprobs_wanted(chat_body(logprobs=False)) is None
    assert logprobs_wanted(chat_body(logprobs=True)) == 0
    assert logprobs_wanted(chat_body(logprobs=True, top_logprobs=7)) == 7
    assert logprobs_wanted(CompletionBody.model_validate({"prompt": "x"})) is None
    assert logprobs_wanted(CompletionBody.model_validate({"prompt": "x", "logprobs": 0})) == 0
    assert logprobs_wanted(CompletionBody.model_validate({"prompt": "x", "logprobs": 5})) == 5
