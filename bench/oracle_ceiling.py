"""The ceiling: the executor with an oracle drafter, against prompt-lookup with every gate on.

    .venv/bin/python -m bench.oracle_ceiling [--quick] [--model PATH] [--out DIR] ...

In-process, like bench/executor_speed.py, on the HTTP bench's fresh copy-heavy, long-prompt and
open-ended prompts (the model's own chat turn for chat workloads, the bare text for open-ended; the
(run, client) pairs are handed prompts in the order first asked, as over HTTP, and plain, the
oracle and auto decode the same ones). Per workload and client count, greedy:

1. **plain** — the executor without a drafter. Its output is each prompt's plain-greedy
   continuation at that lane count.
2. **oracle** — the executor with `OracleDrafter`, which drafts that known continuation: every
   draft is what plain decoding would emit, so no drafter could do better on this machine
   through this executor. It runs at fixed depths (`--depths`) and the best is the ceiling.
3. **auto** — the executor with prompt-lookup and the real gates (`SpecPolicy`), warmed up on the
   cell's prompts until the gate at that lane count has decided, as a long-running server is.
4. **prompt-lookup at fixed depths** (`--lookup-depths`) — its drafts at one depth everywhere,
   no gate: what one depth rule reaches without knowing the text.
5. **prompt-lookup with a clairvoyant length** (`--bound-depths`, `ClairvoyantLookupDrafter`) —
   its drafts cut to what plain decoding accepts, under a depth cap: the bound on what any
   whether-and-how-much rule (the gates) makes of prompt-lookup's drafts.

Rates are aggregate tokens per second, decode-only (after every request's first token, as the
HTTP bench's) and end to end. The report gives auto's fraction of the oracle per cell, and, when
an HTTP run's raw JSON is at hand (`--http-raw`, default the raw JSON of bench.http_bench's
default run, docs/benchmarks/http-gemma3-all-workloads-1-8-clients/http_bench.raw.json),
whether the oracle leaves room for 1.1× llama-server's best there (decode-only; in-process
against HTTP, so the HTTP server's overhead counts in the oracle's favour). Writes `oracle.md`
and `oracle.raw.json` into `--out` (default
docs/benchmarks/prompt-lookup-ceiling-gemma3-1-8-clients/: a default run is the three workloads
at 1-8 lanes on the demo model; with `--quick` /tmp/superfluid-oracle/quick).

The oracle and the clairvoyant plug into the drafting port (`Drafter.open` →
`DraftState.propose`/`commit`) and the executor's `SpeculationPolicy` protocol; nothing in src/
knows about them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.http_workloads import COPY_HEAVY, LONG_PROMPT, OPEN_ENDED, Workload
from superfluid.application.executor import Executor
from superfluid.application.ports import DraftState
from superfluid.application.requests import GenerationRequest
from superfluid.domain.gates.policy import SpecPolicy, TickPlan
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings, default_depth
from superfluid.domain.strategies import Strategy

WORKLOADS = {w.name: w for w in (COPY_HEAVY, LONG_PROMPT, OPEN_ENDED)}
SETTLED = ("speculate", "plain", "final-plain")
# Where a default run writes its report: a new folder on the benchmark shelf (link it from
# docs/benchmarks/README.md when the report is kept); and the HTTP bench's default folder, whose
# raw JSON the report sets beside the oracle.
DEFAULT_OUT = "docs/benchmarks/prompt-lookup-ceiling-gemma3-1-8-clients"
DEFAULT_HTTP_OUT = "docs/benchmarks/http-gemma3-all-workloads-1-8-clients"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the oracle -------------------------------------------------------------------------------


class OracleDrafter:
    """Drafts the known plain-greedy continuation of each prompt it was given."""

    strategy = "oracle"

    def __init__(self, continuations: dict[tuple[int, ...], Sequence[int]]) -> None:
        self._continuations = continuations

    def open(self, prompt: Sequence[int], *, seq: int) -> OracleState:
        del seq
        return OracleState(self._continuations.get(tuple(prompt), ()))


class OracleState:
    """The continuation and how much of it is committed; once the lane commits anything else
    (batched numerics can flip a near-tie) it is off the known path and drafts nothing more."""

    __slots__ = ("_continuation", "_on_path", "_position")

    def __init__(self, continuation: Sequence[int]) -> None:
        self._continuation = tuple(continuation)
        self._position = 0
        self._on_path = True

    def propose(self, k: int) -> list[int]:
        if not self._on_path:
            return []
        return list(self._continuation[self._position : self._position + k])

    def commit(self, tokens: Sequence[int]) -> None:
        expected = self._continuation[self._position : self._position + len(tokens)]
        self._position += len(tokens)
        if tuple(tokens) != expected:
            self._on_path = False


class ClairvoyantLookupDrafter:
    """Prompt-lookup's own drafts, each cut to the part plain decoding will accept.

    What is drafted is prompt-lookup's (docs/contract.md §4); how many of its tokens is decided
    knowing the continuation, so no rule on whether and how much to draft (the gates' whole lever)
    can do better with these drafts, short of evening out a tick's widths across lanes (each lane is
    cut on its own): the bound on what the gates could make of prompt-lookup."""

    strategy = "prompt-lookup, clairvoyant length"

    def __init__(self, continuations: dict[tuple[int, ...], Sequence[int]]) -> None:
        self._known = OracleDrafter(continuations)

    def open(self, prompt: Sequence[int], *, seq: int) -> ClairvoyantLookupState:
        return ClairvoyantLookupState(
            PromptLookupDrafter().open(prompt, seq=seq), self._known.open(prompt, seq=seq)
        )


class ClairvoyantLookupState:
    __slots__ = ("_known", "_lookup")

    def __init__(self, lookup: DraftState, known: OracleState) -> None:
        self._lookup = lookup
        self._known = known

    def propose(self, k: int) -> list[int]:
        draft, known = self._lookup.propose(k), self._known.propose(k)
        agreed = next(
            (i for i, (a, b) in enumerate(zip(draft, known, strict=False)) if a != b),
            min(len(draft), len(known)),
        )
        return draft[:agreed]

    def commit(self, tokens: Sequence[int]) -> None:
        self._lookup.commit(tokens)
        self._known.commit(tokens)


class FixedDepth:
    """A `SpeculationPolicy` that always drafts `depth` tokens: no gate, nothing learnt."""

    def __init__(self, depth: int) -> None:
        self._plan = TickPlan(depth)

    def plan(self, lane_count: int) -> TickPlan:
        return self._plan

    def may_draft(self, request_id: Hashable) -> bool:
        return True

    def request_started(self, request_id: Hashable) -> None:
        pass

    def request_finished(self, request_id: Hashable) -> None:
        pass

    def record_round(
        self,
        request_id: Hashable,
        lane_count: int,
        *,
        drafted: int,
        accepted: int,
        klass: int = 0,
        asked: int | None = None,
    ) -> None:
        pass

    def record_spec_tick(
        self, lane_count: int, *, drafted: int, committed: int, seconds: float, rows: int
    ) -> None:
        pass

    def record_plain_tick(self, lane_count: int, *, committed: int, seconds: float) -> None:
        pass


# -- one round --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoundFigures:
    outputs: tuple[tuple[int, ...], ...]  # each request's committed tokens
    wall: float  # submit → last finish
    decode_tokens: int  # committed after every request's first token
    decode_wall: float  # from then to the last finish
    proposed: int
    accepted: int

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)

    @property
    def aggregate(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    @property
    def decode_aggregate(self) -> float:
        return self.decode_tokens / self.decode_wall if self.decode_wall > 0 else 0.0


def run_round(
    executor: Executor, prompts: Sequence[Sequence[int]], max_tokens: int
) -> RoundFigures:
    """Submit every prompt at once, tick until idle; the decode-only window opens when the last
    request has its first token (no prompt is left to prefill), as in the HTTP bench."""
    requests = [
        GenerationRequest(list(p), SamplingParams(temperature=0.0), max_tokens) for p in prompts
    ]
    began = time.perf_counter()
    for request in requests:
        executor.submit(request)
    outputs: dict[int, list[int]] = {r.id: [] for r in requests}
    timeline: list[tuple[float, int]] = []  # (when, tokens committed in that event)
    first: dict[int, float] = {}
    spec: dict[int, tuple[int, int]] = {}
    while not executor.idle:
        for event in executor.tick():
            now = time.perf_counter()
            if event.tokens:
                first.setdefault(event.request_id, now)
                outputs[event.request_id].extend(event.tokens)
                timeline.append((now, len(event.tokens)))
            spec[event.request_id] = (event.spec.proposed, event.spec.accepted)
    end = time.perf_counter()
    start = max(first.values(), default=end)
    decode_tokens = sum(n for when, n in timeline if when > start)
    return RoundFigures(
        tuple(tuple(outputs[r.id]) for r in requests),
        end - began,
        decode_tokens,
        end - start,
        sum(p for p, _ in spec.values()),
        sum(a for _, a in spec.values()),
    )


# -- a cell -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Cell:
    workload: str
    clients: int
    plain: list[RoundFigures] = field(default_factory=list)
    auto: list[RoundFigures] = field(default_factory=list)
    oracle: dict[int, list[RoundFigures]] = field(default_factory=dict)  # depth -> runs
    auto_gate: str = ""
    #: prompt-lookup at fixed depths, no gate (`--lookup-depths`): depth -> runs
    lookup: dict[int, list[RoundFigures]] = field(default_factory=dict)
    #: prompt-lookup's drafts cut to what is accepted, at fixed depths (`--bound-depths`)
    bound: dict[int, list[RoundFigures]] = field(default_factory=dict)

    @staticmethod
    def decode(runs: list[RoundFigures]) -> float:
        return statistics.median(r.decode_aggregate for r in runs) if runs else 0.0

    @staticmethod
    def end_to_end(runs: list[RoundFigures]) -> float:
        return statistics.median(r.aggregate for r in runs) if runs else 0.0

    @staticmethod
    def acceptance(runs: list[RoundFigures]) -> float | None:
        proposed = sum(r.proposed for r in runs)
        return sum(r.accepted for r in runs) / proposed if proposed else None

    @property
    def best_depth(self) -> int:
        return max(self.oracle, key=lambda d: self.decode(self.oracle[d]))

    @property
    def best_lookup_depth(self) -> int | None:
        """The fixed prompt-lookup depth that decoded fastest (None when none was measured)."""
        if not self.lookup:
            return None
        return max(self.lookup, key=lambda d: self.decode(self.lookup[d]))

    @property
    def best_bound_depth(self) -> int | None:
        """The depth cap at which the clairvoyant-length prompt-lookup decoded fastest."""
        if not self.bound:
            return None
        return max(self.bound, key=lambda d: self.decode(self.bound[d]))


def user_turn(runtime, text: str) -> str:
    """One user message in the model's own chat template, as the server renders it."""
    return runtime.chat_prompt([{"role": "user", "content": text}])


def prompts_for(runtime, workload: Workload, clients: int, run: int) -> list[list[int]]:
    return [
        runtime.tokenize(
            workload.raw_prompt(workload.variant(i, run), lambda text: user_turn(runtime, text)),
            add_special=True,
        )
        for i in range(clients)
    ]


def spec_policy(runtime) -> SpecPolicy:
    return SpecPolicy(
        SpecSettings(),
        default_depth=default_depth(Strategy.PROMPT_LOOKUP),
        depth_cap=runtime.capabilities.max_verify_rows - 1,
        match_classes=PromptLookupDrafter.match_classes,
    )


def gate_phase(policy: SpecPolicy, lanes: int) -> str:
    if policy.abandoned:
        return "abandoned"
    for state in policy.states():
        if state.lane_count == lanes:
            phase = state.phase.value if state.phase is not None else "no gate"
            return f"{phase}, d{state.depth}"
    return "–"


def measure_cell(args: argparse.Namespace, runtime, workload: Workload, clients: int) -> Cell:
    cell = Cell(workload.name, clients)

    def executor(drafter=None, policy=None) -> Executor:
        # No prefix reuse: the bench repeats prompts across systems; a live server's would differ.
        return Executor(
            runtime,
            max_lanes=clients,
            clock=time.perf_counter,
            drafter=drafter,
            policy=policy,
            reuse_prefixes=False,
        )

    def known(prompts: list[list[int]], outputs: Sequence[Sequence[int]]) -> dict:
        return {tuple(p): o for p, o in zip(prompts, outputs, strict=True)}

    plain = executor()
    # auto: one policy for the whole cell, warmed up until its gate at this lane count decides.
    policy = spec_policy(runtime)
    auto = executor(PromptLookupDrafter(), policy)
    # Prompt-lookup's own ceiling: its drafts at one depth everywhere, no gate.
    lookups = {
        depth: executor(PromptLookupDrafter(), FixedDepth(depth)) for depth in args.lookup_depths
    }
    for warm in range(max(args.warmup, args.warmup_max)):
        phase = gate_phase(policy, clients)
        if warm >= args.warmup and phase.split(",")[0] in (*SETTLED, "abandoned"):
            break
        run_round(auto, prompts_for(runtime, workload, clients, 100 + warm), args.tokens)
    run_round(plain, prompts_for(runtime, workload, clients, 0), 8)  # one-time allocations
    for run in range(args.runs):
        prompts = prompts_for(runtime, workload, clients, run)
        base = run_round(plain, prompts, args.tokens)
        cell.plain.append(base)
        for depth in args.depths:
            # On batch-invariant kernels the first pass decodes the continuation exactly; on
            # others verifying a draft's rows in one batch can break a near-tie differently
            # from plain decoding. Up to --passes times, the last pass's own output becomes the
            # continuation, so the measured pass drafts the path it decodes.
            continuation = base.outputs
            for attempt in range(args.passes):
                oracle = executor(OracleDrafter(known(prompts, continuation)), FixedDepth(depth))
                figures = run_round(oracle, prompts, args.tokens)
                if figures.outputs == continuation:
                    break
                log(f"  oracle d{depth} pass {attempt + 1}: output left the continuation")
                continuation = figures.outputs
            cell.oracle.setdefault(depth, []).append(figures)
        for depth, fixed in lookups.items():
            cell.lookup.setdefault(depth, []).append(run_round(fixed, prompts, args.tokens))
        for depth in args.bound_depths:
            clairvoyant = executor(
                ClairvoyantLookupDrafter(known(prompts, base.outputs)), FixedDepth(depth)
            )
            cell.bound.setdefault(depth, []).append(run_round(clairvoyant, prompts, args.tokens))
        cell.auto.append(run_round(auto, prompts, args.tokens))
    cell.auto_gate = gate_phase(policy, clients)
    d = cell.best_depth
    log(
        f"{workload.name} {clients} client(s): plain {cell.decode(cell.plain):.1f}, "
        f"auto {cell.decode(cell.auto):.1f}, oracle {cell.decode(cell.oracle[d]):.1f} (d{d}) "
        "tok/s decode-only"
    )
    return cell


# -- the report -------------------------------------------------------------------------------


def http_decode(http_raw: Path | None, workload: str, clients: int) -> tuple[float | None, ...]:
    """From an HTTP run, if any: superfluid auto's decode-only aggregate, and the best
    llama-server configuration's."""
    if http_raw is None or not http_raw.is_file():
        return None, None
    from bench.http_report import DECODE_ONLY, best_llama
    from bench.http_results import AUTO, Results

    results = Results.load(http_raw)
    key = (workload, 0.0, clients)
    auto, best = results.cell(AUTO, *key), best_llama(results, key, DECODE_ONLY)
    return (
        auto.decode_aggregate if auto is not None else None,
        best.decode_aggregate if best is not None else None,
    )


COLUMNS = (
    "workload",
    "clients",
    "plain tok/s",
    "auto tok/s",
    "oracle tok/s (best depth)",
    "oracle / plain",
    "auto / oracle",
    "auto acceptance",
    "oracle acceptance",
    "auto's gate after the cell",
    "auto over HTTP / oracle",
    "llama-server best (HTTP)",
    "1.1× llama-server possible?",
)


def report(cells: list[Cell], args: argparse.Namespace, header: list[str]) -> str:
    rows = []
    for cell in cells:
        d = cell.best_depth
        oracle = cell.oracle[d]
        plain, auto, ceiling = cell.decode(cell.plain), cell.decode(cell.auto), cell.decode(oracle)
        e2e = (cell.end_to_end(cell.plain), cell.end_to_end(cell.auto), cell.end_to_end(oracle))
        auto_accept, oracle_accept = cell.acceptance(cell.auto), cell.acceptance(oracle)
        served, peer = http_decode(args.http_raw, cell.workload, cell.clients)
        possible = "–" if peer is None else ("yes" if ceiling >= 1.1 * peer else "**no**")
        fraction = auto / ceiling if ceiling else 0.0
        target = ""
        if cell.workload == "copy-heavy":  # the target applies at every lane count
            target = f" (≥ 0.9 {'✓' if fraction >= 0.9 else '✗'})"
        rows.append(
            [
                cell.workload,
                str(cell.clients),
                f"{plain:.1f} / {e2e[0]:.1f}",
                f"{auto:.1f} / {e2e[1]:.1f}",
                f"{ceiling:.1f} / {e2e[2]:.1f} (d{d})",
                f"{ceiling / plain:.2f}×" if plain else "–",
                f"{fraction:.0%}{target}",
                f"{auto_accept:.0%}" if auto_accept is not None else "none drafted",
                f"{oracle_accept:.0%}" if oracle_accept is not None else "–",
                cell.auto_gate,
                "–" if served is None or not ceiling else f"{served:.1f}: {served / ceiling:.0%}",
                "–" if peer is None else f"{peer:.1f}",
                possible,
            ]
        )
        depths = ", ".join(f"d{k} {cell.decode(v):.1f}" for k, v in sorted(cell.oracle.items()))
        rows[-1][4] += f"<br>{depths}"
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join([*header, *table, "", *lookup_table(cells), *METHOD])


LOOKUP_COLUMNS = (
    "workload",
    "clients",
    "prompt-lookup at fixed depths, no gate (decode-only tok/s)",
    "best fixed depth / oracle",
    "auto / best fixed depth",
    "clairvoyant length (decode-only tok/s, by depth cap)",
    "clairvoyant / oracle",
    "auto / clairvoyant",
)


def _best(cell: Cell, runs: dict[int, list[RoundFigures]], best: int | None) -> tuple[str, str]:
    """Each depth's rate, and the best one's fraction of the oracle ("–" when not measured)."""
    if best is None:
        return "–", "–"
    oracle = cell.decode(cell.oracle[cell.best_depth])
    depths = ", ".join(f"d{k} {cell.decode(v):.1f}" for k, v in sorted(runs.items()))
    return depths, f"{cell.decode(runs[best]) / oracle:.0%} (d{best})" if oracle else "–"


def _fraction(part: float, whole: float | None) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def lookup_table(cells: list[Cell]) -> list[str]:
    """Prompt-lookup's own ceilings per cell: what its drafts reach at the best fixed depth, and
    with a clairvoyant length (the bound on any whether-and-how-much rule), and auto's fraction
    of each (empty when neither `--lookup-depths` nor `--bound-depths` measured anything)."""
    rows = []
    for cell in cells:
        fixed_depth, bound_depth = cell.best_lookup_depth, cell.best_bound_depth
        if fixed_depth is None and bound_depth is None:
            continue
        auto = cell.decode(cell.auto)
        fixed = None if fixed_depth is None else cell.decode(cell.lookup[fixed_depth])
        bound = None if bound_depth is None else cell.decode(cell.bound[bound_depth])
        rows.append(
            [
                cell.workload,
                str(cell.clients),
                *_best(cell, cell.lookup, fixed_depth),
                _fraction(auto, fixed),
                *_best(cell, cell.bound, bound_depth),
                _fraction(auto, bound),
            ]
        )
    if not rows:
        return []
    return [
        "## Prompt-lookup's own ceiling",
        "",
        "Prompt-lookup's drafts (the most recent earlier occurrence's continuation, "
        "docs/contract.md §4) on the same prompts in the same runs, no gate. **Fixed depths**: one "
        "depth for every lane and tick; the best is what one depth rule reaches without knowing "
        "the text in advance. **Clairvoyant length**: each draft cut to the part plain decoding "
        "accepts (nothing drafted where that is none), under a depth cap: no rule on whether and "
        "how much of a draft to verify — the gates' whole lever — can do better with these drafts, "
        "short of evening out a tick's widths across lanes. The oracle's lead over it is where "
        "these drafts leave the reply: each such place ends a lane's round early.",
        "",
        "| " + " | ".join(LOOKUP_COLUMNS) + " |",
        "|" + "---|" * len(LOOKUP_COLUMNS),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


METHOD = [
    "## Method",
    "",
    "- Rates are aggregate tokens per second, **decode-only / end to end**, medians over runs. "
    "Decode-only counts the tokens committed after every request of the round has its first "
    "token, over the time from then to the last request's end (the HTTP bench's window); end "
    "to end is all tokens over the round's wall time, prefill included.",
    "- **plain**: the executor without a drafter. **oracle**: the executor drafting plain's "
    "own output for the same prompts at the same lane count (`OracleDrafter`), at each fixed "
    "depth listed (no gate; best depth is the ceiling; every depth's figure is under it). "
    "**auto**: prompt-lookup with `SpecPolicy` (every gate on), one policy per cell, warmed up "
    "on the cell's prompts until the throughput gate at that lane count has decided.",
    "- **auto / oracle** is superfluid's fraction of the ceiling (decode-only), in-process; "
    "**auto over HTTP / oracle** is the same with the HTTP run's superfluid auto (decode-only "
    "aggregate, so serving overhead counts against it). **1.1× "
    "llama-server possible?** compares the oracle with 1.1× the best llama-server "
    "configuration's decode-only aggregate in the HTTP run (`--http-raw`): where it says no, "
    "no drafter could meet the 1.1× target there through this executor. The oracle runs "
    "in-process and llama-server over HTTP, so the comparison flatters the oracle slightly. "
    "Target: auto ≥ 0.9 of the oracle on copy-heavy at every lane count.",
    "- On the served, batch-invariant kernels (ADR 0008) a verify step's rows equal plain "
    "decoding's, so the oracle's first pass stays on the known path (acceptance 100%). On "
    "kernels that are not, a near-tie can break differently and the oracle then has nothing "
    "left to draft for that request; so it runs up to `--passes` times per run, each drafting "
    "the previous pass's output, and the last pass is measured.",
    "",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF (default: the demo model)")
    parser.add_argument("--quick", action="store_true", help="1 run, 1 client, 64 tokens")
    parser.add_argument("--runs", type=int, help="measured runs per cell (default 3; quick 1)")
    parser.add_argument("--tokens", type=int, help="max tokens per request (default 128; quick 64)")
    parser.add_argument("--clients", help="client counts (default 1,2,4,8; quick 1)")
    parser.add_argument("--depths", help="oracle draft depths (default 15,31,63; quick 15,63)")
    parser.add_argument(
        "--lookup-depths",
        default="",
        help="prompt-lookup at these fixed depths, no gate, as its own ceiling (default: none)",
    )
    parser.add_argument(
        "--bound-depths",
        default="",
        help="prompt-lookup with a clairvoyant length at these depth caps: the bound on what "
        "the gates can make of its drafts (default: none)",
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--passes", type=int, default=3, help="oracle passes at most per run (see measure_cell)"
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--warmup-max", type=int, default=6)
    parser.add_argument("--ctx-size", type=int, default=2048)
    parser.add_argument(
        "--http-raw", type=Path, default=Path(DEFAULT_HTTP_OUT) / "http_bench.raw.json"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--from-raw",
        type=Path,
        help="only write the report again from a saved oracle.raw.json (with --http-raw's run)",
    )
    args = parser.parse_args(argv)
    q = args.quick
    args.runs = args.runs or (1 if q else 3)
    args.tokens = args.tokens or (64 if q else 128)
    args.clients = tuple(int(c) for c in (args.clients or ("1" if q else "1,2,4,8")).split(","))
    args.depths = tuple(int(d) for d in (args.depths or ("15,63" if q else "15,31,63")).split(","))
    args.lookup_depths = tuple(int(d) for d in args.lookup_depths.split(",") if d)
    args.bound_depths = tuple(int(d) for d in args.bound_depths.split(",") if d)
    args.workloads = tuple(w for w in args.workloads.split(",") if w)
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    args.out = args.out or (Path("/tmp/superfluid-oracle/quick") if q else Path(DEFAULT_OUT))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_raw is not None:
        saved = json.loads(args.from_raw.read_text())
        shown = " ".join(argv if argv is not None else sys.argv[1:])
        kept = list(saved["header"])
        while kept and not kept[-1]:  # the saved header ends in a blank line; the note joins it
            kept.pop()
        header = [
            *kept,
            f"- report written again with `.venv/bin/python -m bench.oracle_ceiling {shown}`",
            "",
        ]
        page = report([_cell_from(c) for c in saved["cells"]], args, header)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "oracle.md").write_text(page + "\n")
        log(f"wrote {args.out / 'oracle.md'}")
        return
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    model = args.model
    if model is None:
        from superfluid.adapters.llamacpp.demo_model import demo_model_path

        model = demo_model_path(Path.home() / ".superfluid")
    runtime = LlamaCppRuntime.load(model, ctx_size=args.ctx_size, max_sequences=max(args.clients))
    began = time.monotonic()
    load_before = Path("/proc/loadavg").read_text().split()[0]
    cells = [
        measure_cell(args, runtime, WORKLOADS[name], clients)
        for name in args.workloads
        for clients in args.clients
    ]
    minutes = (time.monotonic() - began) / 60
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    header = [
        "# The ceiling: superfluid against an oracle drafter",
        "",
        "Generated by `bench/oracle_ceiling.py`; do not edit by hand (run it again).",
        "",
        f"- `{' '.join(['.venv/bin/python -m bench.oracle_ceiling', shown]).strip()}`",
        f"- model `{Path(model).name}`, {args.tokens} tokens per request, greedy, "
        f"{args.runs} run(s) per cell, oracle depths {', '.join(map(str, args.depths))}"
        + (
            f", prompt-lookup fixed depths {', '.join(map(str, args.lookup_depths))}"
            if args.lookup_depths
            else ""
        )
        + (
            f", clairvoyant-length caps {', '.join(map(str, args.bound_depths))}"
            if args.bound_depths
            else ""
        )
        + "; "
        f"1-minute load {load_before} at the start; {minutes:.1f} minutes"
        + ("; **quick smoke run**" if args.quick else ""),
        "",
    ]
    page = report(cells, args, header)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "oracle.md").write_text(page + "\n")
    raw = [
        {
            "workload": c.workload,
            "clients": c.clients,
            "plain": [asdict(r) for r in c.plain],
            "auto": [asdict(r) for r in c.auto],
            "oracle": {str(d): [asdict(r) for r in runs] for d, runs in c.oracle.items()},
            "auto_gate": c.auto_gate,
            "lookup": {str(d): [asdict(r) for r in runs] for d, runs in c.lookup.items()},
            "bound": {str(d): [asdict(r) for r in runs] for d, runs in c.bound.items()},
        }
        for c in cells
    ]
    (args.out / "oracle.raw.json").write_text(json.dumps({"header": header, "cells": raw}) + "\n")
    print(page)
    log(f"wrote {args.out / 'oracle.md'}")


def _cell_from(saved: dict) -> Cell:
    def runs(items: list[dict]) -> list[RoundFigures]:
        return [
            RoundFigures(**{**r, "outputs": tuple(tuple(o) for o in r["outputs"])}) for r in items
        ]

    return Cell(
        saved["workload"],
        saved["clients"],
        runs(saved["plain"]),
        runs(saved["auto"]),
        {int(d): runs(items) for d, items in saved["oracle"].items()},
        saved["auto_gate"],
        {int(d): runs(items) for d, items in saved.get("lookup", {}).items()},
        {int(d): runs(items) for d, items in saved.get("bound", {}).items()},
    )


if __name__ == "__main__":
    main()
