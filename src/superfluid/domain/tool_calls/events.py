"""What a streaming tool-call reader says each piece of a reply settles."""

from __future__ import annotations

from dataclasses import dataclass


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
