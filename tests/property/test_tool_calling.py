"""Forced tool calls and streamed calls, as properties.

- Whatever a model picks among the bytes the schema grammar allows, a finished output is JSON
  that validates against the schema (checked by an independent validator, jsonschema-rs).
- Every value valid under a schema, written compactly or indented, is accepted whole, cut
  into pieces anywhere.
- Any arguments object survives the trip through stream deltas, accumulated by the official
  `openai` client's own stream state.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from superfluid.domain.json_schema import SchemaPrefix, call_arguments, call_list
from superfluid.entrypoints.http.replies import CallOut, ReplyFrame, call_deltas

KEYS = st.text(alphabet="abcxyz_é", min_size=1, max_size=4)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.text(alphabet='ab "\\é\n', max_size=4),
)


def leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.sampled_from(
            [
                {"type": "string"},
                {"type": "integer"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
                {"type": ["string", "null"]},
                {},
            ]
        ),
        st.lists(SCALARS, min_size=1, max_size=4, unique_by=json.dumps).map(
            lambda values: {"enum": values}
        ),
    )


def object_schema(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        properties = draw(st.dictionaries(KEYS, children, max_size=4))
        required = [k for k in properties if draw(st.booleans())]
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        if draw(st.booleans()):
            schema["additionalProperties"] = False
        return schema

    return build()


def schemas() -> st.SearchStrategy[dict[str, Any]]:
    def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        arrays = st.builds(
            lambda items, low, extra: {
                "type": "array",
                "items": items,
                "minItems": low,
                "maxItems": low + extra,
            },
            children,
            st.integers(0, 2),
            st.integers(0, 2),
        )
        return st.one_of(arrays, object_schema(children))

    return object_schema(st.recursive(leaf_schemas(), extend, max_leaves=6))


#: Bytes a walk prefers once it has wandered long enough: those that close what is open.
_CLOSING = b'"}]0tfn1,:'
#: The bytes a walk picks from (all 256 where none of these is allowed): JSON's structure, the
#: letters of the strategies' keys and literals, hex digits, and UTF-8 bytes, a stray
#: continuation byte included.
_ALPHABET = sorted(set(b'\t\n "\\,:[]{}-+.0123456789eEabcdfglnrstuxyz_') | {0xC3, 0xA9, 0x80})


def walk(schema_prefix: SchemaPrefix, choices: st.DataObject, steps: int = 400) -> bytes | None:
    """A random 'model': at each step one of the bytes the grammar allows; after `steps`, the
    bytes that close things first. None if it never finished."""
    out = bytearray()
    state = schema_prefix
    for step in range(steps * 4):
        if state.complete:
            return bytes(out)
        allowed = [b for b in _ALPHABET if state.advance(bytes([b])) is not None] or [
            b for b in range(256) if state.advance(bytes([b])) is not None
        ]
        assert allowed, f"the grammar allowed nothing after {bytes(out)!r}"
        if step < steps:
            byte = allowed[choices.draw(st.integers(0, len(allowed) - 1))]
        else:
            byte = min(allowed, key=lambda b: (_CLOSING.find(b) % 256, b))
        advanced = state.advance(bytes([byte]))
        assert advanced is not None
        state = advanced
        out.append(byte)
    return None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), choices=st.data())
def test_whatever_a_model_picks_a_finished_forced_call_validates(
    schema: dict[str, Any], choices: st.DataObject
) -> None:
    output = walk(SchemaPrefix(call_arguments(schema, where="p")), choices, steps=60)
    assume(output is not None)
    assert output is not None
    # The server decodes a reply as UTF-8 with replacement, so a stray byte inside a string
    # is a U+FFFD there; the JSON and its validity are the same.
    value = json.loads(output.decode("utf-8", errors="replace"))
    assert jsonschema_rs.validator_for(schema).is_valid(value), (schema, output)


def instances(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under one of the strategy's schemas, declared properties in order."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of(*(instances({**schema, "type": k}) for k in kind))
    if kind == "string":
        return st.text(max_size=6)
    if kind == "integer":
        return st.integers(-(10**6), 10**6)
    if kind == "number":
        # The grammar writes exponents of at most two digits (finite numbers everywhere).
        finite = st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)
        return st.one_of(st.integers(-100, 100), finite.filter(lambda x: x == 0 or abs(x) > 1e-90))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(
            instances(schema["items"]), min_size=schema["minItems"], max_size=schema["maxItems"]
        )
    if kind == "object":
        return _object_instances(schema)
    return SCALARS


def _object_instances(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    required = set(schema.get("required", []))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        value = {}
        for key, sub in schema["properties"].items():
            if key in required or draw(st.booleans()):
                value[key] = draw(instances(sub))
        return value

    return build()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schema=schemas(), indent=st.sampled_from([None, 1]))
def test_every_valid_value_is_accepted_whole_in_any_pieces(
    data: st.DataObject, schema: dict[str, Any], indent: int | None
) -> None:
    value = data.draw(instances(schema))
    text = json.dumps(value, ensure_ascii=False, indent=indent).encode()
    # Enum values are matched as compact JSON, as the grammar's docstring says.
    assume(indent is None or "enum" not in json.dumps(schema))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=6)))
    state: SchemaPrefix | None = SchemaPrefix(call_arguments(schema, where="p"))
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        assert state is not None, (schema, text)
        state = state.advance(text[start:end])
    assert state is not None and state.complete, (schema, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.data(), parallel=st.booleans())
def test_a_required_call_names_a_tool_and_carries_its_arguments(
    choices: st.DataObject, parallel: bool
) -> None:
    tools = {
        "read": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        "ready": {"type": "object", "properties": {}},
    }
    grammar = call_list(
        [(name, call_arguments(schema, where=name)) for name, schema in tools.items()],
        parallel=parallel,
    )
    output = walk(SchemaPrefix(grammar), choices, steps=40)
    assume(output is not None)
    assert output is not None
    calls = json.loads(output.decode("utf-8", errors="replace"))
    assert len(calls) >= 1 and (parallel or len(calls) == 1)
    for made in calls:
        assert jsonschema_rs.validator_for(tools[made["name"]]).is_valid(made["arguments"])


JSON_VALUES = st.recursive(
    SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=120, deadline=None)
@given(
    arguments=st.lists(st.dictionaries(KEYS, JSON_VALUES, max_size=4), min_size=1, max_size=3),
    fragment=st.integers(1, 20),
)
def test_any_arguments_object_round_trips_through_stream_deltas(
    arguments: list[dict[str, Any]], fragment: int
) -> None:
    frame = ReplyFrame(model="m", chat=True)
    calls = [
        CallOut.new(f"f{i}", json.dumps(a, ensure_ascii=False)) for i, a in enumerate(arguments)
    ]
    chunks = [frame.chunk(None, with_role=True, tool_calls=[])]
    for index, made in enumerate(calls):
        chunks += [
            frame.chunk(None, tool_calls=[delta]) for delta in call_deltas(index, made, fragment)
        ]
    chunks.append(frame.chunk(None, finish="tool_calls"))
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    message = state.get_final_completion().choices[0].message
    assert message.tool_calls is not None
    received = [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
    ]
    assert received == [(c.id, c.name, a) for c, a in zip(calls, arguments, strict=True)]
