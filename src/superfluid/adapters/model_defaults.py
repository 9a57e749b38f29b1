"""Where each kind of model file keeps its own sampling defaults, read at startup.

- GGUF (`llamacpp`): the `general.sampling.*` metadata keys of the loaded model
  (adapters/llamacpp/sampling_defaults.py);
- MLX directory (`mlx`): `generation_config.json` beside `config.json`;
- `.base` bundle (`basert`): a `generation_config` object in the header (or in its `metadata`),
  with the same keys as `generation_config.json`.

Reading them never stops a server: a file that says nothing, or says it badly, leaves the
built-in defaults, with the reason in the returned notes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.llamacpp.sampling_defaults import gguf_sampling_defaults
from superfluid.application.ports import ModelFile, Runtime
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.sampling_defaults import SamplingDefaults, from_generation_config

GENERATION_CONFIG = "generation_config.json"

Found = tuple[SamplingDefaults | None, list[str]]


def model_sampling_defaults(kind: str, path: Path, runtime: object) -> Found:
    """The defaults the model at `path` sets (None: it sets none), and notes on what was not
    read. `runtime` is the loaded model; a GGUF one offers `metadata(key)`."""
    if kind == "llamacpp":
        meta = getattr(runtime, "metadata", None)
        if not callable(meta):
            return None, []
        reader: Callable[[str], str | None] = meta
        return gguf_sampling_defaults(reader)
    if kind == "mlx":
        return _generation_config_file(path / GENERATION_CONFIG)
    if kind == "basert":
        return _bundle_generation_config(path)
    return None, []


def _generation_config_file(file: Path) -> Found:
    if not file.is_file():
        return None, []
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, [f"{file.name} does not read as JSON ({error})"]
    if not isinstance(config, dict):
        return None, [f"{file.name} is not a JSON object"]
    return from_generation_config(config, file.name)


def _bundle_generation_config(path: Path) -> Found:
    try:
        raw = read_header(path).raw
    except SuperfluidError as error:
        return None, [error.message]
    return _header_generation_config(raw)


def _header_generation_config(raw: Mapping[str, Any]) -> Found:
    config: Any = raw.get("generation_config")
    source = "the .base header's generation_config"
    if config is None and isinstance(raw.get("metadata"), Mapping):
        config = raw["metadata"].get("generation_config")
        source = "the .base header's metadata.generation_config"
    if config is None:
        return None, []
    if not isinstance(config, Mapping):
        return None, [f"{source} is not an object"]
    return from_generation_config(config, source)


class ModelFileSamplingDefaults:
    """The `SamplingDefaultsSource` port: each kind of model file's own sampling defaults."""

    def read(self, file: ModelFile, runtime: Runtime) -> Found:
        if file.header is not None:  # a `.base` bundle: its header was read once, at startup
            return _header_generation_config(file.header.raw)
        return model_sampling_defaults(file.runtime, file.path, runtime)
