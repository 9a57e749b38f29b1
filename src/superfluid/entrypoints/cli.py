"""`superfluid` on the command line.

Every error a user can cause is one line on stderr, `superfluid: <what is wrong>`, and exit
status 2 — never a traceback.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from typer import _click as click  # the click typer runs on: its help layout is ours to adjust
from typer.core import TyperCommand, TyperGroup

from superfluid.application.serving import (
    DEFAULT_MAX_QUEUE,
    DEFAULT_SHUTDOWN_TIMEOUT,
    ServePlan,
)
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.spec_settings import (
    ENV_ADAPTIVE,
    ENV_MIN_SPEEDUP,
    ENV_MIN_YIELD,
    ENV_REPROBE,
    ENV_REPROBE_MAX,
    ENV_THROUGHPUT_GATE,
    ENV_YIELD_ROUNDS,
    FLAG_ADAPTIVE,
    FLAG_DRAFT_TOKENS,
    FLAG_MAX_TEMPERATURE,
    FLAG_MIN_SPEEDUP,
    FLAG_MIN_YIELD,
    FLAG_REPROBE,
    FLAG_REPROBE_MAX,
    FLAG_THROUGHPUT_GATE,
    FLAG_YIELD_ROUNDS,
    SpecSettings,
    from_sources,
    parse_number,
)
from superfluid.domain.strategies import Strategy, directive_help
from superfluid.domain.tool_calls.families import ToolFamily

log = logging.getLogger("superfluid")

#: Stands in for "-" while --help wraps a line: textwrap would break after a hyphen, splitting
#: `draft-model` or `no-offline`; with it, lines break at spaces only.
_UNBROKEN_HYPHEN = "\u2011"


class _HelpFormatter(click.HelpFormatter):
    """click's plain --help layout, with lines broken at spaces only.

    Plain rather than typer's rich panels: rich sets a panel's flags in one table whose columns,
    at 80 columns, are too narrow for `--no-spec-throughput-gate` and a variable's name beside
    it, and rich cuts both with "…". click puts a long flag on a line of its own instead.
    """

    def write_text(self, text: str) -> None:
        start = len(self.buffer)
        super().write_text(text.replace("-", _UNBROKEN_HYPHEN))
        self._hyphens_back(start)

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        start = len(self.buffer)
        kept = [(term, text.replace("-", _UNBROKEN_HYPHEN)) for term, text in rows]
        super().write_dl(kept, col_max, col_spacing)
        self._hyphens_back(start)

    def _hyphens_back(self, start: int) -> None:
        self.buffer[start:] = [part.replace(_UNBROKEN_HYPHEN, "-") for part in self.buffer[start:]]


class _Context(click.Context):
    formatter_class = _HelpFormatter


class _Command(TyperCommand):
    """A command whose --help is plain text in sections: Arguments, Options, then each
    `rich_help_panel` (Speculation) in the order its first flag is declared."""

    context_class = _Context

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append(record)
            else:
                title = getattr(param, "rich_help_panel", None) or "Options"
                sections.setdefault(title, []).append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class _Group(TyperGroup):
    context_class = _Context

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its first sentence, whole (click would cut it to fit one line)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _show_version(asked: bool) -> None:
    if asked:
        typer.echo(f"superfluid {metadata.version('superfluid')}")
        raise typer.Exit()


app = typer.Typer(
    name="superfluid",
    cls=_Group,
    help="An LLM serving daemon whose speculative decoding never costs output.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _top(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print the version and exit.",
            callback=_show_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """The options before a command (the app's help is its `help=`)."""


SPEC = "Speculation"


def one_line(message: str) -> str:
    """The message with control characters escaped: whatever a user typed, it stays one line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)


def fail(message: str) -> NoReturn:
    typer.echo(f"superfluid: {one_line(message)}", err=True)
    raise typer.Exit(2)


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("superfluid: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    # llama.cpp's own log only when debugging: its failures reach the user as one line of ours
    # (a bad GGUF is "llama.cpp cannot load this file", not five lines of parser internals).
    native = logging.DEBUG if os.environ.get("SUPERFLUID_DEBUG") else logging.ERROR
    logging.getLogger("superfluid.llamacpp").setLevel(native)


def _bool_flag(value: bool | None) -> str | None:
    return None if value is None else ("true" if value else "false")


def _demo_model(env: os._Environ[str]) -> Path:
    from superfluid.entrypoints.container import demo_model

    return demo_model(env)


def _demo_models(env: os._Environ[str]) -> list[Path]:
    """The demo server's models: the base demo model, and the instruct model beside it when
    it is installed (it chats and calls tools; the base model completes text)."""
    from superfluid.entrypoints.container import instruct_model

    models = [_demo_model(env)]
    try:
        models.append(instruct_model())
    except SuperfluidError as missing:
        typer.echo(f"serving the base demo model only: {missing.message}", err=True)
    return models


def _check_template_file(path: Path) -> None:
    from superfluid.entrypoints.container import check_template_file

    check_template_file(path)


@app.command("demo-model", cls=_Command)
def demo_model() -> None:
    """Print the path of the demo model (Gemma 3 270M GGUF), assembling it once if needed."""
    try:
        typer.echo(str(_demo_model(os.environ)))
    except SuperfluidError as error:
        fail(error.message)


bundle_app = typer.Typer(
    cls=_Group, help="Work with .base bundles.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("make-fixtures", cls=_Command)
def make_fixtures_command(
    directory: Annotated[
        Path, typer.Argument(help="Where to write the fixture bundles.", metavar="DIRECTORY")
    ],
) -> None:
    """Write tiny .base fixtures (a target, drafters and a trained byte-level tokenizer) for
    trying every strategy on the basert reference backend."""
    from superfluid.entrypoints.container import write_fixtures

    try:
        written = write_fixtures(directory.expanduser())
    except (SuperfluidError, OSError) as error:
        fail(error.message if isinstance(error, SuperfluidError) else f"{directory}: {error}")
    for role, path in sorted(written.items()):
        typer.echo(f"{role:10} {path}")


@app.command(cls=_Command)
def drafters(
    model: Annotated[
        str,
        typer.Argument(
            help="Target model: a .base bundle (or .gguf / MLX directory).", metavar="MODEL"
        ),
    ],
    speculate: Annotated[
        str,
        typer.Option(
            help="The directive to explain.",
            envvar="SUPERFLUID_SPECULATE",
            metavar="DIRECTIVE",
        ),
    ] = "auto",
    offline: Annotated[bool, typer.Option(help="Never fetch the hub catalog.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Explain what a --speculate directive resolves to for MODEL: the pick, the ranked
    candidates with their rank keys, and every file looked at but skipped, with the reason.
    Reads headers only; never loads weights or downloads a drafter."""
    _setup_logging()
    from superfluid.entrypoints.container import Container
    from superfluid.entrypoints.drafters_report import as_json as report_json
    from superfluid.entrypoints.drafters_report import as_text as report_text

    path = Path(model).expanduser()
    env = dict(os.environ)
    plan = ServePlan(
        models=(path,), speculate=speculate, settings=SpecSettings(), offline=offline, env=env
    )
    try:
        report = Container(plan=plan).serving().explain(path, speculate, env)
    except SuperfluidError as error:
        fail(error.message)
    typer.echo(report_json(report) if as_json else report_text(report))


#: The settings' defaults, shown in --help (they live in one place: SpecSettings).
_DEFAULTS = SpecSettings()


def _spec(text: str, default: object, env: str) -> str:
    """A speculation flag's help: the text, its default and the variable it falls back to."""
    return f"{text}  [default: {default}]  [env var: {env}]"


@app.command(cls=_Command)
def serve(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Model file: .gguf, .base or an MLX directory. Default: the demo models"
            " (Gemma 3 270M, a base model, and SmolLM2-135M-Instruct when installed).",
            metavar="MODEL",
        ),
    ] = None,
    extra_models: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            help="Serve another model too (repeatable); requests pick by name.",
            metavar="PATH",
        ),
    ] = None,
    served_model_name: Annotated[
        list[str] | None,
        typer.Option(
            "--served-model-name",
            help="The id clients use for a model, instead of its file name (repeatable: the"
            " first names MODEL, the next each --model in order). The file name is still"
            " accepted. Default: the file name.",
            metavar="NAME",
        ),
    ] = None,
    chat_template_file: Annotated[
        list[str] | None,
        typer.Option(
            "--chat-template-file",
            help="A Jinja chat template (or a tokenizer_config.json) that replaces a model's own"
            " (repeatable: the first for MODEL, the next each --model in order). Default: the"
            " model's template, else a built-in for its family.",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    tool_call_parser: Annotated[
        list[str] | None,
        typer.Option(
            "--tool-call-parser",
            help="How a model writes tool calls: "
            + ", ".join(f.value for f in ToolFamily)
            + " (repeatable, per model in order). Default: read off the chat template.",
            show_default=False,
            metavar="NAME",
        ),
    ] = None,
    speculate: Annotated[
        str | None,
        typer.Option(
            help=directive_help() + "  [default: off]",
            envvar="SUPERFLUID_SPECULATE",
            rich_help_panel=SPEC,
            metavar="DIRECTIVE",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(help="Address to bind (loopback unless told otherwise).", metavar="ADDRESS"),
    ] = "127.0.0.1",
    port: Annotated[
        str,
        typer.Option(
            help="Port to listen on, 0..=65535; 0 picks a free port, which the log's"
            " `listening on` line shows.",
            metavar="INTEGER",
        ),
    ] = "8453",
    api_key: Annotated[
        str | None,
        typer.Option(
            help="Require this Bearer token on /v1/*.",
            envvar="SUPERFLUID_API_KEY",
            metavar="TOKEN",
        ),
    ] = None,
    offline: Annotated[bool, typer.Option(help="Never fetch the hub catalog.")] = False,
    temperature: Annotated[
        str | None,
        typer.Option(
            help="Default temperature for requests that set none."
            "  [default: the model file's own, else 0.8]",
            metavar="NUMBER",
        ),
    ] = None,
    seed: Annotated[
        str | None,
        typer.Option(
            help="Default seed for requests that set none.  [default: a fresh one per request]",
            metavar="INTEGER",
        ),
    ] = None,
    max_lanes: Annotated[
        int,
        typer.Option(help="Requests decoded at once, per model.", min=1, max=64, metavar="INTEGER"),
    ] = 4,
    max_queue: Annotated[
        str | None,
        typer.Option(
            help="Requests that may wait for a lane, per model; past lanes + queue a request"
            f" gets 429 with Retry-After at once (default {DEFAULT_MAX_QUEUE}).",
            show_default=False,
            metavar="INTEGER",
        ),
    ] = None,
    ctx_size: Annotated[
        int, typer.Option(help="Context window per lane, in tokens.", min=16, metavar="INTEGER")
    ] = 4096,
    shutdown_timeout: Annotated[
        str | None,
        typer.Option(
            help="Seconds SIGTERM or SIGINT lets running requests finish before it ends them"
            " with an error (a second signal ends them at once); the server then exits 0."
            f"  [default: {DEFAULT_SHUTDOWN_TIMEOUT:g}, inside Kubernetes' 30 s grace period]",
            envvar="SUPERFLUID_SHUTDOWN_TIMEOUT",
            show_default=False,
            metavar="NUMBER",
        ),
    ] = None,
    no_monitor: Annotated[
        bool,
        typer.Option(
            "--no-monitor",
            help="No live terminal view; a status line in the log every few seconds instead."
            "  [default: the live view when stderr is a terminal]",
            show_default=False,
        ),
    ] = False,
    prefix_reuse: Annotated[
        bool,
        typer.Option(
            "--prefix-reuse/--no-prefix-reuse",
            help="Keep a finished request's KV for a later prompt that starts the same way"
            " (a chat's next turn); the longest shared prefix is not prefilled again.",
        ),
    ] = True,
    widen_weights: Annotated[
        bool,
        typer.Option(
            "--widen-weights/--no-widen-weights",
            help="On x86, serve a GGUF's Q5_0 weights as Q8_0: the same values and replies,"
            " faster prefill and decoding, from a copy written once under"
            " $SUPERFLUID_HOME/cache/weights (a little larger than the model).",
        ),
    ] = True,
    spec_draft_tokens: Annotated[
        str | None,
        typer.Option(
            help="Draft depth, 1..=64.  [default: per strategy (docs/contract.md §4)]"
            "  [env var: "
            + ", ".join(dict.fromkeys(s.depth_env for s in Strategy if s.depth_env))
            + ", per strategy]",
            rich_help_panel=SPEC,
            metavar="INTEGER",
        ),
    ] = None,
    spec_adaptive: Annotated[
        bool | None,
        typer.Option(
            "--spec-adaptive/--no-spec-adaptive",
            help=_spec("Pick the fastest depth per lane count.", "spec-adaptive", ENV_ADAPTIVE),
            rich_help_panel=SPEC,
        ),
    ] = None,
    spec_min_yield: Annotated[
        str | None,
        typer.Option(
            help=_spec(
                "Accepted tokens per round below which a request stops drafting (a round "
                "asked for fewer tokens than the default depth: in proportion).",
                _DEFAULTS.min_yield,
                ENV_MIN_YIELD,
            ),
            rich_help_panel=SPEC,
            metavar="NUMBER",
        ),
    ] = None,
    spec_yield_rounds: Annotated[
        str | None,
        typer.Option(
            help=_spec(
                "Rounds before the yield floor judges a request.",
                _DEFAULTS.yield_rounds,
                ENV_YIELD_ROUNDS,
            ),
            rich_help_panel=SPEC,
            metavar="INTEGER",
        ),
    ] = None,
    spec_throughput_gate: Annotated[
        bool | None,
        typer.Option(
            "--spec-throughput-gate/--no-spec-throughput-gate",
            help=_spec(
                "Decode plainly where speculation is not faster.",
                "spec-throughput-gate",
                ENV_THROUGHPUT_GATE,
            ),
            rich_help_panel=SPEC,
        ),
    ] = None,
    spec_min_speedup: Annotated[
        str | None,
        typer.Option(
            help=_spec("Speed-up speculation must show.", _DEFAULTS.min_speedup, ENV_MIN_SPEEDUP),
            rich_help_panel=SPEC,
            metavar="NUMBER",
        ),
    ] = None,
    spec_gate_reprobe: Annotated[
        str | None,
        typer.Option(
            help=_spec(
                "Requests before re-measuring a loss (0: final).", _DEFAULTS.reprobe, ENV_REPROBE
            ),
            rich_help_panel=SPEC,
            metavar="INTEGER",
        ),
    ] = None,
    spec_gate_reprobe_max: Annotated[
        str | None,
        typer.Option(
            help=_spec(
                "Cap of the doubling re-probe wait.", _DEFAULTS.reprobe_max, ENV_REPROBE_MAX
            ),
            rich_help_panel=SPEC,
            metavar="INTEGER",
        ),
    ] = None,
    spec_max_temperature: Annotated[
        str | None,
        typer.Option(
            help="Cap a default temperature while speculating.  [default: no cap]",
            rich_help_panel=SPEC,
            metavar="NUMBER",
        ),
    ] = None,
) -> None:
    """Serve models over an OpenAI-compatible HTTP API, speculating where it pays."""
    _setup_logging()
    env = os.environ
    try:
        listen_port = _port(port)  # first: before a bind could fail on it
        settings = from_sources(
            {
                FLAG_DRAFT_TOKENS: spec_draft_tokens,
                FLAG_ADAPTIVE: _bool_flag(spec_adaptive),
                FLAG_MIN_YIELD: spec_min_yield,
                FLAG_YIELD_ROUNDS: spec_yield_rounds,
                FLAG_THROUGHPUT_GATE: _bool_flag(spec_throughput_gate),
                FLAG_MIN_SPEEDUP: spec_min_speedup,
                FLAG_REPROBE: spec_gate_reprobe,
                FLAG_REPROBE_MAX: spec_gate_reprobe_max,
                FLAG_MAX_TEMPERATURE: spec_max_temperature,
            },
            env,
        )
        default_temperature = _temperature(temperature)
        default_seed = None if seed is None else parse_number("--seed", seed, kind=int)
        paths = [
            Path(p).expanduser() for p in ([model] if model else []) + list(extra_models or [])
        ]
        if not paths:
            paths = _demo_models(env)
        templates = chat_template_file or []
        if len(templates) <= len(paths):  # more than one per model is refused with the plan
            for template in templates:
                # Refused now, naming the flag and the file, not after minutes of loading.
                _check_template_file(Path(template).expanduser())
        plan = ServePlan(
            models=tuple(paths),
            speculate=speculate,
            settings=settings,
            host=host,
            port=listen_port,
            api_key=api_key,
            offline=offline,
            temperature=default_temperature,
            seed=default_seed,
            max_lanes=max_lanes,
            ctx_size=ctx_size,
            monitor=not no_monitor,
            env=dict(env),
            served_names=_served_names(served_model_name),
            max_queue=_max_queue(max_queue),
            prefix_reuse=prefix_reuse,
            widen_weights=widen_weights,
            chat_templates=tuple(Path(p).expanduser() for p in chat_template_file or []),
            tool_parsers=_tool_parsers(tool_call_parser),
            shutdown_timeout=_shutdown_timeout(shutdown_timeout),
        )
        _serve(plan)
    except SuperfluidError as error:
        fail(error.message)


def _ranged(
    flag: str,
    raw: str,
    low: float,
    high: float,
    shown: str,
    *,
    kind: type[int] | type[float] = float,
) -> int | float:
    """`raw` as a number of `kind` between `low` and `high`; a SuperfluidError saying `flag`
    must be `shown` otherwise."""
    value = parse_number(flag, raw, kind=kind)
    if not (math.isfinite(value) and low <= value <= high):
        raise SuperfluidError(f"{flag} must be {shown}, got {raw.strip()}")
    return value


def _port(raw: str) -> int:
    return int(_ranged("--port", raw, 0, 65535, "in 0..=65535 (0 picks a free port)", kind=int))


def _shutdown_timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_SHUTDOWN_TIMEOUT
    return float(_ranged("--shutdown-timeout", raw, 0, 86_400, "in 0..=86400 seconds"))


def _max_queue(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_MAX_QUEUE
    return int(_ranged("--max-queue", raw, 0, 100_000, "in 0..=100000", kind=int))


def _tool_parsers(raw: list[str] | None) -> tuple[ToolFamily, ...]:
    families = []
    for name in raw or []:
        try:
            families.append(ToolFamily(name.strip().lower()))
        except ValueError:
            known = ", ".join(f.value for f in ToolFamily)
            raise SuperfluidError(
                f"--tool-call-parser must be one of {known}, got {name!r}"
            ) from None
    return tuple(families)


def _served_names(raw: list[str] | None) -> tuple[str, ...]:
    names = []
    for name in raw or []:
        shown = name.strip()
        if not shown or any(not ch.isprintable() or ch.isspace() for ch in shown):
            raise SuperfluidError(
                f"--served-model-name must be a name without spaces or control characters,"
                f" got {name!r}"
            )
        names.append(shown)
    return tuple(names)


def _temperature(raw: str | None) -> float | None:
    if raw is None:
        return None
    return float(_ranged("--temperature", raw, 0.0, 2.0, "a finite number in [0, 2]"))


def _serve(plan: ServePlan) -> None:
    from superfluid.entrypoints.server import run_server

    run_server(plan)


def main() -> None:
    app()
