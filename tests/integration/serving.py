"""`superfluid serve` as a subprocess, the way a user runs it, for the serve-level tests.

`started(args, env)` starts a server on a free port and yields a `Server` once it is ready; stderr
is drained by a thread (so a chatty server never blocks on a full pipe) and kept in `lines`.
`startup(args, env)` is for startups that may refuse: it returns the exit status (None when the
server came up, then stopped) and the lines it printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

SUPERFLUID = Path(sys.executable).parent / "superfluid"
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
READY = re.compile(r"superfluid: ready: serving ")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Server:
    port: int
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", max_retries=0
        )

    def metrics(self) -> Samples:
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def speculation(self) -> list[str]:
        return [line for line in self.lines if line.startswith("superfluid: speculation")]


def _launch(
    args: Sequence[str], env: Mapping[str, str], until: re.Pattern[str] = READY
) -> tuple[subprocess.Popen[str], list[str], threading.Event]:
    process = subprocess.Popen(
        [str(SUPERFLUID), "serve", "--port", "0", "--no-monitor", *args],
        env=dict(env),
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    settled = threading.Event()  # `until` was printed, or the process ended

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if until.search(line):
                settled.set()
        settled.set()

    threading.Thread(target=drain, daemon=True).start()
    return process, lines, settled


def _port(lines: list[str]) -> int | None:
    found = [m for m in (LISTENING.search(line) for line in lines) if m]
    return int(found[0].group(1)) if found else None


@contextmanager
def started(args: Sequence[str], env: Mapping[str, str], timeout: float = 180) -> Iterator[Server]:
    process, lines, settled = _launch(args, env)
    settled.wait(timeout)
    port = _port(lines)
    if port is None or not any(READY.search(line) for line in lines):
        process.kill()
        pytest.fail("the server did not start:\n" + "\n".join(lines))
    try:
        yield Server(port, process, lines)
    finally:
        process.terminate()
        process.wait(30)
    assert not any("Traceback" in line for line in lines), "\n".join(lines)


@contextmanager
def listening(args: Sequence[str], env: Mapping[str, str], timeout: float = 60) -> Iterator[Server]:
    """A server as soon as its port is open (its models may still be loading); the caller
    stops it (the process is killed at the end if it still runs)."""
    process, lines, settled = _launch(args, env, until=LISTENING)
    settled.wait(timeout)
    port = _port(lines)
    if port is None:
        process.kill()
        pytest.fail("the server did not open its port:\n" + "\n".join(lines))
    try:
        yield Server(port, process, lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)


def startup(
    args: Sequence[str], env: Mapping[str, str], timeout: float = 60
) -> tuple[int | None, list[str]]:
    process, lines, settled = _launch(args, env)
    settled.wait(timeout)
    if any(READY.search(line) for line in lines):
        process.terminate()
        process.wait(30)
        return None, lines
    return process.wait(30), lines


def calls_of(reply: Any) -> list[tuple[str, dict[str, Any]]]:
    """A chat reply's tool calls as (name, parsed arguments)."""
    made = reply.choices[0].message.tool_calls or []
    return [(call.function.name, json.loads(call.function.arguments)) for call in made]
