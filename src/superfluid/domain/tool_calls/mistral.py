"""The mistral family.

Calls follow a marker: `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`, or
`[TOOL_CALLS]f[ARGS]{...}` per call. The marker is a control token some detokenizers drop, so
a reply that is a bare call list holds calls too.
"""

from __future__ import annotations

import json
import re

from superfluid.domain.tool_calls.calls import (
    Malformed,
    ParsedCall,
    ParsedReply,
    arguments_text,
    joined_content,
)
from superfluid.domain.tool_calls.json_calls import (
    Draft,
    parse_json_calls,
    read_arguments,
    read_json_calls,
)
from superfluid.domain.tool_calls.stream import END, Broken, Reading, Stream, is_space

MARKER, _NAMED = "[TOOL_CALLS]", "[ARGS]"
_NAMED_CALL = re.compile(r"\s*([A-Za-z0-9_.\-]+)" + re.escape(_NAMED))


def parse(text: str) -> ParsedReply | None:
    """The calls after each marker and the text before the first; None when there is none."""
    marker = text.find(MARKER)
    if marker < 0:
        stripped = text.strip()
        if stripped.startswith("[") and stripped[1:].lstrip().startswith("{"):
            return ParsedReply(None, tuple(parse_json_calls(stripped)))
        return None
    before, rest = text[:marker], text[marker:]
    calls: list[ParsedCall] = []
    for segment in rest.split(MARKER)[1:]:
        named = _NAMED_CALL.match(segment)
        if named is None:
            calls.extend(parse_json_calls(segment))
            continue
        decoder = json.JSONDecoder()
        try:
            value, _ = decoder.raw_decode(segment, named.end())
        except json.JSONDecodeError as error:
            raise Malformed(f"a call's arguments are not valid JSON ({error.msg})") from None
        calls.append(ParsedCall(named.group(1), arguments_text(value)))
    return ParsedReply(joined_content(before), tuple(calls))


def _is_name(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in ("_", ".", "-"))


def read(stream: Stream) -> Reading[None]:
    """The stream grammar: a bare call list, or content up to the marker and calls after it."""
    ch = yield from stream.leading_space()
    if ch == END:
        return
    begin = stream.at - 1
    if ch == "[" and (yield from stream.skip(is_space)) == "{":
        stream.at = begin + 1
        yield from stream.whole_reply(begin, read_json_calls(stream, "[", marker=False))
        return
    stream.at = begin
    if (yield from stream.content_until((MARKER,))) is None:
        return
    try:
        while True:  # one segment per marker
            stream.loose = stream.at - len(MARKER)
            ch = yield from stream.skip(is_space)
            if _is_name(ch):
                ch = yield from _named_call(stream, ch)
            else:
                ch = yield from read_json_calls(stream, ch, marker=True)
            ch = yield from stream.skip(is_space, ch)
            if ch == END:
                return
            yield from stream.expect(MARKER, ch, "text follows the calls")
    except Broken as broken:
        stream.abandon(broken)


def _named_call(stream: Stream, ch: str) -> Reading[str]:
    """`name[ARGS]{...}`, from the name's first character; returns the character after the
    arguments."""
    start = stream.at - 1
    while _is_name(ch):
        ch = yield
    name = stream.text[start : stream.at - (ch != END)]
    why = "a call is neither a JSON list nor name[ARGS]{...}"
    yield from stream.expect(_NAMED, ch, why)
    stream.open_call(name)
    draft = Draft(name)
    after = yield from read_arguments(stream, draft, (yield))
    stream.close_call()
    return after if after is not None else (yield)
