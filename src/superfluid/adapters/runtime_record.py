"""What a runtime package tells the server about itself: one `RuntimeRecord`.

A record says the runtime's name, how it recognises a model file, how it loads one, and where
such a file keeps its sampling defaults. The composition root lists the records once
(`entrypoints/container.py`, `RUNTIMES`); model-file recognition, loading and sampling defaults
all read that list, so adding a runtime is its package (with its `record.py`) plus one line
there. Records are tried in order and the first that recognises a file serves it; a future
`--runtime` flag would pick by name where two runtimes could read one format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from superfluid.application.ports import ModelFile, Runtime, RuntimeLoader
from superfluid.domain.sampling_defaults import SamplingDefaults

#: Sampling defaults a model file sets (None: it sets none), and notes on what was not read.
Found = tuple[SamplingDefaults | None, list[str]]


@dataclass(frozen=True, slots=True)
class RuntimeRecord:
    name: str
    #: What a user serves with it, for the refusal of a file no runtime takes ("a .gguf file").
    serves: str
    #: Whether it serves `path`: `magic` is the file's first four bytes (None for a directory).
    recognises: Callable[[Path, bytes | None], bool]
    load: RuntimeLoader
    sampling_defaults: Callable[[ModelFile, Runtime], Found]
    #: Whether startup reads the file's `.base` header (drafter resolution needs it).
    reads_bundle_header: bool = False
