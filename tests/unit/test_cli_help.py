"""`--help` in an 80-column terminal: every flag and variable name whole, every number typed."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from superfluid.domain.strategies import Strategy
from superfluid.entrypoints.cli import app
from superfluid.entrypoints.cli_reference import commands
from superfluid.entrypoints.serve_settings import OPTIONS

runner = CliRunner()

#: Flags whose value is a number, and the type --help must show for it.
NUMBERS = {
    "--port": "INTEGER",
    "--temperature": "NUMBER",
    "--seed": "INTEGER",
    "--max-lanes": "INTEGER",
    "--max-queue": "INTEGER",
    "--ctx-size": "INTEGER",
    "--spec-draft-tokens": "INTEGER",
    "--spec-min-yield": "NUMBER",
    "--spec-yield-rounds": "INTEGER",
    "--spec-min-speedup": "NUMBER",
    "--spec-gate-reprobe": "INTEGER",
    "--spec-gate-reprobe-max": "INTEGER",
    "--spec-max-temperature": "NUMBER",
}
#: The variables `serve`'s knobs fall back to, which --help names in their text.
SERVE_ENV = [
    *(option.knob.env for option in OPTIONS if option.knob.env),
    *(s.depth_env for s in Strategy if s.depth_env),
]


def command_at(path: list[str]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def help_at_80(path: list[str]) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="superfluid")
    assert result.exit_code == 0, result.output
    return result.output


def whole(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("path", list(commands()), ids=lambda path: " ".join(path) or "top")
def test_help_at_80_columns_shows_every_flag_and_variable_whole(path):
    shown = help_at_80(path)
    params = command_at(path).params
    flags = [flag for p in params for flag in [*p.opts, *p.secondary_opts] if flag.startswith("-")]
    variables = [p.envvar for p in params if isinstance(p.envvar, str)]
    if path == ["serve"]:
        variables += SERVE_ENV
        assert "--no-spec-throughput-gate" in flags and "SUPERFLUID_SPEC_GATE" in variables
    for name in flags + variables:
        assert whole(name, shown), name
    for line in shown.splitlines():
        assert len(line) <= 80, line
        # Click cuts a command's summary with "..."; a usage line's "[ARGS]..." means "more".
        assert line.startswith("Usage:") or not line.endswith("..."), line
    assert "…" not in shown


def test_help_at_80_columns_never_splits_a_hyphenated_word():
    shown = help_at_80(["serve"])
    assert not re.search(r"\w-\n", shown), "a line ends inside a hyphenated word"
    flat = " ".join(shown.split())
    for word in ("draft-model", "prompt-lookup", "no-offline", "spec-throughput-gate"):
        assert word in flat, word


def test_numeric_flags_show_their_type():
    shown = help_at_80(["serve"])
    for flag, kind in NUMBERS.items():
        term = re.search(rf"^  {re.escape(flag)}(?![\w-])(.*?)(  |$)", shown, re.MULTILINE)
        assert term is not None, flag
        assert term.group(1).strip() == kind, (flag, term.group(1))
    assert "TEXT" not in shown
    assert not re.search(r"^  --\S+ <str>", shown, re.MULTILINE)


def test_top_level_help_offers_the_version():
    shown = help_at_80([])
    assert "-V, --version" in shown
