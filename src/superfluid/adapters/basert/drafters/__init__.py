"""The reference backend's drafters, by strategy: the registry the basert runtime asks.

A head drafter lives inside the target bundle (`mtp-head`); a file drafter is named by its
bundle (`<strategy>:<path>`). Each drafter sees its target only through `DraftTarget`
(`target.py`), so nothing here imports the runtime. Tensor names and header fields:
docs/adr/0005-basert-drafter-format.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from superfluid.adapters.basert.drafters.block import load_block_drafter
from superfluid.adapters.basert.drafters.draft_model import DraftModelDrafter
from superfluid.adapters.basert.drafters.heads import load_eagle3, load_mtp_head
from superfluid.adapters.basert.target import DraftTarget
from superfluid.application.ports import Drafter, EngineRefusal
from superfluid.domain.strategies import Strategy

#: Drafters inside the target bundle, by strategy.
HEAD_DRAFTERS: Mapping[Strategy, Callable[[DraftTarget], Drafter]] = {
    Strategy.MTP_HEAD: load_mtp_head
}

#: Drafters named by their own bundle, by strategy, in the order the runtime lists them.
FILE_DRAFTERS: Mapping[Strategy, Callable[[Path, DraftTarget], Drafter]] = {
    Strategy.DRAFT_MODEL: lambda path, target: DraftModelDrafter.load(path, target=target),
    Strategy.EAGLE3: lambda path, target: load_eagle3(path, target=target),
    Strategy.DFLASH: lambda path, target: load_block_drafter(Strategy.DFLASH, path, target=target),
    Strategy.DSPARK: lambda path, target: load_block_drafter(Strategy.DSPARK, path, target=target),
}


def load_drafter(strategy: Strategy, path: Path | None, target: DraftTarget) -> Drafter:
    """The drafter for `strategy` (and its bundle) on `target`; EngineRefusal says why not."""
    head = HEAD_DRAFTERS.get(strategy)
    if head is not None:
        return head(target)
    if path is None:
        raise EngineRefusal(f"a {strategy} drafter is named by its bundle: {strategy}:<path>")
    load = FILE_DRAFTERS.get(strategy)
    if load is None:
        raise EngineRefusal(f"the basert reference backend runs no {strategy} drafters")
    return load(path, target)
