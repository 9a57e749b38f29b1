"""The hermes family (Qwen 2.5 and 3, Hermes 2/3, most ChatML tool templates).

A call is `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`, one block per call, with
text around the blocks.
"""

from __future__ import annotations

import json

from superfluid.domain.tool_calls.calls import Malformed, ParsedCall, ParsedReply, joined_content
from superfluid.domain.tool_calls.json_calls import call_from_json, read_json_call
from superfluid.domain.tool_calls.stream import END, Broken, Reading, Stream, broken_at, is_space

OPEN, _CLOSE = "<tool_call>", "</tool_call>"


def parse(text: str) -> ParsedReply | None:
    """The blocks' calls and the text around them; None when the reply opens no block."""
    if OPEN not in text:
        return None
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    outside: list[str] = []
    at = 0
    while (opening := text.find(OPEN, at)) >= 0:
        outside.append(text[at:opening])
        start = opening + len(OPEN)
        while start < len(text) and text[start].isspace():
            start += 1
        try:
            value, end = decoder.raw_decode(text, start)
            made = call_from_json(value)
        except (json.JSONDecodeError, Malformed) as error:
            if not calls:
                why = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
                raise Malformed(f"a call is not valid JSON ({why})") from None
            # Calls before it stand; this one (often cut short by max_tokens) stays text.
            outside.append(text[opening:])
            problem = (
                "hermes tool call not parsed: the last call is not valid JSON; it is returned"
                " as text, the calls before it stand"
            )
            return ParsedReply(joined_content(*outside), tuple(calls), problem)
        calls.append(made)
        rest = text[end:].lstrip()
        if rest.startswith(_CLOSE):
            at = len(text) - len(rest) + len(_CLOSE)
        elif _CLOSE.startswith(rest):
            at = len(text)  # the reply ended inside (or before) the closing tag
        else:
            at = len(text) - len(rest)  # no closing tag: what follows is text
    outside.append(text[at:])
    return ParsedReply(joined_content(*outside), tuple(calls))


def read(stream: Stream) -> Reading[None]:
    """The stream grammar: content, and a call in each block."""
    while (yield from stream.content_until((OPEN,))) is not None:
        stream.loose = stream.at - len(OPEN)
        try:
            ch = yield from stream.skip(is_space)
            if ch != "{":
                raise broken_at(ch, "a call is not a JSON object")
            yield from read_json_call(stream)
        except Broken as broken:
            stream.abandon(broken)
            return
        ch = yield from stream.skip(is_space)
        if ch == END:
            return
        tag = stream.at - 1
        closed = yield from stream.match(_CLOSE, ch)
        if closed is None:
            return  # the reply ended inside the closing tag
        if not closed:
            stream.at = tag  # no closing tag: what follows is content
