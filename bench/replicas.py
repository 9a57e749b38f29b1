"""Replicas of `superfluid serve` behind a real router, on loopback: the affinity bench and the
routing tests (tests/integration/test_routers.py) both run them.

`Replica` is one server process on a port chosen before it starts (a router is told its
replicas' addresses up front, and a restarted replica comes back on the same one). The routers
run from the project's own recipes: `deploy/haproxy.cfg` under Debian's `haproxy`, and
`deploy/smg.sh` with smg from `./.routers` (both installed by `scripts/install.sh`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).parents[1]
SUPERFLUID = Path(sys.executable).parent / "superfluid"
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy.cfg"
SMG_SCRIPT = ROOT / "deploy" / "smg.sh"
SMG_BIN = ROOT / ".routers" / "bin"
#: The id both replicas serve the model under, whatever its file is called.
MODEL = "smollm2"


def free_ports(count: int) -> list[int]:
    """Ports free now (the kernel's picks, released at once for a process to bind)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _pipe_lines(process: subprocess.Popen[str], lines: list[str]) -> None:
    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=drain, daemon=True).start()


@dataclass
class Replica:
    """One `superfluid serve` on `port`; `start` again after a stop brings it back there."""

    model: Path
    port: int
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=lambda: {"PATH": "/usr/bin:/bin"})
    process: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        argv = [str(SUPERFLUID), "serve", str(self.model), "--served-model-name", MODEL]
        argv += ["--port", str(self.port), "--no-monitor", "--speculate", "auto", *self.args]
        self.process = subprocess.Popen(argv, env=dict(self.env), stderr=subprocess.PIPE, text=True)
        _pipe_lines(self.process, self.lines)
        return self

    def wait_ready(self, timeout: float = 120) -> Replica:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the replica never got ready:\n" + self.log()
            time.sleep(0.05)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int | None:
        """Signal the process and wait for it; its exit status."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        return self.process.wait(timeout)

    def metrics(self) -> dict[str, float]:
        """Each series' total over its labels (one model is served)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        totals: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        return totals

    def finished(self) -> float:
        """Requests this replica has finished, whatever their finish reason."""
        return self.metrics().get("superfluid_requests_total", 0.0)

    def reused(self) -> float:
        return self.metrics().get("superfluid_prefix_reused_tokens_total", 0.0)

    def log(self) -> str:
        return "\n".join(self.lines)


class Router:
    """A router process in front of replicas; `url` is where clients send requests."""

    name = "router"

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.replicas = list(replicas)
        self.port = free_ports(1)[0]
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self) -> Router:
        argv, env = self.command()
        self.process = subprocess.Popen(
            argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        _pipe_lines(self.process, self.lines)
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, "\n".join(self.lines)
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            assert time.monotonic() < deadline, "the router never listened"
            time.sleep(0.05)

    def wait_routable(self, timeout: float = 30) -> None:
        """Until a chat request through the router gets 200 (its health checks have run)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if chat(self, "ping", max_tokens=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "nothing answered through the router"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class HAProxy(Router):
    name = "haproxy"

    def command(self) -> tuple[list[str], dict[str, str]]:
        first, second = (f"127.0.0.1:{r.port}" for r in self.replicas)
        env = {
            **os.environ,
            "ROUTER_PORT": str(self.port),
            "REPLICA_1": first,
            "REPLICA_2": second,
        }
        return [str(shutil.which("haproxy")), "-f", str(HAPROXY_CONFIG), "-db"], env


class Smg(Router):
    name = "smg"

    def __init__(self, replicas: Sequence[Replica], policy: str = "consistent_hashing") -> None:
        super().__init__(replicas)
        self.policy = policy
        self.metrics_port = free_ports(1)[0]

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = {
            **os.environ,
            "PATH": f"{SMG_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "ROUTER_PORT": str(self.port),
            "SMG_POLICY": self.policy,
            "SMG_METRICS_PORT": str(self.metrics_port),
        }
        return ["sh", str(SMG_SCRIPT), *(r.url for r in self.replicas)], env


def router_missing(name: str) -> str | None:
    """Why router `name` cannot run here, in one line; None when it can."""
    if name == "haproxy" and shutil.which("haproxy") is None:
        return "haproxy is not installed (scripts/install.sh installs it as root with apt-get)"
    if name == "smg" and not (SMG_BIN / "smg").exists():
        return "smg is not installed in ./.routers (scripts/install.sh installs it)"
    return None


def chat(
    router: Router | Replica,
    content: str | list[dict[str, str]],
    *,
    session: str | None = None,
    max_tokens: int = 16,
    stream: bool = False,
    user: str | None = None,
    timeout: float = 120,
) -> httpx.Response:
    """A greedy chat request; `session` goes in the X-Session-ID header."""
    messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
    body: dict[str, object] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }
    if user is not None:
        body["user"] = user
    headers = {"X-Session-ID": session} if session else {}
    return httpx.post(
        f"{router.url}/v1/chat/completions", json=body, headers=headers, timeout=timeout
    )
