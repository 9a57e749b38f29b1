"""Speculation through HTTP: superfluid (auto, off), llama.cpp's llama-server, llama-cpp-python's
server, a raw loop.

    sh bench/build_llama_server.sh   # once: llama.cpp's own server, cached outside the repo
    .venv/bin/python -m bench.http_bench [--quick] [--model PATH] [--out DIR] ...

Drives each server over HTTP with the official `openai` client, streaming, on copy-heavy,
open-ended and multi-turn workloads, greedy at 1, 2, 4 and 8 concurrent clients and T=0.7 at 1,
2 and 4 (multi-turn: greedy sessions at 1 and 4 clients), and compares with a raw greedy
`llama_decode` loop in-process (the serving-overhead floor), which takes its turn in
superfluid's greedy 1-client runs. superfluid auto and off are up together and measured run by
run; beside them at each client count run llama-server's
configurations (plain, `--spec-default`, n-gram speculators), a server each per client count
(`-np` = clients), every run walking the servers forwards, the next backwards, so a ratio
compares runs seconds apart. llama-cpp-python's server runs on its own, as does llama-server
at a client count superfluid is not measured at. `--systems` and `--workloads` limit a run; a
`--systems` entry ending in `*` is a prefix (`'llama-server*'`: every llama-server
configuration). A default full run takes roughly 80–90 minutes on 2 cores: about 30 for
superfluid (multi-turn included) and llama-cpp-python, about 13 per llama-server configuration
(four by default). Afterwards,
`python -m bench.oracle_ceiling` reads its raw JSON for the ceiling's report (oracle.md).
Reports end-to-end rates (prefill included) and decode-only rates (after the first content
chunk). Writes `README.md` (tables, targets, machine, commands), `throughput.png` and
`http_bench.raw.json` into `--out` (default
`docs/benchmarks/http-gemma3-all-workloads-1-8-clients/`: a default run is all the workloads at 1-8
clients on the demo model; `/tmp/superfluid-http-bench/quick` with `--quick`); `--from-raw RAW`
rewrites the report and copies RAW beside it. Method: that report's section "Method"
(bench/http_report.py). `docs/benchmarks/README.md` is the index of every report.

Before measuring, waits (up to `--wait-max` seconds) for the 1-minute load average to fall below
`--wait-load`, since other work on a 2-core machine moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import openai

from bench.http_load import (
    Reply,
    Request,
    Round,
    Samples,
    client_for,
    gate_states,
    one_round,
    scrape,
    spec_counts,
    tick_times,
)
from bench.http_report import markdown, plot
from bench.http_results import (
    AUTO,
    DEFAULT_SYSTEMS,
    LLAMA_SERVERS,
    LLAMACPP,
    PLAIN,
    RAW,
    SYSTEMS,
    Cell,
    Machine,
    Results,
    Settings,
    is_llama_server,
    runs_at,
)
from bench.http_servers import (
    ServerFailed,
    ServerSpec,
    llama_server_binary,
    llama_server_spec,
    llamacpp_python_spec,
    running,
    superfluid_spec,
)
from bench.http_workloads import DEFAULT_WORKLOADS, WORKLOADS, Workload
from bench.raw_loop import RawLoop

# llama-cpp-python's sampling defaults add top-k 40, min-p 0.05, top-p 0.95 and a 1.1 repeat
# penalty; these make it sample the distribution superfluid samples (temperature alone).
LLAMACPP_SAMPLING = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
# llama-server: the same sampling, and per-chunk timings (its token count and drafts so far),
# since it sends usage only at the end of a stream.
LLAMA_SERVER_EXTRA = {"timings_per_token": True}
# Where a default run's report goes: a folder of its own on the benchmark shelf, named for what
# a default run measures (docs/benchmarks/README.md is the shelf's index, never a report).
DEFAULT_OUT = "docs/benchmarks/http-gemma3-all-workloads-1-8-clients"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF (default: the demo model)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 run, 1 and 4 clients, 64 tokens"
    )
    parser.add_argument("--runs", type=int, help="measured runs per cell (default 3; quick 1)")
    parser.add_argument(
        "--min-requests",
        type=int,
        help="more runs in a cell that would otherwise measure fewer requests than this "
        "(default 16; quick 0): at one client a run is one prompt, and one lane's paired ratio "
        "swings 0.7-2.9x from prompt to prompt, so a median of a few is mostly which they were",
    )
    parser.add_argument("--tokens", type=int, help="max_tokens per request (default 128; quick 64)")
    parser.add_argument("--clients", type=_ints, help="client counts (default 1,2,4,8; quick 1,4)")
    parser.add_argument(
        "--sampled-clients",
        type=_ints,
        help="client counts for T > 0 (default 1,2,4: the 8-client sampled cells would push a full run past 20 minutes; quick 1,4)",
    )
    parser.add_argument(
        "--llamacpp-clients",
        type=_ints,
        help="client counts for llama-cpp-python, which serves one request at a time (default 1,4)",
    )
    parser.add_argument(
        "--llama-server-clients",
        type=_ints,
        help="client counts (and -np) for llama-server (default: --clients)",
    )
    parser.add_argument(
        "--llama-server-temperatures",
        type=_floats,
        default=(0.0,),
        help="temperatures for llama-server (default greedy only: a server per configuration "
        "and client count)",
    )
    parser.add_argument(
        "--session-clients",
        type=_ints,
        help="client counts for the multi-turn workload, greedy only (default 1,4; quick 1)",
    )
    parser.add_argument(
        "--llama-server",
        type=Path,
        help="llama-server binary (default: bench/build_llama_server.sh's)",
    )
    parser.add_argument("--temperatures", type=_floats, default=(0.0, 0.7))
    parser.add_argument(
        "--llamacpp-temperatures",
        type=_floats,
        default=(0.0,),
        help="temperatures for llama-cpp-python (default greedy only: its cells serialize)",
    )
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"any of: {', '.join(SYSTEMS)} (an entry ending in * is a prefix; default: "
        f"{', '.join(DEFAULT_SYSTEMS)})",
    )
    parser.add_argument(
        "--warmup", type=int, help="warm-up rounds before a speculating cell (default 1)"
    )
    parser.add_argument(
        "--warmup-max",
        type=int,
        help="more warm-up rounds, up to this many, until the gate at the cell's lane count has "
        "decided (default 6)",
    )
    parser.add_argument("--max-lanes", type=int, default=8, help="superfluid --max-lanes")
    parser.add_argument("--ctx-size", type=int, default=2048, help="context per lane / n_ctx")
    parser.add_argument(
        "--threads", type=int, default=2, help="llama-cpp-python and raw-loop threads"
    )
    parser.add_argument("--out", type=Path, help="where README.md, the plot and raw JSON go")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/superfluid-http-bench/logs"))
    parser.add_argument(
        "--wait-load", type=float, default=0.7, help="1-minute load to wait for (0: don't)"
    )
    parser.add_argument(
        "--wait-max", type=float, default=600.0, help="seconds to wait for it at most"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the superfluid servers' worker under cProfile; stats to PREFIX-<auto|off>-<workload>-T<t>.prof",
    )
    parser.add_argument("--from-raw", type=Path, help="only write the report from a saved raw JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    args.runs = args.runs or (1 if quick else 3)
    args.min_requests = (0 if quick else 16) if args.min_requests is None else args.min_requests
    args.tokens = args.tokens or (64 if quick else 128)
    args.clients = args.clients or ((1, 4) if quick else (1, 2, 4, 8))
    args.sampled_clients = args.sampled_clients or ((1, 4) if quick else (1, 2, 4))
    args.llamacpp_clients = args.llamacpp_clients or (1, 4)
    args.llama_server_clients = args.llama_server_clients or args.clients
    args.session_clients = args.session_clients or ((1,) if quick else (1, 4))
    args.warmup = 1 if args.warmup is None else args.warmup
    args.warmup_max = 6 if args.warmup_max is None else args.warmup_max
    args.out = args.out or (
        Path("/tmp/superfluid-http-bench/quick") if quick else Path(DEFAULT_OUT)
    )
    args.workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    args.systems = chosen_systems(parser, args.systems, SYSTEMS)
    require_llama_server(parser, args)
    return args


def chosen_systems(
    parser: argparse.ArgumentParser, text: str, known: tuple[str, ...]
) -> tuple[str, ...]:
    """The `--systems` entries among `known`, in order; an entry ending in `*` is a prefix."""
    chosen: list[str] = []
    for entry in (s.strip() for s in text.split(",") if s.strip()):
        matches = [s for s in known if s.startswith(entry[:-1])] if entry.endswith("*") else []
        if entry in known:
            matches = [entry]
        if not matches:
            parser.error(f"unknown system {entry!r}; choose from {', '.join(known)}")
        chosen += [m for m in matches if m not in chosen]
    return tuple(chosen)


def require_llama_server(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set `args.llama_server` when a chosen system is llama-server, or stop: it is not built."""
    if any(is_llama_server(s) for s in args.systems) and args.from_raw is None:
        args.llama_server = args.llama_server or llama_server_binary()
        if not args.llama_server.is_file():
            parser.error(
                f"no llama-server at {args.llama_server}: build it with "
                "`sh bench/build_llama_server.sh` (once, about 10 minutes on 2 cores), or leave "
                "it out with --systems"
            )


# -- the machine ------------------------------------------------------------------------------


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def wait_for_quiet(limit: float, patience: float) -> None:
    if limit <= 0:
        return
    deadline = time.monotonic() + patience
    while True:
        one_minute = float(loadavg().split()[0])
        if one_minute < limit:
            log(f"load {one_minute:.2f} < {limit}: measuring")
            return
        if time.monotonic() >= deadline:
            log(f"load still {one_minute:.2f} after {patience:.0f} s: measuring anyway (noted)")
            return
        log(f"load {one_minute:.2f} ≥ {limit}: waiting")
        time.sleep(15)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_model() -> Path:
    from superfluid.adapters.llamacpp.demo_model import demo_model_path
    from superfluid.entrypoints.container import superfluid_home

    return demo_model_path(superfluid_home(os.environ))


# -- measuring --------------------------------------------------------------------------------


def raw_round(loop: RawLoop, workload: Workload, run: int, max_tokens: int) -> Round:
    """One greedy request through the raw loop on the prompt a server's one client is sent in
    round `run`, as a one-reply round."""
    variant = workload.variant(0, run)
    result = loop.generate(loop.tokenize(workload.raw_prompt(variant, loop.chat_turn)), max_tokens)
    prefill = result.seconds - result.decode_seconds  # prompt and the first token
    decoded = result.tokens - 1
    reply = Reply(
        variant.name,
        result.tokens,
        result.seconds,
        "raw",
        ttft=prefill,
        decode_tokens=decoded,
        decode_seconds=result.decode_seconds,
    )
    return Round((reply,), result.seconds, decoded, result.decode_seconds)


def raw_loop_for(args: argparse.Namespace, model: Path, workload: Workload) -> RawLoop:
    """The raw loop, loaded and past its one-time allocations."""
    loop = RawLoop(model, ctx_size=args.ctx_size, threads=args.threads)
    loop.generate(loop.tokenize(workload.raw_prompt(workload.variant(0, 0), loop.chat_turn)), 8)
    return loop


def runs_for(args: argparse.Namespace, clients: int) -> int:
    """`runs_at` for this invocation's `--runs` and `--min-requests`."""
    return runs_at(int(args.runs), int(args.min_requests), clients)


def raw_cells(args: argparse.Namespace, loop: RawLoop, workload: Workload) -> list[Cell]:
    """The raw loop's cell on its own, for a run that measures no superfluid 1-client cell to
    join (its prompts are the first rounds' of the workload)."""
    rounds = [raw_round(loop, workload, r, args.tokens) for r in range(runs_for(args, 1))]
    return [raw_cell(workload, rounds)]


def raw_cell(workload: Workload, rounds: list[Round]) -> Cell:
    """The raw loop's greedy 1-client cell of `workload`, logged."""
    cell = Cell(RAW, workload.name, 0.0, 1, tuple(rounds))
    log_cell(cell)
    return cell


@dataclass(frozen=True, slots=True)
class Side:
    """One running server, as the cells of a workload × temperature group measure it."""

    system: str
    base: str
    client: openai.AsyncOpenAI
    request: Request

    @property
    def speculating(self) -> bool:
        """Whether the server has superfluid's gates (read from /metrics)."""
        return self.system == AUTO

    @property
    def superfluid(self) -> bool:
        """Whether the server counts its ticks in /metrics (superfluid auto and off)."""
        return self.system in (AUTO, PLAIN)

    @property
    def drafting(self) -> bool:
        """Whether the server drafts, so warm-up rounds come before its cells."""
        return self.system == AUTO or (is_llama_server(self.system) and self.system != LLAMA_PLAIN)


LLAMA_PLAIN = LLAMA_SERVERS[0]  # llama-server without speculation


def client_counts(
    args: argparse.Namespace, system: str, temperature: float, workload: Workload
) -> tuple[int, ...]:
    if workload.multi_turn:
        return tuple(args.session_clients) if temperature == 0.0 else ()
    if system == LLAMACPP:
        counts = args.llamacpp_clients
    elif is_llama_server(system):
        counts = args.llama_server_clients
    else:
        counts = args.clients
    if temperature > 0:
        counts = tuple(c for c in counts if c in args.sampled_clients)
    return tuple(counts)


def request_for(
    args: argparse.Namespace, spec: ServerSpec, temperature: float, workload: Workload
) -> Request:
    if spec.system == LLAMACPP:
        # Its server sends no usage in a stream, so its tokens could not be counted honestly.
        return Request(spec.model_name, temperature, args.tokens, LLAMACPP_SAMPLING, stream=False)
    if is_llama_server(spec.system):
        extra = {
            **LLAMA_SERVER_EXTRA,
            **(LLAMACPP_SAMPLING if temperature > 0 else {}),
            # Servers run on their defaults (prompt cache on) wherever prompts are fresh; a
            # repeated cell's prompts repeat as only a bench's do, so no reuse there.
            "cache_prompt": not workload.repeats_prompts,
        }
        return Request(
            spec.model_name,
            temperature,
            args.tokens,
            extra,
            stream_options={"include_usage": True},
        )
    return Request(spec.model_name, temperature, args.tokens)


def cell_of(
    side: Side,
    workload: Workload,
    clients: int,
    rounds: list[Round],
    before: Samples | None,
    timeline: list[str] | None = None,
) -> Cell:
    temperature = side.request.temperature
    if before is None:
        return Cell(side.system, workload.name, temperature, clients, tuple(rounds))
    after = scrape(side.base)
    ticks = tick_times(before, after)
    if not side.speculating:
        return Cell(side.system, workload.name, temperature, clients, tuple(rounds), ticks=ticks)
    gates, abandoned = gate_states(after)
    counts = spec_counts(before, after)
    return Cell(
        side.system,
        workload.name,
        temperature,
        clients,
        tuple(rounds),
        counts,
        gates,
        abandoned,
        tuple(timeline or ()),
        ticks,
    )


def log_cell(cell: Cell) -> None:
    accepted = f", acceptance {cell.acceptance:.0%}" if cell.acceptance is not None else ""
    decode = cell.decode_aggregate
    decoding = f", {decode:.1f} decode-only" if decode is not None else ""
    session = cell.session_seconds
    later = cell.later_ttft
    sessions = (
        f", session {session:.2f} s, later-turn TTFT {later * 1000:.0f} ms"
        if session is not None and later is not None
        else ""
    )
    log(
        f"{cell.system:>18} {cell.workload} T={cell.temperature:g} {cell.clients} client(s): "
        f"{cell.aggregate:.1f} tok/s aggregate{decoding}, {cell.per_client:.1f} per client"
        f"{accepted}{sessions}, prompt tokens {cell.prompt_tokens}"
    )


#: Decided phases: the gate at that lane count has finished probing.
SETTLED = ("speculate", "plain", "final-plain")


#: Rounds are numbered per cell from `next(_CELLS) * ROUNDS_PER_CELL`: measured runs from there,
#: warm-ups from halfway. A fresh-prompt workload hands each (round, client) its own prompt, so
#: with every cell's rounds numbered apart no server is sent a prompt twice, while the servers
#: measured together in a cell are sent the same ones.
ROUNDS_PER_CELL = 1000
WARM_UP_ROUNDS_FROM = ROUNDS_PER_CELL // 2
_CELLS = itertools.count(1)


async def warm_up(
    args: argparse.Namespace,
    side: Side,
    workload: Workload,
    clients: int,
    first: int,
    timeline: list[str],
) -> None:
    """`--warmup` rounds, then more (up to `--warmup-max`) until the gate at this lane count
    has decided: a cell measures the steady state, not the probes a fresh server runs once.
    Warm-up rounds are numbered from `first`; a speculating server's gate after each goes to
    `timeline`."""
    for warm in range(max(args.warmup_max, args.warmup)):
        if warm >= args.warmup and (
            not side.speculating or gate_settled(scrape(side.base), clients)
        ):
            return
        await one_round(side.client, workload, side.request, clients, first + warm)
        if side.speculating:
            timeline.append("w " + gate_at(scrape(side.base), clients))


def gate_settled(samples: Samples, lanes: int) -> bool:
    states, abandoned = gate_states(samples)
    phase = next((state.phase for state in states if state.lanes == lanes), None)
    return abandoned or phase is None or phase in SETTLED


def gate_at(samples: Samples, lanes: int) -> str:
    """The gate at `lanes` lanes as the timeline shows it: "phase dN" (or "abandoned")."""
    states, abandoned = gate_states(samples)
    if abandoned:
        return "abandoned"
    state = next((state for state in states if state.lanes == lanes), None)
    if state is None:
        return "unseen"
    return f"{state.phase or 'no gate'} d{state.depth}"


async def measured_cells(
    args: argparse.Namespace,
    sides: list[Side],
    workload: Workload,
    counts: tuple[int, ...],
    raw: RawLoop | None = None,
) -> list[Cell]:
    """The cells of servers that are all up: per client count, warm-up rounds for the
    drafting servers, then run r of every server before run r + 1 of any, so that a ratio
    pairs runs measured seconds apart rather than minutes. `raw`, the raw loop, joins the
    1-client runs as one more system, on the same prompts (the servers are idle meanwhile)."""
    cells = []
    for clients in counts:
        first = next(_CELLS) * ROUNDS_PER_CELL
        timelines: dict[str, list[str]] = {side.system: [] for side in sides}
        for side in sides:
            if side.drafting:
                await warm_up(
                    args,
                    side,
                    workload,
                    clients,
                    first + WARM_UP_ROUNDS_FROM,
                    timelines[side.system],
                )
        before = {side.system: scrape(side.base) for side in sides if side.superfluid}
        rounds: dict[str, list[Round]] = {side.system: [] for side in sides}
        joined: list[Side | RawLoop] = [*sides]
        if raw is not None and clients == 1:
            joined.append(raw)
            rounds[RAW] = []
        for run in range(runs_for(args, clients)):
            # Alternate who goes first, so that neither system always runs right after the other.
            for turn in joined if run % 2 == 0 else joined[::-1]:
                if isinstance(turn, RawLoop):
                    rounds[RAW].append(raw_round(turn, workload, first + run, args.tokens))
                    continue
                rounds[turn.system].append(
                    await one_round(turn.client, workload, turn.request, clients, first + run)
                )
                if turn.speculating:
                    timelines[turn.system].append(gate_at(scrape(turn.base), clients))
        for side in sides:
            cell = cell_of(
                side,
                workload,
                clients,
                rounds[side.system],
                before.get(side.system),
                timelines[side.system],
            )
            log_cell(cell)
            cells.append(cell)
        if RAW in rounds:
            cells.append(raw_cell(workload, rounds[RAW]))
    return cells


async def group_cells(
    args: argparse.Namespace,
    servers: list[tuple[ServerSpec, str]],
    workload: Workload,
    temperature: float,
    counts: tuple[int, ...],
    primed: set[str] | None = None,
    raw: RawLoop | None = None,
) -> list[Cell]:
    """The cells of `servers`, all up, at each of `counts` (`raw` joining the 1-client runs);
    `primed` holds the servers that already answered their untimed request (and gains the
    ones primed here)."""
    primed = set() if primed is None else primed
    most = max(counts)
    sides = [
        Side(
            spec.system,
            base,
            client_for(base, most, keepalive=not is_llama_server(spec.system)),
            request_for(args, spec, temperature, workload),
        )
        for spec, base in servers
    ]
    try:
        for side in sides:
            if side.base in primed:
                continue
            # One untimed request: the first decode of a fresh server allocates its graphs.
            primer = dataclasses.replace(side.request, max_tokens=16)
            await one_round(side.client, workload, primer, 1, 0)
            primed.add(side.base)
        return await measured_cells(args, sides, workload, counts, raw)
    finally:
        for side in sides:
            await side.client.close()


def server_for(
    args: argparse.Namespace,
    system: str,
    model: Path,
    group: str,
    slots: int,
    workload: Workload,
) -> ServerSpec:
    """The server `system` runs as for `workload`'s cells. Prefix reuse is on, as a user gets
    it, except where the bench repeats prompts (llama-server's prompt cache is off there too:
    `request_for`)."""
    if is_llama_server(system):
        return llama_server_spec(
            system,
            args.llama_server,
            model,
            slots=slots,
            ctx_size=args.ctx_size,
            threads=args.threads,
        )
    if system == LLAMACPP:
        return llamacpp_python_spec(model, ctx_size=args.ctx_size, threads=args.threads)
    speculate = "auto" if system == AUTO else "off"
    spec = superfluid_spec(
        system,
        model,
        speculate,
        max_lanes=args.max_lanes,
        ctx_size=args.ctx_size,
        prefix_reuse=not workload.repeats_prompts,
    )
    if args.profile is not None:
        out = f"{args.profile}-{speculate}-{group}.prof"
        argv = (sys.executable, "-m", "bench.profiled_serve", out, *spec.argv[1:])
        return ServerSpec(system, argv, spec.model_name)
    return spec


def served_cells(
    args: argparse.Namespace,
    model: Path,
    systems: list[str],
    workload: Workload,
    temperature: float,
    commands: dict[str, str],
    counts: tuple[int, ...],
    suffix: str = "",
    beside: dict[int, tuple[str, ...]] | None = None,
    raw: RawLoop | None = None,
) -> list[Cell]:
    """Start the systems' servers side by side (an idle one uses no CPU: its llama.cpp threads
    sleep between requests), measure their cells together, stop them.

    `beside` names, per client count, llama-server configurations to measure with them: each
    is a server of its own per client count (`-np` = clients), started next to the systems'
    servers for that count's cells and stopped after them, so that its runs interleave with
    superfluid's as auto's and off's do."""
    if not counts:
        return []
    group = f"{workload.name}-T{temperature:g}"

    def start(system: str, slots: int, stack: contextlib.ExitStack) -> tuple[ServerSpec, str]:
        spec = server_for(args, system, model, group, slots, workload)
        shown = spec.shown().replace(f"-np {slots}", "-np <clients>")
        if is_llama_server(system):
            shown = shown.replace(
                f"--ctx-size {args.ctx_size * slots}",
                f"--ctx-size <{args.ctx_size} × clients>",
            )
        # superfluid's repeated cells run without prefix reuse: their command is shown apart
        # (llama-server's differs in the request, `cache_prompt`, not in its command).
        repeated = workload.repeats_prompts and not is_llama_server(system)
        commands[f"{system} (repeated cells)" if repeated else system] = shown
        name = f"{system.replace(' ', '-')}-{group}-{slots}{suffix}.log"
        return spec, stack.enter_context(running(spec, args.log_dir / name))

    with contextlib.ExitStack() as stack:
        servers = [start(system, max(counts), stack) for system in systems]
        if not beside or not any(beside.values()):
            return asyncio.run(group_cells(args, servers, workload, temperature, counts, raw=raw))
        cells: list[Cell] = []
        primed: set[str] = set()
        for clients in counts:
            with contextlib.ExitStack() as peers:
                here = [start(peer, clients, peers) for peer in beside.get(clients, ())]
                cells += asyncio.run(
                    group_cells(
                        args, servers + here, workload, temperature, (clients,), primed, raw=raw
                    )
                )
        return cells


#: Set by `measure`: what went wrong with a server group that was then left out.
FAILURES: list[str] = []


def attempt(
    args: argparse.Namespace,
    model: Path,
    systems: list[str],
    workload: Workload,
    temperature: float,
    commands: dict[str, str],
    counts: tuple[int, ...],
    beside: dict[int, tuple[str, ...]] | None = None,
    raw: RawLoop | None = None,
) -> list[Cell]:
    """`served_cells`, tried again once with fresh servers if a server fails (a long run on a
    shared machine should not be lost to one crash or stray signal); left out, and noted in the
    report, if it fails twice."""
    for tries in (1, 2):
        try:
            suffix = "" if tries == 1 else "-retry"  # the failed try's log stays
            return served_cells(
                args, model, systems, workload, temperature, commands, counts, suffix, beside, raw
            )
        except (openai.APIConnectionError, openai.APIStatusError, ServerFailed) as error:
            everyone = [*systems, *sorted({p for ps in (beside or {}).values() for p in ps})]
            what = f"{', '.join(everyone)} on {workload.name} T={temperature:g} {counts} client(s)"
            log(f"{what}: {type(error).__name__}: {error}" + ("; again" if tries == 1 else ""))
            if tries == 2:
                FAILURES.append(f"{what} left out after two failures: {type(error).__name__}")
    return []


def peers_beside(
    args: argparse.Namespace,
    peers: list[str],
    temperature: float,
    workload: Workload,
    counts: tuple[int, ...],
) -> dict[int, tuple[str, ...]]:
    """For each of superfluid's client counts, the llama-server configurations measured at it
    too (`--llama-server-clients`), to be run beside superfluid there."""
    return {
        clients: tuple(
            peer for peer in peers if clients in client_counts(args, peer, temperature, workload)
        )
        for clients in counts
    }


def measure(args: argparse.Namespace, model: Path) -> tuple[list[Cell], dict[str, str]]:
    cells: list[Cell] = []
    commands: dict[str, str] = {}
    for name in args.workloads:
        workload = WORKLOADS[name]
        with contextlib.ExitStack() as stack:
            raw: RawLoop | None = None
            if RAW in args.systems and 0.0 in args.temperatures and not workload.multi_turn:
                raw = raw_loop_for(args, model, workload)
                stack.callback(raw.close)
                commands[RAW] = (
                    f"(in-process) bench/raw_loop.py, n_ctx {args.ctx_size}, {args.threads} threads"
                )
            cells += measure_workload(args, model, workload, commands, raw)
    return cells, commands


def measure_workload(
    args: argparse.Namespace,
    model: Path,
    workload: Workload,
    commands: dict[str, str],
    raw: RawLoop | None,
) -> list[Cell]:
    """Every cell of one workload; the raw loop, if given, joins superfluid's greedy 1-client
    runs (or runs on its own where superfluid has none)."""
    cells: list[Cell] = []
    for temperature in args.temperatures:
        peers = (
            [s for s in LLAMA_SERVERS if s in args.systems]
            if temperature in args.llama_server_temperatures
            else []
        )
        # superfluid off and auto together, run by run, and beside them at each client count
        # the llama-server configurations measured at that count: the runs a ratio compares
        # are measured seconds apart. Run 0 of a cell walks the servers forwards, run 1
        # backwards, and so on.
        superfluid = [system for system in (PLAIN, AUTO) if system in args.systems]
        counts: tuple[int, ...] = ()
        if superfluid:
            counts = client_counts(args, PLAIN, temperature, workload)
        joins = raw is not None and temperature == 0.0 and 1 in counts
        if raw is not None and temperature == 0.0 and not joins:
            cells += raw_cells(args, raw, workload)
        if superfluid:
            beside = peers_beside(args, peers, temperature, workload, counts)
            cells += attempt(
                args,
                model,
                superfluid,
                workload,
                temperature,
                commands,
                counts,
                beside,
                raw if joins else None,
            )
        if (
            LLAMACPP in args.systems
            and temperature in args.llamacpp_temperatures
            and not workload.multi_turn  # it does not stream usage: no TTFT to report
        ):
            llamacpp_counts = client_counts(args, LLAMACPP, temperature, workload)
            cells += attempt(
                args, model, [LLAMACPP], workload, temperature, commands, llamacpp_counts
            )
        for system in peers:
            # A server per client count: `-np` = clients, each slot --ctx-size tokens. The
            # counts superfluid was measured at are done; the others run on their own.
            for clients in client_counts(args, system, temperature, workload):
                if clients not in counts:
                    cells += attempt(
                        args, model, [system], workload, temperature, commands, (clients,)
                    )
    return cells


# -- main -------------------------------------------------------------------------------------


def write_report(results: Results, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    picture: str | None = "throughput.png"
    try:
        plot(results, out / "throughput.png")
    except ImportError as error:  # matplotlib is the bench extra's; the tables need nothing
        log(f"no plot ({error}); install the bench extra: pip install -e '.[bench]'")
        picture = None
    (out / "README.md").write_text(markdown(results, plot=picture))
    log(f"wrote {out / 'README.md'}" + (f" and {out / picture}" if picture else ""))


def report_from_raw(raw: Path, out: Path) -> None:
    """Rewrite the report from a saved run, and put that run's raw beside it: readers of
    `--out` (oracle_ceiling's `--http-raw`) must find the run the report shows, not an older one."""
    results = Results.load(raw)
    out.mkdir(parents=True, exist_ok=True)
    kept = out / "http_bench.raw.json"
    if not kept.exists() or not kept.samefile(raw):
        shutil.copyfile(raw, kept)
    write_report(results, out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_raw is not None:
        report_from_raw(args.from_raw, args.out)
        return
    model = (args.model or default_model()).expanduser().resolve()
    wait_for_quiet(args.wait_load, args.wait_max)
    began, load_before = time.monotonic(), loadavg()
    cells, commands = measure(args, model)
    load_after = loadavg()
    notes = list(FAILURES)
    if float(load_before.split()[0]) >= args.wait_load > 0:
        notes.append(
            f"measuring began with a 1-minute load of {load_before.split()[0]} (≥ {args.wait_load}): figures are noisier"
        )
    machine = Machine(
        nproc=nproc(),
        cpu=cpu_model(),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_before=load_before,
        load_after=load_after,
        python=platform.python_version(),
        llama_cpp_python=metadata.version("llama_cpp_python"),
    )
    settings = Settings(
        model=model.name,
        max_tokens=args.tokens,
        runs=args.runs,
        min_requests=args.min_requests,
        warmup_rounds=args.warmup,
        warmup_max=args.warmup_max,
        clients=args.clients,
        sampled_clients=args.sampled_clients,
        llamacpp_clients=args.llamacpp_clients,
        llamacpp_temperatures=args.llamacpp_temperatures,
        temperatures=args.temperatures,
        workloads=args.workloads,
        max_lanes=args.max_lanes,
        ctx_size=args.ctx_size,
        threads=args.threads,
        quick=args.quick,
        interleaved=True,
        peers_interleaved=True,
        raw_interleaved=True,
        llama_server_clients=args.llama_server_clients,
        llama_server_temperatures=args.llama_server_temperatures,
        session_clients=args.session_clients,
    )
    shown = [
        a if a != str(model) else "<model>" for a in (argv if argv is not None else sys.argv[1:])
    ]
    results = Results(
        machine=machine,
        settings=settings,
        command=f".venv/bin/python -m bench.http_bench {shlex.join(shown)}".rstrip(),
        servers=commands,
        cells=tuple(cells),
        minutes=(time.monotonic() - began) / 60.0,
        notes=tuple(notes),
    )
    results.save(args.out / "http_bench.raw.json")
    write_report(results, args.out)


if __name__ == "__main__":
    main()
