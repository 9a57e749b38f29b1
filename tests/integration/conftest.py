"""Shared fixtures for tests that load the real demo model (Gemma 3 270M, Q4_K_M GGUF)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest


def model_cache() -> Path:
    """Where tests assemble the demo model: once per machine, outside the work tree."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "superfluid"


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    """The demo GGUF; outside CI a missing extra skips, in CI it fails (nothing may hide)."""
    try:
        importlib.import_module("llama_cpp")
        from superfluid.adapters.llamacpp.demo_model import DemoModelMissing, demo_model_path
    except ImportError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs the llamacpp and demo extras (scripts/install.sh): {exc}")
    try:
        return demo_model_path(model_cache())
    except DemoModelMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
