"""The hub catalog against a real HTTP server on 127.0.0.1 serving the real catalog (§5)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from superfluid.adapters.hub_catalog import HubCatalog
from superfluid.domain.catalog import parse_catalog

REAL_CATALOG = Path(__file__).parents[2].parent / "shared" / "data" / "hub-catalog.json"
DAY = 24 * 60 * 60
SHORT_TIMEOUT = 0.3
# A cap that rejects the oversize body after 1 MiB; the default (16 MiB) has its own test.
SMALL_CAP = 1 << 20


class Clock:
    """The clock the cache's age is judged by; tests move it by hand."""

    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Hub:
    """A catalog server: the real catalog plus endpoints that misbehave, and a hit counter."""

    def __init__(self, catalog: bytes) -> None:
        self.catalog = catalog
        self.hits: Counter[str] = Counter()
        self.user_agents: list[str] = []
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # keep the test output clean

            def do_GET(self) -> None:
                with hub._lock:
                    hub.hits[self.path] += 1
                    hub.user_agents.append(self.headers.get("User-Agent", ""))
                # The client may stop reading early, as it should at the cap.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    hub.answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def answer(self, req: BaseHTTPRequestHandler) -> None:
        def send(status: int, body: bytes, length: int | None = None) -> None:
            req.send_response(status)
            req.send_header("Content-Length", str(len(body) if length is None else length))
            req.end_headers()
            req.wfile.write(body)

        if req.path == "/catalog.json":
            send(200, self.catalog)
        elif req.path == "/redirect":
            req.send_response(302)
            req.send_header("Location", "/catalog.json")
            req.send_header("Content-Length", "0")
            req.end_headers()
        elif req.path == "/500":
            send(500, b"internal error")
        elif req.path == "/garbage":
            send(200, b"\x00<html>not json{")
        elif req.path == "/not-a-catalog":
            send(200, b'{"schema": 1, "entries": []}')
        elif req.path == "/lying-length":
            send(200, b'{"models": []}', length=100 << 30)
        elif req.path.startswith("/oversize"):
            # No Content-Length: the body runs until the connection closes (HTTP/1.0), so only
            # counting while streaming can stop it.
            size = 20 << 20
            req.send_response(200)
            req.end_headers()
            chunk = b"[" * (64 << 10)
            for _ in range(size // len(chunk)):
                req.wfile.write(chunk)
        elif req.path == "/slow":
            time.sleep(SHORT_TIMEOUT * 5)
            send(200, self.catalog)
        else:
            send(404, b"no such page")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def real_catalog() -> bytes:
    if not REAL_CATALOG.is_file():
        pytest.skip(f"needs the real catalog at {REAL_CATALOG}")
    return REAL_CATALOG.read_bytes()


@pytest.fixture(scope="module")
def hub(real_catalog: bytes) -> Iterator[Hub]:
    server = Hub(real_catalog)
    yield server
    server.close()


@pytest.fixture(autouse=True)
def fresh_hits(hub: Hub) -> None:
    hub.hits.clear()
    hub.user_agents.clear()


@pytest.fixture
def warned(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], list[str]]:
    """The warnings logged on "superfluid", even after a CLI test stopped it propagating."""
    monkeypatch.setattr(logging.getLogger("superfluid"), "propagate", True)
    caplog.set_level(logging.WARNING, logger="superfluid")

    def lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name.startswith("superfluid") and r.levelno >= logging.WARNING
        ]

    return lines


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "superfluid-home"


@pytest.fixture
def basert_dir(tmp_path: Path) -> Path:
    return tmp_path / "basert-models"


def catalog(
    home: Path,
    url: str,
    clock: Clock,
    basert_dir: Path,
    *,
    offline: bool = False,
    timeout: float = SHORT_TIMEOUT,
    max_bytes: int = SMALL_CAP,
) -> HubCatalog:
    env = {
        "SUPERFLUID_CATALOG_URL": url,
        "BASERT_MODELS_DIR": str(basert_dir),
        "HOME": str(home.parent / "user-home"),
    }
    return HubCatalog(
        home,
        env,
        offline=offline,
        clock=clock,
        timeout=timeout,
        max_bytes=max_bytes,
        platform="linux",
    )


def cache_file(home: Path) -> Path:
    return home / "cache" / "hub-catalog.json"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/catalog.json"


def row(id: str, file: str = "f.base", quant: str = "q4") -> dict[str, object]:
    return {"id": id, "file": file, "quant": quant, "size": 1, "sha256": "AB" * 32}


# -- fetching and caching ----------------------------------------------------------------------


def test_the_first_load_fetches_the_catalog_and_caches_its_bytes(
    hub: Hub, home: Path, basert_dir: Path, real_catalog: bytes
) -> None:
    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir).load()

    assert hub.hits["/catalog.json"] == 1
    assert rows == parse_catalog(json.loads(real_catalog))
    assert len(rows) > 50
    assert cache_file(home).read_bytes() == real_catalog


def test_the_fetch_says_it_is_superfluid(hub: Hub, home: Path, basert_dir: Path) -> None:
    catalog(home, hub.url("/catalog.json"), Clock(), basert_dir).load()

    assert hub.user_agents and all(ua.startswith("superfluid/") for ua in hub.user_agents)


def test_a_cache_younger_than_a_day_is_not_refetched_and_an_older_one_is(
    hub: Hub, home: Path, basert_dir: Path
) -> None:
    clock = Clock()
    hub_catalog = catalog(home, hub.url("/catalog.json"), clock, basert_dir)
    first = hub_catalog.load()

    clock.advance(23 * 60 * 60)
    assert hub_catalog.load() == first
    assert hub.hits["/catalog.json"] == 1

    clock.advance(2 * 60 * 60)
    assert hub_catalog.load() == first
    assert hub.hits["/catalog.json"] == 2


def test_offline_never_fetches_and_without_a_cache_has_no_hub_rows(
    hub: Hub, home: Path, basert_dir: Path
) -> None:
    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir, offline=True).load()

    assert rows == ()
    assert sum(hub.hits.values()) == 0
    assert not cache_file(home).exists()


def test_offline_uses_even_an_old_cache_without_fetching(
    hub: Hub, home: Path, basert_dir: Path
) -> None:
    clock = Clock()
    cached = catalog(home, hub.url("/catalog.json"), clock, basert_dir).load()
    hub.hits.clear()

    clock.advance(30 * DAY)
    rows = catalog(home, hub.url("/catalog.json"), clock, basert_dir, offline=True).load()

    assert rows == cached
    assert sum(hub.hits.values()) == 0


def test_a_redirect_to_the_catalog_is_followed(
    hub: Hub, home: Path, basert_dir: Path, real_catalog: bytes
) -> None:
    rows = catalog(home, hub.url("/redirect"), Clock(), basert_dir).load()

    assert rows == parse_catalog(json.loads(real_catalog))
    assert hub.hits["/redirect"] == 1


# -- a failed fetch keeps the cache ------------------------------------------------------------

FAILURES = {
    "server down": None,
    "HTTP 500": "/500",
    "garbage": "/garbage",
    "JSON but not a catalog": "/not-a-catalog",
    "oversize body": "/oversize",
    "lying Content-Length": "/lying-length",
    "slow server": "/slow",
}


def failing_url(hub: Hub, name: str) -> str:
    path = FAILURES[name]
    return closed_port_url() if path is None else hub.url(path)


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_refresh_keeps_the_cache_byte_for_byte_and_says_so_once(
    hub: Hub,
    home: Path,
    basert_dir: Path,
    failure: str,
    caplog: pytest.LogCaptureFixture,
    warned: Callable[[], list[str]],
) -> None:
    clock = Clock()
    cached = catalog(home, hub.url("/catalog.json"), clock, basert_dir).load()
    before = cache_file(home).read_bytes()
    mtime = cache_file(home).stat().st_mtime_ns
    caplog.clear()

    clock.advance(DAY + 1)
    url = failing_url(hub, failure)
    rows = catalog(home, url, clock, basert_dir).load()

    assert rows == cached
    assert cache_file(home).read_bytes() == before
    assert cache_file(home).stat().st_mtime_ns == mtime
    [line] = warned()
    assert line.startswith(f"hub catalog: could not refresh from {url} (")
    assert "; using the cached copy from " in line
    assert os.listdir(home / "cache") == ["hub-catalog.json"]


@pytest.mark.parametrize("failure", ["server down", "HTTP 500", "garbage"])
def test_a_failed_first_fetch_leaves_no_hub_rows_and_no_cache(
    hub: Hub, home: Path, basert_dir: Path, failure: str, warned: Callable[[], list[str]]
) -> None:
    rows = catalog(home, failing_url(hub, failure), Clock(), basert_dir).load()

    assert rows == ()
    assert not cache_file(home).exists()
    [line] = warned()
    assert line.endswith("; no cached copy, so no drafter is checked against the hub's catalog")


def test_the_default_cap_stops_a_twenty_megabyte_body(
    hub: Hub, home: Path, basert_dir: Path, warned: Callable[[], list[str]]
) -> None:
    hub_catalog = HubCatalog(
        home,
        {"SUPERFLUID_CATALOG_URL": hub.url("/oversize"), "BASERT_MODELS_DIR": str(basert_dir)},
        offline=False,
        timeout=5.0,
    )

    assert hub_catalog.load() == ()
    [line] = warned()
    assert f"over the {16 << 20}-byte limit" in line


# -- a broken cache ----------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"{not json", b'{"models": 3}', b"\xff\xfe"])
def test_a_corrupt_cache_is_refetched_even_when_fresh(
    hub: Hub,
    home: Path,
    basert_dir: Path,
    real_catalog: bytes,
    content: bytes,
    warned: Callable[[], list[str]],
) -> None:
    clock = Clock()
    cache_file(home).parent.mkdir(parents=True)
    cache_file(home).write_bytes(content)
    os.utime(cache_file(home), (clock.now, clock.now))

    rows = catalog(home, hub.url("/catalog.json"), clock, basert_dir).load()

    assert hub.hits["/catalog.json"] == 1
    assert rows == parse_catalog(json.loads(real_catalog))
    assert cache_file(home).read_bytes() == real_catalog
    [line] = warned()
    assert line.startswith(f"hub catalog: ignoring the cached copy at {cache_file(home)} (")


def test_an_unwritable_cache_dir_still_gives_the_fetched_rows(
    hub: Hub,
    home: Path,
    basert_dir: Path,
    real_catalog: bytes,
    warned: Callable[[], list[str]],
) -> None:
    cache_dir = home / "cache"
    cache_dir.mkdir(parents=True)
    cache_dir.chmod(0o500)
    try:
        if os.access(cache_dir, os.W_OK):
            pytest.skip("running as a user who can write a 0o500 directory (root)")
        rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir).load()
        leftovers = os.listdir(cache_dir)
    finally:
        cache_dir.chmod(0o700)

    assert rows == parse_catalog(json.loads(real_catalog))
    assert leftovers == []
    [line] = warned()
    assert line.startswith(f"hub catalog: could not save it to {cache_file(home)} (")


def test_a_cache_dir_blocked_by_a_file_still_gives_the_fetched_rows(
    hub: Hub,
    home: Path,
    basert_dir: Path,
    real_catalog: bytes,
    warned: Callable[[], list[str]],
) -> None:
    # Unlike a read-only directory this fails for root too, so the path is covered everywhere.
    home.mkdir()
    (home / "cache").write_bytes(b"not a directory")

    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir).load()

    assert rows == parse_catalog(json.loads(real_catalog))
    assert (home / "cache").read_bytes() == b"not a directory"
    [line] = warned()
    assert line.startswith(f"hub catalog: could not save it to {cache_file(home)} (")


def test_the_cache_is_written_without_leaving_temporary_files(
    hub: Hub, home: Path, basert_dir: Path
) -> None:
    clock = Clock()
    hub_catalog = catalog(home, hub.url("/catalog.json"), clock, basert_dir)
    for _ in range(3):
        hub_catalog.load()
        clock.advance(DAY)

    assert hub.hits["/catalog.json"] == 3
    assert os.listdir(home / "cache") == ["hub-catalog.json"]


# -- baseRT's own cache ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["bare list", "models object"])
def test_rows_from_baserts_cache_follow_the_hubs_and_malformed_ones_are_skipped(
    hub: Hub, home: Path, basert_dir: Path, real_catalog: bytes, shape: str
) -> None:
    hub_first = parse_catalog(json.loads(real_catalog))
    duplicate = json.loads(real_catalog)["models"][0]
    items: list[object] = [
        row("acme/drafter", "acme-drafter.base"),
        {"id": "acme/bad", "file": "bad.base", "size": "12"},  # size of the wrong type
        "not a row",
        dict(duplicate, note="unknown fields are ignored"),
        row("acme/other", "other.base", quant="q8"),
    ]
    basert_dir.mkdir()
    document = items if shape == "bare list" else {"version": 7, "models": items}
    (basert_dir / ".catalog-cache.json").write_text(json.dumps(document))

    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir).load()

    assert rows[: len(hub_first)] == hub_first
    assert [(r.id, r.file, r.quant) for r in rows[len(hub_first) :]] == [
        ("acme/drafter", "acme-drafter.base", "q4"),
        ("acme/other", "other.base", "q8"),
    ]


def test_baserts_cache_is_read_even_offline_and_without_a_hub_cache(
    hub: Hub, home: Path, basert_dir: Path
) -> None:
    basert_dir.mkdir()
    (basert_dir / ".catalog-cache.json").write_text(json.dumps([row("acme/drafter")]))

    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir, offline=True).load()

    assert [r.id for r in rows] == ["acme/drafter"]


@pytest.mark.parametrize("content", [b"{broken", b"[[[[", b'"a string"', b"\xff"])
def test_an_unreadable_baserts_cache_is_never_fatal(
    hub: Hub, home: Path, basert_dir: Path, content: bytes
) -> None:
    basert_dir.mkdir()
    (basert_dir / ".catalog-cache.json").write_bytes(content)

    rows = catalog(home, hub.url("/catalog.json"), Clock(), basert_dir, offline=True).load()

    assert rows == ()


def test_without_basert_models_dir_the_default_dirs_under_home_are_read(
    tmp_path: Path,
) -> None:
    user_home = tmp_path / "user"
    linux = user_home / ".cache" / "baseRT" / "models"
    mac = user_home / "Library" / "Caches" / "baseRT" / "models"
    for directory, name in ((linux, "acme/linux"), (mac, "acme/mac")):
        directory.mkdir(parents=True)
        (directory / ".catalog-cache.json").write_text(json.dumps([row(name)]))
    env = {"HOME": str(user_home)}

    def ids(platform: str) -> list[str]:
        loaded = HubCatalog(tmp_path / "sf", env, offline=True, platform=platform).load()
        return [r.id for r in loaded]

    assert ids("linux") == ["acme/linux"]
    assert ids("darwin") == ["acme/linux", "acme/mac"]
