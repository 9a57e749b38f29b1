import math

import pytest

from superfluid.domain.errors import SettingsError
from superfluid.domain.knobs import parse_bool, parse_number
from superfluid.domain.spec_settings import (
    UNKNOWN_BLOCK_DEPTH,
    SpecSettings,
    default_depth,
    depth_for,
)
from superfluid.domain.strategies import Strategy

# -- default depths (§4) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "kwargs", "depth"),
    [
        ("mtp-head", {}, 3),
        ("mtp-head", {"arch": "qwen3"}, 3),
        ("mtp-head", {"arch": "glm_dsa"}, 1),
        ("eagle3", {}, 2),
        ("dflash", {"block_size": 8}, 8),
        ("dspark", {"block_size": 5}, 5),
        ("prompt-lookup", {}, 4),
        ("draft-model", {}, 4),
    ],
)
def test_each_strategy_has_the_contracts_default_depth(strategy, kwargs, depth):
    assert default_depth(Strategy(strategy), **kwargs) == depth


def test_a_block_drafter_drafts_its_width_up_to_64():
    assert default_depth(Strategy.DFLASH, block_size=16) == 16
    assert default_depth(Strategy.DFLASH, block_size=70) == 64


@pytest.mark.parametrize("block_size", [None, 0, -3])
def test_a_block_drafter_of_unknown_width_gets_the_safe_depth(block_size):
    assert default_depth(Strategy.DSPARK, block_size=block_size) == UNKNOWN_BLOCK_DEPTH == 4


def test_off_has_no_depth():
    with pytest.raises(ValueError):
        default_depth(Strategy.OFF)


# -- validation messages, verbatim (§7) ------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (SpecSettings(draft_tokens=0), "--spec-draft-tokens must be in 1..=64"),
        (SpecSettings(draft_tokens=65), "--spec-draft-tokens must be in 1..=64"),
        (SpecSettings(min_yield=-0.1), "--spec-min-yield must be finite and non-negative"),
        (SpecSettings(min_yield=math.nan), "--spec-min-yield must be finite and non-negative"),
        (SpecSettings(min_yield=math.inf), "--spec-min-yield must be finite and non-negative"),
        (SpecSettings(yield_rounds=0), "--spec-yield-rounds must be at least 1"),
        (SpecSettings(min_speedup=0.99), "--spec-min-speedup must be finite and at least 1.0"),
        (SpecSettings(min_speedup=math.inf), "--spec-min-speedup must be finite and at least 1.0"),
        (SpecSettings(min_speedup=math.nan), "--spec-min-speedup must be finite and at least 1.0"),
        (
            SpecSettings(max_temperature=2.5),
            "--spec-max-temperature must be a finite number in [0, 2], got 2.5",
        ),
        (
            SpecSettings(max_temperature=3.0),
            "--spec-max-temperature must be a finite number in [0, 2], got 3",
        ),
        (
            SpecSettings(max_temperature=-0.5),
            "--spec-max-temperature must be a finite number in [0, 2], got -0.5",
        ),
        (
            SpecSettings(max_temperature=math.nan),
            "--spec-max-temperature must be a finite number in [0, 2], got NaN",
        ),
        (
            SpecSettings(max_temperature=math.inf),
            "--spec-max-temperature must be a finite number in [0, 2], got inf",
        ),
        (SpecSettings(reprobe=-1), "--spec-gate-reprobe must be at least 0"),
        (
            SpecSettings(reprobe=64, reprobe_max=32),
            "--spec-gate-reprobe-max must be at least --spec-gate-reprobe",
        ),
    ],
)
def test_an_out_of_range_setting_is_refused_with_the_contracts_words(settings, message):
    with pytest.raises(SettingsError) as refused:
        settings.validate()
    assert refused.value.message == message


def test_the_defaults_are_the_contracts_and_valid():
    settings = SpecSettings().validate()
    assert settings == SpecSettings(
        draft_tokens=None,
        adaptive=True,
        min_yield=0.75,
        yield_rounds=24,
        throughput_gate=True,
        min_speedup=1.08,
        reprobe=32,
        reprobe_max=1024,
        max_temperature=None,
    )


@pytest.mark.parametrize(
    "settings",
    [
        SpecSettings(draft_tokens=1),
        SpecSettings(draft_tokens=15),
        SpecSettings(draft_tokens=16),
        SpecSettings(draft_tokens=64),
        SpecSettings(min_yield=0.0),
        SpecSettings(min_speedup=1.0),
        SpecSettings(max_temperature=0.0),
        SpecSettings(max_temperature=2.0),
        SpecSettings(reprobe=0, reprobe_max=0),
    ],
)
def test_the_edges_of_every_range_are_accepted(settings):
    assert settings.validate() is settings


# -- malformed numbers ---------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "", "  ", "1,5", "0x10", "1_000", "1.2.3"])
def test_a_malformed_number_is_refused_naming_the_flag_and_the_text(raw):
    with pytest.raises(SettingsError) as refused:
        parse_number("--spec-min-yield", raw)
    assert refused.value.message == f'--spec-min-yield expects a number, got "{raw}"'


def test_a_whole_number_flag_refuses_a_fraction():
    with pytest.raises(SettingsError) as refused:
        parse_number("--spec-yield-rounds", "2.5", kind=int)
    assert refused.value.message == '--spec-yield-rounds expects a number, got "2.5"'


def test_numbers_are_read_with_surrounding_blanks_forgiven():
    assert parse_number("--spec-min-speedup", " 1.25 ") == 1.25
    assert parse_number("--spec-gate-reprobe", "64\n", kind=int) == 64
    assert isinstance(parse_number("--spec-gate-reprobe", "64", kind=int), int)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", True),
        ("TRUE", True),
        (" on ", True),
        ("yes", True),
        ("0", False),
        ("False", False),
        ("off", False),
        ("NO", False),
    ],
)
def test_boolean_words_read_as_on_or_off(raw, value):
    assert parse_bool("SUPERFLUID_SPEC_GATE", raw) is value


# -- depth resolution ----------------------------------------------------------------------


def test_spec_draft_tokens_beats_the_strategys_variable_and_default():
    settings = SpecSettings(draft_tokens=7)
    assert depth_for(Strategy.MTP_HEAD, settings, {"SUPERFLUID_MTP_DRAFTS": "2"}) == 7


def test_the_strategys_variable_beats_its_default_depth():
    env = {"SUPERFLUID_MTP_DRAFTS": "2", "SUPERFLUID_EAGLE_DRAFTS": "5"}
    assert depth_for(Strategy.MTP_HEAD, SpecSettings(), env) == 2
    assert depth_for(Strategy.EAGLE3, SpecSettings(), env) == 5


def test_the_dflash_variable_covers_dspark_too():
    env = {"SUPERFLUID_DFLASH_DRAFTS": "9"}
    assert depth_for(Strategy.DFLASH, SpecSettings(), env, block_size=16) == 9
    assert depth_for(Strategy.DSPARK, SpecSettings(), env, block_size=16) == 9


def test_without_overrides_the_default_depth_applies():
    assert depth_for(Strategy.MTP_HEAD, SpecSettings(), {}, arch="glm_dsa") == 1
    assert depth_for(Strategy.DFLASH, SpecSettings(), {}, block_size=10) == 10
    assert depth_for(Strategy.PROMPT_LOOKUP, SpecSettings(), {"SUPERFLUID_MTP_DRAFTS": "99"}) == 4


@pytest.mark.parametrize("raw", ["0", "65"])
def test_a_strategy_depth_variable_out_of_range_is_refused(raw):
    with pytest.raises(SettingsError) as refused:
        depth_for(Strategy.EAGLE3, SpecSettings(), {"SUPERFLUID_EAGLE_DRAFTS": raw})
    assert refused.value.message == "SUPERFLUID_EAGLE_DRAFTS must be in 1..=64"


def test_a_malformed_strategy_depth_variable_names_it():
    with pytest.raises(SettingsError) as refused:
        depth_for(Strategy.MTP_HEAD, SpecSettings(), {"SUPERFLUID_MTP_DRAFTS": "lots"})
    assert refused.value.message == 'SUPERFLUID_MTP_DRAFTS expects a number, got "lots"'


def test_an_empty_strategy_depth_variable_is_unset():
    assert depth_for(Strategy.MTP_HEAD, SpecSettings(), {"SUPERFLUID_MTP_DRAFTS": ""}) == 3
