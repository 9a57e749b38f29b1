"""The pythonic family (Llama 4, Gemma 3's `tool_code` blocks).

Calls are Python call expressions: `[f(a=1), g(b="x")]` as the whole reply, or the same calls
inside a ```` ```tool_code ```` block with text around it. `ast` reads them without running
anything: arguments are keywords with literal values.
"""

from __future__ import annotations

import ast
import re

from superfluid.domain.tool_calls.calls import (
    Malformed,
    ParsedCall,
    ParsedReply,
    arguments_text,
    joined_content,
)
from superfluid.domain.tool_calls.stream import (
    END,
    Broken,
    Reading,
    Stream,
    broken_at,
    ended,
    is_space,
)

#: What a chat template that teaches this family shows.
TOOL_CODE = "tool_code"
_FENCE = "```"
_TOOL_CODE_FENCE = _FENCE + TOOL_CODE
_TOOL_CODE_BLOCK = re.compile(re.escape(_TOOL_CODE_FENCE) + r"\s*\n(.*?)(?:```|\Z)", re.DOTALL)


def _python_calls(source: str) -> list[ParsedCall]:
    """The calls in `source`: one call expression, or a list or tuple of them."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        raise Malformed("the call is not a Python call expression") from None
    node = tree.body
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = []
    for call in nodes:
        if not isinstance(call, ast.Call) or call.args:
            raise Malformed("a pythonic call must be name(keyword=value, ...)")
        name = ast.unparse(call.func)
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
        except ValueError:
            raise Malformed(f"a call to {name} has an argument that is not a literal") from None
        if None in arguments:
            raise Malformed(f"a call to {name} unpacks arguments (**)")
        calls.append(ParsedCall(name, arguments_text(arguments)))
    if not calls:
        raise Malformed("the call list is empty")
    return calls


def parse(text: str) -> ParsedReply | None:
    """The first `tool_code` block's calls and the text around it, or a call list that is the
    whole reply; None when there is neither."""
    block = _TOOL_CODE_BLOCK.search(text)
    if block is not None:
        calls = _python_calls(block.group(1))
        return ParsedReply(joined_content(text[: block.start()], text[block.end() :]), tuple(calls))
    body = text.strip()
    if not re.match(r"\[\s*[A-Za-z_][\w.]*\(", body):
        return None
    return ParsedReply(None, tuple(_python_calls(body)))


def _is_name_start(ch: str) -> bool:
    return ch == "_" or (ch.isascii() and ch.isalpha())


def _is_name_char(ch: str) -> bool:
    return ch in (".", "_") or ch.isalnum()


def _call_list(stream: Stream) -> Reading[str]:
    """A call list that is the whole reply, and the character after its trailing space."""
    ch = yield from _python_body(stream, "[")
    return (yield from stream.skip(is_space, ch))


def read(stream: Stream) -> Reading[None]:
    """The stream grammar: a call list that is the whole reply, or content and the first
    `tool_code` block's calls."""
    ch = yield from stream.leading_space()
    if ch == END:
        return
    begin = stream.at - 1
    if ch == "[" and (yield from _bare_call_list_opens(stream)):
        stream.at = begin + 1
        yield from stream.whole_reply(begin, _call_list(stream))
        return
    stream.at = begin
    while (yield from stream.content_until((_TOOL_CODE_FENCE,))) is not None:
        fence = stream.at - len(_TOOL_CODE_FENCE)
        ch, line = "", False
        while (ch := (yield)).isspace():
            line = line or ch == "\n"
        if not line:  # the code must start on a line of its own: this is text
            stream.at -= ch != END
            stream.say(stream.text[fence : stream.at])
            if ch == END:
                return
            continue
        stream.loose = fence
        try:
            ch = yield from _python_body(stream, ch)
            ch = yield from stream.skip(is_space, ch)
            if ch != END:
                yield from stream.expect(_FENCE, ch, "text follows the calls")
        except Broken as broken:
            stream.abandon(broken)
        return  # the first block holds the calls; the rest of the reply is content


def _bare_call_list_opens(stream: Stream) -> Reading[bool]:
    """After a `[` that begins the reply: whether `name(` follows, as a call list's does."""
    ch = yield from stream.skip(is_space)
    if not _is_name_start(ch):
        return False
    ch = yield from stream.skip(_is_name_char, ch)
    return ch == "("


def _python_body(stream: Stream, ch: str) -> Reading[str]:
    """Calls from `ch` on: a list of them, or calls apart by commas; returns the first
    character after them."""
    closer = None
    if ch == "[":
        closer = "]"
        ch = yield from stream.skip(is_space)
    while True:
        yield from _python_call(stream, ch)
        ch = yield from stream.skip(is_space)
        if ch == ",":
            ch = yield from stream.skip(is_space)
            if _is_name_start(ch):
                continue
        if closer is not None and ch == closer:
            return (yield)
        return ch


def _python_call(stream: Stream, ch: str) -> Reading[None]:
    """`name(keyword=value, ...)` from `ch` on; the name leaves when `(` is read, the
    arguments as one JSON fragment when the call's `)` closes."""
    why = "a pythonic call must be name(keyword=value, ...)"
    if not _is_name_start(ch):
        raise broken_at(ch, why)
    if stream.loose is None:
        stream.loose = stream.at - 1
    start = stream.at - 1
    ch = yield from stream.skip(_is_name_char, ch)
    if ch != "(":
        raise broken_at(ch, why)
    stream.open_call(stream.text[start : stream.at - 1])
    opening = stream.at - 1
    yield from _python_arguments(stream)
    try:
        (made,) = _python_calls(stream.text[start : stream.at])
    except Malformed as error:
        raise Broken(str(error), stream.at - opening) from None
    stream.fragment(made.arguments)
    stream.close_call()


def _python_arguments(stream: Stream) -> Reading[None]:
    """Up to the `)` that closes a call's `(`, read over brackets and string literals."""
    depth = 1
    while depth:
        ch = yield
        if ch == END:
            raise ended()
        if ch in "'\"":
            yield from _python_string(stream, ch)
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1


def _python_string(stream: Stream, quote: str) -> Reading[None]:
    """A Python string literal, from just after its opening quote to its closing one."""
    ch = yield
    triple = False
    if ch == quote:
        ch = yield
        if ch != quote:  # an empty string; `ch` comes after it
            if ch == END:
                raise ended()
            stream.at -= 1
            return
        triple = True
        ch = yield
    quotes = 0  # closing quotes in a row
    while True:
        if ch == END:
            raise ended()
        if ch == "\\":
            if (yield) == END:
                raise ended()
            quotes = 0
        elif ch == quote:
            quotes += 1
            if not triple or quotes == 3:
                return
        else:
            quotes = 0
        ch = yield
