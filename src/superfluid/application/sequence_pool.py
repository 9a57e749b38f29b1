"""Sequences for lanes, and prefix reuse: a finished lane's KV kept for the next prompt.

A finished lane's sequence is parked with the tokens its KV holds instead of freed. A new lane
takes the parked sequence sharing the longest prefix with its prompt when that prefix is worth
it (`worth_reusing`), cuts it back to that prefix and prefills only the rest. Otherwise it takes
an id beside the ids other lanes hold, freeing a parked sequence there (else the least recently
parked) when no id is free, so that llama.cpp runs the lanes' steps in one pass. Reuse is exact
only where a token's KV does not depend on how it was computed (alone, in a verify step or in a
prefill chunk), so the runtime says whether it may (`Capabilities.reuse_refusal`). Multi-turn
chat is the case it serves: each prompt is the last prompt, its reply and a new line
(docs/adr/0009-prefix-reuse.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from superfluid.application.ports import Runtime

#: The shortest shared prefix for which a new lane takes a parked sequence.
MIN_REUSED_TOKENS = 16
#: Below `LONG_SHARED_PREFIX` tokens a parked sequence is taken only for at least this share of
#: the prompt: a conversation's next turn shares most of its prompt, a chat template's opening
#: lines only a few percent.
MIN_REUSED_SHARE = 0.25
#: A shared prefix this long (a long system prompt) is taken whatever the prompt's length: its
#: prefill outweighs where the lane lands (ADR 0009).
LONG_SHARED_PREFIX = 256


def worth_reusing(shared: int, prompt_length: int) -> bool:
    """Whether a parked sequence sharing `shared` tokens with a prompt should take it.

    Taking a parked sequence for a template's few shared tokens is not free: lanes land on
    whichever sequence ids were parked, and on llama.cpp a step over non-consecutive ids whose
    lanes feed unequal widths runs in several passes (adapters/llamacpp/runtime.py; ADR 0009
    has the measurements)."""
    if shared >= LONG_SHARED_PREFIX:
        return True
    return shared >= MIN_REUSED_TOKENS and shared >= MIN_REUSED_SHARE * prompt_length


def start_of_longest_run(ids: set[int]) -> int | None:
    """The first id of the longest run of consecutive ids (the lowest such run on a tie)."""
    best, best_length = None, 0
    for first in sorted(ids):
        if first - 1 in ids:
            continue  # inside a run that starts lower
        length = 1
        while first + length in ids:
            length += 1
        if length > best_length:
            best, best_length = first, length
    return best


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
        self._lent: set[int] = set()  # the sequences lanes hold now

    def acquire(self, prompt: list[int]) -> tuple[int, int]:
        """A sequence for a new lane, and how many of its prompt tokens the KV already holds."""
        seq, shared = self._acquire(prompt)
        self._lent.add(seq)
        return seq, shared

    def _acquire(self, prompt: list[int]) -> tuple[int, int]:
        if self._parked:
            # At least the prompt's last token is fed again: its logits row starts the reply.
            best = max(self._parked, key=lambda p: (common_prefix(p.tokens, prompt), p.parked_at))
            shared = min(common_prefix(best.tokens, prompt), len(prompt) - 1)
            # Every prompt shares its first tokens with every other: a short match is worth
            # neither a parked sequence that a later turn of its own conversation may want nor
            # the lanes' packing. Without a free sequence, a parked one goes: the one beside
            # the lanes' block, else the least recently parked (`_evict_for_a_lane`).
            if worth_reusing(shared, len(prompt)):
                self._parked.remove(best)
                try:
                    self._runtime.cut(best.seq, shared)
                except Exception:  # a sequence that will not cut is not reused
                    self._runtime.free_sequence(best.seq)
                else:
                    return best.seq, shared
        if not self._free_ids():
            return self._runtime.new_sequence(self._evict_for_a_lane()), 0
        return self._runtime.new_sequence(self._free_id_for_a_lane()), 0

    # Which id a new lane takes. llama.cpp runs a step's lanes in one pass only over consecutive
    # sequence ids (adapters/llamacpp/runtime.py); a gap costs throwaway rows or another pass
    # on every step of the lanes' lives, so a new lane takes an id beside the lanes' block
    # (ADR 0009).

    def _neighbours(self) -> list[int]:
        """The ids just above and below the block lanes hold now (none when no lane holds one)."""
        if not self._lent:
            return []
        low, high = min(self._lent), max(self._lent)
        return [seq for seq in (high + 1, low - 1) if 0 <= seq < self._capacity]

    def _free_ids(self) -> set[int]:
        parked = {p.seq for p in self._parked}
        return {s for s in range(self._capacity) if s not in self._lent and s not in parked}

    def _free_id_for_a_lane(self) -> int | None:
        """A free id next to the lanes' block; for the first lane, the start of the longest run
        of free ids, so that the lanes admitted with it can follow; else the runtime's choice."""
        free = self._free_ids()
        neighbours = self._neighbours()
        if neighbours:
            return next((seq for seq in neighbours if seq in free), None)
        return start_of_longest_run(free)

    def _evict_for_a_lane(self) -> int | None:
        """No id is free: free the parked sequence next to the lanes' block, else the least
        recently parked, and name its id for the new lane."""
        if not self._parked:
            return None  # lanes hold every sequence: the runtime says so
        neighbours = self._neighbours()
        beside = [p for p in self._parked if p.seq in neighbours]
        if beside:
            chosen = min(beside, key=lambda p: neighbours.index(p.seq))
            self._parked.remove(chosen)
            self._runtime.free_sequence(chosen.seq)
            return chosen.seq
        return self._free_least_recent(1)[0]

    def release(self, seq: int, kv_tokens: list[int] | None, *, now: int) -> None:
        """A lane is done with `seq`: park it with the tokens its KV holds, or, given None (a
        failed lane, whose KV may be in any state) or without reuse, free it."""
        self._lent.discard(seq)
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

    def _free_least_recent(self, count: int) -> list[int]:
        """Free the `count` least recently parked sequences; their ids."""
        self._parked.sort(key=lambda p: p.parked_at)
        freed = [parked.seq for parked in self._parked[:count]]
        for seq in freed:
            self._runtime.free_sequence(seq)
        del self._parked[:count]
        return freed
