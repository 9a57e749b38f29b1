"""Speculation settings: defaults, sources and validation (docs/contract.md §4, §7, §8).

Every knob resolves as **flag > environment > built-in default**. The environment arrives as a
mapping passed in by the caller, so this module never reads the process environment. A settings
value is only trusted after `SpecSettings.validate()`, whose refusals carry the contract's
messages verbatim (the CLI prints them and exits 2).

Draft depth resolves the same way, one level further: `--spec-draft-tokens` beats the strategy's
own variable (`SUPERFLUID_MTP_DRAFTS`, `SUPERFLUID_EAGLE_DRAFTS`, `SUPERFLUID_DFLASH_DRAFTS`),
which beats the strategy's default depth (§4).

Temperature policy (§8): `--spec-max-temperature` caps only a temperature nobody asked for, one
that came from the model's default or the built-in default. A caller's or `--temperature`'s choice
is never touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from superfluid.domain.errors import SettingsError
from superfluid.domain.strategies import Strategy as Strategy

#: The deepest draft any strategy may propose (`--spec-draft-tokens` is 1..=64). The seed sets
#: no ceiling; 15 was the upstream CLI's. Past 15 a draft pays only on long exact copies at one
#: or two lanes (docs/benchmarks/step_cost.md), and the gates choose when (ADR 0013).
MAX_DRAFT_TOKENS = 64
MIN_DRAFT_TOKENS = 1

#: A block drafter whose header does not state its block width gets this depth. A block drafter
#: cannot draft past its own block, so an unknown width calls for a small, safe depth rather than
#: the maximum; 4 is the depth the other drafter-based strategies default to.
UNKNOWN_BLOCK_DEPTH = 4

#: Logged (not fatal) when `--spec-max-temperature` is set but no strategy got registered.
MAX_TEMPERATURE_IGNORED = "--spec-max-temperature ignored: no --speculate strategy is configured"


# Flag names, the keys `from_sources` reads from its `flags` mapping. Boolean flags carry a
# boolean word ("true"/"false", …): the CLI turns `--no-spec-adaptive` into "false".
FLAG_DRAFT_TOKENS = "--spec-draft-tokens"
FLAG_ADAPTIVE = "--spec-adaptive"
FLAG_MIN_YIELD = "--spec-min-yield"
FLAG_YIELD_ROUNDS = "--spec-yield-rounds"
FLAG_THROUGHPUT_GATE = "--spec-throughput-gate"
FLAG_MIN_SPEEDUP = "--spec-min-speedup"
FLAG_REPROBE = "--spec-gate-reprobe"
FLAG_REPROBE_MAX = "--spec-gate-reprobe-max"
FLAG_MAX_TEMPERATURE = "--spec-max-temperature"

SPEC_FLAGS = frozenset(
    {
        FLAG_DRAFT_TOKENS,
        FLAG_ADAPTIVE,
        FLAG_MIN_YIELD,
        FLAG_YIELD_ROUNDS,
        FLAG_THROUGHPUT_GATE,
        FLAG_MIN_SPEEDUP,
        FLAG_REPROBE,
        FLAG_REPROBE_MAX,
        FLAG_MAX_TEMPERATURE,
    }
)

ENV_ADAPTIVE = "SUPERFLUID_SPEC_ADAPTIVE"
ENV_MIN_YIELD = "SUPERFLUID_SPEC_MIN_YIELD"
ENV_YIELD_ROUNDS = "SUPERFLUID_SPEC_LANE_YIELD_ROUNDS"
ENV_THROUGHPUT_GATE = "SUPERFLUID_SPEC_GATE"
ENV_MIN_SPEEDUP = "SUPERFLUID_SPEC_MIN_SPEEDUP"
ENV_REPROBE = "SUPERFLUID_SPEC_GATE_REPROBE"
ENV_REPROBE_MAX = "SUPERFLUID_SPEC_GATE_REPROBE_MAX"

#: The per-strategy depth variable; prompt-lookup and draft-model have none.
DEPTH_ENV_BY_STRATEGY: Mapping[Strategy, str] = {
    s: s.depth_env for s in Strategy if s.depth_env is not None
}

_TRUE_WORDS = frozenset({"1", "true", "on", "yes"})
_FALSE_WORDS = frozenset({"0", "false", "off", "no"})


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


@overload
def parse_number(flag: str, raw: str, kind: type[int]) -> int: ...
@overload
def parse_number(flag: str, raw: str, kind: type[float] = ...) -> float: ...
def parse_number(flag: str, raw: str, kind: type[int] | type[float] = float) -> int | float:
    """Read a number given for `flag` (a flag or variable name), refusing anything else.

    Surrounding blanks are forgiven; digit separators (`1_000`), which Python would accept and a
    user would not expect to, are refused. `kind=int` refuses fractions.
    """
    text = raw.strip()
    if text and "_" not in text:
        try:
            return int(text) if kind is int else float(text)
        except ValueError:
            pass
    raise SettingsError(f'{flag} expects a number, got "{raw}"')


def parse_bool(name: str, raw: str) -> bool:
    """Read an on/off value: 1/0, true/false, on/off, yes/no in any case."""
    word = raw.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise SettingsError(f'{name} expects one of 1/0/true/false/on/off/yes/no, got "{raw}"')


def format_number(value: float) -> str:
    """A number as a user would write it: `3` rather than `3.0`, `2.5`, `NaN`, `inf`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _check_max_temperature(value: float, shown: str) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 2.0):
        raise SettingsError(
            f"--spec-max-temperature must be a finite number in [0, 2], got {shown}"
        )


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """Every speculation knob of §7 and §8, with the contract's defaults.

    `draft_tokens` None means "the strategy's own depth"; `max_temperature` None means no cap.
    """

    draft_tokens: int | None = None
    adaptive: bool = True
    min_yield: float = 0.75
    yield_rounds: int = 24
    throughput_gate: bool = True
    min_speedup: float = 1.08
    reprobe: int = 32
    reprobe_max: int = 1024
    max_temperature: float | None = None

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
            _check_max_temperature(self.max_temperature, format_number(self.max_temperature))
        return self


def _given(value: str | None) -> str | None:
    """An absent or blank value is "not given", so `VAR=` falls through to the default."""
    return value if value is not None and value.strip() else None


def from_sources(flags: Mapping[str, str | None], env: Mapping[str, str]) -> SpecSettings:
    """Resolve every knob flag > env > default, then validate.

    `flags` maps flag names (the FLAG_* constants) to the text given, or None when absent;
    a key outside SPEC_FLAGS is a programming error (ValueError), so a typo cannot silently drop
    a user's setting. `env` is the process environment (or any stand-in for it).
    """
    unknown = set(flags) - SPEC_FLAGS
    if unknown:
        raise ValueError(f"not speculation flags: {sorted(unknown)}")

    def raw(flag: str, env_name: str | None) -> tuple[str, str] | None:
        """(name to blame, text) from the first source that gives the knob."""
        given = _given(flags.get(flag))
        if given is not None:
            return flag, given
        if env_name is not None:
            from_env = _given(env.get(env_name))
            if from_env is not None:
                return env_name, from_env
        return None

    defaults = SpecSettings()

    def boolean(flag: str, env_name: str | None, default: bool) -> bool:
        found = raw(flag, env_name)
        return default if found is None else parse_bool(*found)

    def real(flag: str, env_name: str | None, default: float) -> float:
        found = raw(flag, env_name)
        return default if found is None else parse_number(*found)

    def whole(flag: str, env_name: str | None, default: int) -> int:
        found = raw(flag, env_name)
        return default if found is None else parse_number(*found, kind=int)

    draft_tokens_raw = raw(FLAG_DRAFT_TOKENS, None)
    max_temperature_raw = raw(FLAG_MAX_TEMPERATURE, None)
    max_temperature: float | None = None
    if max_temperature_raw is not None:
        max_temperature = parse_number(*max_temperature_raw)
        # Report the value the way the user typed it, not as Python prints the float.
        _check_max_temperature(max_temperature, max_temperature_raw[1].strip())

    settings = SpecSettings(
        draft_tokens=None
        if draft_tokens_raw is None
        else parse_number(*draft_tokens_raw, kind=int),
        adaptive=boolean(FLAG_ADAPTIVE, ENV_ADAPTIVE, defaults.adaptive),
        min_yield=real(FLAG_MIN_YIELD, ENV_MIN_YIELD, defaults.min_yield),
        yield_rounds=whole(FLAG_YIELD_ROUNDS, ENV_YIELD_ROUNDS, defaults.yield_rounds),
        throughput_gate=boolean(
            FLAG_THROUGHPUT_GATE, ENV_THROUGHPUT_GATE, defaults.throughput_gate
        ),
        min_speedup=real(FLAG_MIN_SPEEDUP, ENV_MIN_SPEEDUP, defaults.min_speedup),
        reprobe=whole(FLAG_REPROBE, ENV_REPROBE, defaults.reprobe),
        reprobe_max=whole(FLAG_REPROBE_MAX, ENV_REPROBE_MAX, defaults.reprobe_max),
        max_temperature=max_temperature,
    )
    return settings.validate()


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
        text = _given(env_depths.get(env_name))
        if text is not None:
            depth = parse_number(env_name, text, kind=int)
            if not MIN_DRAFT_TOKENS <= depth <= MAX_DRAFT_TOKENS:
                raise SettingsError(f"{env_name} must be in 1..={MAX_DRAFT_TOKENS}")
            return depth
    return default_depth(strategy, block_size=block_size, arch=arch)


def effective_temperature(
    request_temperature: float | None,
    cli_temperature: float | None,
    model_default: float,
    max_temperature: float | None,
    strategy_registered: bool,
) -> float:
    """The sampling temperature for a request (§8).

    The request's own value wins, then `--temperature`; both are the user's choice and are never
    capped. Only the fallback (`model_default`: the model's default, or the built-in one) is
    capped, because a flat distribution rejects most drafts, and only when a strategy is registered, since without one the cap buys nothing.
    """
    if request_temperature is not None:
        return request_temperature
    if cli_temperature is not None:
        return cli_temperature
    if max_temperature is not None and strategy_registered:
        return min(model_default, max_temperature)
    return model_default


def max_temperature_notice(settings: SpecSettings, strategy_registered: bool) -> str | None:
    """The log line owed when the cap is set but nothing speculates, else None."""
    if settings.max_temperature is not None and not strategy_registered:
        return MAX_TEMPERATURE_IGNORED
    return None
