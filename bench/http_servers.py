"""Servers under test: started as subprocesses on a free loopback port, one at a time.

Each `ServerSpec` is a command line with a `{port}` placeholder. `running(spec)` starts it,
polls `/v1/models` until it answers, yields the base URL, and stops the process afterwards
(SIGTERM, then SIGKILL after a grace period). Server output goes to a log file next to the raw
results, so a server that fails to start can be read about.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

SUPERFLUID = Path(sys.executable).parent / "superfluid"


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to start one system; `argv` holds `{port}` where the port goes."""

    system: str
    argv: tuple[str, ...]
    model_name: str  # what requests put in `model`

    def command(self, port: int) -> list[str]:
        return [arg.format(port=port) for arg in self.argv]

    def shown(self) -> str:
        """The command as the report prints it (the port is whatever was free)."""
        shown = " ".join(arg.format(port="<port>") for arg in self.argv)
        return shown.replace(str(Path(sys.executable).parent) + "/", ".venv/bin/")


def superfluid_spec(
    system: str, model: Path, speculate: str, *, max_lanes: int, ctx_size: int
) -> ServerSpec:
    argv = (
        str(SUPERFLUID),
        "serve",
        str(model),
        "--speculate",
        speculate,
        "--port",
        "{port}",
        "--no-monitor",
        "--max-lanes",
        str(max_lanes),
        "--ctx-size",
        str(ctx_size),
        "--offline",
    )
    return ServerSpec(system, argv, model.name)


def llamacpp_python_spec(model: Path, *, ctx_size: int, threads: int) -> ServerSpec:
    """llama-cpp-python's own server with its defaults, but for threads, the context size and
    the chat format: the demo GGUF carries no chat template, and without `--chat_format gemma`
    the server falls back to a Llama-2 prompt that the model answers with an immediate stop."""
    argv = (
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--n_ctx",
        str(ctx_size),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--chat_format",
        "gemma",
        "--verbose",
        "False",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    )
    return ServerSpec("llama-cpp-python", argv, model.name)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerFailed(RuntimeError):
    pass


@contextlib.contextmanager
def running(spec: ServerSpec, log_path: Path, *, start_timeout: float = 180.0) -> Iterator[str]:
    """Start the server, wait until `/v1/models` answers, yield its base URL, stop it."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(
            spec.command(port),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # its own process group: stopping it stops its children
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, base, log_path, start_timeout)
        yield base
    finally:
        _stop(process)


def _wait_ready(
    process: subprocess.Popen[bytes], base: str, log_path: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise ServerFailed(f"the server exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise ServerFailed(f"the server did not answer within {timeout:.0f} s; see {log_path}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
