"""The results of an HTTP benchmark run: cells, raw-loop rows, and their JSON form.

A `Cell` is one system on one workload at one temperature and client count: its measured
rounds, and for superfluid what `/metrics` counted and how the gates stood afterwards. The
report (http_report.py) reads only these values, so a run can be saved as JSON and reported
again later (`--from-raw`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.http_load import GateState, Reply, Round, SpecCounts, TickTime
from bench.http_servers import LLAMA_SERVER_CONFIGS

AUTO = "superfluid auto"
PLAIN = "superfluid off"
LLAMACPP = "llama-cpp-python"
RAW = "raw loop"
#: llama.cpp's own server, one system per configuration (bench/http_servers.py).
LLAMA_SERVER = "llama-server"
LLAMA_SERVERS = tuple(LLAMA_SERVER_CONFIGS)
SYSTEMS = (AUTO, PLAIN, LLAMACPP, RAW, *LLAMA_SERVERS)
#: What a run measures unless `--systems` says otherwise: each llama-server configuration costs
#: a server per client count and workload, so the default run takes four of them (plain,
#: --spec-default, and one small-key configuration per n-gram speculator); `'llama-server*'`
#: takes all.
#: llama-server: plain, --spec-default, and the best n-gram configurations measured by hand.
DEFAULT_SYSTEMS = (
    AUTO,
    PLAIN,
    LLAMACPP,
    RAW,
    "llama-server",
    "llama-server spec-default",
    "llama-server ngram-simple n3 m8",
    "llama-server ngram-map-k n3 m16",
)


def is_llama_server(system: str) -> bool:
    return system == LLAMA_SERVER or system.startswith(LLAMA_SERVER + " ")


@dataclass(frozen=True, slots=True)
class Cell:
    system: str
    workload: str
    temperature: float
    clients: int
    rounds: tuple[Round, ...]
    spec: SpecCounts | None = None  # superfluid only
    gates: tuple[GateState, ...] = ()
    abandoned: bool | None = None
    #: The gate at the cell's lane count after each round, warm-ups first ("w" rounds), as
    #: "phase dN" (superfluid auto only): how fast the lane count decided.
    timeline: tuple[str, ...] = ()
    #: Where the server's tick time went over the measured runs, per lane count and kind of
    #: tick (superfluid auto and off; empty in runs saved before it was counted).
    ticks: tuple[TickTime, ...] = ()

    @property
    def key(self) -> tuple[str, float, int]:
        return (self.workload, self.temperature, self.clients)

    @property
    def aggregate(self) -> float:
        """Median over runs of all clients' tokens over the round's wall time."""
        return statistics.median(r.aggregate for r in self.rounds) if self.rounds else 0.0

    @property
    def per_client(self) -> float:
        """Median over runs of the mean client's tokens over its own request's latency."""
        return statistics.median(r.per_client for r in self.rounds) if self.rounds else 0.0

    @property
    def decode_aggregate(self) -> float | None:
        """Median over runs of the round's decode-only rate (http_load.decode_window); None when
        a run has none (a system that does not stream)."""
        return _median_of([r.decode_aggregate for r in self.rounds])

    @property
    def decode_per_client(self) -> float | None:
        """Median over runs of the mean client's tokens after its first content chunk over the
        time from that chunk to its last."""
        return _median_of([r.decode_per_client for r in self.rounds])

    @property
    def ttft(self) -> float | None:
        """Median time to the first content chunk over the replies of every run that had one
        (seconds); None when not streamed."""
        times = [reply.ttft for r in self.rounds for reply in r.replies if reply.ttft is not None]
        return statistics.median(times) if times else None

    @property
    def sessions(self) -> list[float]:
        """Multi-turn: each session's time (its turns' latencies added up), over every run."""
        totals: dict[tuple[int, int], float] = {}
        for index, r in enumerate(self.rounds):
            for reply in r.replies:
                if reply.client is not None:
                    key = (index, reply.client)
                    totals[key] = totals.get(key, 0.0) + reply.seconds
        return list(totals.values())

    @property
    def session_seconds(self) -> float | None:
        """Multi-turn: the median session time (seconds); None for single-turn cells."""
        sessions = self.sessions
        return statistics.median(sessions) if sessions else None

    @property
    def later_ttft(self) -> float | None:
        """Multi-turn: the median TTFT of turns 2 and later (seconds), where a server can reuse
        the session's earlier turns; None for single-turn cells."""
        times = [
            reply.ttft
            for r in self.rounds
            for reply in r.replies
            if reply.turn is not None and reply.turn >= 2 and reply.ttft is not None
        ]
        return statistics.median(times) if times else None

    @property
    def prompt_tokens(self) -> int | None:
        """The prompt tokens of the first reply that reported them (a check that two servers
        saw the same prompt)."""
        return next(
            (
                reply.prompt_tokens
                for r in self.rounds
                for reply in r.replies
                if reply.prompt_tokens
            ),
            None,
        )

    @property
    def acceptance(self) -> float | None:
        """Accepted over proposed draft tokens, summed over the replies' `superfluid.spec`."""
        proposed = sum(reply.proposed for r in self.rounds for reply in r.replies)
        accepted = sum(reply.accepted for r in self.rounds for reply in r.replies)
        return accepted / proposed if proposed else None


def _median_of(values: list[float | None]) -> float | None:
    """The median, or None when there are no values or any is missing (a median of the runs
    that happened to have one would pass for the cell's)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.median(v for v in values if v is not None)


@dataclass(frozen=True, slots=True)
class Machine:
    nproc: int
    cpu: str
    date: str
    load_before: str  # /proc/loadavg when measuring began
    load_after: str
    python: str
    llama_cpp_python: str


def runs_at(runs: int, min_requests: int, clients: int) -> int:
    """Measured runs in a cell of `clients` clients: `runs`, or as many as it takes to send
    `min_requests` requests. One prompt's reply can run at half or twice another's speed (a
    deep draft is all or nothing), so a cell's paired ratio needs several prompts."""
    return max(runs, -(-min_requests // clients))


@dataclass(frozen=True, slots=True)
class Settings:
    model: str
    max_tokens: int
    runs: int
    warmup_rounds: int
    clients: tuple[int, ...]
    sampled_clients: tuple[int, ...]
    llamacpp_clients: tuple[int, ...]
    llamacpp_temperatures: tuple[float, ...]
    temperatures: tuple[float, ...]
    workloads: tuple[str, ...]
    max_lanes: int
    ctx_size: int
    threads: int
    quick: bool
    # superfluid auto and off measured run by run, both servers up (False in runs saved before)
    interleaved: bool = False
    # warm-up rounds continue, up to this many, until the cell's lane count's gate has decided
    # (0 in runs saved before: a fixed number of rounds)
    warmup_max: int = 0
    # llama.cpp's llama-server (empty in runs saved before it was measured)
    llama_server_clients: tuple[int, ...] = ()
    llama_server_temperatures: tuple[float, ...] = ()
    session_clients: tuple[int, ...] = ()  # client counts of the multi-turn workload
    # llama-server measured run by run beside superfluid's pair (False in runs saved before:
    # it ran on its own, after the pair)
    peers_interleaved: bool = False
    # the raw loop measured run by run in superfluid's greedy 1-client cells, on their prompts
    # (False in runs saved before: it ran before the servers, on prompts of its own)
    raw_interleaved: bool = False
    # a cell of c clients runs at least ceil(min_requests / c) times (0 in runs saved before:
    # `runs` in every cell)
    min_requests: int = 0


@dataclass(frozen=True, slots=True)
class Results:
    machine: Machine
    settings: Settings
    command: str  # the harness invocation
    servers: dict[str, str]  # system -> the command line that started it
    cells: tuple[Cell, ...]
    minutes: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def cell(self, system: str, workload: str, temperature: float, clients: int) -> Cell | None:
        for cell in self.cells:
            if cell.system == system and cell.key == (workload, temperature, clients):
                return cell
        return None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Results:
        data = json.loads(path.read_text())
        data["settings"].setdefault("sampled_clients", data["settings"]["clients"])
        return cls(
            machine=Machine(**data["machine"]),
            settings=Settings(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in data["settings"].items()}
            ),
            command=data["command"],
            servers=dict(data["servers"]),
            cells=tuple(_cell(c) for c in data["cells"]),
            minutes=float(data.get("minutes", 0.0)),
            notes=tuple(data.get("notes", ())),
        )


def _cell(data: dict[str, Any]) -> Cell:
    rounds = tuple(
        Round(
            tuple(Reply(**reply) for reply in r["replies"]),
            float(r["wall"]),
            r.get("decode_tokens"),
            r.get("decode_wall"),
        )
        for r in data["rounds"]
    )
    spec = data.get("spec")
    return Cell(
        system=data["system"],
        workload=data["workload"],
        temperature=float(data["temperature"]),
        clients=int(data["clients"]),
        rounds=rounds,
        spec=SpecCounts(
            spec["proposed"], spec["accepted"], spec["generated"], tuple(spec["accepted_at"])
        )
        if spec
        else None,
        gates=tuple(GateState(**g) for g in data.get("gates", ())),
        abandoned=data.get("abandoned"),
        timeline=tuple(data.get("timeline", ())),
        ticks=tuple(TickTime(**t) for t in data.get("ticks", ())),
    )
