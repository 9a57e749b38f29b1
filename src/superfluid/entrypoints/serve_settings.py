"""The `serve` settings table: one record per knob, the one source of its flag and variable.

Each `Knob` says its flag, the variable it falls back to, its metavar, its default, how its
text is read and checked, its help, and the field it lands in (`ServePlan` or `SpecSettings`).
`cli.py` builds `serve`'s options from `KNOBS` and resolves them with `resolve`; `--help` and
docs/cli.md show what `help_text` composes. A knob resolves flag > environment > default, and
the environment is read here only: a variable that is unset or empty (`VAR=`) is not given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from superfluid.domain.errors import SettingsError
from superfluid.domain.spec_settings import format_number, parse_bool, parse_number
from superfluid.domain.strategies import Strategy, directive_help
from superfluid.domain.tool_calls.families import ToolFamily

#: The --help section of the speculation knobs (the rest are under "Options").
SPEC = "Speculation"

#: Reads a knob's value: (the flag or variable to blame, what it gave) to the value it lands as.
Rule = Callable[[str, Any], object]

#: How the CLI takes a knob: a text value, an on/off switch, a repeatable value, or a whole
#: number that click bounds itself (its refusal is click's usage error).
Kind = Literal["text", "switch", "repeat", "bounded"]


def _text(_name: str, raw: str) -> str:
    return raw


def _number(name: str, raw: str) -> float:
    return parse_number(name, raw)


def _whole(name: str, raw: str) -> int:
    return parse_number(name, raw, kind=int)


def _switch(name: str, raw: str) -> bool:
    return parse_bool(name, raw)


def _switch_off(name: str, raw: str) -> bool:
    """A `--no-…` flag: on turns the field off."""
    return not parse_bool(name, raw)


def _bounded(_name: str, raw: int) -> int:
    return raw


def _ranged(low: float, high: float, shown: str, *, kind: type[int] | type[float] = float) -> Rule:
    """A number of `kind` in `low..=high`; otherwise "`name` must be `shown`, got `raw`"."""

    def read(name: str, raw: str) -> int | float:
        value = parse_number(name, raw, kind=kind)
        if not (math.isfinite(value) and low <= value <= high):
            raise SettingsError(f"{name} must be {shown}, got {raw.strip()}")
        return value

    return read


def _paths(_name: str, raw: Sequence[str]) -> tuple[Path, ...]:
    return tuple(Path(p).expanduser() for p in raw)


def _served_names(name: str, raw: Sequence[str]) -> tuple[str, ...]:
    names = []
    for given in raw:
        shown = given.strip()
        if not shown or any(not ch.isprintable() or ch.isspace() for ch in shown):
            raise SettingsError(
                f"{name} must be a name without spaces or control characters, got {given!r}"
            )
        names.append(shown)
    return tuple(names)


def _tool_families(name: str, raw: Sequence[str]) -> tuple[ToolFamily, ...]:
    families = []
    for given in raw:
        try:
            families.append(ToolFamily(given.strip().lower()))
        except ValueError:
            known = ", ".join(f.value for f in ToolFamily)
            raise SettingsError(f"{name} must be one of {known}, got {given!r}") from None
    return tuple(families)


@dataclass(frozen=True)
class Knob:
    """One `serve` knob.

    `flag` is its option as click declares it (`--a/--no-a` for a switch with both sides);
    `lands` is `ServePlan.<field>` or `SpecSettings.<field>`; `default` is the value it lands as
    when neither flag nor variable gives it. `shown` is what --help says in `[default: …]`
    (`{default}` stands for the default; None: nothing) and `env_shown` what it says in
    `[env var: …]` for a knob whose variables are read elsewhere. A `{default}` in `help` is
    replaced too.
    """

    flag: str
    lands: str
    help: str
    default: object = None
    rule: Rule = _text
    env: str | None = None
    metavar: str | None = None
    kind: Kind = "text"
    shown: str | None = "{default}"
    env_shown: str | None = None
    panel: str | None = None
    #: For a "bounded" knob: click's range, low and (None: unbounded) high.
    bounds: tuple[int, int | None] | None = None

    @property
    def option(self) -> str:
        """The flag as errors name it: `--offline` for `--offline/--no-offline`."""
        return self.flag.split("/")[0]

    @property
    def name(self) -> str:
        """The option's parameter name in `serve`."""
        return self.option.lstrip("-").replace("-", "_")

    @property
    def holder(self) -> str:
        return self.lands.split(".")[0]

    @property
    def field(self) -> str:
        return self.lands.split(".")[1]

    def read(self, given: object, env: Mapping[str, str]) -> object:
        """The knob's value: the flag's, else its variable's, else the default."""
        if isinstance(given, bool):  # a switch: its word, read like its variable's
            given = "true" if given else "false"
        if given is not None:
            return self.rule(self.option, given)
        if self.env is not None and env.get(self.env):
            return self.rule(self.env, env[self.env])
        return self.default


def shown_default(knob: Knob) -> str:
    """The default as --help writes it: a switch by the side that is on, `25` for 25.0."""
    value = knob.default
    if knob.kind == "switch" and "/" in knob.flag:
        on, off = knob.flag.split("/")
        return (on if value else off).lstrip("-")
    return format_number(value) if isinstance(value, float) else str(value)


def help_text(knob: Knob) -> str:
    """The knob's --help: its text, then `[default: …]` and `[env var: …]` where it has them.

    A bounded knob's default and range are click's to show, after these.
    """
    default = shown_default(knob)
    text = knob.help.replace("{default}", default)
    if knob.shown is not None and knob.kind != "bounded":
        text += f"  [default: {knob.shown.replace('{default}', default)}]"
    env = knob.env_shown or knob.env
    if env is not None:
        text += f"  [env var: {env}]"
    return text


KNOBS: tuple[Knob, ...] = (
    Knob(
        "--model",
        "ServePlan.models",
        "Serve another model too (repeatable); requests pick by name.",
        default=(),
        rule=_paths,
        metavar="PATH",
        kind="repeat",
        shown=None,
    ),
    Knob(
        "--served-model-name",
        "ServePlan.served_names",
        "The id clients use for a model, instead of its file name (repeatable: the first names"
        " MODEL, the next each --model in order). The file name is still accepted. Default: the"
        " file name.",
        default=(),
        rule=_served_names,
        metavar="NAME",
        kind="repeat",
        shown=None,
    ),
    Knob(
        "--chat-template-file",
        "ServePlan.chat_templates",
        "A Jinja chat template (or a tokenizer_config.json) that replaces a model's own"
        " (repeatable: the first for MODEL, the next each --model in order). Default: the"
        " model's template, else a built-in for its family.",
        default=(),
        rule=_paths,
        metavar="PATH",
        kind="repeat",
        shown=None,
    ),
    Knob(
        "--tool-call-parser",
        "ServePlan.tool_parsers",
        "How a model writes tool calls: "
        + ", ".join(f.value for f in ToolFamily)
        + " (repeatable, per model in order). Default: read off the chat template.",
        default=(),
        rule=_tool_families,
        metavar="NAME",
        kind="repeat",
        shown=None,
    ),
    Knob(
        "--speculate",
        "ServePlan.speculate",
        directive_help(),
        env="SUPERFLUID_SPECULATE",
        metavar="DIRECTIVE",
        shown="off",
        panel=SPEC,
    ),
    Knob(
        "--host",
        "ServePlan.host",
        "Address to bind (loopback unless told otherwise).",
        default="127.0.0.1",
        metavar="ADDRESS",
    ),
    Knob(
        "--port",
        "ServePlan.port",
        "Port to listen on, 0..=65535; 0 picks a free port, which the log's `listening on` line"
        " shows.",
        default=8453,
        rule=_ranged(0, 65535, "in 0..=65535 (0 picks a free port)", kind=int),
        metavar="INTEGER",
    ),
    Knob(
        "--api-key",
        "ServePlan.api_key",
        "Require this Bearer token on /v1/*.",
        env="SUPERFLUID_API_KEY",
        metavar="TOKEN",
        shown=None,
    ),
    Knob(
        "--offline/--no-offline",
        "ServePlan.offline",
        "Never fetch the hub catalog.",
        default=False,
        rule=_switch,
        kind="switch",
    ),
    Knob(
        "--temperature",
        "ServePlan.temperature",
        "Default temperature for requests that set none.",
        rule=_ranged(0.0, 2.0, "a finite number in [0, 2]"),
        metavar="NUMBER",
        shown="the model file's own, else 0.8",
    ),
    Knob(
        "--seed",
        "ServePlan.seed",
        "Default seed for requests that set none.",
        rule=_whole,
        metavar="INTEGER",
        shown="a fresh one per request",
    ),
    Knob(
        "--max-lanes",
        "ServePlan.max_lanes",
        "Requests decoded at once, per model.",
        default=4,
        rule=_bounded,
        metavar="INTEGER",
        kind="bounded",
        bounds=(1, 64),
    ),
    Knob(
        "--max-queue",
        "ServePlan.max_queue",
        "Requests that may wait for a lane, per model; past lanes + queue a request gets 429"
        " with Retry-After at once (default {default}).",
        default=16,
        rule=_ranged(0, 100_000, "in 0..=100000", kind=int),
        metavar="INTEGER",
        shown=None,
    ),
    Knob(
        "--ctx-size",
        "ServePlan.ctx_size",
        "Context window per lane, in tokens.",
        default=4096,
        rule=_bounded,
        metavar="INTEGER",
        kind="bounded",
        bounds=(16, None),
    ),
    Knob(
        "--shutdown-timeout",
        "ServePlan.shutdown_timeout",
        "Seconds SIGTERM or SIGINT lets running requests finish before it ends them with an"
        " error (a second signal ends them at once); the server then exits 0.",
        default=25.0,
        rule=_ranged(0, 86_400, "in 0..=86400 seconds"),
        env="SUPERFLUID_SHUTDOWN_TIMEOUT",
        metavar="NUMBER",
        shown="{default}, inside Kubernetes' 30 s grace period",
    ),
    Knob(
        "--no-monitor",
        "ServePlan.monitor",
        "No live terminal view; a status line in the log every few seconds instead.",
        default=True,
        rule=_switch_off,
        kind="switch",
        shown="the live view when stderr is a terminal",
    ),
    Knob(
        "--prefix-reuse/--no-prefix-reuse",
        "ServePlan.prefix_reuse",
        "Keep a finished request's KV for a later prompt that starts the same way (a chat's"
        " next turn); the longest shared prefix is not prefilled again.",
        default=True,
        rule=_switch,
        kind="switch",
    ),
    Knob(
        "--widen-weights/--no-widen-weights",
        "ServePlan.widen_weights",
        "On x86, serve a GGUF's Q5_0 weights as Q8_0: the same values and replies, faster"
        " prefill and decoding, from a copy written once under $SUPERFLUID_HOME/cache/weights"
        " (a little larger than the model).",
        default=True,
        rule=_switch,
        kind="switch",
    ),
    Knob(
        "--spec-draft-tokens",
        "SpecSettings.draft_tokens",
        "Draft depth, 1..=64.",
        rule=_whole,
        metavar="INTEGER",
        shown="per strategy (docs/contract.md §4)",
        env_shown=", ".join(dict.fromkeys(s.depth_env for s in Strategy if s.depth_env))
        + ", per strategy",
        panel=SPEC,
    ),
    Knob(
        "--spec-adaptive/--no-spec-adaptive",
        "SpecSettings.adaptive",
        "Pick the fastest depth per lane count.",
        default=True,
        rule=_switch,
        env="SUPERFLUID_SPEC_ADAPTIVE",
        kind="switch",
        panel=SPEC,
    ),
    Knob(
        "--spec-min-yield",
        "SpecSettings.min_yield",
        "Accepted tokens per round below which a request stops drafting (a round asked for"
        " fewer tokens than the default depth: in proportion).",
        default=0.75,
        rule=_number,
        env="SUPERFLUID_SPEC_MIN_YIELD",
        metavar="NUMBER",
        panel=SPEC,
    ),
    Knob(
        "--spec-yield-rounds",
        "SpecSettings.yield_rounds",
        "Rounds before the yield floor judges a request.",
        default=24,
        rule=_whole,
        env="SUPERFLUID_SPEC_LANE_YIELD_ROUNDS",
        metavar="INTEGER",
        panel=SPEC,
    ),
    Knob(
        "--spec-throughput-gate/--no-spec-throughput-gate",
        "SpecSettings.throughput_gate",
        "Decode plainly where speculation is not faster.",
        default=True,
        rule=_switch,
        env="SUPERFLUID_SPEC_GATE",
        kind="switch",
        panel=SPEC,
    ),
    Knob(
        "--spec-min-speedup",
        "SpecSettings.min_speedup",
        "Speed-up speculation must show.",
        default=1.08,
        rule=_number,
        env="SUPERFLUID_SPEC_MIN_SPEEDUP",
        metavar="NUMBER",
        panel=SPEC,
    ),
    Knob(
        "--spec-gate-reprobe",
        "SpecSettings.reprobe",
        "Requests before re-measuring a loss (0: final).",
        default=32,
        rule=_whole,
        env="SUPERFLUID_SPEC_GATE_REPROBE",
        metavar="INTEGER",
        panel=SPEC,
    ),
    Knob(
        "--spec-gate-reprobe-max",
        "SpecSettings.reprobe_max",
        "Cap of the doubling re-probe wait.",
        default=1024,
        rule=_whole,
        env="SUPERFLUID_SPEC_GATE_REPROBE_MAX",
        metavar="INTEGER",
        panel=SPEC,
    ),
    Knob(
        "--spec-max-temperature",
        "SpecSettings.max_temperature",
        "Cap a default temperature while speculating.",
        rule=_ranged(0.0, 2.0, "a finite number in [0, 2]"),
        metavar="NUMBER",
        shown="no cap",
        panel=SPEC,
    ),
)


@dataclass
class Resolved:
    """Every knob's value, by the field it lands in."""

    plan: dict[str, Any]
    settings: dict[str, Any]


def resolve(given: Mapping[str, object], env: Mapping[str, str]) -> Resolved:
    """Read every knob in table order: `given` maps option names to what the flags gave (None:
    not given); `env` is the process environment. A refusal is a SettingsError naming the flag
    or variable. `SpecSettings.validate()` still owes its checks across knobs."""
    resolved = Resolved(plan={}, settings={})
    for knob in KNOBS:
        into = resolved.settings if knob.holder == "SpecSettings" else resolved.plan
        into[knob.field] = knob.read(given.get(knob.name), env)
    return resolved
