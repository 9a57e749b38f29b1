"""Calls written as JSON objects (hermes, llama3, mistral), read whole or as they stream.

A call is `{"name": "f", "arguments": {...}}`; `parameters` may stand for `arguments`, the
arguments may be a JSON string holding the object, and OpenAI's own shape
`{"function": {...}}`, echoed, is a call too. Several calls come as a JSON list, or one after
another apart by spaces, `;` or new lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from superfluid.domain.tool_calls.calls import Malformed, ParsedCall, arguments_text
from superfluid.domain.tool_calls.json_scan import JSON_SPACE, JsonScan, Scan
from superfluid.domain.tool_calls.stream import END, Broken, Reading, Stream, broken_at

_SEPARATORS = JSON_SPACE | {";"}  # between llama3 calls written one after another


def call_from_json(item: Any) -> ParsedCall:
    """The call a decoded JSON value makes; Malformed when it is none."""
    if not isinstance(item, dict):
        raise Malformed("a call is not a JSON object")
    if isinstance(item.get("function"), dict):  # OpenAI's own shape, echoed
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed("a call has no function name")
    arguments = item.get("arguments", item.get("parameters"))
    return ParsedCall(name, arguments_text(arguments))


def parse_json_calls(text: str) -> list[ParsedCall]:
    """One JSON call, a list of them, or several separated by `;` or new lines."""
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    at = 0
    while at < len(text):
        while at < len(text) and text[at] in _SEPARATORS:
            at += 1
        if at == len(text):
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as error:
            raise Malformed(f"a call is not valid JSON ({error.msg})") from None
        items = value if isinstance(value, list) else [value]
        calls.extend(call_from_json(item) for item in items)
    if not calls:
        raise Malformed("the call list is empty")
    return calls


# -- streams --------------------------------------------------------------------------------------


def _is_json_space(ch: str) -> bool:
    return ch in JSON_SPACE


def _is_separator(ch: str) -> bool:
    return ch in _SEPARATORS


@dataclass(slots=True)
class Draft:
    """A JSON call being read: its name once known, and arguments that came before it."""

    name: str | None = None
    has_arguments: bool = False
    held: str | None = None  # arguments written before the name, waiting for it


def _read_json_value(
    stream: Stream, ch: str, *, send: bool = False
) -> Reading[tuple[str, str | None]]:
    """One JSON value from `ch` on: its text, and the character read after it (None when
    the value ended on its own last character). `send` sends it as argument fragments."""
    start = stream.at - 1
    scan = JsonScan()
    while True:
        status = scan.feed(ch)
        if status is Scan.INVALID:
            raise broken_at(ch, "a call is not valid JSON")
        if status is Scan.BEFORE:
            return stream.text[start : stream.at - (ch != END)], ch
        if send:
            stream.fragment(ch)
        if status is Scan.DONE:
            return stream.text[start : stream.at], None
        ch = yield


def read_json_call(stream: Stream) -> Reading[None]:
    """One call written as a JSON object, read from just after its `{` to its `}`."""
    if stream.loose is None:
        stream.loose = stream.at - 1
    draft = Draft()
    yield from _members(stream, draft)
    if draft.name is None:
        raise Broken("a call has no function name", 0)
    if not draft.has_arguments:
        stream.fragment("{}")
    stream.close_call()


def _members(stream: Stream, draft: Draft) -> Reading[None]:
    """A call object's members, from just after its `{` to its `}`."""
    ch = yield from stream.skip(_is_json_space)
    if ch == "}":
        return
    while True:
        if ch != '"':
            raise broken_at(ch, "a call is not valid JSON")
        key, after = yield from _read_json_value(stream, ch)
        ch = yield from stream.skip(_is_json_space, after)
        if ch != ":":
            raise broken_at(ch, "a call is not valid JSON")
        ch = yield from stream.skip(_is_json_space)
        after = yield from _member(stream, draft, json.loads(key), ch)
        ch = yield from stream.skip(_is_json_space, after)
        if ch == "}":
            return
        if ch != ",":
            raise broken_at(ch, "a call is not valid JSON")
        ch = yield from stream.skip(_is_json_space)


def _member(stream: Stream, draft: Draft, key: object, ch: str) -> Reading[str | None]:
    """One member's value, from `ch` on; returns the character read after it, if any."""
    if key == "function" and ch == "{":  # OpenAI's own shape, echoed: the call is inside
        yield from _members(stream, draft)
        return None
    if key in ("arguments", "parameters"):
        return (yield from read_arguments(stream, draft, ch))
    raw, after = yield from _read_json_value(stream, ch)
    if key == "name":
        _name(stream, draft, raw, after)
    return after


def _name(stream: Stream, draft: Draft, raw: str, after: str | None) -> None:
    name = json.loads(raw)
    read = len(raw) + bool(after)
    if not isinstance(name, str) or not name:
        raise Broken("a call has no function name", read)
    if draft.name is not None:
        raise Broken("a call names its function twice", read)
    draft.name = name
    stream.open_call(name)
    if draft.held is not None:
        stream.fragment(draft.held)
        draft.held = None


def read_arguments(stream: Stream, draft: Draft, ch: str) -> Reading[str | None]:
    """A call's arguments from `ch` on. An object streams as it is written once the name
    is known; a string holding JSON, or null, leaves converted when it ends."""
    if draft.has_arguments:
        raise broken_at(ch, "a call has its arguments twice")
    draft.has_arguments = True
    streamed = ch == "{" and draft.name is not None
    raw, after = yield from _read_json_value(stream, ch, send=streamed)
    if streamed:
        return after
    text = raw
    if ch != "{":
        try:
            text = arguments_text(json.loads(raw))
        except Malformed as why:
            raise Broken(str(why), len(raw) + bool(after)) from None
    if draft.name is None:
        draft.held = text
    else:
        stream.fragment(text)
    return after


def read_json_calls(stream: Stream, ch: str, *, marker: bool) -> Reading[str]:
    """Calls written as JSON from `ch` on: objects, or lists of them, apart by spaces, `;`
    or new lines. Returns the first character after them that is none of these; with
    `marker`, `[` where mistral's `[TOOL_CALLS]` may begin (the reader stands just after it)."""
    made = 0
    while True:
        if ch == "{":
            yield from read_json_call(stream)
            made += 1
            ch = yield
        elif ch == "[":
            ch = yield
            if marker and ch == "T":
                stream.at -= 1
                ch = "["
                break
            listed, ch = yield from _json_call_list(stream, ch)
            made += listed
        else:
            break
        ch = yield from stream.skip(_is_separator, ch)
    if not made:
        raise broken_at(ch, "the call list is empty")
    return ch


def _json_call_list(stream: Stream, ch: str) -> Reading[tuple[int, str]]:
    """A JSON list of calls from just after its `[` (`ch` is the next character): how
    many, and the character after the list. A reply that ends after a call, the list
    still open, ends the list (one call when `parallel_tool_calls` is false cuts it so)."""
    made = 0
    ch = yield from stream.skip(_is_json_space, ch)
    if ch == "]":
        return made, (yield)
    while True:
        if ch != "{":
            raise broken_at(ch, "a call is not a JSON object")
        yield from read_json_call(stream)
        made += 1
        ch = yield from stream.skip(_is_json_space)
        if ch == END:
            return made, ch
        if ch == "]":
            return made, (yield)
        if ch != ",":
            raise Broken("a call list is not valid JSON", 1)
        ch = yield from stream.skip(_is_json_space)
