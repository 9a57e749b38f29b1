"""A hub catalog server that holds a loading server in its loading phase.

A `.base` target served with `--speculate auto` fetches the hub catalog while it loads; this
server answers (404, which the server takes as "no catalog") only once the test sets `release`,
so the test sees the loading phase for as long as it needs.
"""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StalledHub:
    """A catalog server that answers (404) only once `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub.asked.set()
                hub.release.wait(30)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/catalog.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
