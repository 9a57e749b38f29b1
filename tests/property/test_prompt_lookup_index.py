from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.prompt_lookup import (
    MATCH_LENGTH_LIMIT,
    PromptLookupIndex,
    draft_from_history,
    match_length_from_history,
)

histories = st.lists(st.integers(0, 4), max_size=60)


@given(histories, st.integers(0, 16))
def test_the_index_drafts_exactly_what_the_reference_rule_drafts(history, k):
    assert PromptLookupIndex(history).draft(k) == draft_from_history(history, k)


@given(histories, st.lists(st.integers(0, 4), max_size=20), st.integers(1, 8))
def test_extending_the_index_equals_building_it_at_once(history, more, k):
    index = PromptLookupIndex(history)
    index.extend(more)
    assert index.draft(k) == draft_from_history(history + more, k)


@given(histories, st.integers(1, 16))
def test_a_draft_is_a_slice_of_the_history_no_longer_than_k(history, k):
    draft = PromptLookupIndex(history).draft(k)
    assert len(draft) <= k
    if draft:
        text = ",".join(map(str, history))
        assert ",".join(map(str, draft)) in text


@given(histories, st.integers(1, 40))
def test_the_index_measures_the_match_the_reference_scan_measures(history, limit):
    index = PromptLookupIndex(history)
    assert index.match_length(limit) == match_length_from_history(history, limit)


@given(histories)
def test_a_match_length_is_zero_exactly_when_nothing_is_drafted(history):
    index = PromptLookupIndex(history)
    length = index.match_length()
    assert (length == 0) == (index.draft(1) == [])
    if length:
        assert 2 <= length <= MATCH_LENGTH_LIMIT
