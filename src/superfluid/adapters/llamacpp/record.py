"""The llamacpp runtime's record: GGUF files (magic `GGUF`), read through llama-cpp-python."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from superfluid.adapters.llamacpp.sampling_defaults import gguf_sampling_defaults
from superfluid.adapters.runtime_record import Found, RuntimeRecord
from superfluid.application.ports import ModelFile, Runtime, RuntimeLoader

log = logging.getLogger("superfluid")


def _recognises(path: Path, magic: bytes | None) -> bool:
    return magic == b"GGUF"


def _load(
    path: Path, *, ctx_size: int, max_lanes: int, weights_cache: Path | None = None
) -> Runtime:
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    runtime = LlamaCppRuntime.load(
        path, ctx_size=ctx_size, max_sequences=max_lanes, weights_cache=weights_cache
    )
    # Every model says what it runs on: exactness is the product, so it is never silent.
    for line in runtime.kernel_lines():
        log.info(line)
    return runtime


def _load_keeping_copies(weights_cache: Path) -> RuntimeLoader:
    """A loader that serves Q5_0 weights widened to Q8_0 from copies under `weights_cache`."""
    return functools.partial(_load, weights_cache=weights_cache)


def _sampling_defaults(file: ModelFile, runtime: Runtime) -> Found:
    """The loaded model's `general.sampling.*` metadata keys."""
    meta = getattr(runtime, "metadata", None)
    if not callable(meta):
        return None, []
    reader: Callable[[str], str | None] = meta
    return gguf_sampling_defaults(reader)


RECORD = RuntimeRecord(
    "llamacpp",
    "a .gguf file",
    _recognises,
    _load,
    _sampling_defaults,
    load_keeping_copies=_load_keeping_copies,
)
