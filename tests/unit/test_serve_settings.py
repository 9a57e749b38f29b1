"""A serve knob is declared once, on the field it fills; `serve`'s options, variables,
defaults and --help are derived from those fields."""

import dataclasses
import re
from pathlib import Path

import pytest
import typer

from superfluid.application.serving import ServePlan
from superfluid.domain.errors import SettingsError
from superfluid.domain.knobs import knob, knob_of
from superfluid.domain.spec_settings import SpecSettings
from superfluid.entrypoints.cli import app
from superfluid.entrypoints.cli_reference import help_text as rendered_help
from superfluid.entrypoints.serve_settings import OPTIONS, help_text, resolve, shown_default

ROOT = Path(__file__).resolve().parents[2]
#: The modules whose dataclass fields declare the knobs.
DECLARED_IN = ["src/superfluid/application/serving.py", "src/superfluid/domain/spec_settings.py"]
#: ServePlan's fields that are not serve options.
NOT_OPTIONS = {"settings", "env"}

SPEC_ENV = {
    "SUPERFLUID_SPEC_ADAPTIVE": "0",
    "SUPERFLUID_SPEC_MIN_YIELD": "0.5",
    "SUPERFLUID_SPEC_LANE_YIELD_ROUNDS": "12",
    "SUPERFLUID_SPEC_GATE": "off",
    "SUPERFLUID_SPEC_MIN_SPEEDUP": "1.2",
    "SUPERFLUID_SPEC_GATE_REPROBE": "16",
    "SUPERFLUID_SPEC_GATE_REPROBE_MAX": "256",
}


def settings(given=None, env=None):
    return SpecSettings(**resolve(given or {}, env or {}).settings).validate()


def flat(text):
    return " ".join(text.split())


def knob_fields():
    """`Holder.field` for every field of ServePlan and SpecSettings that carries a knob."""
    return [
        f"{holder.__name__}.{f.name}"
        for holder in (ServePlan, SpecSettings)
        for f in dataclasses.fields(holder)
        if knob_of(f) is not None
    ]


# -- the recipe ----------------------------------------------------------------------------


def test_the_recipe_for_a_new_serve_knob_names_the_modules_that_declare_knobs():
    page = (ROOT / "docs" / "architecture.md").read_text()
    heading = "### A new serve knob\n"
    assert heading in page, "docs/architecture.md has no recipe `### A new serve knob`"
    section = re.split(r"\n#{2,3} ", page.split(heading, 1)[1])[0]
    named = [
        name
        for name in re.findall(r"`([^`\s]+)`", section)
        if re.fullmatch(r"[\w./-]+\.(py|md)", name)
    ]
    for module in DECLARED_IN:
        assert module in named, module
    for name in named:
        assert (ROOT / name).is_file(), name
    steps = re.findall(r"^\d+\. ", section, re.MULTILINE)
    assert 1 <= len(steps) <= 2, "a new serve knob touches at most two places"


# -- the fields are the one source ---------------------------------------------------------


def test_every_serve_option_comes_from_a_knob_field_in_field_order():
    command = typer.main.get_command(app).commands["serve"]
    options = [p for p in command.params if p.param_type_name == "option"]
    assert [option.lands for option in OPTIONS] == knob_fields()
    assert [p.name for p in options] == [option.knob.name for option in OPTIONS]
    for param, option in zip(options, OPTIONS, strict=True):
        assert "/".join([*param.opts, *param.secondary_opts]) == option.knob.flag
        assert param.envvar is None, f"{option.knob.flag}: its variable is read in one place"


def test_every_field_but_the_plans_settings_and_environment_is_a_serve_option():
    plan = {f.name for f in dataclasses.fields(ServePlan)}
    spec = {f.name for f in dataclasses.fields(SpecSettings)}
    assert set(knob_fields()) == {f"ServePlan.{name}" for name in plan - NOT_OPTIONS} | {
        f"SpecSettings.{name}" for name in spec
    }


def test_option_names_flags_and_variables_are_unique():
    for attribute in ("name", "flag", "env"):
        given = [getattr(o.knob, attribute) for o in OPTIONS if getattr(o.knob, attribute)]
        assert len(given) == len(set(given)), attribute


def test_a_switch_declared_without_a_rule_reads_its_word_as_on_or_off():
    @dataclasses.dataclass
    class Plan:
        loud: bool = knob(True, flag="--loud/--quiet", help="Loud.", kind="switch")

    switch = knob_of(dataclasses.fields(Plan)[0])
    assert switch is not None
    assert (switch.rule("--loud", "false"), switch.rule("--loud", "on")) == (False, True)


def test_no_knob_is_built_outside_a_field_declaration():
    for path in sorted((ROOT / "src").rglob("*.py")):
        if path.name != "knobs.py":
            assert "Knob(" not in path.read_text(), path


def test_every_option_shows_its_help_default_and_variable_in_help_and_the_reference():
    shown = flat(rendered_help(["serve"]))
    page = flat((ROOT / "docs" / "cli.md").read_text())
    for option in OPTIONS:
        knob = option.knob
        said = flat(help_text(option))
        assert flat(knob.help.replace("{default}", shown_default(option))) in said, knob.flag
        assert said in shown and said in page, knob.flag
        if knob.env is not None:
            assert f"[env var: {knob.env}]" in said, knob.flag
        if knob.shown is not None:
            default = knob.shown.replace("{default}", shown_default(option))
            assert f"[default: {default}" in shown and f"[default: {default}" in page, knob.flag


# -- flag > environment > default ----------------------------------------------------------


def test_with_nothing_given_every_knob_has_its_default():
    knobs = resolve({}, {})
    assert SpecSettings(**knobs.settings) == SpecSettings()
    plan = ServePlan(settings=SpecSettings(), **knobs.plan)
    assert plan == ServePlan(models=(), speculate=None, settings=SpecSettings())


def test_the_environment_fills_in_what_no_flag_gives():
    assert settings(env=SPEC_ENV) == SpecSettings(
        adaptive=False,
        min_yield=0.5,
        yield_rounds=12,
        throughput_gate=False,
        min_speedup=1.2,
        reprobe=16,
        reprobe_max=256,
    )
    env = {
        "SUPERFLUID_SPECULATE": "auto",
        "SUPERFLUID_API_KEY": "token",
        "SUPERFLUID_SHUTDOWN_TIMEOUT": "3",
    }
    plan = resolve({}, env).plan
    assert (plan["speculate"], plan["api_key"], plan["shutdown_timeout"]) == ("auto", "token", 3)


def test_a_flag_beats_the_environment():
    given = {
        "spec_adaptive": True,
        "spec_min_yield": "1.5",
        "spec_yield_rounds": "40",
        "spec_throughput_gate": True,
        "spec_min_speedup": "1.3",
        "spec_gate_reprobe": "8",
        "spec_gate_reprobe_max": "64",
    }
    assert settings(given, SPEC_ENV) == SpecSettings(
        min_yield=1.5, yield_rounds=40, min_speedup=1.3, reprobe=8, reprobe_max=64
    )
    plan = resolve({"speculate": "off"}, {"SUPERFLUID_SPECULATE": "auto"}).plan
    assert plan["speculate"] == "off"


def test_an_off_switch_beats_its_variable():
    given = {"spec_adaptive": False, "spec_throughput_gate": False}
    env = {"SUPERFLUID_SPEC_ADAPTIVE": "1", "SUPERFLUID_SPEC_GATE": "on"}
    chosen = settings(given, env)
    assert (chosen.adaptive, chosen.throughput_gate) == (False, False)


def test_an_absent_flag_falls_through_to_the_environment():
    chosen = settings({"spec_min_yield": None}, {"SUPERFLUID_SPEC_MIN_YIELD": "0.25"})
    assert chosen.min_yield == 0.25


def test_an_empty_variable_counts_as_unset():
    assert settings(env={"SUPERFLUID_SPEC_MIN_SPEEDUP": ""}).min_speedup == 1.08
    assert resolve({}, {"SUPERFLUID_SPECULATE": ""}).plan["speculate"] is None


def test_a_blank_environment_value_counts_as_unset():
    assert settings(env={"SUPERFLUID_SPEC_MIN_SPEEDUP": " "}).min_speedup == 1.08
    env = {"SUPERFLUID_SPEC_MIN_YIELD": "0.5"}
    assert settings({"spec_min_yield": " "}, env=env).min_yield == 0.5


def test_flags_without_an_environment_fallback_are_read():
    chosen = settings({"spec_draft_tokens": "6", "spec_max_temperature": "0.7"})
    assert (chosen.draft_tokens, chosen.max_temperature) == (6, 0.7)


def test_a_malformed_environment_value_names_the_variable():
    with pytest.raises(SettingsError) as refused:
        settings(env={"SUPERFLUID_SPEC_GATE_REPROBE": "soon"})
    assert refused.value.message == 'SUPERFLUID_SPEC_GATE_REPROBE expects a number, got "soon"'
    with pytest.raises(SettingsError) as refused:
        settings(env={"SUPERFLUID_SPEC_ADAPTIVE": "maybe"})
    assert refused.value.message == (
        'SUPERFLUID_SPEC_ADAPTIVE expects one of 1/0/true/false/on/off/yes/no, got "maybe"'
    )
    with pytest.raises(SettingsError) as refused:
        resolve({}, {"SUPERFLUID_SHUTDOWN_TIMEOUT": "-1"})
    assert refused.value.message == (
        "SUPERFLUID_SHUTDOWN_TIMEOUT must be in 0..=86400 seconds, got -1"
    )


def test_a_malformed_flag_number_names_the_flag():
    with pytest.raises(SettingsError) as refused:
        settings({"spec_draft_tokens": "four"})
    assert refused.value.message == '--spec-draft-tokens expects a number, got "four"'


def test_an_environment_value_out_of_range_is_refused_naming_the_flag():
    with pytest.raises(SettingsError) as refused:
        settings(env={"SUPERFLUID_SPEC_MIN_SPEEDUP": "0.5"})
    assert refused.value.message == "--spec-min-speedup must be finite and at least 1.0"


def test_an_out_of_range_max_temperature_is_reported_as_typed():
    with pytest.raises(SettingsError) as refused:
        settings({"spec_max_temperature": "3.0"})
    assert refused.value.message == (
        "--spec-max-temperature must be a finite number in [0, 2], got 3.0"
    )
    with pytest.raises(SettingsError) as refused:
        settings({"spec_max_temperature": "nan"})
    assert refused.value.message.endswith("got nan")


def test_repeatable_knobs_read_each_value():
    plan = resolve(
        {"served_model_name": [" a "], "tool_call_parser": ["HERMES"], "model": ["~/m.gguf"]}, {}
    ).plan
    assert plan["served_names"] == ("a",)
    assert [f.value for f in plan["tool_parsers"]] == ["hermes"]
    assert plan["models"] == (Path("~/m.gguf").expanduser(),)


def test_no_monitor_turns_the_monitor_off():
    assert resolve({"no_monitor": True}, {}).plan["monitor"] is False
    assert resolve({}, {}).plan["monitor"] is True
