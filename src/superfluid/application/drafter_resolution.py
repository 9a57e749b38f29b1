"""What a `--speculate` directive resolves to for a `.base` target (docs/contract.md §2, §3, §5).

`rank_auto` gathers the facts the domain's ranking needs — each found file's header, whether the
catalog vouches for its bytes, pairing, naming, quantisation — and returns the ranked candidates
together with every file it looked at and did not rank, with the reason. `superfluid drafters`
prints exactly this; `serve` registers the first candidate the engine accepts, so the two can
never disagree on the pick.

`check_explicit` applies the same checks to a drafter the user named; there a problem is a
startup error, never a skip.

I/O comes in through callables (read a header, check a file against the catalog), so this use
case is tested with real files and with fakes alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.catalog import CatalogRow, catalog_id_of, is_paired
from superfluid.domain.directive import Directive, Mode, not_a_bundle, resolve_bundle_path
from superfluid.domain.drafters import (
    Candidate,
    auto_eligible,
    fit_problem,
    is_named_for_any,
    kind_of,
    rank_candidates,
    same_quantisation,
)
from superfluid.domain.errors import DirectiveError, HeaderError, NotABundle
from superfluid.domain.naming import bundle_names
from superfluid.domain.strategies import Pick, Strategy

ReadHeader = Callable[[Path], BundleHeader]
CheckCatalog = Callable[[Path], str | None]


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str
    #: Catalog refusals are logged by `serve`; other skips are only shown by `drafters`.
    catalog: bool = False


@dataclass(frozen=True, slots=True)
class AutoResolution:
    target: str
    has_head: bool
    candidates: tuple[Candidate, ...]
    skipped: tuple[Skipped, ...]
    searched: tuple[str, ...] = field(default=())

    def picks(self) -> list[Pick]:
        """What `auto` tries, in order."""
        head = [Pick(Strategy.MTP_HEAD)] if self.has_head else []
        return head + [c.pick for c in self.candidates]


def rank_auto(
    target: Path,
    target_header: BundleHeader,
    bundles: Iterable[Path],
    *,
    read_header: ReadHeader,
    check_catalog: CheckCatalog,
    rows: Sequence[CatalogRow],
    searched: Sequence[str] = (),
) -> AutoResolution:
    target_id = catalog_id_of(target.parts, rows)
    target_names = bundle_names(target.parts, target_header.source_filename)
    candidates: list[Candidate] = []
    skipped: list[Skipped] = []
    for path in bundles:
        shown = str(path)
        try:
            header = read_header(path)
        except HeaderError as error:
            skipped.append(Skipped(shown, f"header unreadable: {error.message}"))
            continue
        if not auto_eligible(header):
            skipped.append(Skipped(shown, "a plain draft model; auto never picks one"))
            continue
        problem = fit_problem(target_header, header)
        if problem is not None:
            skipped.append(Skipped(shown, f"does not fit: {problem}"))
            continue
        # Hash only what fits: the catalog check may read gigabytes.
        refusal = check_catalog(path)
        if refusal is not None:
            skipped.append(Skipped(shown, refusal, catalog=True))
            continue
        paired, rank = is_paired(catalog_id_of(path.parts, rows), target_id, rows)
        candidates.append(
            Candidate(
                path=shown,
                header=header,
                kind=kind_of(header),
                catalog_paired=paired,
                speculator_rank=rank,
                named_for_target=is_named_for_any(
                    bundle_names(path.parts, header.source_filename), target_names
                ),
                same_quantisation=same_quantisation(target_header, header),
                created=header.created,
            )
        )
    return AutoResolution(
        target=str(target),
        has_head=target_header.has_mtp_head,
        candidates=tuple(rank_candidates(candidates)),
        skipped=tuple(skipped),
        searched=tuple(searched),
    )


def check_explicit(
    directive: Directive,
    target_header: BundleHeader,
    *,
    read_header: ReadHeader,
    check_catalog: CheckCatalog,
) -> Directive:
    """Resolve and check a drafter the user named; any problem is a DirectiveError (exit 2)."""
    if directive.mode not in (Mode.DRAFTER, Mode.BUNDLE_PATH) or directive.path is None:
        return directive
    path = Path(directive.path)
    refusal = check_catalog(path)
    if refusal is not None:
        raise DirectiveError(refusal)
    try:
        header = read_header(path)
    except NotABundle:
        # The same line for `dflash:notes.txt` as for a bare `notes.txt` (the contract's words).
        raise DirectiveError(not_a_bundle(directive.raw)) from None
    except HeaderError as error:
        raise DirectiveError(f"--speculate {directive.raw}: {error.message}") from error
    resolved = resolve_bundle_path(directive, header)
    actual = kind_of(header)
    named = resolved.kind or actual
    if named is not actual and not _compatible(named, actual):
        raise DirectiveError(
            f"--speculate {directive.raw}: {path} is {_a(actual)} drafter, not {_a(named)} one"
            f"{' (dspark needs a Markov head)' if named is Strategy.DSPARK else ''}"
        )
    if named is not Strategy.DRAFT_MODEL:
        problem = fit_problem(target_header, header)
        if problem is not None:
            raise DirectiveError(f"--speculate {directive.raw}: {path} does not fit: {problem}")
    return resolved


def _compatible(named: Strategy, actual: Strategy) -> bool:
    # Any bundle may be run as a plain draft model: it only needs the target's tokenizer,
    # which the engine checks when it loads it.
    return named is Strategy.DRAFT_MODEL


def _a(kind: Strategy) -> str:
    article = "an" if kind.value[0] in "ae" else "a"
    return f"{article} {kind.value}"
