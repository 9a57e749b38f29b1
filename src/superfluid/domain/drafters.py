"""Which installed drafters fit a target, and in which order `auto` tries them.

Fit (docs/contract.md §3 item 3): same hidden size and vocabulary; a drafter that names how many
target layers it was trained against names the target's layer count; every target/aux layer id
it taps exists in the target; same backend class.

Order (§3 item 4), key by key: paired with this target by the hub catalog, lower
`speculator_rank` (none after any number), named for the target, DSpark < DFlash < EAGLE-3, same
storage quantisation, newest `created`, then path. The path makes the order total, so the pick
never depends on the order a directory listing happened to return.

A plain draft model is never an `auto` candidate: it may share a tokenizer and nothing else, and
only the user can say it does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.naming import normalise_name
from superfluid.domain.strategies import Pick, Strategy, strategy_by_arch


def kind_of(header: BundleHeader) -> Strategy:
    """The drafter kind a header's `arch` declares; any other arch is a plain draft model."""
    return strategy_by_arch(header.arch)


def auto_eligible(header: BundleHeader) -> bool:
    """Whether `auto` may pick this bundle at all (DSpark, DFlash and EAGLE-3 only)."""
    return kind_of(header).by_auto


def fit_problem(target: BundleHeader, drafter: BundleHeader) -> str | None:
    """None when the drafter can run against the target, else one line naming the mismatch."""
    for what, drafter_value, target_value in (
        ("hidden size", drafter.hidden_size, target.hidden_size),
        ("vocab size", drafter.vocab_size, target.vocab_size),
    ):
        problem = _differs(what, drafter_value, target_value)
        if problem is not None:
            return problem
    layers = target.num_hidden_layers
    if drafter.num_target_layers is not None and drafter.num_target_layers != layers:
        if layers is None:
            return (
                f"num_target_layers {drafter.num_target_layers}, "
                "but the target's header gives no layer count"
            )
        return f"num_target_layers {drafter.num_target_layers}, not the target's {layers} layers"
    # An unknown layer count cannot be checked against; the engine's own load check is the
    # backstop for that case, as in the reference implementation.
    if layers is not None:
        for key, ids in (
            ("target_layer_ids", drafter.target_layer_ids),
            ("aux_layer_ids", drafter.aux_layer_ids),
        ):
            outside = [i for i in ids if i >= layers]
            if outside:
                return f"{key} entry {outside[0]} is not below the target's {layers} layers"
    if drafter.backend_class != target.backend_class:
        return (
            f"backend {drafter.target_backend}, not the target's {target.target_backend} "
            f"(a different backend class)"
        )
    return None


def fits(target: BundleHeader, drafter: BundleHeader) -> bool:
    return fit_problem(target, drafter) is None


def _differs(what: str, drafter_value: int | None, target_value: int | None) -> str | None:
    """A shape the drafter must share; unknown on either side cannot be shown to match."""
    if target_value is None:
        return f"the target's header gives no {what}"
    if drafter_value is None:
        return f"the drafter's header gives no {what} (the target's is {target_value})"
    if drafter_value != target_value:
        return f"{what} {drafter_value}, not the target's {target_value}"
    return None


def same_quantisation(target: BundleHeader, drafter: BundleHeader) -> bool:
    """Both store their layers the same way; an unknown quantisation matches nothing."""
    return target.quantisation is not None and drafter.quantisation == target.quantisation


def is_named_for(drafter_name: str, target_name: str) -> bool:
    """The drafter's normalised name contains the target's (`qwen3-4b-dflash` ⊇ `qwen3-4b`)."""
    drafter = normalise_name(drafter_name)
    target = normalise_name(target_name)
    return drafter is not None and target is not None and target in drafter


def is_named_for_any(drafter_names: Iterable[str], target_names: Sequence[str]) -> bool:
    """Any of a drafter's names (path, header source) is named for any of the target's."""
    return any(is_named_for(d, t) for d in drafter_names for t in target_names)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A fitting drafter with the facts its rank depends on (gathered by the caller)."""

    path: str
    header: BundleHeader
    kind: Strategy
    catalog_paired: bool
    speculator_rank: int | None
    named_for_target: bool
    same_quantisation: bool
    created: float

    @property
    def pick(self) -> Pick:
        return Pick(self.kind, self.path)


def rank_key(candidate: Candidate) -> tuple[bool, bool, int, bool, int, bool, float, str]:
    """Sort key: smaller sorts first, so every preference is encoded as 'False is better'."""
    rank = candidate.speculator_rank
    return (
        not candidate.catalog_paired,
        rank is None,
        rank if rank is not None else 0,
        not candidate.named_for_target,
        _preference(candidate.kind),
        not candidate.same_quantisation,
        -candidate.created,
        candidate.path,
    )


def _preference(kind: Strategy) -> int:
    """DSpark < DFlash < EAGLE-3 (the table's `auto_rank`); kinds auto never picks sort last."""
    return kind.auto_rank if kind.auto_rank is not None else len(Strategy)


def rank_candidates(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Candidates best first."""
    return sorted(candidates, key=rank_key)
