"""Tool calls in a model's reply: one parser per format family, and a reader for streams.

Each model family writes a call its own way:

- `hermes` (Qwen 2.5 and 3, Hermes 2/3, most ChatML tool templates):
  `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`, one block per call;
- `llama3` (Llama 3.1–3.3, and the fallback for templates that take tools but show no marker):
  a bare JSON object `{"name": "f", "parameters": {...}}` as the whole reply, after an optional
  `<|python_tag|>`; several calls separated by `;` or new lines, or in a JSON list;
- `mistral`: `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`, or the newer
  `[TOOL_CALLS]f[ARGS]{...}` per call;
- `pythonic` (Llama 4, Gemma 3's `tool_code` blocks): `[f(a=1), g(b="x")]` as the whole reply,
  or the same calls inside a ```` ```tool_code ```` block.

A parser returns the calls and the text around them (`content`). When a reply opens a call but
the call does not parse, nothing is lost: the whole reply is content, and `problem` says why,
for the server's log. `ToolCallReader` reads the same formats while a reply streams (see the
streams section), `read_reply` reads a whole one, and `FirstCallEnd` says where a reply that
may make one call ends. Pure code; `ast` reads pythonic calls without running anything.
"""

from __future__ import annotations

import ast
import enum
import itertools
import json
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar


class ToolFamily(enum.StrEnum):
    HERMES = "hermes"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    PYTHONIC = "pythonic"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, compact


@dataclass(frozen=True, slots=True)
class ParsedReply:
    content: str | None  # text outside the calls; None when there is none
    calls: tuple[ParsedCall, ...] = ()
    problem: str | None = None  # why a call-shaped reply (or part of it) was kept as text


def family_of_template(source: str) -> ToolFamily:
    """The format a chat template teaches its model, read off the template's own markers."""
    if "<tool_call>" in source:
        return ToolFamily.HERMES
    if "[TOOL_CALLS]" in source:
        return ToolFamily.MISTRAL
    if "tool_code" in source:
        return ToolFamily.PYTHONIC
    return ToolFamily.LLAMA3


class _Malformed(ValueError):
    pass


def _arguments_text(value: Any) -> str:
    if isinstance(value, str):  # some models write the arguments as a JSON string
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _Malformed("a call's arguments are a string that is not JSON") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise _Malformed("a call's arguments are not a JSON object")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _call_from_json(item: Any) -> ParsedCall:
    if not isinstance(item, dict):
        raise _Malformed("a call is not a JSON object")
    if isinstance(item.get("function"), dict):  # OpenAI's own shape, echoed
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _Malformed("a call has no function name")
    arguments = item.get("arguments", item.get("parameters"))
    return ParsedCall(name, _arguments_text(arguments))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _Malformed(f"a call is not valid JSON ({error.msg})") from None


def _content(*parts: str) -> str | None:
    text = "".join(parts).strip()
    return text or None


_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _parse_hermes(text: str) -> ParsedReply | None:
    if _HERMES_OPEN not in text:
        return None
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    outside: list[str] = []
    at = 0
    while (opening := text.find(_HERMES_OPEN, at)) >= 0:
        outside.append(text[at:opening])
        start = opening + len(_HERMES_OPEN)
        while start < len(text) and text[start].isspace():
            start += 1
        try:
            value, end = decoder.raw_decode(text, start)
            made = _call_from_json(value)
        except (json.JSONDecodeError, _Malformed) as error:
            if not calls:
                why = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
                raise _Malformed(f"a call is not valid JSON ({why})") from None
            # Calls before it stand; this one (often cut short by max_tokens) stays text.
            outside.append(text[opening:])
            problem = (
                "hermes tool call not parsed: the last call is not valid JSON; it is returned"
                " as text, the calls before it stand"
            )
            return ParsedReply(_content(*outside), tuple(calls), problem)
        calls.append(made)
        rest = text[end:].lstrip()
        if rest.startswith(_HERMES_CLOSE):
            at = len(text) - len(rest) + len(_HERMES_CLOSE)
        elif _HERMES_CLOSE.startswith(rest):
            at = len(text)  # the reply ended inside (or before) the closing tag
        else:
            at = len(text) - len(rest)  # no closing tag: what follows is text
    outside.append(text[at:])
    return ParsedReply(_content(*outside), tuple(calls))


def _json_calls(text: str) -> list[ParsedCall]:
    """One JSON call, a list of them, or several separated by `;` or new lines."""
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    at = 0
    while at < len(text):
        while at < len(text) and text[at] in " \t\r\n;":
            at += 1
        if at == len(text):
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as error:
            raise _Malformed(f"a call is not valid JSON ({error.msg})") from None
        items = value if isinstance(value, list) else [value]
        calls.extend(_call_from_json(item) for item in items)
    if not calls:
        raise _Malformed("the call list is empty")
    return calls


def _parse_llama3(text: str) -> ParsedReply | None:
    body = text.strip()
    body = body.removeprefix("<|python_tag|>").lstrip()
    if not body.startswith(("{", "[")):
        return None
    if body.startswith("[") and not body[1:].lstrip().startswith(("{", "]")):
        return None  # a list of something else: prose in brackets
    return ParsedReply(None, tuple(_json_calls(body)))


_MISTRAL_ARGS = re.compile(r"\s*([A-Za-z0-9_.\-]+)\[ARGS\]")


def _parse_mistral(text: str) -> ParsedReply | None:
    marker = text.find("[TOOL_CALLS]")
    if marker < 0:
        # The marker is a control token some detokenizers drop: a bare call list is a call too.
        stripped = text.strip()
        if stripped.startswith("[") and stripped[1:].lstrip().startswith("{"):
            return ParsedReply(None, tuple(_json_calls(stripped)))
        return None
    before, rest = text[:marker], text[marker:]
    calls: list[ParsedCall] = []
    for segment in rest.split("[TOOL_CALLS]")[1:]:
        named = _MISTRAL_ARGS.match(segment)
        if named is None:
            calls.extend(_json_calls(segment))
            continue
        decoder = json.JSONDecoder()
        try:
            value, _ = decoder.raw_decode(segment, named.end())
        except json.JSONDecodeError as error:
            raise _Malformed(f"a call's arguments are not valid JSON ({error.msg})") from None
        calls.append(ParsedCall(named.group(1), _arguments_text(value)))
    return ParsedReply(_content(before), tuple(calls))


_TOOL_CODE = re.compile(r"```tool_code\s*\n(.*?)(?:```|\Z)", re.DOTALL)


def _python_calls(source: str) -> list[ParsedCall]:
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        raise _Malformed("the call is not a Python call expression") from None
    node = tree.body
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = []
    for call in nodes:
        if not isinstance(call, ast.Call) or call.args:
            raise _Malformed("a pythonic call must be name(keyword=value, ...)")
        name = ast.unparse(call.func)
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
        except ValueError:
            raise _Malformed(f"a call to {name} has an argument that is not a literal") from None
        if None in arguments:
            raise _Malformed(f"a call to {name} unpacks arguments (**)")
        calls.append(ParsedCall(name, _arguments_text(arguments)))
    if not calls:
        raise _Malformed("the call list is empty")
    return calls


def _parse_pythonic(text: str) -> ParsedReply | None:
    block = _TOOL_CODE.search(text)
    if block is not None:
        calls = _python_calls(block.group(1))
        return ParsedReply(_content(text[: block.start()], text[block.end() :]), tuple(calls))
    body = text.strip()
    if not re.match(r"\[\s*[A-Za-z_][\w.]*\(", body):
        return None
    return ParsedReply(None, tuple(_python_calls(body)))


_PARSERS: dict[ToolFamily, Callable[[str], ParsedReply | None]] = {
    ToolFamily.HERMES: _parse_hermes,
    ToolFamily.LLAMA3: _parse_llama3,
    ToolFamily.MISTRAL: _parse_mistral,
    ToolFamily.PYTHONIC: _parse_pythonic,
}


def parse_reply(family: ToolFamily, text: str) -> ParsedReply:
    """The calls in `text` and the content around them; a malformed call leaves it all content."""
    try:
        parsed = _PARSERS[family](text)
    except _Malformed as why:
        problem = f"{family.value} tool call not parsed: {why}; the reply is returned as text"
        return ParsedReply(text or None, (), problem)
    if parsed is None:
        return ParsedReply(text or None)
    return parsed


# -- streams --------------------------------------------------------------------------------------
#
# A stream cannot wait for the end of the reply: `ToolCallReader` reads the reply as it comes,
# character by character, in the same formats, and says what each piece settles. Content leaves
# as soon as it cannot begin a call; a call opens once its function name is known, and its
# arguments follow as JSON text while the model writes them (pythonic arguments, which are
# Python keywords, leave as one JSON fragment when the call's `)` closes; arguments written as
# a JSON string leave as the object it holds when the string ends).
#
# Text that may begin a call is held until it is known: a marker's first characters, or a JSON
# call whose name has not come yet (its arguments, written first, wait for it). When held text
# turns out to be no call, it leaves as content. Once a call's name has left, the stream cannot
# take it back: when the call then breaks, it stands as far as it was sent, and the reply from
# the first character the reader could not take as part of it on is content. Either way the
# reader says why (`CallProblem`), for the server's log. After a broken call the rest of the
# reply is content, as the whole-reply parsers return it.
#
# Whitespace waits for what follows it: it leaves with the next content, even across calls,
# and a reply that ends after a call drops it (the whole-reply parsers strip it too).


@dataclass(frozen=True, slots=True)
class Content:
    """Text of the reply that is no call."""

    text: str


@dataclass(frozen=True, slots=True)
class CallOpened:
    """Call `index` (0, 1, ... in the reply) begins: its function name is known."""

    index: int
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsFragment:
    """More of call `index`'s arguments: the fragments of a call that closes join to its
    arguments object, as JSON text."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class CallClosed:
    """Call `index` is complete; `end` counts the reply's characters up to its last one."""

    index: int
    end: int


@dataclass(frozen=True, slots=True)
class CallProblem:
    """Why call-shaped text was read as content, or a sent call broke off (for the log)."""

    why: str


ToolCallEvent = Content | CallOpened | ArgumentsFragment | CallClosed | CallProblem

_T = TypeVar("_T")
#: A grammar step: it is sent the reply's characters one at a time, then `_END`.
_Reading = Generator[None, str, _T]
_END = ""

_JSON_SPACE = frozenset(" \t\n\r")
_SEPARATORS = _JSON_SPACE | {";"}  # between llama3 calls written one after another
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_MARKER, _MISTRAL_NAMED = "[TOOL_CALLS]", "[ARGS]"
_TOOL_CODE_FENCE, _FENCE = "```tool_code", "```"


class _Broken(Exception):
    """Text that cannot be read on as a call: why, how many of the characters read last are
    to be read again as content, and whether it is the reply's end that cut it short."""

    def __init__(self, why: str, unread: int, *, ended: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.unread = unread
        self.ended = ended


def _ended() -> _Broken:
    return _Broken("the reply ended inside it", 0, ended=True)


def _broken_at(ch: str, why: str) -> _Broken:
    """`why`, unless `ch` is the end of the reply: then the reply ended inside the call."""
    return _ended() if ch == _END else _Broken(why, 1)


def _is_json_space(ch: str) -> bool:
    return ch in _JSON_SPACE


def _is_separator(ch: str) -> bool:
    return ch in _SEPARATORS


def _is_space(ch: str) -> bool:
    return ch.isspace()


def _is_name_start(ch: str) -> bool:
    return ch == "_" or (ch.isascii() and ch.isalpha())


def _is_name_char(ch: str) -> bool:
    return ch in (".", "_") or ch.isalnum()


def _is_mistral_name(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in ("_", ".", "-"))


@dataclass(slots=True)
class _Draft:
    """A JSON call being read: its name once known, and arguments that came before it."""

    name: str | None = None
    has_arguments: bool = False
    held: str | None = None  # arguments written before the name, waiting for it


class ToolCallReader:
    """Reads one family's tool calls out of a reply as it is generated.

    `push` takes the next piece of the reply and returns the events it settles, in order:
    `Content`, `CallOpened`, `ArgumentsFragment`, `CallClosed`, `CallProblem`. `finish`, once
    the reply has ended, settles the rest. However the reply is cut into pieces, the events
    say the same (joined, adjacent content and fragments are one).
    """

    def __init__(self, family: ToolFamily) -> None:
        self.family = family
        self._text = ""
        self._at = 0  # characters read; a grammar steps back by lowering it
        self._events: list[ToolCallEvent] = []
        self._space = ""  # whitespace after the last content: it waits for content after it
        self._calls = 0  # calls opened
        self._open: str | None = None  # the name of the call whose arguments are streaming
        #: Where text begins that was read as a possible call but neither sent as a call nor
        #: as content (None: there is none). A call that breaks before its name left gives
        #: all of it back as content.
        self._loose: int | None = None
        self._rest_is_content = False  # the grammar has returned
        self._finished = False
        self._ended_inside_call = False
        grammars = {
            ToolFamily.HERMES: self._hermes,
            ToolFamily.LLAMA3: self._llama3,
            ToolFamily.MISTRAL: self._mistral,
            ToolFamily.PYTHONIC: self._pythonic,
        }
        self._grammar = grammars[family]()
        next(self._grammar)

    @property
    def ended_inside_call(self) -> bool:
        """Whether the reply ended inside a call: one it had begun (its name sent or not)."""
        return self._ended_inside_call

    def push(self, text: str) -> list[ToolCallEvent]:
        """The events `text`, the reply's next piece, settles."""
        if self._finished:
            raise RuntimeError("the reply has already ended")
        self._text += text
        self._read()
        return self._take()

    def finish(self) -> list[ToolCallEvent]:
        """The events the end of the reply settles: held text, a call the reply ended inside."""
        if self._finished:
            raise RuntimeError("the reply has already ended")
        self._finished = True
        self._read()
        while not self._rest_is_content:
            try:
                self._grammar.send(_END)
            except StopIteration:
                self._rest_is_content = True
            else:
                if self._at == len(self._text):
                    raise RuntimeError("a tool-call grammar read past the end of the reply")
            self._read()  # what the grammar stepped back over, read again
        if self._calls == 0:
            self._say_space()
        return self._take()

    # -- the driver ----------------------------------------------------------------------------

    def _read(self) -> None:
        while self._at < len(self._text):
            if self._rest_is_content:
                self._say(self._text[self._at :])
                self._at = len(self._text)
                return
            ch = self._text[self._at]
            self._at += 1
            try:
                self._grammar.send(ch)
            except StopIteration:
                self._rest_is_content = True

    def _take(self) -> list[ToolCallEvent]:
        """The events since the last take, adjacent content and fragments of a call joined."""
        taken: list[ToolCallEvent] = []
        for _, group in itertools.groupby(self._events, key=_joining):
            events = list(group)
            first = events[0]
            texts = [e.text for e in events if isinstance(e, (Content, ArgumentsFragment))]
            if isinstance(first, Content):
                taken.append(Content("".join(texts)))
            elif isinstance(first, ArgumentsFragment):
                taken.append(ArgumentsFragment(first.index, "".join(texts)))
            else:
                taken += events
        self._events = []
        return taken

    # -- what the grammars say -----------------------------------------------------------------

    def _say(self, text: str) -> None:
        """Content; trailing whitespace waits for content after it."""
        body = text.rstrip()
        if body:
            self._events.append(Content(self._space + body))
            self._space = text[len(body) :]
        else:
            self._space += text

    def _say_space(self) -> None:
        if self._space:
            self._events.append(Content(self._space))
            self._space = ""

    def _open_call(self, name: str) -> None:
        self._loose = None
        self._open = name
        self._events.append(CallOpened(self._calls, name))
        self._calls += 1

    def _fragment(self, text: str) -> None:
        self._events.append(ArgumentsFragment(self._calls - 1, text))

    def _close_call(self) -> None:
        self._events.append(CallClosed(self._calls - 1, self._at))
        self._open = None

    def _abandon(self, broken: _Broken) -> None:
        """Stop reading calls: held text is content, and so is the rest of the reply."""
        self._ended_inside_call = broken.ended
        family = self.family.value
        if self._loose is not None:
            self._events.append(
                CallProblem(
                    f"{family} tool call not parsed: {broken.why}; its text is returned as content"
                )
            )
            self._say(self._text[self._loose : self._at])
            self._loose = None
            return
        self._at -= broken.unread
        if self._open is not None:
            why = (
                f"{family} tool call {self._open!r} broke off ({broken.why}): it stands as"
                " streamed, and the rest of the reply is content"
            )
        else:
            why = (
                f"{family} tool calls: {broken.why}; the calls before stand, and the rest of"
                " the reply is content"
            )
        self._events.append(CallProblem(why))
        self._open = None

    # -- reading helpers (generators: each is sent the characters it reads) ---------------------

    def _skip(self, skipped: Callable[[str], bool], ch: str | None = None) -> _Reading[str]:
        """The first character from `ch` (or the next) on that is not `skipped`."""
        if ch is None:
            ch = yield
        while ch != _END and skipped(ch):
            ch = yield
        return ch

    def _leading_space(self) -> _Reading[str]:
        """Whitespace that begins the reply, as content; returns the first other character."""
        ch = yield
        while ch.isspace():
            self._say(ch)
            ch = yield
        return ch

    def _match(self, word: str, ch: str) -> _Reading[bool | None]:
        """Whether `word` is written from `ch` on (None: the reply ended inside it). Reads no
        character past the word, and none past the first that differs."""
        for at, expected in enumerate(word):
            if at:
                ch = yield
            if ch == _END:
                return None
            if ch != expected:
                return False
        return True

    def _expect(self, word: str, ch: str, why: str) -> _Reading[None]:
        """`word` from `ch` on, or _Broken with the reader stepped back to `ch`."""
        at = self._at - (ch != _END)
        matched = yield from self._match(word, ch)
        if not matched:
            self._at = at
            raise _ended() if matched is None else _Broken(why, 0)

    def _content_until(self, markers: tuple[str, ...]) -> _Reading[str | None]:
        """Content up to the first of `markers`, which it returns (None: the reply ended).
        Text that may be a marker's first characters waits for the next ones."""
        partial = ""
        while True:
            ch = yield
            if ch == _END:
                self._say(partial)
                return None
            partial += ch
            if partial in markers:
                return partial
            keep = _partial_marker_tail(partial, markers)
            if keep < len(partial):
                self._say(partial[: len(partial) - keep])
                partial = partial[len(partial) - keep :]

    # -- JSON calls (hermes, llama3, mistral) -----------------------------------------------------

    def _json_value(self, ch: str, *, stream: bool = False) -> _Reading[tuple[str, str | None]]:
        """One JSON value from `ch` on: its text, and the character read after it (None when
        the value ended on its own last character). `stream` sends it as argument fragments."""
        start = self._at - 1
        scan = _JsonScan()
        while True:
            status = scan.feed(ch)
            if status is _Scan.INVALID:
                raise _broken_at(ch, "a call is not valid JSON")
            if status is _Scan.BEFORE:
                return self._text[start : self._at - (ch != _END)], ch
            if stream:
                self._fragment(ch)
            if status is _Scan.DONE:
                return self._text[start : self._at], None
            ch = yield

    def _json_call(self) -> _Reading[None]:
        """One call written as a JSON object, read from just after its `{` to its `}`."""
        if self._loose is None:
            self._loose = self._at - 1
        draft = _Draft()
        yield from self._members(draft)
        if draft.name is None:
            raise _Broken("a call has no function name", 0)
        if not draft.has_arguments:
            self._fragment("{}")
        self._close_call()

    def _members(self, draft: _Draft) -> _Reading[None]:
        """A call object's members, from just after its `{` to its `}`."""
        ch = yield from self._skip(_is_json_space)
        if ch == "}":
            return
        while True:
            if ch != '"':
                raise _broken_at(ch, "a call is not valid JSON")
            key, after = yield from self._json_value(ch)
            ch = yield from self._skip(_is_json_space, after)
            if ch != ":":
                raise _broken_at(ch, "a call is not valid JSON")
            ch = yield from self._skip(_is_json_space)
            after = yield from self._member(draft, json.loads(key), ch)
            ch = yield from self._skip(_is_json_space, after)
            if ch == "}":
                return
            if ch != ",":
                raise _broken_at(ch, "a call is not valid JSON")
            ch = yield from self._skip(_is_json_space)

    def _member(self, draft: _Draft, key: object, ch: str) -> _Reading[str | None]:
        """One member's value, from `ch` on; returns the character read after it, if any."""
        if key == "function" and ch == "{":  # OpenAI's own shape, echoed: the call is inside
            yield from self._members(draft)
            return None
        if key in ("arguments", "parameters"):
            return (yield from self._arguments(draft, ch))
        raw, after = yield from self._json_value(ch)
        if key == "name":
            self._name(draft, raw, after)
        return after

    def _name(self, draft: _Draft, raw: str, after: str | None) -> None:
        name = json.loads(raw)
        read = len(raw) + bool(after)
        if not isinstance(name, str) or not name:
            raise _Broken("a call has no function name", read)
        if draft.name is not None:
            raise _Broken("a call names its function twice", read)
        draft.name = name
        self._open_call(name)
        if draft.held is not None:
            self._fragment(draft.held)
            draft.held = None

    def _arguments(self, draft: _Draft, ch: str) -> _Reading[str | None]:
        """A call's arguments from `ch` on. An object streams as it is written once the name
        is known; a string holding JSON, or null, leaves converted when it ends."""
        if draft.has_arguments:
            raise _broken_at(ch, "a call has its arguments twice")
        draft.has_arguments = True
        streamed = ch == "{" and draft.name is not None
        raw, after = yield from self._json_value(ch, stream=streamed)
        if streamed:
            return after
        text = raw
        if ch != "{":
            try:
                text = _arguments_text(json.loads(raw))
            except _Malformed as why:
                raise _Broken(str(why), len(raw) + bool(after)) from None
        if draft.name is None:
            draft.held = text
        else:
            self._fragment(text)
        return after

    def _json_calls(self, ch: str, *, marker: bool) -> _Reading[str]:
        """Calls written as JSON from `ch` on: objects, or lists of them, apart by spaces, `;`
        or new lines. Returns the first character after them that is none of these; with
        `marker`, `[` where `[TOOL_CALLS]` may begin (the reader stands just after it)."""
        made = 0
        while True:
            if ch == "{":
                yield from self._json_call()
                made += 1
                ch = yield
            elif ch == "[":
                ch = yield
                if marker and ch == "T":
                    self._at -= 1
                    ch = "["
                    break
                listed, ch = yield from self._json_call_list(ch)
                made += listed
            else:
                break
            ch = yield from self._skip(_is_separator, ch)
        if not made:
            raise _broken_at(ch, "the call list is empty")
        return ch

    def _json_call_list(self, ch: str) -> _Reading[tuple[int, str]]:
        """A JSON list of calls from just after its `[` (`ch` is the next character): how
        many, and the character after the list. A reply that ends after a call, the list
        still open, ends the list (one call when `parallel_tool_calls` is false cuts it so)."""
        made = 0
        ch = yield from self._skip(_is_json_space, ch)
        if ch == "]":
            return made, (yield)
        while True:
            if ch != "{":
                raise _broken_at(ch, "a call is not a JSON object")
            yield from self._json_call()
            made += 1
            ch = yield from self._skip(_is_json_space)
            if ch == _END:
                return made, ch
            if ch == "]":
                return made, (yield)
            if ch != ",":
                raise _Broken("a call list is not valid JSON", 1)
            ch = yield from self._skip(_is_json_space)

    def _hermes(self) -> _Reading[None]:
        while (yield from self._content_until((_HERMES_OPEN,))) is not None:
            self._loose = self._at - len(_HERMES_OPEN)
            try:
                ch = yield from self._skip(_is_space)
                if ch != "{":
                    raise _broken_at(ch, "a call is not a JSON object")
                yield from self._json_call()
            except _Broken as broken:
                self._abandon(broken)
                return
            ch = yield from self._skip(_is_space)
            if ch == _END:
                return
            tag = self._at - 1
            closed = yield from self._match(_HERMES_CLOSE, ch)
            if closed is None:
                return  # the reply ended inside the closing tag
            if not closed:
                self._at = tag  # no closing tag: what follows is content

    def _llama3(self) -> _Reading[None]:
        ch = yield from self._leading_space()
        if ch == _END:
            return
        begin = self._at - 1
        if ch == "<":
            if not (yield from self._match(_PYTHON_TAG, ch)):
                self._at = begin
                return
            ch = yield from self._skip(_is_space)
        if ch == "[":
            opening = self._at - 1
            # A list of something other than calls is prose in brackets.
            if (yield from self._skip(_is_space)) not in ("{", "]"):
                self._at = begin
                return
            self._at = opening + 1
        elif ch != "{":
            self._at = begin
            return
        self._loose = begin
        try:
            ch = yield from self._json_calls(ch, marker=False)
            if ch != _END:
                raise _Broken("text follows the calls", 1)
        except _Broken as broken:
            self._abandon(broken)

    def _mistral(self) -> _Reading[None]:
        ch = yield from self._leading_space()
        if ch == _END:
            return
        begin = self._at - 1
        if ch == "[" and (yield from self._skip(_is_space)) == "{":
            # A bare call list: the marker is a control token some detokenizers drop.
            self._at = begin + 1
            self._loose = begin
            try:
                ch = yield from self._json_calls("[", marker=False)
                if ch != _END:
                    raise _Broken("text follows the calls", 1)
            except _Broken as broken:
                self._abandon(broken)
            return
        self._at = begin
        if (yield from self._content_until((_MISTRAL_MARKER,))) is None:
            return
        try:
            while True:  # one segment per marker
                self._loose = self._at - len(_MISTRAL_MARKER)
                ch = yield from self._skip(_is_space)
                if _is_mistral_name(ch):
                    ch = yield from self._named_call(ch)
                else:
                    ch = yield from self._json_calls(ch, marker=True)
                ch = yield from self._skip(_is_space, ch)
                if ch == _END:
                    return
                yield from self._expect(_MISTRAL_MARKER, ch, "text follows the calls")
        except _Broken as broken:
            self._abandon(broken)

    def _named_call(self, ch: str) -> _Reading[str]:
        """Mistral's `name[ARGS]{...}`, from the name's first character; returns the
        character after the arguments."""
        start = self._at - 1
        while _is_mistral_name(ch):
            ch = yield
        name = self._text[start : self._at - (ch != _END)]
        why = "a call is neither a JSON list nor name[ARGS]{...}"
        yield from self._expect(_MISTRAL_NAMED, ch, why)
        self._open_call(name)
        draft = _Draft(name)
        after = yield from self._arguments(draft, (yield))
        self._close_call()
        return after if after is not None else (yield)

    # -- pythonic calls -----------------------------------------------------------------------

    def _pythonic(self) -> _Reading[None]:
        ch = yield from self._leading_space()
        if ch == _END:
            return
        begin = self._at - 1
        if ch == "[" and (yield from self._bare_call_list_opens()):
            self._at = begin + 1
            self._loose = begin
            try:
                ch = yield from self._python_body("[")
                ch = yield from self._skip(_is_space, ch)
                if ch != _END:
                    raise _Broken("text follows the calls", 1)
            except _Broken as broken:
                self._abandon(broken)
            return
        self._at = begin
        while (yield from self._content_until((_TOOL_CODE_FENCE,))) is not None:
            fence = self._at - len(_TOOL_CODE_FENCE)
            ch, line = "", False
            while (ch := (yield)).isspace():
                line = line or ch == "\n"
            if not line:  # the code must start on a line of its own: this is text
                self._at -= ch != _END
                self._say(self._text[fence : self._at])
                if ch == _END:
                    return
                continue
            self._loose = fence
            try:
                ch = yield from self._python_body(ch)
                ch = yield from self._skip(_is_space, ch)
                if ch != _END:
                    yield from self._expect(_FENCE, ch, "text follows the calls")
            except _Broken as broken:
                self._abandon(broken)
            return  # the first block holds the calls; the rest of the reply is content

    def _bare_call_list_opens(self) -> _Reading[bool]:
        """After a `[` that begins the reply: whether `name(` follows, as a call list's does."""
        ch = yield from self._skip(_is_space)
        if not _is_name_start(ch):
            return False
        ch = yield from self._skip(_is_name_char, ch)
        return ch == "("

    def _python_body(self, ch: str) -> _Reading[str]:
        """Calls from `ch` on: a list of them, or calls apart by commas; returns the first
        character after them."""
        closer = None
        if ch == "[":
            closer = "]"
            ch = yield from self._skip(_is_space)
        while True:
            yield from self._python_call(ch)
            ch = yield from self._skip(_is_space)
            if ch == ",":
                ch = yield from self._skip(_is_space)
                if _is_name_start(ch):
                    continue
            if closer is not None and ch == closer:
                return (yield)
            return ch

    def _python_call(self, ch: str) -> _Reading[None]:
        """`name(keyword=value, ...)` from `ch` on; the name leaves when `(` is read, the
        arguments as one JSON fragment when the call's `)` closes."""
        why = "a pythonic call must be name(keyword=value, ...)"
        if not _is_name_start(ch):
            raise _broken_at(ch, why)
        if self._loose is None:
            self._loose = self._at - 1
        start = self._at - 1
        ch = yield from self._skip(_is_name_char, ch)
        if ch != "(":
            raise _broken_at(ch, why)
        self._open_call(self._text[start : self._at - 1])
        opening = self._at - 1
        yield from self._python_arguments()
        try:
            (made,) = _python_calls(self._text[start : self._at])
        except _Malformed as error:
            raise _Broken(str(error), self._at - opening) from None
        self._fragment(made.arguments)
        self._close_call()

    def _python_arguments(self) -> _Reading[None]:
        """Up to the `)` that closes a call's `(`, read over brackets and string literals."""
        depth = 1
        while depth:
            ch = yield
            if ch == _END:
                raise _ended()
            if ch in "'\"":
                yield from self._python_string(ch)
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1

    def _python_string(self, quote: str) -> _Reading[None]:
        """A Python string literal, from just after its opening quote to its closing one."""
        ch = yield
        triple = False
        if ch == quote:
            ch = yield
            if ch != quote:  # an empty string; `ch` comes after it
                if ch == _END:
                    raise _ended()
                self._at -= 1
                return
            triple = True
            ch = yield
        quotes = 0  # closing quotes in a row
        while True:
            if ch == _END:
                raise _ended()
            if ch == "\\":
                if (yield) == _END:
                    raise _ended()
                quotes = 0
            elif ch == quote:
                quotes += 1
                if not triple or quotes == 3:
                    return
            else:
                quotes = 0
            ch = yield


def _joining(event: ToolCallEvent) -> object:
    """Events with equal keys join: content with content, fragments of one call."""
    if isinstance(event, Content):
        return "content"
    if isinstance(event, ArgumentsFragment):
        return ("arguments", event.index)
    return event  # no other event equals it


def _partial_marker_tail(text: str, markers: tuple[str, ...]) -> int:
    """The length of the longest tail of `text` that is a marker's first characters."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


class _Scan(enum.Enum):
    MORE = enum.auto()  # the character belongs to the value, which goes on
    DONE = enum.auto()  # the character was the value's last
    BEFORE = enum.auto()  # the value (a number) ended before this character
    INVALID = enum.auto()  # no JSON value goes on with this character


_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_ESCAPED = frozenset('"\\/bfnrt')
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
#: A number's states, and those in which it may end.
_NUMBER = frozenset({"minus", "zero", "int", "dot", "frac", "exp", "exp_sign", "exp_digits"})
_NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp_digits"})


class _JsonScan:
    """Checks one JSON value a character at a time, as Python's `json` reads it (less NaN and
    Infinity), and says where it ends: the stream sends only text that is JSON so far."""

    def __init__(self) -> None:
        self._stack: list[str] = []  # open containers: "{" or "["
        self._state = "value"
        self._key = False  # the string being read is an object's key
        self._left = ""  # a literal's characters still to come
        self._hex = 0  # a \u escape's hex digits still to come

    def feed(self, ch: str) -> _Scan:
        state = self._state
        if state == "string":
            return self._string(ch)
        if state == "escape":
            if ch == "u":
                self._state, self._hex = "hex", 4
                return _Scan.MORE
            self._state = "string"
            return _Scan.MORE if ch in _ESCAPED else _Scan.INVALID
        if state == "hex":
            if ch not in _HEX_DIGITS:
                return _Scan.INVALID
            self._hex -= 1
            if not self._hex:
                self._state = "string"
            return _Scan.MORE
        if state == "literal":
            if ch == _END or not self._left.startswith(ch):
                return _Scan.INVALID
            self._left = self._left[1:]
            return _Scan.MORE if self._left else self._value_done()
        if state in _NUMBER:
            return self._number(ch)
        if state == "done":
            return _Scan.INVALID
        if ch in _JSON_SPACE:  # between tokens, inside a container
            return _Scan.MORE if self._stack else _Scan.INVALID
        return self._structure(state, ch)

    def _structure(self, state: str, ch: str) -> _Scan:
        if state == "array_first" and ch == "]":
            return self._close()
        if state in ("value", "array_first"):
            return self._begin(ch)
        if state in ("object_first", "key"):
            if ch == '"':
                self._state, self._key = "string", True
                return _Scan.MORE
            return self._close() if state == "object_first" and ch == "}" else _Scan.INVALID
        if state == "colon":
            if ch != ":":
                return _Scan.INVALID
            self._state = "value"
            return _Scan.MORE
        # "next": after a value inside a container
        top = self._stack[-1]
        if ch == ",":
            self._state = "key" if top == "{" else "value"
            return _Scan.MORE
        return self._close() if ch == ("}" if top == "{" else "]") else _Scan.INVALID

    def _begin(self, ch: str) -> _Scan:
        if ch in ("{", "["):
            self._stack.append(ch)
            self._state = "object_first" if ch == "{" else "array_first"
        elif ch == '"':
            self._state, self._key = "string", False
        elif ch in _LITERALS:
            self._state, self._left = "literal", _LITERALS[ch]
        elif ch == "-":
            self._state = "minus"
        elif ch in _DIGITS:
            self._state = "zero" if ch == "0" else "int"
        else:
            return _Scan.INVALID
        return _Scan.MORE

    def _string(self, ch: str) -> _Scan:
        if ch == '"':
            if self._key:
                self._state, self._key = "colon", False
                return _Scan.MORE
            return self._value_done()
        if ch == "\\":
            self._state = "escape"
            return _Scan.MORE
        return _Scan.MORE if ch >= " " else _Scan.INVALID  # control characters are not JSON

    def _number(self, ch: str) -> _Scan:
        state = self._state
        following = None
        if ch in _DIGITS:
            following = {
                "minus": "zero" if ch == "0" else "int",
                "zero": None,  # no digit follows a leading zero
                "int": "int",
                "dot": "frac",
                "frac": "frac",
                "exp": "exp_digits",
                "exp_sign": "exp_digits",
                "exp_digits": "exp_digits",
            }[state]
        elif ch == "." and state in ("zero", "int"):
            following = "dot"
        elif ch in ("e", "E") and state in ("zero", "int", "frac"):
            following = "exp"
        elif ch in ("+", "-") and state == "exp":
            following = "exp_sign"
        if following is not None:
            self._state = following
            return _Scan.MORE
        if state not in _NUMBER_ENDS:
            return _Scan.INVALID
        if not self._stack:
            self._state = "done"
            return _Scan.BEFORE
        self._state = "next"
        return self.feed(ch)

    def _close(self) -> _Scan:
        self._stack.pop()
        return self._value_done()

    def _value_done(self) -> _Scan:
        if self._stack:
            self._state = "next"
            return _Scan.MORE
        self._state = "done"
        return _Scan.DONE


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
        return _arguments_text(json.loads(arguments))
    except (ValueError, _Malformed):
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


class FirstCallEnd:
    """Where a reply that may make one call ends: right after its first call closes."""

    def __init__(self, family: ToolFamily) -> None:
        self._reader = ToolCallReader(family)
        self._read = 0

    def push(self, text: str) -> int | None:
        """How much of `text`, the reply's next piece, the reply keeps when its first call
        closes in it; None while no call has closed."""
        for event in self._reader.push(text):
            if isinstance(event, CallClosed):
                return event.end - self._read
        self._read += len(text)
        return None
