"""Registering a speculation strategy for one loaded model (SPECULATION.md §1–§3).

A parsed directive meets the runtime's capability record here. Only `auto` falls back: an
explicit directive that this runtime cannot honour is a startup error (DirectiveError, exit 2),
while `auto` decodes plainly and says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from superfluid.application.drafting import Drafter, PromptLookupDrafter
from superfluid.application.ports import Capabilities
from superfluid.domain import announcements as say
from superfluid.domain.directive import Directive, Mode
from superfluid.domain.errors import DirectiveError

PROMPT_LOOKUP = "prompt-lookup"


@dataclass(frozen=True, slots=True)
class Registration:
    """The outcome for one model: a strategy and its drafter, or plain decoding; what to log."""

    strategy: str | None
    drafter: Drafter | None
    log: tuple[str, ...]

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
            PROMPT_LOOKUP, PromptLookupDrafter(), (say.auto_prompt_lookup(caps.runtime),)
        )
    raise DirectiveError(say.strategy_not_on_runtime(directive.raw, caps.runtime))
