"""The schema grammar for forced tool calls: what it accepts, refuses, and cannot promise."""

from __future__ import annotations

import pytest

from superfluid.domain.json_schema import (
    SchemaPrefix,
    SchemaUnsupported,
    call_arguments,
    call_list,
    compile_schema,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "annotations assert nothing"},
        "line": {"type": "integer"},
        "mode": {"enum": ["r", "w"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "ratio": {"type": ["number", "null"]},
        "options": {"$ref": "#/$defs/options"},
    },
    "required": ["path"],
    "$defs": {"options": {"type": "object", "properties": {"force": {"type": "boolean"}}}},
}


def accepts(text: str, schema: object = SCHEMA) -> bool:
    state = SchemaPrefix(call_arguments(schema, where="p")).advance(text.encode())  # type: ignore[arg-type]
    return state is not None and state.complete


@pytest.mark.parametrize(
    "text",
    [
        '{"path":"a"}',
        '{"path": "a\\u00e9", "line": -12, "mode": "w"}',
        '{ "path":"a" , "tags":["x","y"], "ratio": null, "options": {"force": true}}',
        '{"path":"a","ratio":-1.5e3}',
        '{"path":"a","ratio":2 }',
    ],
)
def test_values_the_schema_allows_are_accepted(text: str) -> None:
    assert accepts(text)


@pytest.mark.parametrize(
    "text",
    [
        "{}",  # a required property is missing
        '{"line":1}',
        '{"path":"a","line":1.5}',  # not an integer
        '{"path":"a","mode":"x"}',  # not in the enum
        '{"path":"a","tags":["x","y","z"]}',  # more than maxItems
        ' {"path":"a"}',  # nothing before the value
        '{"path":"a","zz":1}',  # no undeclared property
        '{"line":1,"path":"a"}',  # declared order
        '{"path":"a","ratio":1e999}',  # would read as infinity
        '{"path":"a","line":1234567890123456789}',  # past an int64's digits
    ],
)
def test_values_it_does_not_allow_are_refused(text: str) -> None:
    assert not accepts(text)


def test_a_required_call_picks_its_arguments_schema_by_name() -> None:
    grammar = call_list(
        [("read", call_arguments(SCHEMA, where="a")), ("noop", call_arguments(None, where="b"))],
        parallel=False,
    )
    assert SchemaPrefix(grammar).advance(b'[{"name":"noop","arguments":{}}]').complete  # type: ignore[union-attr]
    assert SchemaPrefix(grammar).advance(b'[{"name":"noop","arguments":{"x":1}}]') is None
    assert SchemaPrefix(grammar).advance(b'[{"name":"nope"') is None
    two = b'[{"name":"noop","arguments":{}},{"name":"noop","arguments":{}}]'
    assert SchemaPrefix(grammar).advance(two) is None  # parallel calls not allowed


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "string", "pattern": "^a"}, "pattern"),
        ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}, "minimum"),
        ({"anyOf": [{"type": "object"}, {"type": "object", "properties": {}}]}, "begin alike"),
        ({"$ref": "#/$defs/missing"}, "does not name"),
        ({"type": "array"}, "must describe an object"),
        ({"type": "object", "required": ["x"], "additionalProperties": False}, "no property"),
    ],
)
def test_what_the_grammar_cannot_enforce_is_refused_naming_the_keyword(
    schema: dict[str, object], words: str
) -> None:
    with pytest.raises(SchemaUnsupported, match=words):
        call_arguments(schema, where="tools[0].function.parameters")


def test_a_recursive_schema_is_refused() -> None:
    looped = {
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
        "$ref": "#/$defs/n",
    }
    with pytest.raises(SchemaUnsupported, match="recursive"):
        compile_schema(looped)
