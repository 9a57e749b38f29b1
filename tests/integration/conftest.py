"""Shared fixtures for tests that load the real models: the demo model (Gemma 3 270M, Q4_K_M
GGUF) and the instruct model (SmolLM2-135M-Instruct, Q4_1 GGUF)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def model_cache() -> Path:
    """Where tests assemble the demo model: once per machine, outside the work tree."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "superfluid"


def _real_model(locate: Callable[[ModuleType], Path], extras: str) -> Path:
    """The GGUF `locate` finds with the `demo_model` module; outside CI a missing extra skips,
    in CI it fails (nothing may hide)."""
    try:
        importlib.import_module("llama_cpp")
        from superfluid.adapters.llamacpp import demo_model
    except ImportError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs the {extras} (scripts/install.sh): {exc}")
    try:
        return locate(demo_model)
    except demo_model.DemoModelMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    """The demo GGUF (Gemma 3 270M)."""
    return _real_model(
        lambda found: found.demo_model_path(model_cache()), "llamacpp and demo extras"
    )


@pytest.fixture(scope="session")
def instruct_gguf() -> Path:
    """The instruct GGUF (SmolLM2-135M-Instruct)."""
    return _real_model(
        lambda found: found.instruct_model_path(), "llamacpp extra and the instruct model"
    )
