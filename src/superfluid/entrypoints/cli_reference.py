"""docs/cli.md, generated from the typer app: every command's `--help`, as a terminal shows it.

    .venv/bin/python -m superfluid.entrypoints.cli_reference > docs/cli.md

tests/unit/test_cli_reference.py fails when docs/cli.md differs from what this renders, so the
reference cannot go stale. Help is rendered as an 80-column terminal shows it (click lays help
out at most 80 columns wide, whatever the terminal).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from superfluid.entrypoints.cli import app

WIDTH = 80

HEAD = """# CLI reference

Generated from the `superfluid` command by `python -m superfluid.entrypoints.cli_reference`; do
not edit by hand (tests/unit/test_cli_reference.py fails when this page is stale). Each section
is the command's `--help`: every flag with its default and, where it has one, the environment
variable it falls back to. docs/contract.md says what the speculation flags do.
"""


def commands() -> Iterator[list[str]]:
    """Every command path, the top level first, then depth first in the app's order."""

    def walk(command: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        listed = getattr(command, "commands", None)  # a group: its subcommands, in order
        for name, sub in (listed or {}).items():
            if not getattr(sub, "hidden", False):
                yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def help_text(path: list[str]) -> str:
    env = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    result = CliRunner().invoke(app, [*path, "--help"], env=env, prog_name="superfluid")
    if result.exit_code != 0:
        raise RuntimeError(f"superfluid {' '.join(path)} --help failed: {result.output}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines).rstrip() + "\n"


def render() -> str:
    sections = [HEAD]
    for path in commands():
        title = " ".join(["superfluid", *path])
        sections.append(f"## `{title}`\n\n```text\n{help_text(path)}```\n")
    return "\n".join(sections)


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", str(WIDTH))
    print(render(), end="")
