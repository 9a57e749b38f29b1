"""From committed tokens to text a client can show: whole UTF-8 characters, stop strings cut.

Tokens arrive in chunks (an accepted draft is one chunk). Their bytes are decoded
incrementally so a character split across tokens is never emitted half-way, and stop strings
are searched across chunk boundaries: text that might be the start of a stop string is held
back until it is known not to be.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence


class TextStream:
    """Turns token chunks into text chunks for one request."""

    def __init__(
        self, detokenize: Callable[[Sequence[int]], bytes], stops: Sequence[str] = ()
    ) -> None:
        self._detokenize = detokenize
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stops if s)
        self._held = ""  # decoded text not yet emitted: it may begin a stop string
        self.stopped = False

    def push(self, tokens: Sequence[int]) -> str:
        """Text that is safe to emit after these tokens ('' if none yet)."""
        if self.stopped or not tokens:
            return ""
        self._held += self._decoder.decode(self._detokenize(tokens))
        return self._release(final=False)

    def finish(self) -> str:
        """Whatever is left once the request has ended."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        text = self._held
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = 0 if final else self._partial_stop_suffix(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _partial_stop_suffix(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest
