"""A whole reply's tool calls as a parser returns them, and the checks every family shares."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, compact


@dataclass(frozen=True, slots=True)
class ParsedReply:
    content: str | None  # text outside the calls; None when there is none
    calls: tuple[ParsedCall, ...] = ()
    problem: str | None = None  # why a call-shaped reply (or part of it) was kept as text


class Malformed(ValueError):
    """A call-shaped reply that does not parse; the message says why."""


def arguments_text(value: Any) -> str:
    """A call's arguments as compact JSON text: an object, or a JSON string holding one."""
    if isinstance(value, str):  # some models write the arguments as a JSON string
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise Malformed("a call's arguments are a string that is not JSON") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise Malformed("a call's arguments are not a JSON object")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def joined_content(*parts: str) -> str | None:
    """Text around calls, joined and stripped; None when nothing is left."""
    text = "".join(parts).strip()
    return text or None
