"""The hub catalog's rows, fetched at most daily and cached, plus baseRT's own cache (§5).

The hub's catalog lives at `CATALOG_URL` (or `$SUPERFLUID_CATALOG_URL`, for tests) and is kept at
`<home>/cache/hub-catalog.json`. It is fetched when the cache is missing or a day old, never
offline. Nothing here is fatal: the catalog only decides which drafters get their bytes checked,
so a failed fetch, a corrupt cache or an unwritable directory costs one log line, never startup.

Redirects are followed (a renamed repository answers with one) but may not leave https: the rows
pin digests, and a plain-http hop would let anyone on the path choose them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import httpx

from superfluid import __version__
from superfluid.domain.catalog import CatalogRow, parse_catalog

CATALOG_URL = "https://raw.githubusercontent.com/basecompute/baseRT/main/base-convert/crates/base-hub/catalog.json"
CACHE_FILE = "hub-catalog.json"
BASERT_CACHE_FILE = ".catalog-cache.json"
MAX_AGE_S = 24 * 60 * 60

log = logging.getLogger("superfluid")


class _Unusable(Exception):
    """A fetch or a file that yields no catalog; the message says why, for the log line."""


class HubCatalog:
    """Loads the catalog rows: the hub's (fetched or cached) first, then baseRT's cached ones."""

    def __init__(
        self,
        home: Path,
        env: Mapping[str, str],
        *,
        offline: bool,
        clock: Callable[[], float] = time.time,
        client: httpx.Client | None = None,
        max_bytes: int = 16 << 20,
        timeout: float = 10.0,
        platform: str = sys.platform,
    ) -> None:
        self.url = env.get("SUPERFLUID_CATALOG_URL") or CATALOG_URL
        self.cache_path = home / "cache" / CACHE_FILE
        self._env = env
        self._offline = offline
        self._clock = clock
        self._client = client
        self._max_bytes = max_bytes
        self._timeout = timeout
        self._platform = platform

    def load(self) -> tuple[CatalogRow, ...]:
        """Every known row, hub rows first; a row repeated (same id, file and quant) counts once."""
        return _first_of_each(self._hub_rows() + self._basert_rows())

    # -- the hub's catalog ---------------------------------------------------------------------

    def _hub_rows(self) -> tuple[CatalogRow, ...]:
        cached = self._read_cache()
        if self._offline:
            return cached[0] if cached else ()
        if cached is not None and not self._is_stale(cached[1]):
            return cached[0]
        try:
            body = self._fetch()
            rows = _catalog_rows(body)
        except _Unusable as why:
            if cached is None:
                outcome = "no cached copy, so no drafter is checked against the hub's catalog"
            else:
                outcome = f"using the cached copy from {_when(cached[1])}"
            log.warning("hub catalog: could not refresh from %s (%s); %s", self.url, why, outcome)
            return cached[0] if cached else ()
        self._save(body)
        return rows

    def _read_cache(self) -> tuple[tuple[CatalogRow, ...], float] | None:
        """The cached rows and the cache's mtime; None when there is no usable cache."""
        try:
            mtime = self.cache_path.stat().st_mtime
            body = self.cache_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            why = error.strerror or str(error)
        else:
            try:
                return _catalog_rows(body), mtime
            except _Unusable as error:
                why = str(error)
        # A corrupt cache is the same as none: the next fetch replaces it.
        log.warning("hub catalog: ignoring the cached copy at %s (%s)", self.cache_path, why)
        return None

    def _is_stale(self, mtime: float) -> bool:
        # Either way: a cache dated a day ahead (the clock was set back) is as suspect as an old one.
        return abs(self._clock() - mtime) >= MAX_AGE_S

    def _fetch(self) -> bytes:
        if self._client is not None:
            return self._fetch_with(self._client)
        with httpx.Client() as client:
            return self._fetch_with(client)

    def _fetch_with(self, client: httpx.Client) -> bytes:
        # Per-request settings, so a client handed in (tests, a shared pool) behaves the same.
        headers = {"User-Agent": f"superfluid/{__version__}"}
        # The timeout bounds each wait; the deadline bounds a server that trickles bytes.
        deadline = time.monotonic() + self._timeout
        try:
            with client.stream(
                "GET", self.url, headers=headers, timeout=self._timeout, follow_redirects=True
            ) as response:
                if not response.is_success:
                    raise _Unusable(f"HTTP {response.status_code}")
                if self.url.lower().startswith("https:") and response.url.scheme != "https":
                    raise _Unusable(f"redirected to {response.url}, which is not https")
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > self._max_bytes:
                    raise _Unusable(f"{declared} bytes, over the {self._max_bytes}-byte limit")
                return self._read_capped(response.iter_bytes(), deadline)
        except httpx.TimeoutException:
            raise _Unusable(f"no answer within {self._timeout:g} s") from None
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as error:
            raise _Unusable(str(error) or type(error).__name__) from None

    def _read_capped(self, chunks: Iterable[bytes], deadline: float) -> bytes:
        # Counted after decompression, so a small gzip body cannot expand past the cap either.
        body = bytearray()
        for chunk in chunks:
            body += chunk
            if len(body) > self._max_bytes:
                raise _Unusable(f"over the {self._max_bytes}-byte limit")
            if time.monotonic() > deadline:
                raise _Unusable(f"not complete within {self._timeout:g} s")
        return bytes(body)

    def _save(self, body: bytes) -> None:
        """Replace the cache atomically: a reader sees the old catalog or the new, never half."""
        directory = self.cache_path.parent
        temp: str | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{CACHE_FILE}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            # Stamped by the clock that later judges its age, so the two always agree.
            now = self._clock()
            os.utime(temp, (now, now))
            os.replace(temp, self.cache_path)
        except OSError as error:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            log.warning(
                "hub catalog: could not save it to %s (%s); using the fetched copy for this run",
                self.cache_path,
                error.strerror or error,
            )

    # -- baseRT's cache ------------------------------------------------------------------------

    def _basert_dirs(self) -> list[Path]:
        explicit = self._env.get("BASERT_MODELS_DIR")
        if explicit:
            return [Path(explicit).expanduser()]
        user_home = self._env.get("HOME")
        if not user_home:
            try:
                user_home = str(Path.home())
            except RuntimeError:
                return []
        dirs = [Path(user_home) / ".cache" / "baseRT" / "models"]
        if self._platform == "darwin":
            dirs.append(Path(user_home) / "Library" / "Caches" / "baseRT" / "models")
        return dirs

    def _basert_rows(self) -> tuple[CatalogRow, ...]:
        rows: list[CatalogRow] = []
        for directory in self._basert_dirs():
            path = directory / BASERT_CACHE_FILE
            try:
                if path.stat().st_size > self._max_bytes:
                    raise _Unusable(f"over the {self._max_bytes}-byte limit")
                rows.extend(parse_catalog(json.loads(path.read_bytes())))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, RecursionError, _Unusable) as error:
                # baseRT owns this file and its format: a user can do nothing about it, so quietly.
                log.debug("hub catalog: ignoring baseRT's %s (%s)", path, error)
        return tuple(rows)


def _catalog_rows(body: bytes) -> tuple[CatalogRow, ...]:
    """The rows of the hub's catalog document; _Unusable unless it is JSON with a `models` list."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:  # not UTF-8; nested past the parser's depth
        raise _Unusable(f"not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("models"), list):
        raise _Unusable("JSON, but not a catalog (no `models` list)")
    return parse_catalog(document)


def _first_of_each(rows: Iterable[CatalogRow]) -> tuple[CatalogRow, ...]:
    seen: set[tuple[str, str, str]] = set()
    kept: list[CatalogRow] = []
    for row in rows:
        key = (row.id, row.file, row.quant)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return tuple(kept)


def _when(mtime: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime))
