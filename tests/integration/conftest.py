"""Shared fixtures for tests that load the real models: the demo model (Gemma 3 270M, Q4_K_M
GGUF) and the instruct model (SmolLM2-135M-Instruct, Q4_1 GGUF)."""

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


@pytest.fixture(scope="session")
def instruct_gguf() -> Path:
    """The instruct GGUF; outside CI a missing package skips, in CI it fails."""
    try:
        importlib.import_module("llama_cpp")
        from superfluid.adapters.llamacpp.demo_model import DemoModelMissing, instruct_model_path
    except ImportError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs the llamacpp extra (scripts/install.sh): {exc}")
    try:
        return instruct_model_path()
    except DemoModelMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
