"""Tool calls read out of a reply while it streams (`stream` says how)."""

from __future__ import annotations

from superfluid.domain.tool_calls.events import CallClosed, ToolCallEvent
from superfluid.domain.tool_calls.families import ToolFamily, family_record
from superfluid.domain.tool_calls.stream import Stream


class ToolCallReader:
    """Reads one family's tool calls out of a reply as it is generated.

    `push` takes the next piece of the reply and returns the events it settles, in order:
    `Content`, `CallOpened`, `ArgumentsFragment`, `CallClosed`, `CallProblem`. `finish`, once
    the reply has ended, settles the rest. However the reply is cut into pieces, the events
    say the same (joined, adjacent content and fragments are one).
    """

    def __init__(self, family: ToolFamily) -> None:
        self._stream = Stream(family.value, family_record(family).read)

    @property
    def ended_inside_call(self) -> bool:
        """Whether the reply ended inside a call: one it had begun (its name sent or not)."""
        return self._stream.ended_inside_call

    def push(self, text: str) -> list[ToolCallEvent]:
        """The events `text`, the reply's next piece, settles."""
        return self._stream.push(text)

    def finish(self) -> list[ToolCallEvent]:
        """The events the end of the reply settles: held text, a call the reply ended inside."""
        return self._stream.finish()


class FirstCallEnd:
    """Where a reply that may make one call ends: right after its first call closes."""

    def __init__(self, family: ToolFamily) -> None:
        self._reader = ToolCallReader(family)
        self._read = 0

    def push(self, text: str) -> int | None:
        """How much of `text`, the reply's next piece, the reply keeps when its first call
        closes in it; None while no call has closed."""
        for event in self._reader.push(text):
            if isinstance(event, CallClosed):
                return event.end - self._read
        self._read += len(text)
        return None
