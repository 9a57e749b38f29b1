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
    #: For a runtime that serves some files from a faster copy of their weights: given a cache
    #: directory, a loader that keeps those copies there (llamacpp: Q5_0 widened to Q8_0).
    load_keeping_copies: Callable[[Path], RuntimeLoader] | None = None

    def loader(self, weights_cache: Path | None) -> RuntimeLoader:
        """`load`, keeping copies of model weights under `weights_cache` where it makes any."""
        if weights_cache is None or self.load_keeping_copies is None:
            return self.load
        return self.load_keeping_copies(weights_cache)
