"""Server-sent events for a streamed reply: one chunk per committed event, then `[DONE]`.

An accepted draft is one committed event, so it leaves as one chunk carrying all of its text.
An event whose bytes end inside a UTF-8 character releases no text yet; its chunk is skipped,
but its tokens are counted, so the next chunk's cumulative usage includes them. With logprobs,
a content chunk carries the entries of the tokens whose text it shows; entries still owed when
the reply ends (tokens that showed no text) ride on the closing chunk.

`superfluid.spec` rides on the chunk with the finish reason and, with
`stream_options.include_usage`, on the usage-only chunk after it as well: whichever chunk is
last carries it (docs/contract.md §9), and a client that stops reading at the finish reason still
sees it.

Tool calls leave as OpenAI's deltas (`StreamedCalls`): a call's index, id, type and name first,
then its arguments in fragments, each chunk in the order the reply wrote them; the closing chunk
of a reply that called says `finish_reason: "tool_calls"`, unless `max_tokens` cut it inside a
call ("length").

The first piece is awaited before the response starts (see app.py), so a failure before any
byte is an ordinary HTTP error; a failure after the headers went out can only be told in the
stream: an SSE `data: {"error": ...}` event, then `[DONE]`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from superfluid.application.tool_calling import ToolChoice, ToolPlan
from superfluid.domain.tool_calls.events import (
    ArgumentsFragment,
    CallOpened,
    CallProblem,
    Content,
    ToolCallEvent,
)
from superfluid.domain.tool_calls.reader import ToolCallReader
from superfluid.entrypoints.http.errors import SERVER_ERROR, SHUTTING_DOWN_CODE, error_body
from superfluid.entrypoints.http.generation import Generation, Piece
from superfluid.entrypoints.http.replies import (
    CallOut,
    Json,
    LogprobEntry,
    ReplyFrame,
    call_deltas,
    call_fragment,
    call_opening,
    new_call_id,
    usage,
)
from superfluid.entrypoints.http.schemas import StreamOptions

log = logging.getLogger("superfluid")

DONE = "data: [DONE]\n\n"

#: What a stream says next: content, or a chunk's tool-call deltas.
Said = str | list[Json]


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def sse_events(
    generation: Generation,
    first: Piece,
    frame: ReplyFrame,
    options: StreamOptions,
    tools: ToolPlan | None = None,
) -> AsyncIterator[str]:
    role_owed = frame.chat  # the first chunk of a chat stream names the assistant role
    wants_logprobs = generation.request.logprobs is not None
    owed: list[LogprobEntry] = []  # entries of a skipped chunk go with the next one sent
    calls = StreamedCalls(tools)
    piece = first
    try:
        while True:
            totals = usage(generation.prompt_tokens, piece.completion_tokens)
            owed.extend(piece.logprobs)
            for said in calls.push(piece.text):
                if isinstance(said, str):
                    yield sse(
                        frame.chunk(
                            said,
                            with_role=role_owed,
                            usage_block=totals if options.continuous_usage_stats else None,
                            logprobs=owed if wants_logprobs else None,
                        )
                    )
                    owed = []
                else:
                    yield sse(frame.chunk(None, with_role=role_owed, tool_calls=said))
                role_owed = False
            if piece.error is not None:
                code = SHUTTING_DOWN_CODE if piece.error_status == 503 else None
                yield sse(error_body(piece.error, type=SERVER_ERROR, code=code))
                break
            if piece.finish is not None:
                finish = piece.finish
                for said in calls.finish(finish):
                    if isinstance(said, str):
                        yield sse(frame.chunk(said, with_role=role_owed))
                    else:
                        yield sse(frame.chunk(None, with_role=role_owed, tool_calls=said))
                    role_owed = False
                finish = calls.finish_reason(finish)
                wants_usage = options.include_usage or options.continuous_usage_stats
                yield sse(
                    frame.chunk(
                        None,
                        with_role=role_owed,
                        finish=finish,
                        usage_block=totals if wants_usage else None,
                        spec=piece.spec,
                        logprobs=owed if owed else None,
                    )
                )
                if options.include_usage:
                    # The final chunk carries the spec too (§9), not only the one before it.
                    yield sse(frame.usage_chunk(totals, piece.spec))
                break
            piece = await generation.next_piece()
        yield DONE
    except Exception:  # a bug, after the headers went out: say so in the stream, log the rest
        log.exception("a streamed reply failed")
        message = "the server failed while streaming this reply; the server log has the details"
        yield sse(error_body(message, type=SERVER_ERROR))
        yield DONE
    finally:
        generation.cancel()


class StreamedCalls:
    """What a stream shows of a reply's tool calls, piece by piece, in the reply's order.

    - `auto`: the reply is read as it comes (`domain/tool_calls/reader.py`): content leaves
      at once, except text that may begin a call, which waits until it is known; a call leaves
      as soon as its name is known, then its arguments as the model writes them.
    - a named function: the call opens at the first piece and each piece of the grammar's output
      is one fragment of its arguments, as it is generated.
    - `required`: the grammar writes a list of calls; it is parsed when the reply ends.
    """

    def __init__(self, plan: ToolPlan | None) -> None:
        self._plan = plan
        family = plan.family if plan is not None and plan.choice is ToolChoice.AUTO else None
        self._reader = ToolCallReader(family) if family is not None else None
        self._forced = plan is not None and plan.forced
        self._raw: list[str] = []
        self._named_id: str | None = None
        self.called = False

    def push(self, text: str) -> list[Said]:
        """What to send now, in order."""
        if self._reader is not None:
            return self._said(self._reader.push(text))
        if not self._forced:
            return [text] if text else []
        if not text:
            return []
        self._raw.append(text)
        plan = self._plan
        assert plan is not None
        if plan.choice is not ToolChoice.NAMED:
            return []
        deltas = []
        if self._named_id is None:
            assert plan.named is not None
            self._named_id = new_call_id()
            self.called = True
            deltas.append(call_opening(0, self._named_id, plan.named))
        deltas.append(call_fragment(0, text))
        return [deltas]

    def finish_reason(self, finish: str) -> str:
        """What the closing chunk says of a reply that ended with `finish` (after `finish`)."""
        if self._plan is None:
            return finish
        if self._reader is not None:
            cut_inside = self._reader.ended_inside_call
        else:
            cut_inside = self._plan.ends_inside_call("".join(self._raw))
        return self._plan.finish_reason(finish, called=self.called, cut_inside_call=cut_inside)

    def finish(self, finish: str) -> list[Said]:
        """What is still owed when the reply ends with `finish`."""
        if self._reader is not None:
            return self._said(self._reader.finish())
        if self._plan is None or not self._forced or self._named_id is not None:
            return []  # no calls, or a named call that has streamed already
        parsed = self._plan.read("".join(self._raw), finish)
        if parsed.problem is not None:
            log.warning("%s", parsed.problem)
        deltas: list[Json] = []
        for index, call in enumerate(parsed.calls):
            deltas += call_deltas(index, CallOut.new(call.name, call.arguments))
        self.called = bool(parsed.calls)
        said: list[Said] = [parsed.content] if parsed.content else []
        return [*said, deltas] if deltas else said

    def _said(self, events: list[ToolCallEvent]) -> list[Said]:
        said: list[Said] = []

        def delta(value: Json) -> None:
            if said and isinstance(said[-1], list):
                said[-1].append(value)  # one chunk for a call's deltas that come together
            else:
                said.append([value])

        for event in events:
            if isinstance(event, Content):
                said.append(event.text)
            elif isinstance(event, CallOpened):
                self.called = True
                delta(call_opening(event.index, new_call_id(), event.name))
            elif isinstance(event, ArgumentsFragment):
                delta(call_fragment(event.index, event.text))
            elif isinstance(event, CallProblem):
                log.warning("%s", event.why)
        return said


class GenerationStream(StreamingResponse):
    """An SSE response that cancels its generation however it ends.

    Starlette stops iterating when the client disconnects, and the iterator's own `finally`
    may then run only when it is garbage-collected; cancelling here frees the lane at once.
    """

    def __init__(self, generation: Generation, events: AsyncIterator[str]) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            # Proxies must pass each chunk on as it comes, or drafts arrive in lumps.
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._generation.cancel()
