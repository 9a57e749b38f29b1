"""The drafter port and the prompt-lookup drafter.

A drafter opens a per-lane state from the prompt, proposes up to k tokens each round, and is
told which tokens were committed. Deterministic drafters (prompt-lookup) are verified by
sample-and-match, so a speculating lane emits exactly what a plain lane would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from superfluid.domain.prompt_lookup import PromptLookupIndex


class DraftState(Protocol):
    def propose(self, k: int) -> list[int]: ...

    def commit(self, tokens: Sequence[int]) -> None: ...


class Drafter(Protocol):
    @property
    def strategy(self) -> str: ...

    def open(self, prompt: Sequence[int]) -> DraftState: ...


class PromptLookupDrafter:
    """n-gram drafting from the lane's own context (SPECULATION.md §4)."""

    strategy = "prompt-lookup"

    def open(self, prompt: Sequence[int]) -> DraftState:
        return _PromptLookupState(prompt)


class _PromptLookupState:
    __slots__ = ("_index",)

    def __init__(self, prompt: Sequence[int]) -> None:
        self._index = PromptLookupIndex(prompt)

    def propose(self, k: int) -> list[int]:
        return self._index.draft(k)

    def commit(self, tokens: Sequence[int]) -> None:
        self._index.extend(tokens)
