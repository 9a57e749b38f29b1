"""A whole reply's tool calls: parsed at once, or read as a stream would show them.

When a reply opens a call but the call does not parse, nothing is lost: the whole reply is
content, and `problem` says why, for the server's log.
"""

from __future__ import annotations

import json

from superfluid.domain.tool_calls.calls import Malformed, ParsedCall, ParsedReply, arguments_text
from superfluid.domain.tool_calls.events import ArgumentsFragment, CallOpened, CallProblem, Content
from superfluid.domain.tool_calls.families import ToolFamily, family_record
from superfluid.domain.tool_calls.reader import ToolCallReader


def parse_reply(family: ToolFamily, text: str) -> ParsedReply:
    """The calls in `text` and the content around them; a malformed call leaves it all content."""
    try:
        parsed = family_record(family).parse(text)
    except Malformed as why:
        problem = f"{family.value} tool call not parsed: {why}; the reply is returned as text"
        return ParsedReply(text or None, (), problem)
    if parsed is None:
        return ParsedReply(text or None)
    return parsed


def read_as_streamed(family: ToolFamily, text: str) -> ParsedReply:
    """What a stream of `text` shows: its content, and its calls with their arguments
    compacted (a call that broke off keeps the text it was sent). `problem` is the first
    thing the reader logged."""
    reader = ToolCallReader(family)
    content: list[str] = []
    names: list[str] = []
    arguments: list[list[str]] = []
    problems: list[str] = []
    for event in [*reader.push(text), *reader.finish()]:
        if isinstance(event, Content):
            content.append(event.text)
        elif isinstance(event, CallOpened):
            names.append(event.name)
            arguments.append([])
        elif isinstance(event, ArgumentsFragment):
            arguments[event.index].append(event.text)
        elif isinstance(event, CallProblem):
            problems.append(event.why)
    calls = tuple(
        ParsedCall(name, _compacted("".join(parts)))
        for name, parts in zip(names, arguments, strict=True)
    )
    return ParsedReply("".join(content) or None, calls, problems[0] if problems else None)


def _compacted(arguments: str) -> str:
    try:
        return arguments_text(json.loads(arguments))
    except (ValueError, Malformed):
        return arguments


def ends_inside_call(family: ToolFamily, text: str) -> bool:
    """Whether a reply of `text` ended inside a call (as `max_tokens` cuts one short)."""
    reader = ToolCallReader(family)
    reader.push(text)
    reader.finish()
    return reader.ended_inside_call


def read_reply(family: ToolFamily, text: str) -> ParsedReply:
    """A whole reply's calls: `parse_reply`'s reading, unless it cannot read a reply that a
    stream reads without a problem, such as a call list that ends after a complete call (as
    one call when `parallel_tool_calls` is false leaves it): then the stream's."""
    parsed = parse_reply(family, text)
    if parsed.problem is None:
        return parsed
    streamed = read_as_streamed(family, text)
    return streamed if streamed.problem is None else parsed
