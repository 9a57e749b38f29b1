"""Where each kind of model file keeps its own sampling defaults, read at startup.

Each runtime's record says where (adapters/<runtime>/record.py): GGUF metadata keys
`general.sampling.*` (llamacpp), `generation_config.json` beside an MLX model's `config.json`,
a `generation_config` object in a `.base` header or in its `metadata` (basert). The readers for
the two Hugging Face shapes live here, shared.

Reading them never stops a server: a file that says nothing, or says it badly, leaves the
built-in defaults, with the reason in the returned notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from superfluid.adapters.runtime_record import Found, RuntimeRecord
from superfluid.application.ports import ModelFile, Runtime
from superfluid.domain.sampling_defaults import from_generation_config

GENERATION_CONFIG = "generation_config.json"


def generation_config_file(file: Path) -> Found:
    """A Hugging Face `generation_config.json`, if there is one."""
    if not file.is_file():
        return None, []
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, [f"{file.name} does not read as JSON ({error})"]
    if not isinstance(config, dict):
        return None, [f"{file.name} is not a JSON object"]
    return from_generation_config(config, file.name)


def header_generation_config(raw: Mapping[str, Any]) -> Found:
    """A `.base` header's `generation_config` (or its `metadata.generation_config`)."""
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
    """The `SamplingDefaultsSource` port: each kind of model file's own sampling defaults, as
    its runtime's record reads them."""

    def __init__(self, runtimes: Sequence[RuntimeRecord]) -> None:
        self._by_name = {record.name: record for record in runtimes}

    def read(self, file: ModelFile, runtime: Runtime) -> Found:
        record = self._by_name.get(file.runtime)
        return record.sampling_defaults(file, runtime) if record is not None else (None, [])
