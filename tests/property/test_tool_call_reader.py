"""The stream reader of tool calls, as properties, in every family's format.

- However a reply is cut into pieces (tokens, accepted drafts), the reader says the same.
- On a well-formed reply it reads the calls the whole-reply parser reads, each call's fragments
  joining to its arguments as JSON, and the same content (up to whitespace around the calls).
- Whatever the text, nothing is lost: a reply the reader sent no call of reaches the client as
  content, character for character.
- A one-call reply (`parallel_tool_calls` false) ends where its first call closes, and what is
  kept reads as exactly that call.
"""

from __future__ import annotations

import itertools
import json
import keyword
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from superfluid.domain.tool_calls.calls import ParsedCall
from superfluid.domain.tool_calls.events import (
    ArgumentsFragment,
    CallOpened,
    CallProblem,
    Content,
    ToolCallEvent,
)
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.domain.tool_calls.reader import FirstCallEnd, ToolCallReader
from superfluid.domain.tool_calls.replies import parse_reply, read_as_streamed, read_reply

# Function names are Python identifiers (a pythonic call is Python syntax): no keywords.
NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,7}(\.[a-z_][a-z0-9_]{0,3})?", fullmatch=True).filter(
    lambda name: not any(keyword.iskeyword(part) for part in name.split("."))
)
KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True).filter(
    lambda key: not keyword.iskeyword(key)  # pythonic arguments are Python keywords
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(-1e6, 1e6, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-6),
    st.text(alphabet="ab \"\\'é\n)(]}{[,", max_size=6),
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3)


VALUES = st.recursive(SCALARS, containers, max_leaves=6)
ARGUMENTS = st.dictionaries(KEYS, VALUES, max_size=4)
#: Prose around calls: no marker can begin in it, and it never starts like a call.
PROSE = st.text(alphabet="abc xyz.,!?é\n", max_size=12).map(lambda t: f"So{t}" if t else t)


def json_text(draw: st.DrawFn, value: Any) -> str:
    indent = draw(st.sampled_from([None, 1]))
    separators = draw(st.sampled_from([None, (",", ":")]))
    return json.dumps(value, ensure_ascii=draw(st.booleans()), indent=indent, separators=separators)


@st.composite
def json_call(draw: st.DrawFn, name: str, arguments: dict[str, Any]) -> str:
    """A call object as models write them: either key order, `arguments` or `parameters`,
    arguments as an object or as a JSON string, an id beside them, OpenAI's shape echoed."""
    key = draw(st.sampled_from(["arguments", "parameters"]))
    written = json_text(draw, arguments)
    if draw(st.integers(0, 4)) == 0:
        written = json.dumps(written)  # arguments as a string holding JSON
    members = [f'"name": {json.dumps(name)}', f'"{key}": {written}']
    if draw(st.booleans()):
        members.reverse()
    if draw(st.integers(0, 4)) == 0:
        members.append('"id": "abc123"')
    body = "{" + draw(st.sampled_from([", ", ",", ",\n "])).join(members) + "}"
    if draw(st.integers(0, 5)) == 0:
        body = '{"type": "function", "function": ' + body + "}"
    return body


def python_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    return repr(value)


def python_call(name: str, arguments: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={python_literal(v)}' for k, v in arguments.items())})"


CALLS = st.lists(st.tuples(NAMES, ARGUMENTS), min_size=1, max_size=3)


@st.composite
def hermes_reply(draw: st.DrawFn) -> str:
    parts = [draw(PROSE)]
    for name, arguments in draw(CALLS):
        space = draw(st.sampled_from(["", "\n"]))
        parts.append(f"<tool_call>{space}{draw(json_call(name, arguments))}{space}</tool_call>")
        parts.append(draw(st.sampled_from(["", "\n", " "])))
    return "".join(parts)


@st.composite
def llama3_reply(draw: st.DrawFn) -> str:
    calls = [draw(json_call(name, arguments)) for name, arguments in draw(CALLS)]
    tag = draw(st.sampled_from(["", "<|python_tag|>"]))
    if draw(st.booleans()):
        return tag + "[" + ", ".join(calls) + "]"
    return tag + draw(st.sampled_from(["; ", "\n", ";"])).join(calls)


@st.composite
def mistral_reply(draw: st.DrawFn) -> str:
    made = draw(CALLS)
    prose = draw(PROSE)
    form = draw(st.sampled_from(["list", "named", "bare"]))
    if form == "named":
        return prose + "".join(
            f"[TOOL_CALLS]{name}[ARGS]{json_text(draw, arguments)}" for name, arguments in made
        )
    listed = "[" + ", ".join(draw(json_call(name, arguments)) for name, arguments in made) + "]"
    return listed if form == "bare" else f"{prose}[TOOL_CALLS]{listed}"


@st.composite
def pythonic_reply(draw: st.DrawFn) -> str:
    calls = [python_call(name, arguments) for name, arguments in draw(CALLS)]
    if draw(st.booleans()):
        return "[" + ", ".join(calls) + "]"
    body = ", ".join(calls) if len(calls) == 1 or draw(st.booleans()) else f"[{', '.join(calls)}]"
    return f"{draw(PROSE)}\n```tool_code\n{body}\n```{draw(PROSE)}"


REPLIES = {
    ToolFamily.HERMES: hermes_reply(),
    ToolFamily.LLAMA3: llama3_reply(),
    ToolFamily.MISTRAL: mistral_reply(),
    ToolFamily.PYTHONIC: pythonic_reply(),
}


@st.composite
def replies(draw: st.DrawFn) -> tuple[ToolFamily, str]:
    family = draw(st.sampled_from(list(ToolFamily)))
    return family, draw(REPLIES[family])


#: Pieces of every family's markup, and what breaks it: to build texts of any shape.
SOUP = {
    ToolFamily.HERMES: ["<tool_call>", "</tool_call>", "<tool", '"name"', '"arguments"', '"f"'],
    ToolFamily.LLAMA3: ["<|python_tag|>", "<|py", '"name"', '"parameters"', '"f"', ";", "-1e"],
    ToolFamily.MISTRAL: ["[TOOL_CALLS]", "[TOOL", "[ARGS]", "get", '"name"', '"arguments"'],
    ToolFamily.PYTHONIC: ["```tool_code", "```", "f", "g.h", "(", ")", "x=1", "'a)'", '"""q"""'],
}
COMMON = ["{", "}", "[", "]", ":", ",", " ", "\n", "text", '"', "\\", "1", "null", '{"x": 1}']


def test_every_family_has_replies_and_markup_to_draw() -> None:
    assert set(REPLIES) == set(ToolFamily) == set(SOUP)


@st.composite
def soups(draw: st.DrawFn) -> tuple[ToolFamily, str]:
    family = draw(st.sampled_from(list(ToolFamily)))
    parts = draw(st.lists(st.sampled_from(SOUP[family] + COMMON), max_size=16))
    return family, "".join(parts)


def joined(events: list[ToolCallEvent]) -> list[ToolCallEvent]:
    """Adjacent content, and adjacent fragments of one call, as one event each."""
    out: list[ToolCallEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, Content) and isinstance(last, Content):
            out[-1] = Content(last.text + event.text)
        elif (
            isinstance(event, ArgumentsFragment)
            and isinstance(last, ArgumentsFragment)
            and last.index == event.index
        ):
            out[-1] = ArgumentsFragment(event.index, last.text + event.text)
        else:
            out.append(event)
    return out


def events_of(family: ToolFamily, pieces: list[str]) -> list[ToolCallEvent]:
    reader = ToolCallReader(family)
    events = [event for piece in pieces for event in reader.push(piece)]
    return joined(events + reader.finish())


def cut(text: str, data: st.DataObject) -> list[str]:
    points = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=8)))
    return [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)])]


def words(text: str | None) -> list[str]:
    return (text or "").split()


@settings(max_examples=300, deadline=None)
@given(reply=replies(), data=st.data())
def test_a_well_formed_reply_streams_the_calls_the_parser_reads(
    reply: tuple[ToolFamily, str], data: st.DataObject
) -> None:
    family, text = reply
    parsed = parse_reply(family, text)
    assert parsed.problem is None and parsed.calls, (text, parsed)
    events = events_of(family, cut(text, data))
    assert not [e for e in events if isinstance(e, CallProblem)], (text, events)
    names = [e.name for e in events if isinstance(e, CallOpened)]
    fragments = [
        "".join(e.text for e in events if isinstance(e, ArgumentsFragment) and e.index == index)
        for index in range(len(names))
    ]
    # Each call's fragments join to valid JSON: the arguments the parser reads.
    streamed = [(name, json.loads(text)) for name, text in zip(names, fragments, strict=True)]
    assert streamed == [(c.name, json.loads(c.arguments)) for c in parsed.calls], text
    shown = "".join(e.text for e in events if isinstance(e, Content))
    assert words(shown) == words(parsed.content), text
    assert read_as_streamed(family, text).calls == parsed.calls


@settings(max_examples=300, deadline=None)
@given(reply=st.one_of(replies(), soups()), data=st.data())
def test_however_a_reply_is_cut_into_pieces_the_reader_says_the_same(
    reply: tuple[ToolFamily, str], data: st.DataObject
) -> None:
    family, text = reply
    whole = events_of(family, [text])
    assert events_of(family, cut(text, data)) == whole, text
    assert events_of(family, list(text)) == whole, text


@settings(max_examples=500, deadline=None)
@given(reply=soups())
def test_nothing_is_lost_a_reply_without_a_sent_call_is_its_content(
    reply: tuple[ToolFamily, str],
) -> None:
    family, text = reply
    events = events_of(family, [text])
    if not any(isinstance(e, CallOpened) for e in events):
        assert "".join(e.text for e in events if isinstance(e, Content)) == text
    parsed, streamed = parse_reply(family, text), read_as_streamed(family, text)
    if parsed.problem is None and streamed.problem is None:
        assert streamed.calls == parsed.calls, text


@settings(max_examples=300, deadline=None)
@given(reply=replies(), data=st.data())
def test_a_one_call_reply_keeps_exactly_its_first_call(
    reply: tuple[ToolFamily, str], data: st.DataObject
) -> None:
    family, text = reply
    first = parse_reply(family, text).calls[0]
    ends, seen = FirstCallEnd(family), 0
    for piece in cut(text, data):
        keep = ends.push(piece)
        if keep is not None:
            kept = text[: seen + keep]
            break
        seen += len(piece)
    else:
        raise AssertionError(f"the first call never closed: {text!r}")
    assert read_reply(family, kept).calls == (first,), (text, kept)
    assert _streamed_calls(family, kept) == [first], kept


def _streamed_calls(family: ToolFamily, text: str) -> list[ParsedCall]:
    reply = read_as_streamed(family, text)
    assert reply.problem is None, (text, reply.problem)
    return list(reply.calls)
