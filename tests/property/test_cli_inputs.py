"""Whatever a user types into `--speculate` or a speculation flag: one line, exit 2, no traceback."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from superfluid.entrypoints.cli import app

runner = CliRunner()
NUMBER_FLAGS = [
    "--spec-draft-tokens",
    "--spec-min-yield",
    "--spec-yield-rounds",
    "--spec-min-speedup",
    "--spec-gate-reprobe",
    "--spec-gate-reprobe-max",
    "--spec-max-temperature",
    "--temperature",
    "--seed",
    "--port",
]
# Printable text without NUL (which no shell can pass in an argument).
typed = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)


@pytest.fixture(scope="module")
def not_a_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "model.gguf"
    # Not even a GGUF header: refused before the port opens (a file that only fails to load
    # would be refused after it, below a `listening on` line).
    path.write_bytes(b"NOTAGGUF not really a model")
    return str(path)


def assert_one_line_refusal(result):
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("superfluid: "), result.stderr


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=typed)
def test_any_speculate_value_is_refused_in_one_line(not_a_model, value):
    # The file is not a loadable model, so even a valid directive ends in a one-line refusal.
    result = runner.invoke(
        app, ["serve", not_a_model, "--port", "0", f"--speculate={value}"], env={}
    )
    assert_one_line_refusal(result)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(NUMBER_FLAGS), value=typed)
def test_any_flag_value_is_accepted_or_refused_in_one_line(not_a_model, flag, value):
    result = runner.invoke(app, ["serve", not_a_model, "--port", "0", f"{flag}={value}"], env={})
    assert_one_line_refusal(result)
