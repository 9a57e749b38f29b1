"""docs/cli.md is the CLI's own --help, and --help says every speculation default."""

from __future__ import annotations

from pathlib import Path

from superfluid.entrypoints.cli_reference import commands, help_text, render

PAGE = Path(__file__).parents[2] / "docs" / "cli.md"


def test_the_cli_reference_is_what_the_cli_prints() -> None:
    assert PAGE.read_text() == render(), (
        "docs/cli.md is stale: run .venv/bin/python -m superfluid.entrypoints.cli_reference"
        " > docs/cli.md"
    )


def test_every_command_has_a_section() -> None:
    titled = [line for line in PAGE.read_text().splitlines() if line.startswith("## ")]
    assert len(titled) == len(list(commands())) >= 5


def test_every_speculation_flag_shows_its_default_and_its_variable() -> None:
    shown = help_text(["serve"])
    panel = shown[shown.index("Speculation") :]
    flags = [part.split()[0] for part in panel.split("│ --")[1:]]
    assert len(flags) == 10
    for flag in flags:
        entry = panel[panel.index(f"--{flag}") :].split("│ --")[0]
        assert "[default:" in entry, flag
        if flag not in ("speculate", "spec-max-temperature"):
            assert "[env var:" in entry.replace("│", "").replace("\n", ""), flag
