"""One request in flight: the bridge from the service's worker thread to the event loop.

The service calls a sink from its worker thread with each `Committed` event. The sink must be
quick and must not touch asyncio objects from that thread, so it only schedules the event onto
the request's queue in the event loop (`call_soon_threadsafe`). The loop side turns events into
`Piece`s of text through a `TextStream`, which keeps UTF-8 characters whole and cuts stop
strings. A piece is one committed event: an accepted draft is one piece with several tokens.
A reply that may make one tool call only (`parallel_tool_calls` false) ends where its first call
closes (`FirstCallEnd`), the way a stop string ends it: the text is cut there, the lane is
cancelled, and the finish is "stop".

Whoever holds a `Generation` must call `cancel()` when it stops listening (a finished reply, a
client that hung up, a stop string, a closed call): the lane is then freed at the worker's next
tick. Cancelling a request that already finished is harmless.

Logprobs (for a request that asked): each emitted token's entry waits until text from that token
has been released, then leaves with the piece that released it, so a stream's chunk carries the
entries of the tokens it shows. When a stop string cuts the reply, the entries of tokens whose
text starts at or after the cut are dropped: the client never sees those tokens. A token's
`offset` counts characters of its tokens' bytes decoded one after another; where a tokenizer
renders a sequence differently from its tokens one by one, offsets are approximate.
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fastapi import Request

from superfluid.application.events import Committed, Finish, SpecStats
from superfluid.application.request_defaults import Work
from superfluid.application.service import SHUTTING_DOWN, GenerationService, ModelHost
from superfluid.application.text import TextStream
from superfluid.domain.logprobs import TokenLogprob
from superfluid.entrypoints.http.errors import ClientGone
from superfluid.entrypoints.http.replies import LogprobEntry, TopEntry

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Piece:
    """Text released by one committed event, with the counts a reply reports."""

    text: str
    tokens: int  # tokens committed in this event (even when they released no text yet)
    completion_tokens: int  # tokens committed so far, this event included
    spec: SpecStats  # the lane's drafting so far
    finish: str | None = None  # "stop" or "length" on the last piece
    error: str | None = None  # set instead of `finish` when the lane failed
    #: Entries for the tokens whose text this piece released (requests with logprobs only).
    logprobs: tuple[LogprobEntry, ...] = ()

    @property
    def last(self) -> bool:
        return self.finish is not None or self.error is not None

    @property
    def error_status(self) -> int:
        """The HTTP status for a failure that happened before any byte was sent."""
        return 503 if self.error and self.error.startswith(SHUTTING_DOWN) else 500


def _shown(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class LogprobTrail:
    """Turns a lane's `TokenLogprob`s into reply entries and holds each until its text is out."""

    def __init__(self, pieces: Callable[[int], bytes]) -> None:
        self._pieces = pieces
        # The same decoding TextStream does, so offsets count the characters a client sees.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chars = 0
        self._waiting: list[LogprobEntry] = []

    def push(self, tokens: Sequence[int], logprobs: Sequence[TokenLogprob]) -> None:
        for token, logprob in zip(tokens, logprobs, strict=True):
            data = self._pieces(token)
            top = tuple(self._top_entry(alt, value) for alt, value in logprob.top)
            self._waiting.append(
                LogprobEntry(_shown(data), data, logprob.logprob, top, self._chars)
            )
            self._chars += len(self._decoder.decode(data))

    def _top_entry(self, token: int, logprob: float) -> TopEntry:
        data = self._pieces(token)
        return TopEntry(_shown(data), data, logprob)

    def release(self, shown_chars: int | None) -> tuple[LogprobEntry, ...]:
        """Entries whose text starts before `shown_chars` (all of them for None)."""
        if shown_chars is None:
            count = len(self._waiting)
        else:  # offsets never decrease, so the released entries are a prefix
            count = bisect.bisect_left(self._waiting, shown_chars, key=lambda e: e.offset)
        released, self._waiting = self._waiting[:count], self._waiting[count:]
        return tuple(released)


class Generation:
    def __init__(self, service: GenerationService, host: ModelHost, work: Work) -> None:
        self.request = work.request
        self.prompt_tokens = len(work.request.prompt)
        self._service = service
        self._host = host
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[Committed] = asyncio.Queue()
        self._text = TextStream(host.detokenize, work.stops)
        self._ends = work.first_call_end  # where a one-call reply ends, read off its text
        self._completion_tokens = 0
        self._spec = SpecStats()
        self._ended = False
        self._trail = (
            LogprobTrail(host.token_pieces()) if work.request.logprobs is not None else None
        )
        self._shown_chars = 0  # characters released so far

    def start(self) -> None:
        self._service.submit(self._host, self.request, self._on_event)

    def cancel(self) -> None:
        self.request.cancel()

    def _on_event(self, event: Committed) -> None:
        """The sink: runs on the service's worker thread."""
        # A closed event loop (RuntimeError) means nobody is waiting for this request any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    async def next_piece(self) -> Piece:
        """The next piece; the one with `last` set ends the reply (do not ask past it)."""
        if self._ended:
            raise RuntimeError("the reply has already ended")
        event = await self._events.get()
        self._completion_tokens += len(event.tokens)
        if event.spec.proposed >= self._spec.proposed:
            self._spec = event.spec  # a failure event carries no stats: keep what was seen
        text = self._text.push(event.tokens)
        if self._trail is not None:
            self._trail.push(event.tokens, event.logprobs)
        ends_here = event.finish in (Finish.STOP, Finish.LENGTH)
        if ends_here and not self._text.stopped:
            text += self._text.finish()
        keep = self._ends.push(text) if self._ends is not None else None
        if keep is not None or self._text.stopped:
            # A stop string, or the one call's close, ends the reply here, whatever the lane
            # would do next.
            self._ended = True
            self.cancel()
            return self._piece(text if keep is None else text[:keep], event, finish="stop")
        if event.finish is None:
            return self._piece(text, event)
        self._ended = True
        if ends_here:
            return self._piece(text, event, finish=event.finish.value, everything=True)
        # CANCELLED only follows our own cancel(), after which nobody listens; ERROR is real.
        why = event.error or f"the request ended unexpectedly ({event.finish.value})"
        return self._piece(text, event, error=why)

    def _piece(
        self,
        text: str,
        event: Committed,
        finish: str | None = None,
        error: str | None = None,
        *,
        everything: bool = False,
    ) -> Piece:
        """The piece for `event`; `everything` releases every waiting entry (the text is all out)."""
        self._shown_chars += len(text)
        entries = (
            self._trail.release(None if everything else self._shown_chars)
            if self._trail is not None
            else ()
        )
        return Piece(
            text, len(event.tokens), self._completion_tokens, self._spec, finish, error, entries
        )


async def _until_disconnected(request: Request) -> None:
    # The body has been read, so the next message the server hands us is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(work: Awaitable[T], request: Request) -> T:
    """`work`'s result, or ClientGone as soon as the client hangs up (work is then cancelled)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise ClientGone
    finally:
        task.cancel()
        watch.cancel()
