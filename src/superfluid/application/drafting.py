"""Drafters: the ports (in `ports.py`) and prompt-lookup (pure, in `domain/prompt_lookup.py`).

A drafter opens a per-lane state from the prompt (and the lane's sequence id, for drafters that
read the target's hidden states for that sequence), proposes up to k tokens each round, and is
told which tokens were committed. Deterministic drafts (prompt-lookup, greedy model drafts) are
verified by sample-and-match, so a speculating lane emits exactly what a plain lane would.

A draft state that can also *sample* its proposal (`SampledDraftState`) returns the
distributions q it drew from; on a sampling lane the executor then verifies by rejection
sampling, which keeps acceptance high at temperature > 0 (docs/contract.md §6).
"""

from __future__ import annotations

# The drafter ports, re-exported for modules that still import them from here.
from superfluid.application.ports import Drafter as Drafter
from superfluid.application.ports import DraftState as DraftState
from superfluid.application.ports import MatchedDraftState as MatchedDraftState
from superfluid.application.ports import SampledDraftState as SampledDraftState
from superfluid.domain.prompt_lookup import PromptLookupDrafter as PromptLookupDrafter
