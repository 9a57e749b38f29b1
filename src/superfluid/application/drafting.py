"""The prompt-lookup drafter (the drafter ports are in `ports.py`).

A drafter opens a per-lane state from the prompt (and the lane's sequence id, for drafters that
read the target's hidden states for that sequence), proposes up to k tokens each round, and is
told which tokens were committed. Deterministic drafts (prompt-lookup, greedy model drafts) are
verified by sample-and-match, so a speculating lane emits exactly what a plain lane would.

A draft state that can also *sample* its proposal (`SampledDraftState`) returns the
distributions q it drew from; on a sampling lane the executor then verifies by rejection
sampling, which keeps acceptance high at temperature > 0 (docs/contract.md §6).
"""

from __future__ import annotations

from collections.abc import Sequence

# The drafter ports, re-exported for modules that still import them from here.
from superfluid.application.ports import Drafter as Drafter
from superfluid.application.ports import DraftState as DraftState
from superfluid.application.ports import MatchedDraftState as MatchedDraftState
from superfluid.application.ports import SampledDraftState as SampledDraftState
from superfluid.domain.gates.depth import MATCH_CLASSES
from superfluid.domain.prompt_lookup import PromptLookupIndex


class PromptLookupDrafter:
    """n-gram drafting from the lane's own context (docs/contract.md §4)."""

    strategy = "prompt-lookup"
    #: Its drafts carry a match length, so the gates size them per match class.
    match_classes = MATCH_CLASSES

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
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
