"""`superfluid serve`, with the model worker thread under cProfile and every tick recorded.

    .venv/bin/python -m bench.profiled_serve OUT.prof serve MODEL --speculate auto ...

Everything after OUT.prof is the `superfluid` command line. The worker thread (the one that
ticks the executor: drafting, the packed llama_decode step, verification, gates) runs under
`cProfile`; its statistics go to OUT.prof, and each tick's `TickReport` (lanes, prefill
tokens, drafted, accepted, committed, seconds) plus the wall time between ticks to
OUT.prof.ticks.jsonl, when the server stops (SIGTERM or SIGINT). The HTTP event loop is not
profiled: it runs on other threads.

uvicorn re-raises the signal that stopped it once it has shut down; with SIGTERM's default
action the process would die there, before `serve` stops the service and the worker returns.
So SIGTERM is turned into KeyboardInterrupt, which `serve`'s `finally` survives.
"""

from __future__ import annotations

import cProfile
import dataclasses
import json
import signal
import sys
import time
from types import FrameType
from typing import Any

from superfluid.application import executor, service


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    work, tick = service.GenerationService._work, executor.Executor.tick
    ticks: list[dict[str, Any]] = []
    last_end = [0.0]

    def recorded_tick(self: executor.Executor) -> Any:
        before, began = self.last_tick, time.perf_counter()
        events = tick(self)
        ended = time.perf_counter()
        if self.last_tick is not None and self.last_tick is not before:  # a tick that stepped
            row = dataclasses.asdict(self.last_tick)
            row["wall"] = ended - began
            row["since_last"] = began - last_end[0] if last_end[0] else None
            ticks.append(row)
        last_end[0] = ended
        return events

    def profiled(self: Any, host: Any) -> None:
        profile = cProfile.Profile()
        profile.enable()
        try:
            work(self, host)
        finally:
            profile.disable()
            profile.dump_stats(out)
            with open(f"{out}.ticks.jsonl", "w") as file:
                file.writelines(json.dumps(row) + "\n" for row in ticks)

    service.GenerationService._work = profiled  # type: ignore[method-assign]
    executor.Executor.tick = recorded_tick  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, _interrupt)
    sys.argv = ["superfluid", *argv]
    from superfluid.entrypoints.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
