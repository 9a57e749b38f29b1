"""The llama3 family (Llama 3.1–3.3, and the family of templates that take tools but show no
marker).

The whole reply is a bare JSON call `{"name": "f", "parameters": {...}}` after an optional
`<|python_tag|>`; several calls are separated by `;` or new lines, or written as a JSON list.
"""

from __future__ import annotations

from superfluid.domain.tool_calls.calls import ParsedReply
from superfluid.domain.tool_calls.json_calls import parse_json_calls, read_json_calls
from superfluid.domain.tool_calls.stream import END, Reading, Stream, is_space

_PYTHON_TAG = "<|python_tag|>"


def parse(text: str) -> ParsedReply | None:
    """The calls that make the whole reply; None when it is prose."""
    body = text.strip()
    body = body.removeprefix(_PYTHON_TAG).lstrip()
    if not body.startswith(("{", "[")):
        return None
    if body.startswith("[") and not body[1:].lstrip().startswith(("{", "]")):
        return None  # a list of something else: prose in brackets
    return ParsedReply(None, tuple(parse_json_calls(body)))


def read(stream: Stream) -> Reading[None]:
    """The stream grammar: calls from the reply's start to its end, or content."""
    ch = yield from stream.leading_space()
    if ch == END:
        return
    begin = stream.at - 1
    if ch == "<":
        if not (yield from stream.match(_PYTHON_TAG, ch)):
            stream.at = begin
            return
        ch = yield from stream.skip(is_space)
    if ch == "[":
        opening = stream.at - 1
        # A list of something other than calls is prose in brackets.
        if (yield from stream.skip(is_space)) not in ("{", "]"):
            stream.at = begin
            return
        stream.at = opening + 1
    elif ch != "{":
        stream.at = begin
        return
    yield from stream.whole_reply(begin, read_json_calls(stream, ch, marker=False))
