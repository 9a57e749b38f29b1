"""Loading an MLX model directory for `serve` (the container maps the `mlx` runtime here)."""

from __future__ import annotations

from pathlib import Path

from superfluid.adapters.mlx import MlxUnavailable
from superfluid.application.ports import Runtime


def load_mlx(path: Path, *, ctx_size: int, max_lanes: int) -> Runtime:
    """An MLX runtime for `path`."""
    # Imported here so that a machine without the mlx extra can still serve other runtimes.
    try:
        from superfluid.adapters.mlx.runtime import MlxRuntime
    except ImportError as exc:
        raise MlxUnavailable(
            f"{path}: serving an MLX model directory needs the mlx extra"
            f" (pip install 'superfluid[mlx]'): {exc}"
        ) from exc
    return MlxRuntime.load(path, ctx_size=ctx_size, max_sequences=max_lanes)
