"""`serve`'s options, derived from the fields of `ServePlan` and `SpecSettings` that carry a knob.

A field declared with `knob()` (domain/knobs.py) is an option; `OPTIONS` lists them in field
order, `ServePlan`'s first. `cli.py` builds `serve`'s signature from them and resolves them
with `resolve`; `--help` and docs/cli.md show what `help_text` composes. An option resolves
flag > environment > default, and a serve option's variable is read here only (the
per-strategy depth variables are read by `depth_for` once a strategy is known). A variable that
is unset or empty (`VAR=`) is not given; for the speculation knobs a blank flag or variable is
not given either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from superfluid.application.serving import ServePlan
from superfluid.domain.knobs import Knob, format_number, knob_of
from superfluid.domain.spec_settings import SpecSettings


@dataclass(frozen=True)
class ServeOption:
    """A `serve` option: the knob on a field, the dataclass that holds it and its default."""

    knob: Knob
    holder: type[ServePlan] | type[SpecSettings]
    field: str
    default: object

    @property
    def lands(self) -> str:
        """`ServePlan.<field>` or `SpecSettings.<field>`."""
        return f"{self.holder.__name__}.{self.field}"

    def read(self, given: object, env: Mapping[str, str]) -> object:
        """The option's value: the flag's, else its variable's, else the field's default."""
        knob = self.knob
        if isinstance(given, bool):  # a switch: its word, read like its variable's
            given = "true" if given else "false"
        if self._given(given):
            return knob.rule(knob.option, given)
        if knob.env is not None and env.get(knob.env) and self._given(env[knob.env]):
            return knob.rule(knob.env, env[knob.env])
        return self.default

    def _given(self, value: object) -> bool:
        """Whether a flag or variable gives a value: the speculation knobs take a blank one as
        not given, as `SpecSettings` always has."""
        if isinstance(value, str) and self.holder is SpecSettings:
            return bool(value.strip())
        return value is not None


def serve_options() -> tuple[ServeOption, ...]:
    """Every field of `ServePlan`, then of `SpecSettings`, that carries a knob, in order."""
    found = []
    for holder in (ServePlan, SpecSettings):
        for declared in fields(holder):
            knob = knob_of(declared)
            if knob is not None:
                found.append(ServeOption(knob, holder, declared.name, declared.default))
    return tuple(found)


OPTIONS = serve_options()


def shown_default(option: ServeOption) -> str:
    """The default as --help writes it: a switch by the side that is on, `25` for 25.0."""
    knob, value = option.knob, option.default
    if knob.kind == "switch" and "/" in knob.flag:
        on, off = knob.flag.split("/")
        return (on if value else off).lstrip("-")
    return format_number(value) if isinstance(value, float) else str(value)


def help_text(option: ServeOption) -> str:
    """The option's --help: its text, then `[default: …]` and `[env var: …]` where it has them.

    A bounded option's default and range are click's to show, after these.
    """
    knob = option.knob
    default = shown_default(option)
    text = knob.help.replace("{default}", default)
    if knob.shown is not None and not knob.bounded:
        text += f"  [default: {knob.shown.replace('{default}', default)}]"
    env = knob.env_shown or knob.env
    if env is not None:
        text += f"  [env var: {env}]"
    return text


@dataclass
class Resolved:
    """Every option's value, by the field it lands in."""

    plan: dict[str, Any]
    settings: dict[str, Any]


def resolve(given: Mapping[str, object], env: Mapping[str, str]) -> Resolved:
    """Read every option in order: `given` maps option names to what the flags gave (None: not
    given); `env` is the process environment. A refusal is a SettingsError naming the flag or
    variable. `SpecSettings.validate()` owes the contract's range checks."""
    resolved = Resolved(plan={}, settings={})
    for option in OPTIONS:
        into = resolved.settings if option.holder is SpecSettings else resolved.plan
        into[option.field] = option.read(given.get(option.knob.name), env)
    return resolved
