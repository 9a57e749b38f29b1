"""The CLI's promises: one line per mistake on stderr, exit 2, never a traceback."""

from importlib import metadata

import pytest
from typer.testing import CliRunner

from superfluid.entrypoints.cli import app

runner = CliRunner()


def serve(*args, env=None):
    result = runner.invoke(app, ["serve", "--port", "0", *args], env=env or {})
    return result.exit_code, result.stderr


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"NOTAGGUF")
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spec-draft-tokens", "0"], "--spec-draft-tokens must be in 1..=64"),
        (["--spec-draft-tokens", "65"], "--spec-draft-tokens must be in 1..=64"),
        (["--spec-draft-tokens", "many"], '--spec-draft-tokens expects a number, got "many"'),
        (["--spec-min-yield", "-1"], "--spec-min-yield must be finite and non-negative"),
        (["--spec-min-yield", "nan"], "--spec-min-yield must be finite and non-negative"),
        (["--spec-yield-rounds", "0"], "--spec-yield-rounds must be at least 1"),
        (["--spec-min-speedup", "0.5"], "--spec-min-speedup must be finite and at least 1.0"),
        (["--spec-min-speedup", "inf"], "--spec-min-speedup must be finite and at least 1.0"),
        (
            ["--spec-max-temperature", "3"],
            "--spec-max-temperature must be a finite number in [0, 2], got 3",
        ),
        (["--spec-max-temperature", "x"], '--spec-max-temperature expects a number, got "x"'),
        (["--temperature", "hot"], '--temperature expects a number, got "hot"'),
        (["--seed", "1.5"], '--seed expects a number, got "1.5"'),
        (["--max-queue", "-1"], "--max-queue must be in 0..=100000, got -1"),
        (["--max-queue", "some"], '--max-queue expects a number, got "some"'),
        (["--shutdown-timeout", "-1"], "--shutdown-timeout must be in 0..=86400 seconds, got -1"),
        (["--shutdown-timeout", "soon"], '--shutdown-timeout expects a number, got "soon"'),
        (["--port", "99999"], "--port must be in 0..=65535 (0 picks a free port), got 99999"),
        (["--port", "65536"], "--port must be in 0..=65535 (0 picks a free port), got 65536"),
        (["--port", "-1"], "--port must be in 0..=65535 (0 picks a free port), got -1"),
        (["--port", "http"], '--port expects a number, got "http"'),
        (
            ["--served-model-name", "a b"],
            "--served-model-name must be a name without spaces or control characters, got 'a b'",
        ),
        (
            ["--served-model-name", "a", "--served-model-name", "b"],
            "2 --served-model-name values for 1 model(s); give at most one per model,"
            " in the order the models are given",
        ),
        (
            ["--tool-call-parser", "xml"],
            "--tool-call-parser must be one of hermes, llama3, mistral, pythonic, got 'xml'",
        ),
        (
            ["--chat-template-file", "a.jinja", "--chat-template-file", "b.jinja"],
            "2 --chat-template-file values for 1 model(s); give at most one per model,"
            " in the order the models are given",
        ),
    ],
)
def test_invalid_speculation_flags_exit_2_with_the_contract_message(gguf, args, message):
    code, err = serve(gguf, *args)
    assert code == 2
    assert err == f"superfluid: {message}\n"


def test_an_environment_value_is_validated_like_its_flag(gguf):
    code, err = serve(gguf, env={"SUPERFLUID_SPEC_MIN_SPEEDUP": "0.9"})
    assert (code, err) == (2, "superfluid: --spec-min-speedup must be finite and at least 1.0\n")


def test_a_flag_wins_over_its_environment_variable(gguf):
    # The env value is invalid, the flag is valid: startup gets past settings to the model file.
    code, err = serve(gguf, "--spec-min-yield", "0.5", env={"SUPERFLUID_SPEC_MIN_YIELD": "-3"})
    assert code == 2
    assert "not a model superfluid can serve" in err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "fast",
            "--speculate fast: expected auto | prompt-lookup | mtp-head | a drafter .base path | dflash/dspark/eagle3/draft-model:<path>",
        ),
    ],
)
def test_a_bad_directive_is_one_line_and_exit_2(tmp_path, value, message):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF\x03\x00\x00\x00")
    code, err = serve(str(model), "--speculate", value)
    assert (code, err) == (2, f"superfluid: {message}\n")


def test_a_missing_or_unknown_model_file_is_one_line_and_exit_2(tmp_path, gguf):
    code, err = serve(str(tmp_path / "nope.gguf"))
    assert (code, err) == (2, f"superfluid: {tmp_path / 'nope.gguf'}: no such model file\n")
    code, err = serve(gguf)
    assert code == 2 and err.count("\n") == 1 and "not a model superfluid can serve" in err


def test_help_lists_every_speculation_flag():
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in (
        "--speculate",
        "--spec-draft-tokens",
        "--spec-adaptive",
        "--no-spec-adaptive",
        "--spec-min-yield",
        "--spec-yield-rounds",
        "--spec-throughput-gate",
        "--no-spec-throughput-gate",
        "--spec-min-speedup",
        "--spec-gate-reprobe",
        "--spec-gate-reprobe-max",
        "--spec-max-temperature",
        "--max-lanes",
        "--ctx-size",
        "--api-key",
        "--offline",
        "--no-monitor",
        "--max-queue",
        "--served-model-name",
        "--prefix-reuse",
        "--no-prefix-reuse",
        "--widen-weights",
        "--no-widen-weights",
    ):
        assert flag in result.output, flag


def test_help_says_the_defaults_of_the_operations_flags():
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    assert "gets 429 with Retry-After at once (default 16)" in text
    assert "Default: the file name." in text


def test_two_models_cannot_share_a_served_name(tmp_path):
    models = []
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF\x03\x00\x00\x00")
        models.append(str(tmp_path / name))
    code, err = serve(models[0], "--model", models[1], "--served-model-name", "b.gguf")
    assert code == 2 and err.count("\n") == 1
    assert "two models answer to the name b.gguf" in err


def test_a_chat_template_file_that_does_not_parse_is_refused_before_the_model_loads(gguf, tmp_path):
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }}")
    code, err = serve(gguf, "--chat-template-file", str(broken))
    assert code == 2
    assert err.startswith(f"superfluid: the chat template from --chat-template-file {broken} ")
    assert err.count("\n") == 1 and "Traceback" not in err
    code, err = serve(gguf, "--chat-template-file", str(tmp_path / "missing.jinja"))
    assert (code, err) == (
        2,
        f"superfluid: --chat-template-file {tmp_path / 'missing.jinja'}: No such file or"
        " directory\n",
    )


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_out_of_range_is_refused_before_the_model_is_looked_at(tmp_path, port):
    # The model file does not exist: the port is the first thing refused.
    code, err = serve(str(tmp_path / "nope.gguf"), "--port", port)
    assert (code, err) == (
        2,
        f"superfluid: --port must be in 0..=65535 (0 picks a free port), got {port}\n",
    )


@pytest.mark.parametrize("port", ["0", "65535"])
def test_the_ends_of_the_port_range_are_accepted(tmp_path, port):
    # Accepted: startup gets past the port to the missing model file.
    code, err = serve(str(tmp_path / "nope.gguf"), "--port", port)
    assert (code, err) == (2, f"superfluid: {tmp_path / 'nope.gguf'}: no such model file\n")


def test_help_says_port_0_picks_a_free_port():
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert "0 picks a free port" in " ".join(result.output.split())


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_installed_version(flag):
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0
    assert result.stdout == f"superfluid {metadata.version('superfluid')}\n"
