"""Per-lane draft ramp: draft deep only while the drafter has just been right.

Prompt-lookup's drafts come in runs: while a reply copies its context, a draft continues the
copy and is accepted whole; after a miss the next draft follows a fresh n-gram match, which is
right far less often. Verify rows are not free, so a deep draft after a miss mostly buys
rejected rows.

The ramp caps a lane's next draft: after a round whose draft was rejected it drops to
`PROBE_DEPTH`; after a round accepted whole it grows `GROWTH`-fold, up to the policy's depth. The
cap only ever shortens a draft, so it cannot change what a lane commits.

Growth is fourfold (2, 8, then the policy's depth), not twofold: once a 2-token probe is accepted
whole the copy has usually resumed, and the 4- and 8-token rounds of a doubling ramp commit
fewer tokens per second than one deep round. ADR 0004 has the measurements.
"""

from __future__ import annotations

from superfluid.domain.spec_settings import MAX_DRAFT_TOKENS

#: The cap after a miss: a short draft that is cheap to verify and re-establishes a run.
PROBE_DEPTH = 2

#: How much the cap grows after a round accepted whole.
GROWTH = 4


class DraftRamp:
    __slots__ = ("_cap",)

    def __init__(self) -> None:
        self._cap: int | None = None  # None: no evidence yet, the policy's depth applies

    def cap(self, depth: int) -> int:
        """The depth to draft at when the policy says `depth`."""
        return depth if self._cap is None else max(1, min(depth, self._cap))

    def record(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        if accepted < drafted:
            self._cap = PROBE_DEPTH
        elif self._cap is not None:
            self._cap = min(self._cap * GROWTH, MAX_DRAFT_TOKENS)  # no depth is deeper
