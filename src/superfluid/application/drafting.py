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
from superfluid.application.ports import SampledDraftState as SampledDraftState
from superfluid.domain.prompt_lookup import MatchHistory, PromptLookupIndex


class PromptLookupDrafter:
    """n-gram drafting from the lane's own context (docs/contract.md §4).

    With `sized_by_match`, a draft's length follows what the last draft from the same n-gram
    earned (`MatchHistory`) instead of the per-lane ramp, within the gates' depth.
    """

    strategy = "prompt-lookup"

    def __init__(self, *, sized_by_match: bool = False) -> None:
        self._sized_by_match = sized_by_match

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        del seq  # the lane's own history is all prompt-lookup needs
        return _PromptLookupState(prompt, MatchHistory() if self._sized_by_match else None)


class _PromptLookupState:
    __slots__ = ("_draft", "_history", "_index", "_key")

    def __init__(self, prompt: Sequence[int], history: MatchHistory | None) -> None:
        self._index = PromptLookupIndex(prompt)
        self._history = history
        self._draft: list[int] = []
        self._key: tuple[int, ...] | None = None

    def draft_size(self, depth: int) -> int | None:
        """The draft length the match's own history asks for; None: the caller decides."""
        if self._history is None:
            return None
        return self._history.size(self._index.key(), depth)

    def propose(self, k: int) -> list[int]:
        self._draft, self._key = self._index.draft_keyed(k) if k > 0 else ([], None)
        return list(self._draft)

    def commit(self, tokens: Sequence[int]) -> None:
        if self._history is not None and self._key is not None and self._draft:
            accepted = 0
            for drafted, committed in zip(self._draft, tokens, strict=False):
                if drafted != committed:
                    break
                accepted += 1
            self._history.record(self._key, len(self._draft), min(accepted, len(tokens) - 1))
        self._draft, self._key = [], None
        self._index.extend(tokens)
