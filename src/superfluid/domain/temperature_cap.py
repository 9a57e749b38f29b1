"""The speculation temperature cap (docs/contract.md §8).

`--spec-max-temperature` caps only a temperature nobody asked for: one that comes from the
model's default or the built-in default. A caller's or `--temperature`'s choice is never
touched. The cap is a sampling rule; the speculation settings carry its value.
"""

from __future__ import annotations

#: Logged (not fatal) when `--spec-max-temperature` is set but no strategy got registered.
MAX_TEMPERATURE_IGNORED = "--spec-max-temperature ignored: no --speculate strategy is configured"


def effective_temperature(
    request_temperature: float | None,
    cli_temperature: float | None,
    model_default: float,
    max_temperature: float | None,
    strategy_registered: bool,
) -> float:
    """The sampling temperature for a request.

    The request's own value wins, then `--temperature`; both are the user's choice and are never
    capped. Only the fallback (`model_default`: the model's default, or the built-in one) is
    capped, because a flat distribution rejects most drafts, and only when a strategy is
    registered, since without one the cap buys nothing.
    """
    if request_temperature is not None:
        return request_temperature
    if cli_temperature is not None:
        return cli_temperature
    if max_temperature is not None and strategy_registered:
        return min(model_default, max_temperature)
    return model_default


def max_temperature_notice(max_temperature: float | None, strategy_registered: bool) -> str | None:
    """The log line owed when the cap is set but nothing speculates, else None."""
    if max_temperature is not None and not strategy_registered:
        return MAX_TEMPERATURE_IGNORED
    return None
