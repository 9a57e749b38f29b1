"""The MLX runtime adapter: MLX model directories through mlx-lm, one lane per forward pass.

Nothing here imports mlx (an optional extra) until `superfluid.adapters.mlx.runtime` is
imported, so the errors below can be raised on a machine without it.
"""

from superfluid.domain.errors import SuperfluidError


class MlxUnavailable(SuperfluidError):
    """mlx or mlx-lm is not installed (the `mlx` extra)."""


class ModelLoadError(SuperfluidError):
    """A directory that mlx-lm cannot load as a model."""
