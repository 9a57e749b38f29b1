"""Servers under test: started as subprocesses on a free loopback port, one at a time.

Each `ServerSpec` is a command line with a `{port}` placeholder. `running(spec)` starts it,
polls `/v1/models` until it answers, yields the base URL, and stops the process afterwards
(SIGTERM, then SIGKILL after a grace period). Server output goes to a log file next to the raw
results, so a server that fails to start can be read about.
"""

from __future__ import annotations

import contextlib
import functools
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

from superfluid.adapters.llamacpp.gguf_layout import UnreadableHeader, read_layout

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
        shown = shown.replace(str(Path(sys.executable).parent) + "/", ".venv/bin/")
        return shown.replace(str(Path.home()), "~")


def superfluid_spec(
    system: str,
    model: Path,
    speculate: str,
    *,
    max_lanes: int,
    ctx_size: int,
    prefix_reuse: bool = True,
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
        *(() if prefix_reuse else ("--no-prefix-reuse",)),
    )
    return ServerSpec(system, argv, model.name)


@functools.cache
def has_chat_template(model: Path) -> bool:
    """Whether the GGUF carries `tokenizer.chat_template` (read from its header alone); a file
    that cannot be read has none here, and the server started on it says why it fails."""
    try:
        with model.open("rb") as f:
            return b"tokenizer.chat_template" in read_layout(f).keys
    except (OSError, UnreadableHeader):
        return False


def llamacpp_python_spec(model: Path, *, ctx_size: int, threads: int) -> ServerSpec:
    """llama-cpp-python's own server with its defaults, but for threads, the context size and
    the chat format: a GGUF with a chat template is rendered by it; the demo GGUF carries none,
    and without `--chat_format gemma` the server falls back to a Llama-2 prompt that the model
    answers with an immediate stop."""
    chat_format = () if has_chat_template(model) else ("--chat_format", "gemma")
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
        *chat_format,
        "--verbose",
        "False",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    )
    return ServerSpec("llama-cpp-python", argv, model.name)


#: Where bench/build_llama_server.sh keeps llama.cpp's own server (it prints the path).
BUILD_LLAMA_SERVER = Path(__file__).with_name("build_llama_server.sh")

#: llama.cpp's own server, as the peer: a name per configuration and the flags that make it.
#: Plain decoding; `--spec-default` (its ngram-mod speculator: 24-token match, 48–64-token
#: drafts); and the n-gram speculators with small keys and short drafts, which suit a 270M
#: model's short replies better than their defaults (12-token keys, 48-token drafts). The report
#: takes the best of them per cell.
LLAMA_SERVER_CONFIGS: dict[str, tuple[str, ...]] = {
    "llama-server": (),
    "llama-server spec-default": ("--spec-default",),
    "llama-server ngram-simple n3 m8": (
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "3",
        "--spec-ngram-simple-size-m",
        "8",
    ),
    "llama-server ngram-simple n2 m16": (
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "2",
        "--spec-ngram-simple-size-m",
        "16",
    ),
    "llama-server ngram-map-k n3 m8": (
        "--spec-type",
        "ngram-map-k",
        "--spec-ngram-map-k-size-n",
        "3",
        "--spec-ngram-map-k-size-m",
        "8",
    ),
    "llama-server ngram-map-k n3 m16": (
        "--spec-type",
        "ngram-map-k",
        "--spec-ngram-map-k-size-n",
        "3",
        "--spec-ngram-map-k-size-m",
        "16",
    ),
    "llama-server ngram-map-k n2 m16": (
        "--spec-type",
        "ngram-map-k",
        "--spec-ngram-map-k-size-n",
        "2",
        "--spec-ngram-map-k-size-m",
        "16",
    ),
}


def llama_server_binary() -> Path:
    """Where the build script keeps (or would keep) the binary; it may not be built yet."""
    out = subprocess.run(
        ["sh", str(BUILD_LLAMA_SERVER), "--path"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def llama_server_spec(
    system: str,
    binary: Path,
    model: Path,
    *,
    slots: int,
    ctx_size: int,
    threads: int,
    chat_template_file: Path | None = None,
) -> ServerSpec:
    """llama.cpp's `llama-server` in configuration `system` with `slots` parallel slots of
    `ctx_size` tokens each (it splits `--ctx-size` evenly between slots). A GGUF with a chat
    template is rendered by it (`--jinja`), as superfluid renders it; the demo GGUF carries none,
    and `--no-jinja --chat-template gemma` is llama.cpp's built-in Gemma turn format, which
    renders the prompt superfluid renders (the same prompt token counts). `chat_template_file`
    replaces either with a Jinja template (`--jinja --chat-template-file`): tool calling needs
    one that shows tools."""
    if chat_template_file is not None:
        template: tuple[str, ...] = ("--jinja", "--chat-template-file", str(chat_template_file))
    elif has_chat_template(model):
        template = ("--jinja",)
    else:
        template = ("--no-jinja", "--chat-template", "gemma")
    argv = (
        str(binary),
        "--model",
        str(model),
        "--alias",
        model.name,
        "--ctx-size",
        str(ctx_size * slots),
        "-np",
        str(slots),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        *template,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        *LLAMA_SERVER_CONFIGS[system],
    )
    return ServerSpec(system, argv, model.name)


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
        died = process.poll()
        _stop(process)
        if died is not None:  # it ended before it was stopped: say how, for the post-mortem
            with log_path.open("a") as log:
                log.write(f"\n[bench] the server had exited by itself with {died}\n")


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
