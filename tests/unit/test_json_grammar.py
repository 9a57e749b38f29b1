import pytest

from superfluid.domain.json_grammar import JsonObjectPrefix


def accepts(text: bytes):
    return JsonObjectPrefix().advance(text)


@pytest.mark.parametrize(
    "doc",
    [
        b"{}",
        b'{"a": 1}\n',
        b'{"a": [1, -2.5e+3, 0, true, false, null, "x\\n\\u00e9"], "b": {}}',
        '{"é": "ü"}'.encode(),
    ],
)
def test_a_json_object_is_accepted_and_complete_and_every_prefix_is_open(doc):
    for cut in range(len(doc)):
        state = accepts(doc[:cut])
        assert state is not None, doc[:cut]
    assert accepts(doc).complete


@pytest.mark.parametrize(
    "bad",
    [
        b"[1]",
        b" {}",
        b"{" + b" " * 17 + b"}",
        b'"x"',
        b"{,}",
        b'{"a" 1}',
        b'{"a":01}',
        b'{"a":tru}x',
        b'{"a":1,}',
        b"{} {}",
        b'{"a":"\x01"}',
        b"{]",
    ],
)
def test_anything_that_cannot_become_a_json_object_is_refused(bad):
    state = JsonObjectPrefix()
    for i in range(len(bad)):
        state = state.advance(bad[i : i + 1])
        if state is None:
            return
    assert not state.complete, bad


def test_advancing_never_changes_the_state_it_started_from():
    start = accepts(b'{"a":')
    assert start.advance(b"1}").complete
    assert start.advance(b'"x"}').complete
    assert not start.complete
