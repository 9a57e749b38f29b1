"""Speculation settings: defaults, validation and draft depth (docs/contract.md §4, §7).

`SpecSettings` holds every speculation knob with the contract's default; each field carries its
`serve` flag, variable and help (`knob()`, domain/knobs.py), which the CLI reads flag >
environment > default. The value is only trusted after `SpecSettings.validate()`, whose refusals
carry the contract's messages verbatim (the CLI prints them and exits 2).

Draft depth resolves one level further: `--spec-draft-tokens` beats the strategy's own variable
(`SUPERFLUID_MTP_DRAFTS`, `SUPERFLUID_EAGLE_DRAFTS`, `SUPERFLUID_DFLASH_DRAFTS`), which beats
the strategy's default depth (§4). The environment arrives as a mapping passed in by the
caller, so this module never reads the process environment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from superfluid.domain.errors import SettingsError
from superfluid.domain.knobs import (
    SPEC,
    as_temperature,
    as_whole,
    format_number,
    knob,
    parse_number,
)
from superfluid.domain.strategies import Strategy

#: The deepest draft any strategy may propose (`--spec-draft-tokens` is 1..=64); a deep draft
#: pays only on long exact copies at few lanes, and the gates choose when (ADR 0013).
MAX_DRAFT_TOKENS = 64
MIN_DRAFT_TOKENS = 1

#: A block drafter whose header does not state its block width gets this depth. A block drafter
#: cannot draft past its own block, so an unknown width calls for a small, safe depth rather than
#: the maximum; 4 is the depth the other drafter-based strategies default to.
UNKNOWN_BLOCK_DEPTH = 4

#: The per-strategy depth variable; prompt-lookup and draft-model have none.
DEPTH_ENV_BY_STRATEGY: Mapping[Strategy, str] = {
    s: s.depth_env for s in Strategy if s.depth_env is not None
}


def default_depth(
    strategy: Strategy, *, block_size: int | None = None, arch: str | None = None
) -> int:
    """The draft depth a strategy uses when nothing overrides it (§4).

    `arch` is the target's header `arch` (it matters for `mtp-head` only); `block_size` is the
    block drafter's block width (DFlash/DSpark only), clamped into 1..=64. `off` has no depth.
    """
    chosen = strategy
    if chosen is Strategy.OFF:
        raise ValueError("`off` drafts nothing, so it has no draft depth")
    if chosen.depth is not None:
        return chosen.depth
    if chosen is Strategy.MTP_HEAD:
        # The engine's own choice (§4): GLM-DSA's head drafts one token, others three.
        return 1 if arch == "glm_dsa" else 3
    # A block drafter drafts its block width.
    if block_size is None or block_size < MIN_DRAFT_TOKENS:
        return UNKNOWN_BLOCK_DEPTH
    return min(block_size, MAX_DRAFT_TOKENS)


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """Every speculation knob of §7 and §8, with the contract's defaults; each field is a
    `serve` option (`knob()`).

    `draft_tokens` None means "the strategy's own depth"; `max_temperature` None means no cap.
    """

    draft_tokens: int | None = knob(
        None,
        flag="--spec-draft-tokens",
        help="Draft depth, 1..=64.",
        rule=as_whole,
        metavar="INTEGER",
        shown="per strategy (docs/contract.md §4)",
        env_shown=", ".join(dict.fromkeys(DEPTH_ENV_BY_STRATEGY.values())) + ", per strategy",
        panel=SPEC,
    )
    adaptive: bool = knob(
        True,
        flag="--spec-adaptive/--no-spec-adaptive",
        help="Pick the fastest depth per lane count.",
        env="SUPERFLUID_SPEC_ADAPTIVE",
        kind="switch",
        panel=SPEC,
    )
    min_yield: float = knob(
        0.75,
        flag="--spec-min-yield",
        help="Accepted tokens per round below which a request stops drafting (a round asked for"
        " fewer tokens than the default depth: in proportion).",
        rule=parse_number,
        env="SUPERFLUID_SPEC_MIN_YIELD",
        metavar="NUMBER",
        panel=SPEC,
    )
    yield_rounds: int = knob(
        24,
        flag="--spec-yield-rounds",
        help="Rounds before the yield floor judges a request.",
        rule=as_whole,
        env="SUPERFLUID_SPEC_LANE_YIELD_ROUNDS",
        metavar="INTEGER",
        panel=SPEC,
    )
    throughput_gate: bool = knob(
        True,
        flag="--spec-throughput-gate/--no-spec-throughput-gate",
        help="Decode plainly where speculation is not faster.",
        env="SUPERFLUID_SPEC_GATE",
        kind="switch",
        panel=SPEC,
    )
    min_speedup: float = knob(
        1.08,
        flag="--spec-min-speedup",
        help="Speed-up speculation must show.",
        rule=parse_number,
        env="SUPERFLUID_SPEC_MIN_SPEEDUP",
        metavar="NUMBER",
        panel=SPEC,
    )
    reprobe: int = knob(
        32,
        flag="--spec-gate-reprobe",
        help="Requests before re-measuring a loss (0: final).",
        rule=as_whole,
        env="SUPERFLUID_SPEC_GATE_REPROBE",
        metavar="INTEGER",
        panel=SPEC,
    )
    reprobe_max: int = knob(
        1024,
        flag="--spec-gate-reprobe-max",
        help="Cap of the doubling re-probe wait.",
        rule=as_whole,
        env="SUPERFLUID_SPEC_GATE_REPROBE_MAX",
        metavar="INTEGER",
        panel=SPEC,
    )
    max_temperature: float | None = knob(
        None,
        flag="--spec-max-temperature",
        help="Cap a default temperature while speculating.",
        rule=as_temperature,
        metavar="NUMBER",
        shown="no cap",
        panel=SPEC,
    )

    def validate(self) -> SpecSettings:
        """Return self, or raise SettingsError with the first rule broken, in flag order."""
        if self.draft_tokens is not None and not (
            MIN_DRAFT_TOKENS <= self.draft_tokens <= MAX_DRAFT_TOKENS
        ):
            raise SettingsError(f"--spec-draft-tokens must be in 1..={MAX_DRAFT_TOKENS}")
        if not (math.isfinite(self.min_yield) and self.min_yield >= 0.0):
            raise SettingsError("--spec-min-yield must be finite and non-negative")
        if self.yield_rounds < 1:
            raise SettingsError("--spec-yield-rounds must be at least 1")
        if not (math.isfinite(self.min_speedup) and self.min_speedup >= 1.0):
            raise SettingsError("--spec-min-speedup must be finite and at least 1.0")
        # The contract gives no wording for the re-probe pair; these follow its style.
        if self.reprobe < 0:
            raise SettingsError("--spec-gate-reprobe must be at least 0")
        if self.reprobe > 0 and self.reprobe_max < self.reprobe:
            raise SettingsError("--spec-gate-reprobe-max must be at least --spec-gate-reprobe")
        if self.max_temperature is not None:
            as_temperature("--spec-max-temperature", format_number(self.max_temperature))
        return self


def depth_for(
    strategy: Strategy,
    settings: SpecSettings,
    env_depths: Mapping[str, str],
    block_size: int | None = None,
    arch: str | None = None,
) -> int:
    """The starting draft depth: `--spec-draft-tokens` > the strategy's variable > §4 default.

    `env_depths` is the environment; only the variable of this strategy is read (a stray
    `SUPERFLUID_MTP_DRAFTS` does not stop a prompt-lookup server from starting).
    """
    if settings.draft_tokens is not None:
        return settings.draft_tokens
    env_name = DEPTH_ENV_BY_STRATEGY.get(strategy)
    if env_name is not None:
        text = env_depths.get(env_name)
        if text:  # an empty variable (`VAR=`) is unset
            depth = parse_number(env_name, text, kind=int)
            if not MIN_DRAFT_TOKENS <= depth <= MAX_DRAFT_TOKENS:
                raise SettingsError(f"{env_name} must be in 1..={MAX_DRAFT_TOKENS}")
            return depth
    return default_depth(strategy, block_size=block_size, arch=arch)
