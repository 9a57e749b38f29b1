"""Agent sessions through HTTP: superfluid (auto, off) against llama.cpp's llama-server on the
traffic of a coding agent.

    sh bench/build_llama_server.sh   # once: llama.cpp's own server, cached outside the repo
    .venv/bin/python -m bench.agent_bench [--quick] [--models instruct,demo] [--out DIR] ...

A session (bench/agent_workload.py) is a conversation of cycles: the model calls `read_file`
(the call turn), the tool's answer brings the file, the user asks for the file back with one
small change and the model returns it whole (the edit turn: copying, where prompt-lookup
drafting pays), and the next cycle continues the conversation (so a server reuses its prefix).
Every request is greedy, streamed, and carries the tool. A call turn is forced (`--calls
forced`, the default; superfluid: `tool_choice` naming the function, a grammar lane that never
speculates; llama-server: see ARGUMENTS_FORMAT) or left to the model (`--calls auto`, where
superfluid takes it: a template that shows no tools is refused, and the run falls back to forced
calls). Forced is the default because neither model calls on its own: SmolLM2 answers "Open
`path`." with code it makes up, even after a worked example. Edit turns send `tool_choice: auto`
where superfluid takes it, else `none`.

Each system runs every session of a run with its own replies: a session goes on from what the
server answered, as an agent's would. Greedy replies of superfluid auto must equal off's turn by
turn; while they do, the two servers are sent the same prompts, so each turn compares like with
like, and a session's turns after a first difference are counted apart (not comparable).

Per model, superfluid auto and off are up together for every client count; llama-server's
configurations (plain, `--spec-default`, `ngram-simple n3 m8`: the best two of the HTTP bench's
peers on copy-heavy and multi-turn work) get a server per client count (`-np` = clients). Run r
of every system sends the same sessions; run 0 walks the systems forwards, run 1 backwards, and
so on, so that a ratio pairs sessions measured seconds apart. Session files are fresh in every
round (warm-up rounds included), so no server sees a prompt twice.

Writes `README.md` and `agent_bench.raw.json` into `--out` (default
`docs/benchmarks/agent-sessions-smollm2-gemma3-1-4-clients/`; `/tmp/superfluid-agent-bench/quick`
with `--quick`); `--from-raw RAW` rewrites the report from a saved run. A default run takes about
20-25 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.agent_workload import (
    CALL_BUDGET,
    EDIT_STOP,
    READ_FILE_PARAMETERS,
    SYSTEM,
    TOOLS,
    SessionPlan,
    SourceFile,
    call_line,
    call_valid,
    called_path,
    closed,
    edit_budget,
    edit_exact,
    edit_line,
    opening,
    pasted_line,
    session_plan,
    write_template,
)
from bench.http_bench import (
    LLAMA_SERVER_EXTRA,
    chosen_systems,
    cpu_model,
    gate_at,
    gate_settled,
    loadavg,
    log,
    nproc,
    require_llama_server,
    wait_for_quiet,
)
from bench.http_load import STREAM_OPTIONS, Timeline, _Count, _spec, _timings, client_for, digest
from bench.http_load import scrape as scrape_metrics
from bench.http_results import AUTO, LLAMA_SERVER, LLAMA_SERVERS, PLAIN, is_llama_server
from bench.http_servers import (
    ServerFailed,
    ServerSpec,
    has_chat_template,
    llama_server_spec,
    running,
    superfluid_spec,
)

SYSTEMS = (AUTO, PLAIN, *LLAMA_SERVERS)
DEFAULT_SYSTEMS = (AUTO, PLAIN, LLAMA_SERVER, "llama-server spec-default",
                   "llama-server ngram-simple n3 m8")  # fmt: skip
FORCED, AUTO_CALLS = "forced", "auto"
#: llama-server's forced call: it takes no named `tool_choice`, and its `required` lets the
#: model write text before the call (llama.cpp's grammar allows any text up to the first
#: `<tool_call>`): SmolLM2 then writes code and never calls. So the call is forced as an agent
#: framework forces one on such a server: `tool_choice: none` (the tools still show in the
#: prompt) and `response_format` holding the function's parameters schema, the reply read as
#: the arguments of a `read_file` call. The grammar writes them from the first token, as
#: superfluid's named-function lane does.
ARGUMENTS_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "read_file", "schema": READ_FILE_PARAMETERS, "strict": True},
}
#: The models by name on the command line (a GGUF path serves too).
MODELS = ("instruct", "demo")
#: Where no two rounds' sessions meet: a cell's measured rounds count from its number times
#: this, its warm-up rounds from half-way.
ROUNDS_PER_CELL = 1000
WARM_UP_FROM = ROUNDS_PER_CELL // 2


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 client, 1 session")
    parser.add_argument(
        "--models", default=",".join(MODELS), help="instruct, demo, or GGUF paths (as demo)"
    )
    parser.add_argument("--calls", choices=(FORCED, AUTO_CALLS), help="call turns' tool_choice")
    parser.add_argument("--clients", type=_ints, help="concurrent sessions (default 1,4)")
    parser.add_argument(
        "--sessions",
        type=_ints,
        help="sessions per system in a cell, one number per client count, rounded up to whole "
        "runs (default 4,8; quick 1)",
    )
    parser.add_argument("--cycles", type=int, help="files a session reads and edits (default 3)")
    parser.add_argument("--lines", type=int, help="lines per file, about (default 32; quick 14)")
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"any of: {', '.join(SYSTEMS)} (an entry ending in * is a prefix)",
    )
    parser.add_argument(
        "--warmup-max",
        type=int,
        help="warm-up rounds of one-cycle sessions before a drafting system's cell: one, then "
        "more up to this many until superfluid's gate at the cell's lane count has decided "
        "(default 4; quick 2)",
    )
    parser.add_argument("--ctx-size", type=int, default=4096, help="context per lane / slot")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads")
    parser.add_argument("--llama-server", type=Path, help="binary (default: the build script's)")
    parser.add_argument("--out", type=Path, help="where README.md and the raw JSON go")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/superfluid-agent-bench/logs"))
    parser.add_argument("--wait-load", type=float, help="1-minute load to wait for (default 0.7)")
    parser.add_argument("--wait-max", type=float, default=600.0, help="seconds to wait at most")
    parser.add_argument(
        "--transcripts", type=Path, help="write each session's conversation (JSON) here"
    )
    parser.add_argument("--from-raw", type=Path, help="only write the report from a saved raw JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    args.clients = args.clients or ((1,) if quick else (1, 4))
    sessions = args.sessions or ((1,) if quick else (4, 8))
    if len(sessions) == 1:
        sessions = sessions * len(args.clients)
    if len(sessions) != len(args.clients):
        parser.error("--sessions takes one number, or one per client count")
    args.sessions = sessions
    args.cycles = args.cycles or (2 if quick else 3)
    args.lines = args.lines or (14 if quick else 32)
    args.warmup_max = args.warmup_max or (2 if quick else 4)
    args.wait_load = (0.0 if quick else 0.7) if args.wait_load is None else args.wait_load
    args.out = args.out or (
        Path("/tmp/superfluid-agent-bench/quick")
        if quick
        else Path("docs/benchmarks/agent-sessions-smollm2-gemma3-1-4-clients")
    )
    args.models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    args.systems = chosen_systems(parser, args.systems, SYSTEMS)
    require_llama_server(parser, args)
    return args


# -- records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    id: str
    name: str
    arguments: str  # as the server sent it: a JSON text, if the call is valid

    @property
    def valid(self) -> bool:
        return call_valid(self.name, self.arguments)


@dataclass(frozen=True, slots=True)
class Turn:
    """One streamed reply of a session."""

    cycle: int
    kind: str  # "call" or "edit"
    tokens: int
    seconds: float
    ttft: float | None  # request sent → first chunk with text or a call
    proposed: int  # draft tokens: superfluid's `superfluid.spec`, llama-server's timings
    accepted: int
    prompt_tokens: int | None
    finish: str
    digest: str  # of the reply's text
    calls: tuple[Call, ...] = ()
    path_asked: str = ""  # the path the turn's user line named
    edit_exact: bool | None = None  # edit turns: the code block is the edited file

    @property
    def answer(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What the identity check compares: the text, and the calls (their ids aside)."""
        return self.digest, tuple((c.name, c.arguments) for c in self.calls)


@dataclass(frozen=True, slots=True)
class Session:
    round: int
    client: int
    seconds: float
    turns: tuple[Turn, ...]
    error: str | None = None  # a request the server refused or failed: the session stopped

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.turns)


@dataclass(frozen=True, slots=True)
class Cell:
    model: str
    system: str
    clients: int
    sessions: tuple[Session, ...]
    #: superfluid auto: the gate at the cell's lane count after each round, warm-ups first
    #: ("w ..."), and every lane count's gate after the cell.
    timeline: tuple[str, ...] = ()
    gates: str = ""


@dataclass(frozen=True, slots=True)
class ModelRun:
    """How one model was served and asked."""

    name: str  # the GGUF's file name
    calls: str  # FORCED or AUTO_CALLS
    edit_choice: str  # the edit turns' tool_choice
    auto_refused: str | None  # superfluid's answer to `tool_choice: auto`, when it refused
    servers: dict[str, str] = field(default_factory=dict)  # system -> command
    llama_template: str = ""


@dataclass(frozen=True, slots=True)
class Results:
    command: str
    date: str
    minutes: float
    machine: dict[str, str]
    settings: dict[str, Any]
    models: tuple[ModelRun, ...]
    cells: tuple[Cell, ...]
    notes: tuple[str, ...] = ()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Results:
        data = json.loads(path.read_text())
        return cls(
            command=data["command"],
            date=data["date"],
            minutes=data["minutes"],
            machine=data["machine"],
            settings=data["settings"],
            models=tuple(ModelRun(**m) for m in data["models"]),
            cells=tuple(_cell(c) for c in data["cells"]),
            notes=tuple(data.get("notes", ())),
        )


def _cell(data: dict[str, Any]) -> Cell:
    def turn(t: dict[str, Any]) -> Turn:
        return Turn(**{**t, "calls": tuple(Call(**c) for c in t["calls"])})

    sessions = tuple(
        Session(**{**s, "turns": tuple(turn(t) for t in s["turns"])}) for s in data["sessions"]
    )
    return Cell(**{**data, "sessions": sessions, "timeline": tuple(data["timeline"])})


# -- one turn, one session --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Side:
    """One running server as the sessions use it."""

    system: str
    base: str
    client: openai.AsyncOpenAI
    model: str  # what requests put in `model`
    calls: str
    edit_choice: str

    @property
    def llama(self) -> bool:
        return is_llama_server(self.system)

    def schema_call(self, kind: str) -> bool:
        """Whether this turn's call is forced through `response_format` (llama-server's forced
        calls): the reply's text is then the call's arguments."""
        return self.llama and kind == "call" and self.calls == FORCED

    def body(self, messages: list[dict[str, Any]], kind: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": TOOLS,
            "tool_choice": self._choice(kind),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
        }
        body["parallel_tool_calls"] = False  # one file at a time
        if kind == "edit":
            body["stop"] = [EDIT_STOP]
        if self.schema_call(kind):
            body["response_format"] = ARGUMENTS_FORMAT
        if self.llama:
            body["stream_options"] = {"include_usage": True}
            body["extra_body"] = dict(LLAMA_SERVER_EXTRA)
        else:
            body["stream_options"] = STREAM_OPTIONS
        return body

    def _choice(self, kind: str) -> Any:
        if kind == "edit":
            return self.edit_choice
        if self.calls == AUTO_CALLS:
            return "auto"
        if self.llama:
            return "none"  # the tools still show; `response_format` writes the call
        return {"type": "function", "function": {"name": "read_file"}}


@dataclass(slots=True)
class _Stream:
    """What a streamed reply has said so far."""

    timeline: Timeline = field(default_factory=Timeline)
    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    tokens: int = 0
    prompt_tokens: int | None = None
    spec: tuple[int, int] = (0, 0)
    finish: str = "None"

    def chunk(self, chunk: Any, arrival: float) -> None:
        usage = chunk.usage
        if usage is not None:
            self.tokens = usage.completion_tokens
            self.prompt_tokens = usage.prompt_tokens
        timings = _timings(chunk.model_extra)
        if timings is not None:  # llama-server: counts and drafts in every chunk's timings
            if usage is None:
                usage = _Count(int(timings["predicted_n"]))
                self.tokens = max(self.tokens, usage.completion_tokens)
            self.spec = (int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))
        if chunk.model_extra and "superfluid" in chunk.model_extra:
            self.spec = _spec(chunk.model_extra)
        if not chunk.choices:
            return
        choice = chunk.choices[0]
        self.timeline.last = arrival
        if choice.finish_reason is not None:
            self.finish = str(choice.finish_reason)
        said = self._delta(choice.delta)
        if said:
            self.timeline.content(arrival, usage)

    def _delta(self, delta: Any) -> bool:
        """Take a delta's text and call pieces; whether it carried any."""
        said = False
        if delta.content:
            self.text.append(delta.content)
            said = True
        for piece in delta.tool_calls or []:
            call = self.calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = piece.id or call["id"]
            if piece.function is not None:
                name = piece.function.name or ""
                # A name comes whole in one delta; a server that repeats it is not doubled.
                call["name"] = name if name.startswith(call["name"]) else call["name"] + name
                call["arguments"] += piece.function.arguments or ""
            said = True
        return said


async def stream_turn(
    side: Side, messages: list[dict[str, Any]], kind: str, budget: int
) -> tuple[Turn, str]:
    """One streamed request; its Turn (cycle and path unset) and its text."""
    stream = _Stream()
    began = time.perf_counter()
    async for chunk in await side.client.chat.completions.create(
        **side.body(messages, kind, budget)
    ):
        stream.chunk(chunk, time.perf_counter())
    seconds = time.perf_counter() - began
    figures = stream.timeline.figures(began, stream.tokens)
    text = "".join(stream.text)
    calls = tuple(Call(c["id"], c["name"], c["arguments"]) for _, c in sorted(stream.calls.items()))
    if side.schema_call(kind):  # the text is the call's arguments
        calls, text = (Call(f"call_{len(messages)}", "read_file", text),), ""
    turn = Turn(
        cycle=0,
        kind=kind,
        tokens=stream.tokens,
        seconds=seconds,
        ttft=figures.get("ttft"),
        proposed=stream.spec[0],
        accepted=stream.spec[1],
        prompt_tokens=stream.prompt_tokens,
        finish=stream.finish,
        digest=digest(text),
        calls=calls,
    )
    return turn, text


def answered(turn: Turn, text: str, source: SourceFile) -> list[dict[str, Any]]:
    """The messages a turn adds to the conversation: the assistant's reply, and the tool's
    answer to each of its calls (the cycle's file). A call turn without a usable call (none, or
    arguments that are no JSON object) is followed by the user pasting the file instead."""
    usable = [c for c in turn.calls if _object(c.arguments)]
    reply: dict[str, Any] = {"role": "assistant", "content": text or None}
    if usable:
        reply["tool_calls"] = [
            {
                "id": c.id or f"call_{turn.cycle}_{n}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for n, c in enumerate(usable)
        ]
    elif not text:
        reply["content"] = ""
    answers = [
        {"role": "tool", "tool_call_id": call["id"], "content": source.text}
        for call in reply.get("tool_calls", [])
    ]
    if turn.kind == "call" and not usable:
        answers.append({"role": "user", "content": pasted_line(source)})
    return [reply, *answers]


def _object(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


async def run_session(side: Side, plan: SessionPlan, round_: int, client: int) -> Session:
    """A session's cycles one after another, each request carrying the conversation so far."""
    messages = opening()
    turns: list[Turn] = []
    began = time.perf_counter()
    try:
        for cycle, source in enumerate(plan.files):
            for kind, line, budget in (
                ("call", call_line(source), CALL_BUDGET),
                ("edit", edit_line(source), edit_budget(source)),
            ):
                messages.append({"role": "user", "content": line})
                turn, text = await stream_turn(side, messages, kind, budget)
                text = closed(text) if kind == "edit" else text
                exact = edit_exact(source, text) if kind == "edit" else None
                turn = replace(turn, cycle=cycle, path_asked=source.path, edit_exact=exact)
                turns.append(turn)
                messages += answered(turn, text, source)
    except openai.APIStatusError as error:
        seconds = time.perf_counter() - began
        why = f"{error.status_code}: {str(error.message)[:300]}"
        _keep(side, round_, client, messages)
        return Session(round_, client, seconds, tuple(turns), why)
    seconds = time.perf_counter() - began
    _keep(side, round_, client, messages)
    return Session(round_, client, seconds, tuple(turns))


#: Where `--transcripts` puts each session's conversation (None: nowhere).
TRANSCRIPTS: list[Path] = []


def _keep(side: Side, round_: int, client: int, messages: list[dict[str, Any]]) -> None:
    """The session's conversation as JSON, for reading what the models answered."""
    if not TRANSCRIPTS:
        return
    name = f"{side.model}-{side.system.replace(' ', '-')}-{round_}.{client}.json"
    TRANSCRIPTS[0].mkdir(parents=True, exist_ok=True)
    (TRANSCRIPTS[0] / name).write_text(json.dumps(messages, indent=1) + "\n")


async def run_round(
    side: Side, round_: int, clients: int, cycles: int, lines: int
) -> list[Session]:
    """`clients` sessions at once, session i of round r the same on every system."""
    plans = [session_plan(round_, client, cycles, lines) for client in range(clients)]
    return list(
        await asyncio.gather(*(run_session(side, plan, round_, i) for i, plan in enumerate(plans)))
    )


# -- a cell: every system at one client count -------------------------------------------------

_CELLS = itertools.count(1)


def drafting(system: str) -> bool:
    return system == AUTO or (is_llama_server(system) and system != LLAMA_SERVER)


async def warm_up(args: argparse.Namespace, side: Side, clients: int, first: int) -> list[str]:
    """One-cycle sessions before a drafting system's cell: one round, then more (up to
    `--warmup-max`) until superfluid's gate at this lane count has decided, so that the cell
    measures the steady state rather than a fresh server's probes. The gate after each round
    is returned for the timeline."""
    timeline: list[str] = []
    for warm in range(args.warmup_max):
        if warm >= 1 and (side.system != AUTO or gate_settled(scrape_metrics(side.base), clients)):
            break
        await run_round(side, first + warm, clients, 1, args.lines)
        if side.system == AUTO:
            timeline.append("w " + gate_at(scrape_metrics(side.base), clients))
    return timeline


async def prime(side: Side, round_: int) -> None:
    """One short forced call: a fresh server's first decode allocates its graphs, and
    llama-server compiles the tool grammar. Its file is round `round_`'s, which no session
    uses."""
    plan = session_plan(round_, 0, 1, 8)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": call_line(plan.files[0])},
    ]
    with contextlib.suppress(openai.APIStatusError):
        await stream_turn(side, messages, "call", 8)


async def measure_cell(
    args: argparse.Namespace, model: str, sides: list[Side], clients: int, sessions: int
) -> list[Cell]:
    """Every side's sessions at `clients` clients, run r of each side before run r + 1 of any."""
    number = next(_CELLS) * ROUNDS_PER_CELL
    timelines: dict[str, list[str]] = {side.system: [] for side in sides}
    for side in sides:
        await prime(side, number + ROUNDS_PER_CELL - 1)
        if drafting(side.system):
            timelines[side.system] += await warm_up(args, side, clients, number + WARM_UP_FROM)
    recorded: dict[str, list[Session]] = {side.system: [] for side in sides}
    runs = -(-sessions // clients)
    for run in range(runs):
        for side in sides if run % 2 == 0 else sides[::-1]:
            recorded[side.system] += await run_round(
                side, number + run, clients, args.cycles, args.lines
            )
            if side.system == AUTO:
                timelines[side.system].append(gate_at(scrape_metrics(side.base), clients))
    cells = []
    for side in sides:
        gates = _gates(side) if side.system == AUTO else ""
        cell = Cell(
            model,
            side.system,
            clients,
            tuple(recorded[side.system]),
            tuple(timelines[side.system]),
            gates,
        )
        log_cell(cell)
        cells.append(cell)
    return cells


def _gates(side: Side) -> str:
    from bench.http_load import gate_states

    states, abandoned = gate_states(scrape_metrics(side.base))
    if abandoned:
        return "abandoned"
    return "; ".join(f"{s.lanes}: {s.phase or 'no gate'}, d{s.depth}" for s in states)


def log_cell(cell: Cell) -> None:
    figures = CellFigures.of(cell)
    median = f"{figures.session:.2f} s" if figures.session is not None else "–"
    log(
        f"{cell.model} {cell.system:>32} {cell.clients} client(s): session {median}, "
        f"later-turn TTFT {_ms(figures.later_ttft)} ms, edit acceptance "
        f"{_percent(figures.edit_acceptance)}, calls valid {figures.valid_calls}, "
        f"{figures.failed} failed"
    )


# -- servers ----------------------------------------------------------------------------------


def model_path(name: str) -> Path:
    from superfluid.adapters.llamacpp.demo_model import demo_model_path, instruct_model_path
    from superfluid.entrypoints.container import superfluid_home

    if name == "instruct":
        return instruct_model_path()
    if name == "demo":
        return demo_model_path(superfluid_home(os.environ))
    return Path(name).expanduser().resolve()


def llama_template(path: Path) -> str:
    """The template llama-server is given tools with: ChatML for a GGUF with its own template
    (SmolLM2's is ChatML), Gemma's turns for one without (the demo model)."""
    return "chatml-hermes" if has_chat_template(path) else "gemma-hermes"


def auto_refusal(base: str, model: str) -> str | None:
    """superfluid's answer to a request with `tool_choice: auto`: None if it takes it, else the
    reason it gives (a template that cannot show tools is refused with a 400)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Open `README.md`."}],
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 1,
        "temperature": 0.0,
    }
    answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120.0)
    if answer.status_code == 200:
        return None
    try:
        return str(answer.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {answer.status_code}"


def shown(spec: ServerSpec, log_dir: Path, clients: int | None = None) -> str:
    """The command as the report prints it: paths under the work tree relative to it, the
    template file under `<log-dir>` (the bench writes it there)."""
    text = spec.shown().replace(str(log_dir), "<log-dir>").replace(f"{Path.cwd()}/", "")
    if clients is not None:
        text = text.replace(f"-np {clients}", "-np <clients>")
    return text


@contextlib.contextmanager
def superfluid_up(
    args: argparse.Namespace, path: Path, systems: list[str]
) -> Iterator[list[tuple[ServerSpec, str]]]:
    with contextlib.ExitStack() as stack:
        servers = []
        for system in systems:
            spec = superfluid_spec(
                system,
                path,
                "auto" if system == AUTO else "off",
                max_lanes=max(args.clients),
                ctx_size=args.ctx_size,
            )
            log_path = args.log_dir / f"{path.stem}-{system.replace(' ', '-')}.log"
            servers.append((spec, stack.enter_context(running(spec, log_path))))
        yield servers


def llama_specs(
    args: argparse.Namespace, path: Path, template: Path, clients: int
) -> list[ServerSpec]:
    return [
        llama_server_spec(
            system,
            args.llama_server,
            path,
            slots=clients,
            ctx_size=args.ctx_size,
            threads=args.threads,
            chat_template_file=template,
        )
        for system in args.systems
        if is_llama_server(system)
    ]


def measure_model(
    args: argparse.Namespace, name: str, notes: list[str]
) -> tuple[ModelRun, list[Cell]]:
    """Every cell of one model: superfluid's servers up throughout, llama-server's per client
    count."""
    path = model_path(name)
    template = write_template(llama_template(path), args.log_dir / "templates")
    ours = [s for s in (PLAIN, AUTO) if s in args.systems]
    cells: list[Cell] = []
    with superfluid_up(args, path, ours) as servers:
        refused = auto_refusal(servers[0][1], path.name) if servers else None
        calls = args.calls or FORCED
        if calls == AUTO_CALLS and refused is not None:
            notes.append(f"{path.name}: superfluid refuses `tool_choice: auto` ({refused}); "
                         "calls are forced")  # fmt: skip
            calls = FORCED
        run = ModelRun(
            path.name,
            calls,
            "none" if refused is not None else "auto",
            refused,
            {spec.system: shown(spec, args.log_dir) for spec, _ in servers},
            template.name,
        )
        for clients, sessions in zip(args.clients, args.sessions, strict=True):
            cells += measure_clients(args, run, path, template, servers, clients, sessions, notes)
    return run, cells


def measure_clients(
    args: argparse.Namespace,
    run: ModelRun,
    path: Path,
    template: Path,
    servers: list[tuple[ServerSpec, str]],
    clients: int,
    sessions: int,
    notes: list[str],
) -> list[Cell]:
    """One client count: llama-server's configurations started beside superfluid's servers,
    every system measured together, llama-server stopped. A failed server start is noted and
    the cell measured without it."""
    with contextlib.ExitStack() as stack:
        up = list(servers)
        for spec in llama_specs(args, path, template, clients):
            log_path = args.log_dir / f"{path.stem}-{spec.system.replace(' ', '-')}-{clients}.log"
            try:
                up.append((spec, stack.enter_context(running(spec, log_path))))
            except ServerFailed as error:
                notes.append(f"{path.name}, {clients} client(s): {spec.system} failed: {error}")
                continue
            run.servers[spec.system] = shown(spec, args.log_dir, clients)
        return asyncio.run(_measure(args, run, up, clients, sessions))


async def _measure(
    args: argparse.Namespace,
    run: ModelRun,
    up: list[tuple[ServerSpec, str]],
    clients: int,
    sessions: int,
) -> list[Cell]:
    sides = [
        Side(
            spec.system,
            base,
            client_for(base, clients, keepalive=not is_llama_server(spec.system)),
            spec.model_name,
            run.calls,
            run.edit_choice,
        )
        for spec, base in up
    ]
    try:
        return await measure_cell(args, run.name, sides, clients, sessions)
    finally:
        for side in sides:
            await side.client.close()


# -- figures ----------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f}" if seconds is not None else "–"


def _percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "–"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _acceptance(turns: list[Turn]) -> float | None:
    proposed = sum(t.proposed for t in turns)
    return sum(t.accepted for t in turns) / proposed if proposed else None


@dataclass(frozen=True, slots=True)
class CellFigures:
    session: float | None  # median seconds of the sessions that finished
    sessions: tuple[float, ...]  # every finished session's seconds, in run order
    later_ttft: float | None  # median TTFT of every turn but each session's first
    call_seconds: float | None  # median seconds of a call turn
    edit_seconds: float | None  # median seconds of an edit turn
    edit_acceptance: float | None
    call_acceptance: float | None
    edit_proposed: int
    call_proposed: int
    tokens: float | None  # median tokens per finished session
    valid_calls: str  # "valid / calls"
    called: str  # "call turns with a call / call turns"
    path_right: str  # "calls of the path asked / calls"
    edits_exact: str  # "exact edit turns / edit turns"
    failed: int
    prompt_tokens: int | None  # the first turn's, of the first session

    @classmethod
    def of(cls, cell: Cell) -> CellFigures:
        done = [s for s in cell.sessions if s.error is None]
        turns = [t for s in cell.sessions for t in s.turns]
        later = [t.ttft for s in cell.sessions for t in s.turns[1:] if t.ttft is not None]
        edits = [t for t in turns if t.kind == "edit"]
        call_turns = [t for t in turns if t.kind == "call"]
        calls = [c for t in turns for c in t.calls]
        right = sum(called_path(c.arguments) == t.path_asked for t in turns for c in t.calls)
        first = next((s.turns[0].prompt_tokens for s in cell.sessions if s.turns), None)
        return cls(
            statistics.median(s.seconds for s in done) if done else None,
            tuple(s.seconds for s in done),
            statistics.median(later) if later else None,
            _median([t.seconds for t in call_turns]),
            _median([t.seconds for t in edits]),
            _acceptance(edits),
            _acceptance(call_turns),
            sum(t.proposed for t in edits),
            sum(t.proposed for t in call_turns),
            statistics.median(s.tokens for s in done) if done else None,
            f"{sum(c.valid for c in calls)}/{len(calls)}",
            f"{sum(bool(t.calls) for t in call_turns)}/{len(call_turns)}",
            f"{right}/{len(calls)}",
            f"{sum(bool(t.edit_exact) for t in edits)}/{len(edits)}",
            len(cell.sessions) - len(done),
            first,
        )


def paired_ratio(top: Cell | None, bottom: Cell | None) -> float | None:
    """Median over sessions of top's session time over bottom's for the same session (the
    same round and client), both finished."""
    if top is None or bottom is None:
        return None
    theirs = {(s.round, s.client): s.seconds for s in bottom.sessions if s.error is None}
    ratios = [
        s.seconds / theirs[(s.round, s.client)]
        for s in top.sessions
        if s.error is None and theirs.get((s.round, s.client))
    ]
    return statistics.median(ratios) if ratios else None


@dataclass(frozen=True, slots=True)
class Identity:
    """Turns of one system equal to a reference system's, session by session: compared while
    every earlier turn of the session was equal (the prompts were then the same)."""

    same: int
    compared: int
    beyond: int  # turns after a session's first difference, not compared
    first: str  # where the first difference was, if any

    def text(self) -> str:
        shown = f"{self.same}/{self.compared}"
        if self.beyond:
            shown += f" ({self.beyond} turns after a difference not compared)"
        return shown + (f"; first at {self.first}" if self.first else "")


def identity(cell: Cell | None, reference: Cell | None) -> Identity | None:
    if cell is None or reference is None:
        return None
    theirs = {(s.round, s.client): s for s in reference.sessions}
    same = compared = beyond = 0
    first = ""
    for session in cell.sessions:
        other = theirs.get((session.round, session.client))
        if other is None:
            continue
        pairs = list(zip(session.turns, other.turns, strict=False))
        for index, (mine, ref) in enumerate(pairs):
            compared += 1
            if mine.answer == ref.answer:
                same += 1
                continue
            beyond += len(pairs) - index - 1
            first = first or f"round {session.round} client {session.client} turn {index + 1}"
            break
    return Identity(same, compared, beyond, first)


# -- the report -------------------------------------------------------------------------------

#: The timing table, then what the turns did.
TIME_COLUMNS = (
    "clients",
    "system",
    "sessions",
    "session s (median)",
    "vs off",
    "later-turn TTFT ms",
    "call turn s",
    "edit turn s",
    "tokens / session",
    "prompt tokens, turn 1",
)
TURN_COLUMNS = (
    "clients",
    "system",
    "edit-turn acceptance",
    "call-turn acceptance",
    "call turns that called",
    "calls valid",
    "path as asked",
    "edits exact",
)


def _rows(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def short(system: str) -> str:
    return {AUTO: "superfluid auto", PLAIN: "superfluid off"}.get(system, system)


def _acceptance_text(value: float | None, proposed: int) -> str:
    return f"{value:.0%} of {proposed}" if value is not None else "none drafted"


def _cells(results: Results, model: str, clients: int) -> dict[str, Cell]:
    return {c.system: c for c in results.cells if c.model == model and c.clients == clients}


def _seconds(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "–"


def time_table(results: Results, model: str) -> list[str]:
    rows = []
    for clients in _client_counts(results, model):
        cells = _cells(results, model, clients)
        for system, cell in cells.items():
            f = CellFigures.of(cell)
            ratio = paired_ratio(cell, cells.get(PLAIN)) if system != PLAIN else None
            rows.append(
                [
                    str(clients),
                    short(system),
                    f"{len(f.sessions)}" + (f" ({f.failed} failed)" if f.failed else ""),
                    _seconds(f.session),
                    f"{ratio:.2f}×" if ratio is not None else "–",
                    _ms(f.later_ttft),
                    _seconds(f.call_seconds),
                    _seconds(f.edit_seconds),
                    f"{f.tokens:.0f}" if f.tokens is not None else "–",
                    str(f.prompt_tokens or "–"),
                ]
            )
    return _rows(TIME_COLUMNS, rows)


def turn_table(results: Results, model: str) -> list[str]:
    rows = []
    for clients in _client_counts(results, model):
        for system, cell in _cells(results, model, clients).items():
            f = CellFigures.of(cell)
            rows.append(
                [
                    str(clients),
                    short(system),
                    _acceptance_text(f.edit_acceptance, f.edit_proposed),
                    _acceptance_text(f.call_acceptance, f.call_proposed),
                    f.called,
                    f.valid_calls,
                    f.path_right,
                    f.edits_exact,
                ]
            )
    return _rows(TURN_COLUMNS, rows)


def _client_counts(results: Results, model: str) -> list[int]:
    return sorted({c.clients for c in results.cells if c.model == model})


def best_llama(cells: dict[str, Cell]) -> Cell | None:
    """The llama-server configuration with the shortest median session."""
    timed: list[tuple[float, Cell]] = []
    for system, cell in cells.items():
        seconds = CellFigures.of(cell).session
        if is_llama_server(system) and seconds is not None:
            timed.append((seconds, cell))
    return min(timed, key=lambda pair: pair[0])[1] if timed else None


def summary_lines(results: Results, model: str) -> list[str]:
    lines = []
    for clients in _client_counts(results, model):
        cells = _cells(results, model, clients)
        parts = []
        off = paired_ratio(cells.get(AUTO), cells.get(PLAIN))
        if off is not None:
            parts.append(f"auto / off {off:.2f}×")
        best = best_llama(cells)
        against = paired_ratio(cells.get(AUTO), best)
        if best is not None and against is not None:
            parts.append(f"auto / best llama-server ({best.system}) {against:.2f}×")
        if parts:
            lines.append(f"- {clients} client(s), session time: " + ", ".join(parts))
    return [*lines, ""] if lines else []


def per_session_table(results: Results, model: str) -> list[str]:
    rows = []
    for clients in _client_counts(results, model):
        for system, cell in _cells(results, model, clients).items():
            times = ", ".join(f"{s.seconds:.1f}" + ("!" if s.error else "") for s in cell.sessions)
            rows.append([str(clients), short(system), times])
    return _rows(("clients", "system", "each session, s (run order; ! failed)"), rows)


def identity_table(results: Results, model: str) -> list[str]:
    rows = []
    for clients in _client_counts(results, model):
        cells = _cells(results, model, clients)
        ours = identity(cells.get(AUTO), cells.get(PLAIN))
        theirs = [
            f"{short(s)}: {i.text()}"
            for s, c in cells.items()
            if is_llama_server(s) and s != LLAMA_SERVER
            for i in [identity(c, cells.get(LLAMA_SERVER))]
            if i is not None
        ]
        rows.append([str(clients), ours.text() if ours else "–", "; ".join(theirs) or "–"])
    header = ("clients", "superfluid auto = off", "llama-server configurations = plain")
    return _rows(header, rows)


def gates_table(results: Results, model: str) -> list[str]:
    rows = [
        [str(c.clients), c.gates or "–", ", ".join(c.timeline) or "–"]
        for c in results.cells
        if c.model == model and c.system == AUTO
    ]
    if not rows:
        return []
    header = ("clients", "gates after the cell (lanes: phase, depth)", "gate after each round")
    return _rows(header, rows)


def failures(results: Results, model: str) -> list[str]:
    lines = [
        f"- {short(c.system)}, {c.clients} client(s), round {s.round} client {s.client}: {s.error}"
        for c in results.cells
        if c.model == model
        for s in c.sessions
        if s.error
    ]
    return ["Sessions that stopped on an error:", "", *lines, ""] if lines else []


def model_section(results: Results, run: ModelRun) -> list[str]:
    calls = (
        "forced (superfluid: `tool_choice` naming `read_file`; llama-server: `tool_choice: "
        "none` and `response_format` with `read_file`'s parameters schema, read back as the "
        "call)"
        if run.calls == FORCED
        else "`tool_choice: auto`"
    )
    lines = [
        f"## {run.name}",
        "",
        f"- call turns: {calls}; edit turns: `tool_choice: {run.edit_choice}`",
        f"- llama-server's template: `{run.llama_template}` (bench/agent_workload.py), "
        "`--jinja --chat-template-file`",
    ]
    if run.auto_refused:
        lines.append(f"- superfluid refused `tool_choice: auto`: {run.auto_refused}")
    lines += ["", *summary_lines(results, run.name)]
    lines += time_table(results, run.name)
    lines += turn_table(results, run.name)
    lines += ["Each session's time:", "", *per_session_table(results, run.name)]
    lines += [
        "Greedy replies equal turn by turn (text and calls, call ids aside), compared while "
        "the session's earlier turns were equal:",
        "",
        *identity_table(results, run.name),
    ]
    lines += gates_table(results, run.name)
    lines += failures(results, run.name)
    return lines


def markdown(results: Results) -> str:
    s = results.settings
    lines = [
        "# Agent sessions: superfluid against llama.cpp's llama-server",
        "",
        "Generated by `bench/agent_bench.py`; do not edit by hand (run it again).",
        "",
        "## Machine and run",
        "",
        f"- CPU: {results.machine['cpu']}, `nproc` = {results.machine['nproc']}",
        f"- date: {results.date}; the whole run took {results.minutes:.1f} minutes",
        f"- `/proc/loadavg` when measuring began: `{results.machine['load_before']}`; at the "
        f"end: `{results.machine['load_after']}`",
        f"- sessions of {s['cycles']} cycles (call turn, edit turn) on generated files of about "
        f"{s['lines']} lines; clients {', '.join(map(str, s['clients']))} with "
        f"{', '.join(map(str, s['sessions']))} sessions per system; warm-up: one-cycle "
        f"sessions, one round then up to {s['warmup_max']} until superfluid's gate decided "
        f"(drafting systems); `--ctx-size {s['ctx_size']}` per lane / slot",
        "",
        "```sh",
        results.command,
        *(
            line
            for run in results.models
            for system, command in run.servers.items()
            for line in (f"# {run.name}, {system}:", command)
        ),
        "```",
        "",
        *method(),
    ]
    if results.notes:
        lines += ["Notes:", "", *(f"- {note}" for note in results.notes), ""]
    for run in results.models:
        lines += model_section(results, run)
    return "\n".join(lines).rstrip() + "\n"


def method() -> list[str]:
    return [
        "## Method",
        "",
        "A session is a coding agent's conversation: each cycle, the user names a file and the "
        "model calls `read_file` (the call turn); the tool answers with the file (generated "
        "code, fresh in every session); the user asks for one small change (rename a "
        "function, change a constant) and the whole file back, and the model returns it (the "
        "edit turn). The next cycle continues the conversation. Every request is greedy, "
        "streamed, carries the tool, and has `max_tokens` enough for the file. Every call is "
        "answered with the cycle's file, whatever path it names (*path as asked* counts "
        "those that named the right one); a call turn without a usable call is followed by "
        "the user pasting the file. Every session opens with the same instructions and one "
        "worked cycle (as an agent's instructions are the same from task to task; a server "
        "may reuse that prefix across sessions): the small models follow a pattern they have "
        "seen, not one described. Edit turns stop at the code block's closing fence.",
        "",
        "Each system continues its sessions from its own replies. *session s*: a session's "
        "wall time, from its first request to its last reply; *vs off*: the median over "
        "sessions of the paired ratio to superfluid off's time for the same session (same "
        "round, same client). *later-turn TTFT*: time to the first chunk with text or a call, "
        "over every turn but a session's first. *Acceptance*: accepted over proposed draft "
        "tokens (superfluid's `superfluid.spec` on the closing chunk, llama-server's "
        "`timings.draft_n` / `draft_n_accepted`), edit turns and call turns apart; a forced "
        "call is a grammar lane in superfluid and never drafts. *calls valid*: calls naming "
        "`read_file` with arguments that are a JSON object matching its schema (checked with "
        "jsonschema-rs). *edits exact*: edit replies whose code block is the correctly edited "
        "file.",
        "",
        "Templates: superfluid renders with the model's own (SmolLM2: its ChatML, and for "
        "requests with tools its built-in ChatML with Hermes-style `<tool_call>` blocks; the "
        "demo model: its built-in Gemma turns, which show tools and calls Python-style). "
        "llama-server runs with `--jinja --chat-template-file`: for SmolLM2 a Jinja copy of "
        "superfluid's ChatML-with-tools template (the same prompts: compare *prompt tokens*); "
        "for the demo model Gemma's turns with Hermes-style blocks, since llama-server builds "
        'no call grammar from the Python-style template (a forced call fails with "failed '
        "to parse grammar\"), so its prompts differ from superfluid's in how tools and calls "
        "are written.",
        "",
        "Per client count, every system runs the same sessions, run by run, the order "
        "reversed every other run. superfluid auto and off are up throughout; each "
        "llama-server configuration gets a server with `-np` = clients. Before a drafting "
        "system's cell, warm-up rounds of one-cycle sessions (fresh files too).",
        "",
    ]


# -- main -------------------------------------------------------------------------------------


def write_report(results: Results, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(markdown(results))
    log(f"wrote {out / 'README.md'}")


def report_from_raw(raw: Path, out: Path) -> None:
    results = Results.load(raw)
    out.mkdir(parents=True, exist_ok=True)
    kept = out / "agent_bench.raw.json"
    if not kept.exists() or not kept.samefile(raw):
        shutil.copyfile(raw, kept)
    write_report(results, out)


def _stop_on_sigterm() -> Any:
    """SIGTERM (`timeout`, a job runner) exits through the servers' cleanup: each server runs in
    its own session, so one left running would go on loading the machine after the bench.
    Returns the handler it replaces."""

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    before = _stop_on_sigterm()
    try:
        measure_and_report(args, argv)
    finally:
        signal.signal(signal.SIGTERM, before)


def measure_and_report(args: argparse.Namespace, argv: list[str] | None) -> None:
    if args.from_raw is not None:
        report_from_raw(args.from_raw, args.out)
        return
    if args.transcripts is not None:
        TRANSCRIPTS.append(args.transcripts)
    wait_for_quiet(args.wait_load, args.wait_max)
    began, load_before = time.monotonic(), loadavg()
    notes: list[str] = []
    runs: list[ModelRun] = []
    cells: list[Cell] = []
    for name in args.models:
        run, measured = measure_model(args, name, notes)
        runs.append(run)
        cells += measured
    if float(load_before.split()[0]) >= args.wait_load > 0:
        notes.append(
            f"measuring began with a 1-minute load of {load_before.split()[0]} "
            f"(≥ {args.wait_load}): figures are noisier"
        )
    shown_argv = argv if argv is not None else sys.argv[1:]
    results = Results(
        command=f".venv/bin/python -m bench.agent_bench {shlex.join(shown_argv)}".rstrip(),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        minutes=(time.monotonic() - began) / 60.0,
        machine={
            "cpu": cpu_model(),
            "nproc": str(nproc()),
            "load_before": load_before,
            "load_after": loadavg(),
            "python": platform.python_version(),
        },
        settings={
            "clients": list(args.clients),
            "sessions": list(args.sessions),
            "cycles": args.cycles,
            "lines": args.lines,
            "warmup_max": args.warmup_max,
            "ctx_size": args.ctx_size,
            "systems": list(args.systems),
            "quick": args.quick,
        },
        models=tuple(runs),
        cells=tuple(cells),
        notes=tuple(notes),
    )
    results.save(args.out / "agent_bench.raw.json")
    write_report(results, args.out)


if __name__ == "__main__":
    main()
