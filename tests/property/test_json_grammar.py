import json

from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.json_grammar import JsonObjectPrefix

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(st.text(), values, max_size=4)


@given(objects, st.booleans(), st.integers(0, 3))
def test_every_serialised_object_is_accepted_whatever_the_token_boundaries(obj, ascii_only, chunk):
    data = json.dumps(obj, ensure_ascii=ascii_only, indent=2 if chunk % 2 else None).encode()
    state = JsonObjectPrefix()
    step = chunk + 1
    for i in range(0, len(data), step):
        state = state.advance(data[i : i + step])
        assert state is not None
    assert state.complete


@given(st.binary(max_size=40))
def test_a_complete_prefix_is_always_a_json_object(data):
    state = JsonObjectPrefix().advance(data)
    if state is not None and state.complete:
        assert isinstance(json.loads(data.decode("utf-8", "surrogatepass")), dict)
