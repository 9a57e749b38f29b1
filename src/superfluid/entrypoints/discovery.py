"""Drafter discovery wired to real files: the one path `drafters` and `serve` both take.

Both commands build a `Discovery` and ask it the same questions, so `superfluid drafters`
explains exactly what `superfluid serve` will register.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.catalog_check import check_against_catalog
from superfluid.adapters.digests import DigestCache, tty_progress
from superfluid.adapters.drafter_search import find_bundles, search_locations
from superfluid.adapters.hub_catalog import HubCatalog
from superfluid.adapters.model_files import runtime_for
from superfluid.application.drafter_resolution import AutoResolution, check_explicit, rank_auto
from superfluid.domain import announcements as say
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.catalog import CatalogRow
from superfluid.domain.directive import Directive, Mode, check_mtp_head, parse_directive
from superfluid.domain.errors import DirectiveError
from superfluid.entrypoints.drafters_report import Report


@dataclass
class Discovery:
    """What a `.base` target's directive resolves to; reads headers, never weights."""

    target: Path
    home: Path
    env: Mapping[str, str]
    offline: bool

    @cached_property
    def target_header(self) -> BundleHeader:
        return read_header(self.target)

    @cached_property
    def rows(self) -> tuple[CatalogRow, ...]:
        return HubCatalog(self.home, self.env, offline=self.offline).load()

    @cached_property
    def digests(self) -> DigestCache:
        return DigestCache(self.home)

    def check_catalog(self, path: Path) -> str | None:
        return check_against_catalog(
            path, self.rows, self.digests, progress=tty_progress(sys.stderr)
        )

    def auto(self) -> AutoResolution:
        roots = search_locations(self.target, self.env)
        return rank_auto(
            self.target,
            self.target_header,
            find_bundles(self.target, roots),
            read_header=read_header,
            check_catalog=self.check_catalog,
            rows=self.rows,
            searched=[str(root.path) for root in roots],
        )

    def explicit(self, directive: Directive) -> Directive:
        """Check a named strategy; raises DirectiveError with the contract's message."""
        if directive.mode is Mode.MTP_HEAD:
            check_mtp_head(str(self.target), self.target_header)
            return directive
        return check_explicit(
            directive, self.target_header, read_header=read_header, check_catalog=self.check_catalog
        )


def explain(
    model: Path, speculate: str | None, *, home: Path, env: Mapping[str, str], offline: bool
) -> Report:
    """What `serve` would register for `model` with `--speculate speculate` (no weights read)."""
    directive = parse_directive(speculate, home=env.get("HOME"), is_file=os.path.isfile)
    runtime = runtime_for(model)
    report = Report(str(model), runtime, directive.raw, None)
    if directive.mode is Mode.OFF:
        return report
    if runtime != "basert":
        if directive.mode not in (Mode.AUTO, Mode.PROMPT_LOOKUP):
            raise DirectiveError(say.strategy_not_on_runtime(directive.raw, runtime))
        report.resolved = "prompt-lookup"
        report.note = "if the model can cut its KV back; serve checks that when it loads the model"
        return report
    discovery = Discovery(model, home, env, offline)
    if directive.mode is Mode.PROMPT_LOOKUP:
        report.resolved = "prompt-lookup"
    elif directive.mode is Mode.AUTO:
        report.auto = discovery.auto()
        picks = report.auto.picks()
        report.resolved = str(picks[0]) if picks else None
        if len(picks) > 1:
            report.note = "if the engine refuses the first pick, serve tries the next in order"
    else:
        report.resolved = discovery.explicit(directive).describe()
    return report
