"""A `serve` knob is declared on the dataclass field it fills: `port: int = knob(8453, ...)`.

`knob()` returns the field with its default and, in its metadata, a `Knob`: the flag, the
variable it falls back to, its metavar, how its text is read and checked (a `Rule`), its help
and how --help shows it. The CLI walks the fields of `ServePlan` and `SpecSettings` and builds
`serve`'s options, their variables, defaults and --help from these records, so a knob is
written once. The rules here are pure: they read text and refuse it with a SettingsError that
names the flag or variable it came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import Field, dataclass, field
from typing import Any, Literal, TypeVar, overload

from superfluid.domain.errors import SettingsError

#: The key under which a field's metadata holds its `Knob`.
KNOB = "knob"

#: The --help section of the speculation knobs (the rest are under "Options").
SPEC = "Speculation"

#: Reads a knob's value: (the flag or variable to blame, what it gave) to the value it lands as.
Rule = Callable[[str, Any], object]

#: How the CLI takes a knob: a text value, an on/off switch, or a repeatable value. A knob with
#: `bounds` is a whole number that click bounds itself (its refusal is click's usage error).
Kind = Literal["text", "switch", "repeat"]

_TRUE_WORDS = frozenset({"1", "true", "on", "yes"})
_FALSE_WORDS = frozenset({"0", "false", "off", "no"})

T = TypeVar("T")


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


# -- rules ---------------------------------------------------------------------------------


def as_given(_name: str, raw: Any) -> Any:
    """The value as given: text, or the whole number click has already bounded."""
    return raw


def as_whole(name: str, raw: str) -> int:
    return parse_number(name, raw, kind=int)


def as_switch_off(name: str, raw: str) -> bool:
    """A `--no-…` flag: on turns the field off."""
    return not parse_bool(name, raw)


def in_range(low: float, high: float, shown: str, *, kind: type[int] | type[float] = float) -> Rule:
    """A number of `kind` in `low..=high`; otherwise "`name` must be `shown`, got `raw`"."""

    def read(name: str, raw: str) -> int | float:
        value = parse_number(name, raw, kind=kind)
        if not (math.isfinite(value) and low <= value <= high):
            raise SettingsError(f"{name} must be {shown}, got {raw.strip()}")
        return value

    return read


#: A sampling temperature, as OpenAI bounds it.
as_temperature = in_range(0.0, 2.0, "a finite number in [0, 2]")


# -- the record ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """One `serve` knob, kept in the metadata of the field it fills (whose default it has).

    `flag` is its option as click declares it (`--a/--no-a` for a switch with both sides).
    `shown` is what --help says in `[default: …]` (`{default}` stands for the field's default;
    None: nothing) and `env_shown` what it says in `[env var: …]` for a knob whose variables are
    read elsewhere. A `{default}` in `help` is replaced too. `panel` is its --help section.
    """

    flag: str
    help: str
    rule: Rule = as_given
    env: str | None = None
    metavar: str | None = None
    kind: Kind = "text"
    shown: str | None = "{default}"
    env_shown: str | None = None
    panel: str | None = None
    #: For a whole number click bounds itself: its range, low and (None: unbounded) high.
    bounds: tuple[int, int | None] | None = None

    @property
    def bounded(self) -> bool:
        return self.bounds is not None

    @property
    def option(self) -> str:
        """The flag as errors name it: `--offline` for `--offline/--no-offline`."""
        return self.flag.split("/")[0]

    @property
    def name(self) -> str:
        """The option's parameter name in `serve`."""
        return self.option.lstrip("-").replace("-", "_")


def knob(
    default: T,
    *,
    flag: str,
    help: str,
    rule: Rule | None = None,
    env: str | None = None,
    metavar: str | None = None,
    kind: Kind = "text",
    shown: str | None = "{default}",
    env_shown: str | None = None,
    panel: str | None = None,
    bounds: tuple[int, int | None] | None = None,
) -> T:
    """A dataclass field whose default is `default` and whose metadata holds its `Knob`.

    Without a rule a switch reads its word as on or off, and any other knob takes its value as
    given.
    """
    rule = rule or (parse_bool if kind == "switch" else as_given)
    record = Knob(flag, help, rule, env, metavar, kind, shown, env_shown, panel, bounds)
    return field(default=default, metadata={KNOB: record})


def knob_of(declared: Field[Any]) -> Knob | None:
    """The knob a dataclass field carries; None for a field that is not a serve option."""
    found = declared.metadata.get(KNOB)
    return found if isinstance(found, Knob) else None
