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

from superfluid.entrypoints.http.errors import SERVER_ERROR, error_body
from superfluid.entrypoints.http.generation import Generation, Piece
from superfluid.entrypoints.http.replies import LogprobEntry, ReplyFrame, usage
from superfluid.entrypoints.http.schemas import StreamOptions

log = logging.getLogger("superfluid")

DONE = "data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def sse_events(
    generation: Generation, first: Piece, frame: ReplyFrame, options: StreamOptions
) -> AsyncIterator[str]:
    role_owed = frame.chat  # the first chunk of a chat stream names the assistant role
    wants_logprobs = generation.request.logprobs is not None
    owed: list[LogprobEntry] = []  # entries of a skipped chunk go with the next one sent
    piece = first
    try:
        while True:
            totals = usage(generation.prompt_tokens, piece.completion_tokens)
            owed.extend(piece.logprobs)
            if piece.text:
                yield sse(
                    frame.chunk(
                        piece.text,
                        with_role=role_owed,
                        usage_block=totals if options.continuous_usage_stats else None,
                        logprobs=owed if wants_logprobs else None,
                    )
                )
                role_owed = False
                owed = []
            if piece.error is not None:
                yield sse(error_body(piece.error, type=SERVER_ERROR))
                break
            if piece.finish is not None:
                wants_usage = options.include_usage or options.continuous_usage_stats
                yield sse(
                    frame.chunk(
                        None,
                        with_role=role_owed,
                        finish=piece.finish,
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
