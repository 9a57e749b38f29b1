"""The basert runtime's record: `.base` bundles (magic `BASE`), whose header startup reads."""

from __future__ import annotations

from pathlib import Path

from superfluid.adapters.model_defaults import header_generation_config
from superfluid.adapters.runtime_record import Found, RuntimeRecord
from superfluid.application.ports import ModelFile, Runtime


def _recognises(path: Path, magic: bytes | None) -> bool:
    return magic == b"BASE"


def _load(path: Path, *, ctx_size: int, max_lanes: int) -> Runtime:
    from superfluid.adapters.basert.runtime import BaseRTRuntime

    return BaseRTRuntime.load(path, ctx_size=ctx_size, max_sequences=max_lanes)


def _sampling_defaults(file: ModelFile, runtime: Runtime) -> Found:
    """A `generation_config` object in the header (or in its `metadata`)."""
    if file.header is None:
        return None, []
    return header_generation_config(file.header.raw)


RECORD = RuntimeRecord(
    "basert",
    "a .base bundle",
    _recognises,
    _load,
    _sampling_defaults,
    reads_bundle_header=True,
)
