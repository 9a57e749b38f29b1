"""The drafter port and the prompt-lookup drafter.

A drafter opens a per-lane state from the prompt (and the lane's sequence id, for drafters that
read the target's hidden states for that sequence), proposes up to k tokens each round, and is
told which tokens were committed. Deterministic drafts (prompt-lookup, greedy model drafts) are
verified by sample-and-match, so a speculating lane emits exactly what a plain lane would.

A draft state that can also *sample* its proposal (`SampledDraftState`) returns the
distributions q it drew from; on a sampling lane the executor then verifies by rejection
sampling, which keeps acceptance high at temperature > 0 (SPECULATION.md §6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from superfluid.domain.prompt_lookup import MatchHistory, PromptLookupIndex
from superfluid.domain.sampling import SamplingParams


class DraftState(Protocol):
    def propose(self, k: int) -> list[int]:
        """Up to k tokens to verify (greedy/deterministic)."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """The tokens the round committed (accepted draft tokens and the one after them)."""
        ...


@runtime_checkable
class SampledDraftState(DraftState, Protocol):
    def propose_sampled(
        self, k: int, params: SamplingParams, pos: int
    ) -> tuple[list[int], npt.NDArray[np.float64]]:
        """Up to k tokens drawn from the drafter's own distributions, and those distributions
        (one row per token, over the target's vocabulary). Draw token i with the counter RNG at
        `uniform(params.seed, pos + i, STREAM_DRAFT)` so the draft is independent of the
        verifier's coins."""
        ...


class Drafter(Protocol):
    @property
    def strategy(self) -> str: ...

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState: ...


class PromptLookupDrafter:
    """n-gram drafting from the lane's own context (SPECULATION.md §4).

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
