"""docs/cli.md is the CLI's own --help, and --help says every speculation default."""

from __future__ import annotations

import re
from pathlib import Path

from superfluid.entrypoints.cli_reference import commands, help_text, render

PAGE = Path(__file__).parents[2] / "docs" / "cli.md"


def test_the_cli_reference_is_what_the_cli_prints() -> None:
    assert PAGE.read_text() == render(), (
        "docs/cli.md is stale: run .venv/bin/python -m superfluid.entrypoints.cli_reference"
        " > docs/cli.md"
    )


def test_the_cli_reference_cuts_nothing_short() -> None:
    page = PAGE.read_text()
    assert "…" not in page
    blocks = page.split("```text\n")[1:]
    assert blocks
    for block in blocks:
        for line in block.split("```")[0].splitlines():
            assert len(line) <= 80, line


def test_every_command_has_a_section() -> None:
    titled = [line for line in PAGE.read_text().splitlines() if line.startswith("## ")]
    assert len(titled) == len(list(commands())) >= 5


def test_every_speculation_flag_shows_its_default_and_its_variable() -> None:
    shown = help_text(["serve"])
    section = shown[shown.index("\nSpeculation:\n") :]
    entries = re.split(r"\n  (?=--)", section)[1:]
    flags = [entry.split()[0] for entry in entries]
    assert len(flags) == 10
    for flag, entry in zip(flags, entries, strict=True):
        said = " ".join(entry.split())
        assert "[default:" in said, flag
        if flag not in ("--speculate", "--spec-max-temperature"):
            assert "[env var:" in said, flag
