"""The mlx runtime's record: MLX model directories (config.json and *.safetensors), via mlx-lm."""

from __future__ import annotations

from pathlib import Path

from superfluid.adapters.mlx import MlxUnavailable
from superfluid.adapters.model_defaults import generation_config_file
from superfluid.adapters.runtime_record import Found, RuntimeRecord
from superfluid.application.ports import ModelFile, Runtime


def _recognises(path: Path, magic: bytes | None) -> bool:
    return magic is None and (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def _load(path: Path, *, ctx_size: int, max_lanes: int) -> Runtime:
    try:
        from superfluid.adapters.mlx.runtime import MlxRuntime
    except ImportError as exc:
        raise MlxUnavailable(
            f"{path}: serving an MLX model directory needs the mlx extra"
            f" (pip install 'superfluid[mlx]'): {exc}"
        ) from exc
    return MlxRuntime.load(path, ctx_size=ctx_size, max_sequences=max_lanes)


def _sampling_defaults(file: ModelFile, runtime: Runtime) -> Found:
    """`generation_config.json` beside `config.json`."""
    return generation_config_file(file.path / "generation_config.json")


RECORD = RuntimeRecord("mlx", "an MLX model directory", _recognises, _load, _sampling_defaults)
