"""The JSON shapes of replies and stream chunks, OpenAI's plus the `superfluid` extension.

Chat and text completions differ only in names: `chat.completion` with a `message` or a
`delta`, against `text_completion` with `text`. A `ReplyFrame` carries what every chunk of one
reply shares (id, creation time, model, which API) and builds both shapes.

`logprobs` is always null: this server does not compute log-probabilities yet, though a request
asking for them is accepted (and decodes plainly, as §8 requires of such lanes).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from superfluid.application.requests import SpecStats

Json = dict[str, Any]


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def spec_extension(spec: SpecStats) -> Json | None:
    """`{"spec": {...}}` when anything was drafted (SPECULATION.md §9), else None."""
    if spec.proposed <= 0:
        return None
    return {
        "spec": {
            "proposed": spec.proposed,
            "accepted": spec.accepted,
            "acceptance_rate": spec.acceptance_rate,
        }
    }


@dataclass(frozen=True, slots=True)
class ReplyFrame:
    model: str
    chat: bool
    id: str = field(default="")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            prefix = "chatcmpl" if self.chat else "cmpl"
            object.__setattr__(self, "id", f"{prefix}-{uuid.uuid4().hex}")

    def _head(self, kind: str) -> Json:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def reply(self, text: str, finish: str, usage_block: Json, spec: SpecStats) -> Json:
        """A whole, non-streamed reply."""
        if self.chat:
            choice: Json = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            body = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            body = self._head("text_completion")
        body["choices"] = [choice]
        body["usage"] = usage_block
        extension = spec_extension(spec)
        if extension is not None:
            body["superfluid"] = extension
        return body

    def chunk(
        self,
        text: str | None,
        *,
        with_role: bool = False,
        finish: str | None = None,
        usage_block: Json | None = None,
        spec: SpecStats | None = None,
    ) -> Json:
        """One stream chunk: text (None on the closing chunk), and what it is asked to carry."""
        if self.chat:
            delta: Json = {}
            if with_role:
                delta["role"] = "assistant"
            if text is not None or with_role:
                delta["content"] = text or ""
            choice: Json = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            body = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            body = self._head("text_completion")
        body["choices"] = [choice]
        if usage_block is not None:
            body["usage"] = usage_block
        extension = spec_extension(spec) if spec is not None else None
        if extension is not None:
            body["superfluid"] = extension
        return body

    def usage_chunk(self, usage_block: Json) -> Json:
        """`stream_options.include_usage`'s last chunk: usage and no choices."""
        body = self._head("chat.completion.chunk" if self.chat else "text_completion")
        body["choices"] = []
        body["usage"] = usage_block
        return body
