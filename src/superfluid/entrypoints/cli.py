"""`superfluid` on the command line.

Every error a user can cause is one line on stderr, `superfluid: <what is wrong>`, and exit
status 2 — never a traceback.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer import _click as click  # the click typer runs on: its help layout is ours to adjust
from typer.core import TyperCommand, TyperGroup

from superfluid.application.serving import ServePlan
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.spec_settings import SpecSettings
from superfluid.entrypoints.serve_settings import OPTIONS, ServeOption, help_text, resolve

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


# Its options are `serve_settings.OPTIONS` (the knobs on the fields of ServePlan and
# SpecSettings), set as its signature below; `given` maps each option's name to what its flag gave.
def serve(
    model_file: Annotated[
        str | None,
        typer.Argument(
            help="Model file: .gguf, .base or an MLX directory. Default: the demo models"
            " (Gemma 3 270M, a base model, and SmolLM2-135M-Instruct when installed).",
            metavar="MODEL",
        ),
    ] = None,
    **given: Any,
) -> None:
    """Serve models over an OpenAI-compatible HTTP API, speculating where it pays."""
    _setup_logging()
    env = os.environ
    try:
        knobs = resolve(given, env)
        settings = SpecSettings(**knobs.settings).validate()
        paths = [Path(model_file).expanduser()] if model_file else []
        paths += knobs.plan.pop("models")  # MODEL first, then each --model
        if not paths:
            paths = _demo_models(env)
        templates = knobs.plan["chat_templates"]
        if len(templates) <= len(paths):  # more than one per model is refused with the plan
            for template in templates:
                # Refused now, naming the flag and the file, not after minutes of loading.
                _check_template_file(template)
        plan = ServePlan(models=tuple(paths), settings=settings, env=dict(env), **knobs.plan)
        _serve(plan)
    except SuperfluidError as error:
        fail(error.message)


def _option(option: ServeOption) -> inspect.Parameter:
    """`serve`'s parameter for an option. An absent flag gives None, so `resolve` reads the
    variable next; a bounded option's flag gives its default, which click shows with the range."""
    knob = option.knob
    low, high = knob.bounds or (None, None)
    info = typer.Option(
        knob.flag,
        help=help_text(option),
        metavar=knob.metavar,
        rich_help_panel=knob.panel,
        show_default=knob.bounded,
        min=low,
        max=high,
    )
    taken: object = (
        int
        if knob.bounded
        else {"text": str | None, "switch": bool | None, "repeat": list[str] | None}[knob.kind]
    )
    return inspect.Parameter(
        knob.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=option.default if knob.bounded else None,
        annotation=Annotated[taken, info],
    )


# `serve` takes MODEL, then one option per knob field, in field order.
_MODEL_FILE = inspect.signature(serve, eval_str=True).parameters["model_file"]
serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_MODEL_FILE, *map(_option, OPTIONS)], return_annotation=None
)
app.command(cls=_Command)(serve)


def _serve(plan: ServePlan) -> None:
    from superfluid.entrypoints.server import run_server

    run_server(plan)


def main() -> None:
    app()
