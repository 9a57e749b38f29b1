"""A GGUF file's own sampling defaults: its `general.sampling.*` metadata keys.

These are the keys llama.cpp's server reads for its defaults (gguf-py `Keys.General.SAMPLING_*`).
`meta` is a lookup of one metadata key as text (`native.model_meta` over a loaded model), so
this module reads the loaded model's metadata and never parses the file itself.
"""

from __future__ import annotations

from collections.abc import Callable

from superfluid.domain.sampling_defaults import SamplingDefaults, sampling_defaults

#: GGUF key → our field.
GGUF_SAMPLING_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repeat_penalty",
}

SOURCE = "GGUF general.sampling.*"


def gguf_sampling_defaults(
    meta: Callable[[str], str | None],
) -> tuple[SamplingDefaults | None, list[str]]:
    """The defaults a GGUF model's metadata sets (None when it sets none), and what was ignored."""
    values = {ours: meta(key) for key, ours in GGUF_SAMPLING_KEYS.items()}
    return sampling_defaults(values, SOURCE)
