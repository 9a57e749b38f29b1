"""Registering a speculation strategy for one loaded model (docs/contract.md §1–§3).

A parsed directive meets the runtime's capability record here. Only `auto` falls back: an
explicit directive that this runtime cannot honour is a startup error (DirectiveError, exit 2),
while `auto` decodes plainly and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from superfluid.application.drafter_resolution import AutoResolution
from superfluid.application.ports import Capabilities, Drafter, DrafterEngine, EngineRefusal
from superfluid.domain import announcements as say
from superfluid.domain.directive import Directive, Mode
from superfluid.domain.errors import DirectiveError
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.strategies import Pick, Strategy

PROMPT_LOOKUP = Strategy.PROMPT_LOOKUP


@dataclass(frozen=True, slots=True)
class Registration:
    """The outcome for one model: a strategy and its drafter, or plain decoding; what to log."""

    strategy: Strategy | None
    drafter: Drafter | None
    log: tuple[str, ...]
    #: The drafter's own file, for strategies that name one (`dflash:<path>`, …).
    drafter_path: Path | None = None

    @property
    def speculates(self) -> bool:
        return self.drafter is not None


def register_prompt_lookup_runtime(
    directive: Directive, caps: Capabilities, model: str, *, name_model: bool = False
) -> Registration:
    """Runtimes whose one strategy is prompt-lookup (llamacpp, mlx)."""
    label = model if name_model else None
    if directive.mode is Mode.OFF:
        return Registration(None, None, (say.registered("off", label),))
    inexact = caps.exactness_refusal
    if inexact is not None and directive.mode is Mode.PROMPT_LOOKUP:
        raise DirectiveError(say.prompt_lookup_inexact(inexact))
    if inexact is not None and directive.mode is Mode.AUTO:
        return Registration(None, None, (say.auto_inexact(model, inexact),))
    if directive.mode is Mode.PROMPT_LOOKUP:
        if caps.cut_refusal is not None or PROMPT_LOOKUP not in caps.strategies:
            raise DirectiveError(
                say.prompt_lookup_cannot_cut(caps.cut_refusal or "KV cannot be cut")
            )
        return Registration(
            PROMPT_LOOKUP, PromptLookupDrafter(), (say.registered(PROMPT_LOOKUP, label),)
        )
    if directive.mode is Mode.AUTO:
        if caps.cut_refusal is not None or PROMPT_LOOKUP not in caps.strategies:
            why = caps.cut_refusal or "it registers no strategy"
            return Registration(None, None, (say.auto_cannot_cut(model, caps.runtime, why),))
        return Registration(
            PROMPT_LOOKUP, PromptLookupDrafter(), (say.auto_prompt_lookup(caps.runtime, label),)
        )
    raise DirectiveError(say.strategy_not_on_runtime(directive.raw, caps.runtime))


def _build(engine: DrafterEngine, pick: Pick) -> tuple[Strategy, Drafter, Path | None]:
    """The engine's drafter for `pick`; EngineRefusal says why not."""
    path = Path(pick.path) if pick.path is not None else None
    return pick.strategy, engine.drafter(pick.strategy, path), path


def register_explicit(
    directive: Directive, engine: DrafterEngine, *, model: str, name_model: bool = False
) -> Registration:
    """An explicit, already-checked directive: the engine's refusal is a startup error."""
    label = model if name_model else None
    if directive.mode is Mode.OFF:
        return Registration(None, None, (say.registered("off", label),))
    if directive.mode is Mode.PROMPT_LOOKUP:
        return Registration(
            PROMPT_LOOKUP, PromptLookupDrafter(), (say.registered(PROMPT_LOOKUP, label),)
        )
    pick = directive.pick
    if pick is None:  # auto, or a bare path not yet resolved: a caller's mistake
        raise ValueError(f"{directive.raw} is not a resolved directive")
    try:
        strategy, drafter, path = _build(engine, pick)
    except EngineRefusal as error:
        raise DirectiveError(f"--speculate {directive.raw}: {error.message}") from error
    return Registration(strategy, drafter, (say.registered(str(pick), label),), path)


def register_auto(
    resolution: AutoResolution, engine: DrafterEngine, *, model: str, name_model: bool = False
) -> Registration:
    """`auto` on a bundle: the first pick the engine accepts, else plain decoding (§3)."""
    label = model if name_model else None
    log = [say.skipping_drafter(s.reason, label) for s in resolution.skipped if s.catalog]
    picks = resolution.picks()
    if not picks:
        log.append(say.auto_found_nothing(model, resolution.searched))
        return Registration(None, None, tuple(log))
    for i, pick in enumerate(picks):
        try:
            strategy, drafter, path = _build(engine, pick)
        except EngineRefusal as error:
            following = str(picks[i + 1]) if i + 1 < len(picks) else None
            log.append(say.auto_refused(str(pick), error.message, following, label))
            continue
        log.append(say.registered(str(pick), label))
        return Registration(strategy, drafter, tuple(log), path)
    return Registration(None, None, tuple(log))
