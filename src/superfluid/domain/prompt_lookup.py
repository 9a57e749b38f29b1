"""Prompt-lookup drafting (docs/contract.md §4): draft what followed the tail the last time.

For n = 3, then 2: when the history (prompt + committed output) is longer than n, find the most
recent earlier start i with `history[i:i+n] == history[-n:]`; the draft is
`history[i+n : i+n+k]`, cut at the end of the history. The first non-empty draft wins.

`draft_from_history` states the rule directly and is the reference. `PromptLookupIndex` gives
the same answers in O(k) per round: drafting runs every round on histories of thousands of
tokens, so rescanning the history would cost more than the rows it saves. The index only ever
grows, because a lane's history holds committed tokens only (rejected drafts never enter it).

What is drafted is fixed by the contract; how much of it is worth verifying is not. The *match
length* says how sure a draft is: how many tokens before the draft's source equal the tail (at
least the n of the n-gram that matched, at most `MATCH_LENGTH_LIMIT`). A reply that has copied
twenty tokens of its context in a row is likely to copy on; one whose last two tokens happen to
occur earlier is not. The gates learn acceptance per match-length class (ADR 0013).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from superfluid.domain.gates.depth import MATCH_CLASSES
from superfluid.domain.strategies import Strategy

NGRAM_SIZES = (3, 2)

#: How far back a match is measured: past this a draft is as sure as it gets.
MATCH_LENGTH_LIMIT = 32


def draft_from_history(history: Sequence[int], k: int) -> list[int]:
    """The reference rule, by a backwards scan."""
    if k <= 0:
        return []
    source = _source_by_scan(history)
    return [] if source is None else list(history[source : source + k])


def match_length_from_history(history: Sequence[int], limit: int = MATCH_LENGTH_LIMIT) -> int:
    """The reference match length: 0 when nothing is drafted, else how many tokens up to and
    including the matched n-gram equal the tail (by a backwards scan, capped at `limit`)."""
    source = _source_by_scan(history)
    return 0 if source is None else _extend_back(history, source, len(history), limit)


def _source_by_scan(history: Sequence[int]) -> int | None:
    """Where the draft starts: just after the most recent earlier occurrence of the tail's last
    3, else 2, tokens (always inside the history, so the draft is never empty)."""
    length = len(history)
    for n in NGRAM_SIZES:
        if length <= n:
            continue
        tail = list(history[length - n :])
        for i in range(length - n - 1, -1, -1):
            if list(history[i : i + n]) == tail:
                return i + n
    return None


def _extend_back(history: Sequence[int], source_end: int, length: int, limit: int) -> int:
    """How many tokens before `source_end` equal those before `length` (the tail), up to limit."""
    matched = 0
    while (
        matched < limit
        and matched < source_end
        and history[source_end - 1 - matched] == history[length - 1 - matched]
    ):
        matched += 1
    return matched


class PromptLookupIndex:
    """Incremental n-gram index over one lane's committed history.

    For each n it maps an n-gram to the latest start i that already has a following token
    (i + n < len(history)). The tail's own occurrence never has one, so a lookup of the tail
    finds exactly the most recent *earlier* occurrence.
    """

    __slots__ = ("_history", "_latest")

    def __init__(self, history: Iterable[int] = ()) -> None:
        self._history: list[int] = []
        self._latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in NGRAM_SIZES}
        self.extend(history)

    def __len__(self) -> int:
        return len(self._history)

    def extend(self, tokens: Iterable[int]) -> None:
        history = self._history
        for token in tokens:
            history.append(int(token))
            length = len(history)
            # The n-gram that ends just before the new token now has a follower.
            for n, latest in self._latest.items():
                start = length - 1 - n
                if start >= 0:
                    latest[tuple(history[start : start + n])] = start

    def draft(self, k: int) -> list[int]:
        if k <= 0:
            return []
        source = self._source()
        # Non-empty: the source is inside the history.
        return [] if source is None else self._history[source : source + k]

    def match_length(self, limit: int = MATCH_LENGTH_LIMIT) -> int:
        """The match length behind the draft `draft` would return (0: nothing to draft)."""
        source = self._source()
        history = self._history
        return 0 if source is None else _extend_back(history, source, len(history), limit)

    def _source(self) -> int | None:
        """Where the draft starts: after the latest earlier occurrence of the last 3, else 2."""
        history = self._history
        length = len(history)
        for n, latest in self._latest.items():
            if length <= n:
                continue
            start = latest.get(tuple(history[length - n :]))
            if start is not None:
                return start + n
        return None


# -- the drafter --------------------------------------------------------------------------------
# It meets the application's Drafter port structurally (open → a state with propose, commit and
# match_length); it lives here because it is pure, so every runtime can use it.


class PromptLookupDrafter:
    """n-gram drafting from the lane's own context (docs/contract.md §4)."""

    strategy = Strategy.PROMPT_LOOKUP
    #: Its drafts carry a match length, so the gates size them per match class.
    match_classes = MATCH_CLASSES

    def open(self, prompt: Sequence[int], *, seq: int) -> _PromptLookupState:
        del seq  # the lane's own history is all prompt-lookup needs
        return _PromptLookupState(prompt)


class _PromptLookupState:
    __slots__ = ("_index",)

    def __init__(self, prompt: Sequence[int]) -> None:
        self._index = PromptLookupIndex(prompt)

    def propose(self, k: int) -> list[int]:
        return self._index.draft(k)

    def match_length(self) -> int:
        return self._index.match_length()

    def commit(self, tokens: Sequence[int]) -> None:
        self._index.extend(tokens)
