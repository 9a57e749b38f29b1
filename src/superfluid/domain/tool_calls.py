"""Tool calls in a model's reply: one parser per format family, and a watch for streams.

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
for the server's log. Pure functions; `ast` reads pythonic calls without running anything.
"""

from __future__ import annotations

import ast
import enum
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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

#: Markers that open a call anywhere in a reply, per family.
_ANYWHERE = {
    ToolFamily.HERMES: ("<tool_call>",),
    ToolFamily.LLAMA3: ("<|python_tag|>",),
    ToolFamily.MISTRAL: ("[TOOL_CALLS]",),
    ToolFamily.PYTHONIC: ("```tool_code",),
}
#: First characters that may open a call when they begin the reply.
_AT_START = {
    ToolFamily.HERMES: (),
    ToolFamily.LLAMA3: ("{", "["),
    ToolFamily.MISTRAL: ("[",),
    ToolFamily.PYTHONIC: ("[",),
}


class ToolCallWatch:
    """Streams a reply's content while holding back whatever may be a call.

    `push` returns the text that can go to the client now. Once a call may have begun, the rest
    of the reply is held; `finish` parses what was held. Text that might be the start of a
    marker waits until the next piece shows whether it is one.
    """

    def __init__(self, family: ToolFamily) -> None:
        self.family = family
        self._markers = _ANYWHERE[family]
        self._starts = _AT_START[family]
        self._pending = ""  # not yet released, not yet known to be a call
        self._held: str | None = None  # a call may have begun: everything from there
        self._released_any = False

    @property
    def holding(self) -> bool:
        return self._held is not None

    def push(self, text: str) -> str:
        if self._held is not None:
            self._held += text
            return ""
        self._pending += text
        if not self._released_any:
            head = self._pending.lstrip()
            if not head:
                return ""
            if head.startswith(self._starts):
                self._held, self._pending = self._pending, ""
                return ""
        cut = min((i for i in (self._pending.find(m) for m in self._markers) if i >= 0), default=-1)
        if cut >= 0:
            released, self._held, self._pending = self._pending[:cut], self._pending[cut:], ""
            return self._release(released)
        keep = _partial_marker_tail(self._pending, self._markers)
        released = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return self._release(released)

    def _release(self, text: str) -> str:
        if text:
            self._released_any = True
        return text

    def finish(self) -> ParsedReply:
        """The held text, parsed: calls, and content not yet released (a malformed call's text)."""
        if self._held is None:
            rest, self._pending = self._pending, ""
            return ParsedReply(rest or None)
        held, self._held = self._held, None
        parsed = parse_reply(self.family, held)
        if parsed.calls or parsed.problem is not None:
            return parsed
        return ParsedReply(held or None)  # it was not a call after all: all of it is content


def _partial_marker_tail(text: str, markers: tuple[str, ...]) -> int:
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest
