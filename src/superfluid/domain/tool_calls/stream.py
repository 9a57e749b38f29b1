"""The reading a family's stream grammar runs on: the reply's characters in, events out.

A stream cannot wait for the end of the reply: the reply is read as it comes, character by
character, and each piece says what it settles. Content leaves as soon as it cannot begin a
call; a call opens once its function name is known, and its arguments follow as JSON text
while the model writes them (pythonic arguments, which are Python keywords, leave as one JSON
fragment when the call's `)` closes; arguments written as a JSON string leave as the object it
holds when the string ends).

Text that may begin a call is held until it is known: a marker's first characters, or a JSON
call whose name has not come yet (its arguments, written first, wait for it). When held text
turns out to be no call, it leaves as content. Once a call's name has left, the stream cannot
take it back: when the call then breaks, it stands as far as it was sent, and the reply from
the first character the reader could not take as part of it on is content. Either way the
reader says why (`CallProblem`), for the server's log. After a broken call the rest of the
reply is content, as the whole-reply parsers return it.

Whitespace waits for what follows it: it leaves with the next content, even across calls,
and a reply that ends after a call drops it (the whole-reply parsers strip it too).

A grammar is a generator function of a `Stream`: it is sent the reply's characters one at a
time, then `END`, and steps back by lowering `Stream.at` (what it stepped over is read again).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from typing import TypeVar

from superfluid.domain.tool_calls.events import (
    ArgumentsFragment,
    CallClosed,
    CallOpened,
    CallProblem,
    Content,
    ToolCallEvent,
)

_T = TypeVar("_T")
#: A grammar step: it is sent the reply's characters one at a time, then `END`.
Reading = Generator[None, str, _T]
END = ""


class Broken(Exception):
    """Text that cannot be read on as a call: why, how many of the characters read last are
    to be read again as content, and whether it is the reply's end that cut it short."""

    def __init__(self, why: str, unread: int, *, ended: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.unread = unread
        self.ended = ended


def ended() -> Broken:
    return Broken("the reply ended inside it", 0, ended=True)


def broken_at(ch: str, why: str) -> Broken:
    """`why`, unless `ch` is the end of the reply: then the reply ended inside the call."""
    return ended() if ch == END else Broken(why, 1)


def is_space(ch: str) -> bool:
    return ch.isspace()


class Stream:
    """One reply read by one family's grammar.

    `push` takes the next piece of the reply and returns the events it settles, in order;
    `finish`, once the reply has ended, settles the rest. The grammar reads `text` from `at`,
    marks held text with `loose`, and says what it read through `say`, `open_call`,
    `fragment`, `close_call` and `abandon`.
    """

    def __init__(self, family: str, grammar: Callable[[Stream], Reading[None]]) -> None:
        self.family = family  # the family's name, for the log
        self.text = ""
        self.at = 0  # characters read; a grammar steps back by lowering it
        #: Where text begins that was read as a possible call but neither sent as a call nor
        #: as content (None: there is none). A call that breaks before its name left gives
        #: all of it back as content.
        self.loose: int | None = None
        self._events: list[ToolCallEvent] = []
        self._space = ""  # whitespace after the last content: it waits for content after it
        self._calls = 0  # calls opened
        self._open: str | None = None  # the name of the call whose arguments are streaming
        self._rest_is_content = False  # the grammar has returned
        self._finished = False
        self._ended_inside_call = False
        self._grammar = grammar(self)
        next(self._grammar)

    @property
    def ended_inside_call(self) -> bool:
        """Whether the reply ended inside a call: one it had begun (its name sent or not)."""
        return self._ended_inside_call

    def push(self, text: str) -> list[ToolCallEvent]:
        """The events `text`, the reply's next piece, settles."""
        if self._finished:
            raise RuntimeError("the reply has already ended")
        self.text += text
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
                self._grammar.send(END)
            except StopIteration:
                self._rest_is_content = True
            else:
                if self.at == len(self.text):
                    raise RuntimeError("a tool-call grammar read past the end of the reply")
            self._read()  # what the grammar stepped back over, read again
        if self._calls == 0:
            self._say_space()
        return self._take()

    # -- the driver ----------------------------------------------------------------------------

    def _read(self) -> None:
        while self.at < len(self.text):
            if self._rest_is_content:
                self.say(self.text[self.at :])
                self.at = len(self.text)
                return
            ch = self.text[self.at]
            self.at += 1
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

    def say(self, text: str) -> None:
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

    def open_call(self, name: str) -> None:
        self.loose = None
        self._open = name
        self._events.append(CallOpened(self._calls, name))
        self._calls += 1

    def fragment(self, text: str) -> None:
        self._events.append(ArgumentsFragment(self._calls - 1, text))

    def close_call(self) -> None:
        self._events.append(CallClosed(self._calls - 1, self.at))
        self._open = None

    def whole_reply(self, begin: int, calls: Reading[str]) -> Reading[None]:
        """Read the rest of the reply, held from `begin`, as calls only: `calls` reads them and
        returns the character after them, where anything but the reply's end is a problem."""
        self.loose = begin
        try:
            if (yield from calls) != END:
                raise Broken("text follows the calls", 1)
        except Broken as broken:
            self.abandon(broken)

    def abandon(self, broken: Broken) -> None:
        """Stop reading calls: held text is content, and so is the rest of the reply."""
        self._ended_inside_call = broken.ended
        family = self.family
        if self.loose is not None:
            self._events.append(
                CallProblem(
                    f"{family} tool call not parsed: {broken.why}; its text is returned as content"
                )
            )
            self.say(self.text[self.loose : self.at])
            self.loose = None
            return
        self.at -= broken.unread
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

    def skip(self, skipped: Callable[[str], bool], ch: str | None = None) -> Reading[str]:
        """The first character from `ch` (or the next) on that is not `skipped`."""
        if ch is None:
            ch = yield
        while ch != END and skipped(ch):
            ch = yield
        return ch

    def leading_space(self) -> Reading[str]:
        """Whitespace that begins the reply, as content; returns the first other character."""
        ch = yield
        while ch.isspace():
            self.say(ch)
            ch = yield
        return ch

    def match(self, word: str, ch: str) -> Reading[bool | None]:
        """Whether `word` is written from `ch` on (None: the reply ended inside it). Reads no
        character past the word, and none past the first that differs."""
        for at, expected in enumerate(word):
            if at:
                ch = yield
            if ch == END:
                return None
            if ch != expected:
                return False
        return True

    def expect(self, word: str, ch: str, why: str) -> Reading[None]:
        """`word` from `ch` on, or Broken with the reader stepped back to `ch`."""
        at = self.at - (ch != END)
        matched = yield from self.match(word, ch)
        if not matched:
            self.at = at
            raise ended() if matched is None else Broken(why, 0)

    def content_until(self, markers: tuple[str, ...]) -> Reading[str | None]:
        """Content up to the first of `markers`, which it returns (None: the reply ended).
        Text that may be a marker's first characters waits for the next ones."""
        partial = ""
        while True:
            ch = yield
            if ch == END:
                self.say(partial)
                return None
            partial += ch
            if partial in markers:
                return partial
            keep = _partial_marker_tail(partial, markers)
            if keep < len(partial):
                self.say(partial[: len(partial) - keep])
                partial = partial[len(partial) - keep :]


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
