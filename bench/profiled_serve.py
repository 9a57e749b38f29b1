"""`superfluid serve`, with the model worker thread under cProfile.

    .venv/bin/python -m bench.profiled_serve OUT.prof serve MODEL --speculate auto ...

Everything after OUT.prof is the `superfluid` command line. The worker thread (the one that
ticks the executor: drafting, the packed llama_decode step, verification, gates) runs under
`cProfile`; its statistics are written to OUT.prof when the server stops (SIGTERM or SIGINT).
The HTTP event loop is not profiled: it runs on other threads.

uvicorn re-raises the signal that stopped it once it has shut down; with SIGTERM's default
action the process would die there, before `serve` stops the service and the worker returns.
So SIGTERM is turned into KeyboardInterrupt, which `serve`'s `finally` survives.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from types import FrameType
from typing import Any

from superfluid.application import service


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    original = service.GenerationService._work

    def profiled(self: Any, host: Any) -> None:
        profile = cProfile.Profile()
        profile.enable()
        try:
            original(self, host)
        finally:
            profile.disable()
            profile.dump_stats(out)

    service.GenerationService._work = profiled  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, _interrupt)
    sys.argv = ["superfluid", *argv]
    from superfluid.entrypoints.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
