"""Sequence bookkeeping shared by the runtimes: which ids are lent out, and what each holds.

Every runtime hands sequence ids to lanes, tracks how many positions each holds, and refuses a
feed that does not start where its sequence ends, would pass the per-lane context, or feeds one
sequence twice in a step: the executor's promises, checked at the boundary so a bug shows as a
`RuntimeFault` for that step, never as a silently wrong KV.
"""

from __future__ import annotations

from collections.abc import Sequence

from superfluid.application.ports import Feed, RuntimeFault

#: The length of a sequence whose cut failed: it may only be freed.
BROKEN = -1


def take_free_id(free: list[int], prefer: int | None, capacity: int) -> int:
    """Take an id out of `free` (kept sorted): `prefer` when it is there, else the lowest."""
    if not free:
        raise RuntimeFault(f"all {capacity} sequences of this model are in use")
    return free.pop(free.index(prefer) if prefer in free else 0)


class SequenceTable:
    def __init__(self, capacity: int, context_size: int) -> None:
        self._capacity = capacity
        self._context_size = context_size
        self._free = list(range(capacity))
        self._lengths: dict[int, int] = {}

    def __contains__(self, seq: int) -> bool:
        return seq in self._lengths

    def __len__(self) -> int:
        return len(self._lengths)

    def allocate(self, prefer: int | None = None) -> int:
        """The lowest free id, or `prefer` when it is free."""
        seq = take_free_id(self._free, prefer, self._capacity)
        self._lengths[seq] = 0
        return seq

    def release(self, seq: int) -> None:
        # Freeing twice would wipe a lane that was handed the id in between: refuse instead.
        if self._lengths.pop(seq, None) is None:
            raise RuntimeFault(f"sequence {seq} is not in use")
        self._free.append(seq)
        self._free.sort()

    def held(self, seq: int) -> int:
        held = self._lengths.get(seq)
        if held is None:
            raise RuntimeFault(f"sequence {seq} is not in use")
        return held

    def set(self, seq: int, length: int) -> None:
        self.held(seq)
        self._lengths[seq] = length

    def check_cut(self, seq: int, length: int) -> int:
        """The positions `seq` holds, after checking a cut to `length` is within them."""
        held = self.held(seq)
        if not 0 <= length <= held:
            raise RuntimeFault(f"cannot cut sequence {seq} to {length}: it holds {held} positions")
        return held

    def check_feeds(self, feeds: Sequence[Feed]) -> int:
        """Refuse a step that breaks a promise; returns the tokens it feeds in all."""
        seen: set[int] = set()
        total = 0
        for feed in feeds:
            held = self.held(feed.seq)
            if feed.seq in seen:
                raise RuntimeFault(f"sequence {feed.seq} is fed twice in one step")
            seen.add(feed.seq)
            if not feed.tokens:
                raise RuntimeFault(f"an empty feed for sequence {feed.seq}")
            if held == BROKEN:
                raise RuntimeFault(f"sequence {feed.seq} failed a cut; free it and start again")
            if feed.start != held:
                raise RuntimeFault(
                    f"a feed for sequence {feed.seq} starts at {feed.start}, but it holds {held} positions"
                )
            if held + len(feed.tokens) > self._context_size:
                raise RuntimeFault(
                    f"sequence {feed.seq} would pass the context size"
                    f" ({held} + {len(feed.tokens)} > {self._context_size})"
                )
            total += len(feed.tokens)
        return total

    def advance(self, feeds: Sequence[Feed]) -> None:
        """Record that every feed of a step now sits in its sequence."""
        for feed in feeds:
            self._lengths[feed.seq] = feed.start + len(feed.tokens)

    def clear(self) -> None:
        """Forget every sequence (the model is unloaded): any later call fails as not in use."""
        self._lengths.clear()
