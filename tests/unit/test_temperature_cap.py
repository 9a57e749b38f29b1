"""The temperature cap caps only a temperature nobody asked for (docs/contract.md §8)."""

from superfluid.domain.temperature_cap import (
    MAX_TEMPERATURE_IGNORED,
    effective_temperature,
    max_temperature_notice,
)


def test_a_request_temperature_is_never_capped():
    assert effective_temperature(1.5, None, 0.7, 0.5, strategy_registered=True) == 1.5


def test_a_cli_temperature_is_never_capped():
    assert effective_temperature(None, 1.2, 0.7, 0.5, strategy_registered=True) == 1.2


def test_the_request_beats_the_cli_temperature():
    assert effective_temperature(0.2, 1.2, 0.7, None, strategy_registered=False) == 0.2


def test_a_model_default_temperature_is_capped_when_a_strategy_is_registered():
    assert effective_temperature(None, None, 1.0, 0.6, strategy_registered=True) == 0.6


def test_a_model_default_below_the_cap_is_kept():
    assert effective_temperature(None, None, 0.3, 0.6, strategy_registered=True) == 0.3


def test_without_a_strategy_the_cap_does_nothing():
    assert effective_temperature(None, None, 1.0, 0.6, strategy_registered=False) == 1.0


def test_without_a_cap_the_model_default_stands():
    assert effective_temperature(None, None, 1.0, None, strategy_registered=True) == 1.0


def test_a_cap_with_no_strategy_owes_the_log_line():
    assert MAX_TEMPERATURE_IGNORED == (
        "--spec-max-temperature ignored: no --speculate strategy is configured"
    )
    assert max_temperature_notice(0.5, strategy_registered=False) == MAX_TEMPERATURE_IGNORED
    assert max_temperature_notice(0.5, strategy_registered=True) is None
    assert max_temperature_notice(None, strategy_registered=False) is None
