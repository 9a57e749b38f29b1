"""Sequences for lanes, and prefix reuse: a finished lane's KV kept for the next prompt.

A finished lane's sequence is parked with the tokens its KV holds instead of freed. A new lane
takes the parked sequence sharing the longest prefix with its prompt, cuts it back to that
prefix and prefills only the rest; parked sequences are freed least recently used first when a
lane needs one. It is exact only where a token's KV does not depend on how it was computed
(alone, in a verify step or in a prefill chunk), so the runtime says whether it may
(`Capabilities.reuse_refusal`). Multi-turn chat is the case it serves: each prompt is the last
prompt, its reply and a new line (docs/adr/0009-prefix-reuse.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from superfluid.application.ports import Runtime

#: The shortest shared prefix for which a new lane takes a parked sequence over a free one.
MIN_REUSED_TOKENS = 16


@dataclass(eq=False, slots=True)
class _Parked:
    seq: int
    tokens: list[int]
    parked_at: int  # when it was parked (the caller's clock): least recent goes first


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class SequencePool:
    """The runtime's sequences as lanes see them: taken, parked for reuse, or freed."""

    def __init__(self, runtime: Runtime, *, reuse: bool) -> None:
        caps = runtime.capabilities
        self._runtime = runtime
        self._capacity = caps.max_sequences
        self.reuses = reuse and caps.truncate_partial and caps.reuse_refusal is None
        self._parked: list[_Parked] = []

    def acquire(self, prompt: list[int], *, in_use: int) -> tuple[int, int]:
        """A sequence for a new lane, and how many of its prompt tokens the KV already holds.
        `in_use` is how many sequences lanes hold now."""
        if self._parked:
            # At least the prompt's last token is fed again: its logits row starts the reply.
            best = max(self._parked, key=lambda p: (common_prefix(p.tokens, prompt), p.parked_at))
            shared = min(common_prefix(best.tokens, prompt), len(prompt) - 1)
            free = self._capacity - in_use - len(self._parked)
            # Every prompt shares its first token or so with every other: a short match is not
            # worth losing a parked sequence that a later turn of its own conversation may want.
            if shared >= MIN_REUSED_TOKENS or (shared > 0 and free <= 0):
                self._parked.remove(best)
                try:
                    self._runtime.cut(best.seq, shared)
                except Exception:  # a sequence that will not cut is not reused
                    self._runtime.free_sequence(best.seq)
                else:
                    return best.seq, shared
            if free <= 0:
                self._free_least_recent(1)
        return self._runtime.new_sequence(), 0

    def release(self, seq: int, kv_tokens: list[int] | None, *, now: int) -> None:
        """A lane is done with `seq`: park it with the tokens its KV holds, or, given None (a
        failed lane, whose KV may be in any state) or without reuse, free it."""
        if self.reuses and kv_tokens:
            self._parked.append(_Parked(seq, kv_tokens, now))
        else:
            self._runtime.free_sequence(seq)

    def release_parked(self) -> None:
        """Free every parked sequence."""
        self._free_least_recent(len(self._parked))

    def parked(self) -> dict[int, list[int]]:
        """Each parked sequence and the tokens its KV holds."""
        return {p.seq: list(p.tokens) for p in self._parked}

    def _free_least_recent(self, count: int) -> None:
        self._parked.sort(key=lambda p: p.parked_at)
        for parked in self._parked[:count]:
            self._runtime.free_sequence(parked.seq)
        del self._parked[:count]
