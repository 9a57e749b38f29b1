"""The JSON shapes of replies and stream chunks, OpenAI's plus the `superfluid` extension.

Chat and text completions differ only in names: `chat.completion` with a `message` or a
`delta`, against `text_completion` with `text`. A `ReplyFrame` carries what every chunk of one
reply shares (id, creation time, model, which API) and builds both shapes.

`logprobs` is null unless the request asked for them (such lanes decode plainly, §8). Then:

- chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
  "bytes"}, ...]}, ...]}`, OpenAI's shape;
- text completions: `{"tokens": [...], "token_logprobs": [...], "top_logprobs": [{text: logprob,
  ...}, ...], "text_offset": [...]}`, the legacy shape. Two top tokens with the same text would
  share a key: the likelier one is kept.

Values are the model's raw log-probabilities (superfluid.domain.logprobs). A token's text is the
runtime's detokenization of that token alone, decoded with errors="replace", so a token holding
part of a UTF-8 character shows U+FFFD; `bytes` carries its exact bytes. JSON has no -Infinity,
so a log-probability below LOGPROB_FLOOR is reported as the floor (vLLM does the same).
In a stream each content chunk carries the entries of the tokens whose text it releases.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from superfluid.application.events import SpecStats

Json = dict[str, Any]

#: The lowest log-probability a reply reports: -inf is not valid JSON.
LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True, slots=True)
class TopEntry:
    text: str
    data: bytes
    logprob: float


@dataclass(frozen=True, slots=True)
class LogprobEntry:
    """One emitted token as a reply shows it: its text and bytes, its log-probability, the
    likeliest tokens at its step, and where its text starts in the completion (characters)."""

    text: str
    data: bytes
    logprob: float
    top: tuple[TopEntry, ...]
    offset: int


def _reported(logprob: float) -> float:
    return max(logprob, LOGPROB_FLOOR)


def chat_logprobs(entries: Sequence[LogprobEntry]) -> Json:
    return {
        "content": [
            {
                "token": entry.text,
                "logprob": _reported(entry.logprob),
                "bytes": list(entry.data),
                "top_logprobs": [
                    {"token": top.text, "logprob": _reported(top.logprob), "bytes": list(top.data)}
                    for top in entry.top
                ],
            }
            for entry in entries
        ]
    }


def completion_logprobs(entries: Sequence[LogprobEntry]) -> Json:
    tops: list[dict[str, float]] = []
    for entry in entries:
        by_text: dict[str, float] = {}
        for top in entry.top:  # highest first: setdefault keeps the likelier of two same texts
            by_text.setdefault(top.text, _reported(top.logprob))
        tops.append(by_text)
    return {
        "tokens": [entry.text for entry in entries],
        "token_logprobs": [_reported(entry.logprob) for entry in entries],
        "top_logprobs": tops,
        "text_offset": [entry.offset for entry in entries],
    }


@dataclass(frozen=True, slots=True)
class CallOut:
    """A tool call as a reply shows it."""

    id: str
    name: str
    arguments: str  # a JSON object, as a string

    @classmethod
    def new(cls, name: str, arguments: str) -> CallOut:
        return cls(new_call_id(), name, arguments)

    def as_json(self) -> Json:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def call_opening(index: int, call_id: str, name: str) -> Json:
    """A stream's first delta of a call: its index, id, type and name, no arguments yet."""
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def call_fragment(index: int, fragment: str) -> Json:
    """A later delta of call `index`: more of its arguments' text."""
    return {"index": index, "function": {"arguments": fragment}}


def call_deltas(index: int, call: CallOut, fragment_chars: int = 64) -> list[Json]:
    """A whole call as stream deltas: the opening, then its arguments in fragments."""
    deltas = [call_opening(index, call.id, call.name)]
    text = call.arguments
    deltas += [
        call_fragment(index, text[at : at + fragment_chars])
        for at in range(0, len(text), fragment_chars)
    ]
    return deltas


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def spec_extension(spec: SpecStats) -> Json | None:
    """`{"spec": {...}}` when anything was drafted (docs/contract.md §9), else None."""
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

    def _logprobs(self, entries: Sequence[LogprobEntry] | None) -> Json | None:
        if entries is None:
            return None
        return chat_logprobs(entries) if self.chat else completion_logprobs(entries)

    def reply(
        self,
        text: str,
        finish: str,
        usage_block: Json,
        spec: SpecStats,
        logprobs: Sequence[LogprobEntry] | None = None,
        tool_calls: Sequence[CallOut] = (),
    ) -> Json:
        """A whole, non-streamed reply; `logprobs` is None when the request did not ask.
        With tool calls, `content` is the text around them (null when there is none)."""
        if self.chat:
            message: Json = {"role": "assistant", "content": text}
            if tool_calls:
                message["content"] = text or None
                message["tool_calls"] = [call.as_json() for call in tool_calls]
            choice: Json = {
                "index": 0,
                "message": message,
                "logprobs": self._logprobs(logprobs),
                "finish_reason": finish,
            }
            body = self._head("chat.completion")
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": self._logprobs(logprobs),
                "finish_reason": finish,
            }
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
        logprobs: Sequence[LogprobEntry] | None = None,
        tool_calls: Sequence[Json] = (),
    ) -> Json:
        """One stream chunk: text (None on the closing chunk), tool-call deltas (chat), and
        what it is asked to carry."""
        lp = self._logprobs(logprobs)
        if self.chat:
            delta: Json = {}
            if with_role:
                delta["role"] = "assistant"
            if text is not None or (with_role and not tool_calls):
                delta["content"] = text or ""
            if tool_calls:
                delta["tool_calls"] = list(tool_calls)
            choice: Json = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
            body = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
            body = self._head("text_completion")
        body["choices"] = [choice]
        if usage_block is not None:
            body["usage"] = usage_block
        extension = spec_extension(spec) if spec is not None else None
        if extension is not None:
            body["superfluid"] = extension
        return body

    def usage_chunk(self, usage_block: Json, spec: SpecStats | None = None) -> Json:
        """`stream_options.include_usage`'s last chunk: usage and no choices, and the spec
        extension too, since it belongs on a stream's final chunk (docs/contract.md §9)."""
        body = self._head("chat.completion.chunk" if self.chat else "text_completion")
        body["choices"] = []
        body["usage"] = usage_block
        extension = spec_extension(spec) if spec is not None else None
        if extension is not None:
            body["superfluid"] = extension
        return body
