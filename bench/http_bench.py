"""Speculation through HTTP: superfluid (auto, off), llama-cpp-python's server, a raw loop.

    .venv/bin/python -m bench.http_bench [--quick] [--model PATH] [--out DIR] ...

Drives each server over HTTP with the official `openai` client, one server at a time, on
copy-heavy and open-ended workloads, greedy at 1, 2, 4 and 8 concurrent clients and T=0.7 at
1, 2 and 4 (a default full run takes about 20 minutes on 2 cores), and compares with a raw
greedy `llama_decode` loop in-process (the serving-overhead floor). Writes `README.md` (tables, targets, machine, commands), `throughput.png` and
`http_bench.raw.json` into `--out` (default `docs/benchmarks/`; `/tmp/superfluid-http-bench/quick`
with `--quick`). Method: docs/benchmarks/README.md, section "Method" (bench/http_report.py).

Before measuring, waits (up to `--wait-max` seconds) for the 1-minute load average to fall below
`--wait-load`, since other work on a 2-core machine moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shlex
import sys
import time
from importlib import metadata
from pathlib import Path

from bench.http_load import (
    Reply,
    Request,
    Round,
    client_for,
    gate_states,
    one_round,
    scrape,
    spec_counts,
)
from bench.http_report import markdown, plot
from bench.http_results import AUTO, LLAMACPP, PLAIN, RAW, SYSTEMS, Cell, Machine, Results, Settings
from bench.http_servers import (
    ServerSpec,
    llamacpp_python_spec,
    running,
    superfluid_spec,
)
from bench.http_workloads import WORKLOADS, Workload
from bench.raw_loop import RawLoop

# llama-cpp-python's sampling defaults add top-k 40, min-p 0.05, top-p 0.95 and a 1.1 repeat
# penalty; these make it sample the distribution superfluid samples (temperature alone).
LLAMACPP_SAMPLING = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}


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
    parser.add_argument("--temperatures", type=_floats, default=(0.0, 0.7))
    parser.add_argument(
        "--llamacpp-temperatures",
        type=_floats,
        default=(0.0,),
        help="temperatures for llama-cpp-python (default greedy only: its cells serialize)",
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"any of: {', '.join(SYSTEMS)}"
    )
    parser.add_argument(
        "--warmup", type=int, help="warm-up rounds before a speculating cell (default 1)"
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
    args.tokens = args.tokens or (64 if quick else 128)
    args.clients = args.clients or ((1, 4) if quick else (1, 2, 4, 8))
    args.sampled_clients = args.sampled_clients or ((1, 4) if quick else (1, 2, 4))
    args.llamacpp_clients = args.llamacpp_clients or (1, 4)
    args.warmup = 1 if args.warmup is None else args.warmup
    args.out = args.out or (
        Path("/tmp/superfluid-http-bench/quick") if quick else Path("docs/benchmarks")
    )
    args.workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    args.systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for name in args.systems:
        if name not in SYSTEMS:
            parser.error(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
    return args


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
    from superfluid.entrypoints.hosts import superfluid_home

    return demo_model_path(superfluid_home(os.environ))


# -- measuring --------------------------------------------------------------------------------


def raw_cells(args: argparse.Namespace, model: Path, workload: Workload) -> list[Cell]:
    loop = RawLoop(model, ctx_size=args.ctx_size, threads=args.threads)
    try:
        first = workload.variant(0, 0)
        loop.generate(loop.tokenize(workload.raw_prompt(first)), 8)  # one-time allocations
        rounds = []
        for run in range(args.runs):
            variant = workload.variant(0, run)
            result = loop.generate(loop.tokenize(workload.raw_prompt(variant)), args.tokens)
            reply = Reply(variant.name, result.tokens, result.seconds, "raw")
            rounds.append(Round((reply,), result.seconds))
    finally:
        loop.close()
    cell = Cell(RAW, workload.name, 0.0, 1, tuple(rounds))
    log(f"{RAW:>18} {workload.name} greedy 1 client: {cell.aggregate:.1f} tok/s")
    return [cell]


async def server_cells(
    args: argparse.Namespace, spec: ServerSpec, base: str, workload: Workload, temperature: float
) -> list[Cell]:
    system = spec.system
    speculating = system == AUTO
    counts = args.llamacpp_clients if system == LLAMACPP else args.clients
    if temperature > 0:
        counts = tuple(c for c in counts if c in args.sampled_clients)
    extra = LLAMACPP_SAMPLING if system == LLAMACPP else {}
    request = Request(spec.model_name, temperature, args.tokens, extra)
    client = client_for(base, max(counts))
    cells = []
    try:
        # One untimed request: the first decode of a fresh server allocates its graphs.
        await one_round(client, workload, Request(spec.model_name, temperature, 16, extra), 1, 0)
        for clients in counts:
            if speculating:
                for warm in range(args.warmup):
                    await one_round(client, workload, request, clients, 100 + warm)
            before = scrape(base) if speculating else {}
            rounds = [
                await one_round(client, workload, request, clients, run) for run in range(args.runs)
            ]
            cell = Cell(system, workload.name, temperature, clients, tuple(rounds))
            if speculating:
                after = scrape(base)
                gates, abandoned = gate_states(after)
                cell = Cell(
                    system,
                    workload.name,
                    temperature,
                    clients,
                    tuple(rounds),
                    spec_counts(before, after),
                    gates,
                    abandoned,
                )
            cells.append(cell)
            accepted = f", acceptance {cell.acceptance:.0%}" if cell.acceptance is not None else ""
            log(
                f"{system:>18} {workload.name} T={temperature:g} {clients} client(s): "
                f"{cell.aggregate:.1f} tok/s aggregate, {cell.per_client:.1f} per client{accepted}"
            )
    finally:
        await client.close()
    return cells


def server_for(args: argparse.Namespace, system: str, model: Path, group: str) -> ServerSpec:
    if system == LLAMACPP:
        return llamacpp_python_spec(model, ctx_size=args.ctx_size, threads=args.threads)
    speculate = "auto" if system == AUTO else "off"
    spec = superfluid_spec(
        system, model, speculate, max_lanes=args.max_lanes, ctx_size=args.ctx_size
    )
    if args.profile is not None:
        out = f"{args.profile}-{speculate}-{group}.prof"
        argv = (sys.executable, "-m", "bench.profiled_serve", out, *spec.argv[1:])
        return ServerSpec(system, argv, spec.model_name)
    return spec


def measure(args: argparse.Namespace, model: Path) -> tuple[list[Cell], dict[str, str]]:
    cells: list[Cell] = []
    commands: dict[str, str] = {}
    for name in args.workloads:
        workload = WORKLOADS[name]
        if RAW in args.systems and 0.0 in args.temperatures:
            cells += raw_cells(args, model, workload)
            commands[RAW] = (
                f"(in-process) bench/raw_loop.py, n_ctx {args.ctx_size}, {args.threads} threads"
            )
        for temperature in args.temperatures:
            group = f"{name}-T{temperature:g}"
            # Systems interleaved per group: the cells a ratio compares are measured close in time.
            for system in (PLAIN, AUTO, LLAMACPP):
                if system not in args.systems:
                    continue
                if system == LLAMACPP and temperature not in args.llamacpp_temperatures:
                    continue
                spec = server_for(args, system, model, group)
                commands[system] = spec.shown()
                log_path = args.log_dir / f"{system.replace(' ', '-')}-{group}.log"
                with running(spec, log_path) as base:
                    cells += asyncio.run(server_cells(args, spec, base, workload, temperature))
    return cells, commands


# -- main -------------------------------------------------------------------------------------


def write_report(results: Results, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    picture: str | None = "throughput.png"
    try:
        plot(results, out / "throughput.png")
    except ImportError as error:  # matplotlib is the bench extra's; the tables need nothing
        log(f"no plot ({error}); install the bench extra: pip install -e '.[bench]'")
        picture = None
    extra = []
    if (out / "profile.md").is_file():  # hand-written: where the time goes in the misses
        extra = ["## Where the time goes", "", "See [profile.md](profile.md).", ""]
    (out / "README.md").write_text(markdown(results, plot=picture, extra=extra))
    log(f"wrote {out / 'README.md'}" + (f" and {out / picture}" if picture else ""))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_raw is not None:
        write_report(Results.load(args.from_raw), args.out)
        return
    model = (args.model or default_model()).expanduser().resolve()
    wait_for_quiet(args.wait_load, args.wait_max)
    began, load_before = time.monotonic(), loadavg()
    cells, commands = measure(args, model)
    load_after = loadavg()
    notes = []
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
        warmup_rounds=args.warmup,
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
