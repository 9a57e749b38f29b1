"""A model's own default sampling: what a request gets for the parameters it leaves unset.

Model files say how their authors want them sampled: GGUF in `general.sampling.*` keys (which
llama.cpp's own server honours), an MLX (Hugging Face) directory in `generation_config.json`, a
`.base` bundle in a `generation_config` object of its header. Each runtime adapter reads its
file's raw values into a mapping of our field names; this module checks them and builds the
`SamplingDefaults`. A model that says nothing gets the built-in defaults (temperature 0.8, every
filter off), and the server says so once at startup.

Per request, the request's own value comes first, then `--temperature`, then the model's
default; `--spec-max-temperature` caps only that last one (docs/contract.md §8). The use case
that applies them is `RequestDefaults` (application/request_defaults.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The temperature of a model that sets none.
BUILT_IN_TEMPERATURE = 0.8

BUILT_IN_SOURCE = "built-in"


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """Defaults for the sampling parameters; None: the model sets none (the filter is off)."""

    temperature: float = BUILT_IN_TEMPERATURE
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    #: Where they came from: "built-in", or the file and keys that set them.
    source: str = BUILT_IN_SOURCE

    @property
    def built_in(self) -> bool:
        return self.source == BUILT_IN_SOURCE

    def as_json(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "repeat_penalty": self.repeat_penalty,
            "source": self.source,
        }

    def describe(self) -> str:
        """`temperature 0.6, top_k 20, top_p 0.95` (only what is set)."""
        parts = [f"temperature {self.temperature:g}"]
        for name in ("top_k", "top_p", "min_p", "repeat_penalty"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name} {value:g}")
        return ", ".join(parts)


BUILT_IN_SAMPLING = SamplingDefaults()

#: Our field -> (lowest allowed, highest allowed, integer?, lowest excluded?)
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "temperature": (0.0, 2.0, False, False),
    "top_k": (0.0, float(2**31 - 1), True, False),
    "top_p": (0.0, 1.0, False, True),
    "min_p": (0.0, 1.0, False, False),
    "repeat_penalty": (0.0, 10.0, False, True),
}


def _number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            return None
    return None


def sampling_defaults(
    values: Mapping[str, object], source: str
) -> tuple[SamplingDefaults | None, list[str]]:
    """The defaults `values` (our field names → raw values) set, and what was ignored and why.

    None when no value is usable: the caller falls back to `BUILT_IN_SAMPLING`. A value out of
    range or not a number is ignored with a reason (one bad key does not void the others).
    """
    kept: dict[str, float | int] = {}
    ignored: list[str] = []
    for name, raw in values.items():
        if name not in _RANGES or raw is None:
            continue
        low, high, integral, open_low = _RANGES[name]
        value = _number(raw)
        if (
            value is None
            or not math.isfinite(value)
            or not low <= value <= high
            or (open_low and value == low)
        ):
            interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
            ignored.append(f"{name} {raw!r} (expected a number in {interval})")
            continue
        kept[name] = int(value) if integral else value
    if not kept:
        return None, ignored
    top_k = kept.get("top_k")
    defaults = SamplingDefaults(
        temperature=float(kept.get("temperature", BUILT_IN_TEMPERATURE)),
        top_k=None if top_k is None else int(top_k),
        top_p=_float_or_none(kept.get("top_p")),
        min_p=_float_or_none(kept.get("min_p")),
        repeat_penalty=_float_or_none(kept.get("repeat_penalty")),
        source=source,
    )
    return defaults, ignored


def _float_or_none(value: float | int | None) -> float | None:
    return None if value is None else float(value)


#: Hugging Face `generation_config.json` names → ours.
GENERATION_CONFIG_KEYS = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
}


def from_generation_config(
    config: Mapping[str, Any], source: str
) -> tuple[SamplingDefaults | None, list[str]]:
    """Defaults from a Hugging Face generation config (as `generation_config.json` holds)."""
    values = {ours: config.get(theirs) for theirs, ours in GENERATION_CONFIG_KEYS.items()}
    return sampling_defaults(values, source)
