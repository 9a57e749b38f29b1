"""The drafter port and the prompt-lookup drafter.

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
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from superfluid.domain.prompt_lookup import PromptLookupIndex
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
    """n-gram drafting from the lane's own context (docs/contract.md §4)."""

    strategy = "prompt-lookup"

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        del seq  # the lane's own history is all prompt-lookup needs
        return _PromptLookupState(prompt)


class _PromptLookupState:
    __slots__ = ("_index",)

    def __init__(self, prompt: Sequence[int]) -> None:
        self._index = PromptLookupIndex(prompt)

    def propose(self, k: int) -> list[int]:
        return self._index.draft(k)

    def commit(self, tokens: Sequence[int]) -> None:
        self._index.extend(tokens)
