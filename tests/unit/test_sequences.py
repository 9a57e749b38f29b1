import pytest

from superfluid.adapters.sequences import BROKEN, SequenceTable
from superfluid.application.ports import Feed, RuntimeFault


def test_ids_are_lent_and_returned_and_never_freed_twice():
    table = SequenceTable(capacity=2, context_size=8)
    a, b = table.allocate(), table.allocate()
    with pytest.raises(RuntimeFault, match="all 2 sequences"):
        table.allocate()
    table.release(a)
    with pytest.raises(RuntimeFault, match="not in use"):
        table.release(a)
    assert table.allocate() == a and b in table


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ([Feed(0, [1], 1)], "starts at 1, but it holds 0"),
        ([Feed(0, [1], 0), Feed(0, [2], 1)], "fed twice"),
        ([Feed(0, [], 0)], "empty feed"),
        ([Feed(0, list(range(9)), 0)], "would pass the context size"),
        ([Feed(5, [1], 0)], "not in use"),
    ],
)
def test_a_step_that_breaks_a_promise_is_refused(feeds, message):
    table = SequenceTable(capacity=2, context_size=8)
    table.allocate()
    with pytest.raises(RuntimeFault, match=message):
        table.check_feeds(feeds)


def test_a_broken_sequence_takes_no_feed_and_cuts_stay_within_what_it_holds():
    table = SequenceTable(capacity=1, context_size=8)
    seq = table.allocate()
    assert table.check_feeds([Feed(seq, [1, 2, 3], 0)]) == 3
    table.advance([Feed(seq, [1, 2, 3], 0)])
    assert table.check_cut(seq, 2) == 3
    with pytest.raises(RuntimeFault, match="cannot cut"):
        table.check_cut(seq, 4)
    table.set(seq, BROKEN)
    with pytest.raises(RuntimeFault, match="failed a cut"):
        table.check_feeds([Feed(seq, [4], BROKEN)])
