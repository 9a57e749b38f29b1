"""The HTTP benchmark's report: a markdown page with one table per workload, the targets, and
a grouped-bar plot.

Ratios are of aggregate tokens per second (medians over paired runs), end to end (prefill
included) and decode-only (after the first content chunk). A target is judged on both and
printed next to the ratio it applies to, with ✓ or ✗; a miss is reported, never an error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.http_load import Round
from bench.http_results import (
    AUTO,
    LLAMA_SERVER,
    LLAMA_SERVERS,
    LLAMACPP,
    PLAIN,
    RAW,
    Cell,
    Results,
    Settings,
    is_llama_server,
    runs_at,
)

#: The systems of the main table; llama-server's configurations have a table of their own.
SYSTEMS = (AUTO, PLAIN, LLAMACPP, RAW)
#: A pseudo-system: per cell and rate, the fastest llama-server configuration (plain included).
LLAMA_BEST = "llama-server best"

END_TO_END = "end-to-end"
DECODE_ONLY = "decode-only"
METRICS = (END_TO_END, DECODE_ONLY)


def short(system: str) -> str:
    """A system's name in a column header: superfluid's two are told apart by `--speculate`."""
    return {AUTO: "auto", PLAIN: "off"}.get(system, system)


@dataclass(frozen=True, slots=True)
class RatioColumn:
    numerator: str
    denominator: str
    metric: str

    @property
    def header(self) -> str:
        head = f"{short(self.numerator)} / {short(self.denominator)}"
        return head if self.metric == END_TO_END else f"{head} ({self.metric})"


# Systems whose cells have a decode-only rate: llama-cpp-python's server is not streamed.
DECODE_SYSTEMS = (AUTO, PLAIN, RAW)
RATE_COLUMNS = tuple(
    (system, metric)
    for system in SYSTEMS
    for metric in METRICS
    if metric == END_TO_END or system in DECODE_SYSTEMS
)
RATIO_COLUMNS = tuple(
    RatioColumn(numerator, denominator, metric)
    for numerator, denominator in ((AUTO, PLAIN), (AUTO, LLAMACPP), (PLAIN, RAW))
    for metric in METRICS
    if metric == END_TO_END or denominator in DECODE_SYSTEMS
)
COLUMNS = (
    "T",
    "clients",
    *(
        f"{short(system)} tok/s" if metric == END_TO_END else f"{short(system)} tok/s ({metric})"
        for system, metric in RATE_COLUMNS
    ),
    *(column.header for column in RATIO_COLUMNS),
)
SPEC_COLUMNS = (
    "T",
    "clients",
    "auto TTFT ms",
    "off TTFT ms",
    "acceptance",
    "accepted / round",
    "gates after the cell (lanes: phase, depth)",
)


@dataclass(frozen=True, slots=True)
class Target:
    """`numerator / denominator ≥ minimum` on the cells `applies` selects."""

    label: str
    numerator: str
    denominator: str
    minimum: float
    applies: Callable[[str, float, int], bool]  # (workload, temperature, clients)


#: The targets (decode-only is the one judged for copy-heavy and long-prompt; end to end
#: is reported beside it), and the serving-overhead floor.
TARGETS = (
    Target(
        "copy-heavy, greedy, 1–8 clients: auto ≥ 1.1× llama-server best",
        AUTO,
        LLAMA_BEST,
        1.1,
        lambda w, t, c: w == "copy-heavy" and t == 0.0,
    ),
    Target(
        "long-prompt, greedy, 1–8 clients: auto ≥ 1.1× llama-server best",
        AUTO,
        LLAMA_BEST,
        1.1,
        lambda w, t, c: w == "long-prompt" and t == 0.0,
    ),
    Target(
        "open-ended, greedy, 1–8 clients: auto ≥ 0.98× off",
        AUTO,
        PLAIN,
        0.98,
        lambda w, t, c: w == "open-ended" and t == 0.0,
    ),
    Target(
        "open-ended, greedy, 1–8 clients: auto ≥ 1.0× llama-server best",
        AUTO,
        LLAMA_BEST,
        1.0,
        lambda w, t, c: w == "open-ended" and t == 0.0,
    ),
    Target(
        "plain through the server ≥ 0.95× the raw loop (1 client, greedy)",
        PLAIN,
        RAW,
        0.95,
        lambda w, t, c: t == 0.0 and c == 1,
    ),
)


def llama_cells(results: Results, key: tuple[str, float, int]) -> list[Cell]:
    return [c for c in results.cells if is_llama_server(c.system) and c.key == key and c.rounds]


def best_llama(
    results: Results, key: tuple[str, float, int], metric: str = END_TO_END
) -> Cell | None:
    """The llama-server configuration with the highest aggregate rate in this cell (for this
    rate), plain included; None when none was measured there."""
    rated = [(rate, c) for c in llama_cells(results, key) if (rate := _aggregate(c, metric))]
    return max(rated, key=lambda pair: pair[0])[1] if rated else None


def cell_for(
    results: Results, system: str, key: tuple[str, float, int], metric: str = END_TO_END
) -> Cell | None:
    if system == LLAMA_BEST:
        return best_llama(results, key, metric)
    return results.cell(system, *key)


def temperature_label(temperature: float) -> str:
    return "greedy" if temperature == 0.0 else f"{temperature:g}"


def _aggregate(cell: Cell, metric: str) -> float | None:
    return cell.aggregate if metric == END_TO_END else cell.decode_aggregate


def _per_client(cell: Cell, metric: str) -> float | None:
    return cell.per_client if metric == END_TO_END else cell.decode_per_client


def _rate(cell: Cell | None, metric: str) -> str:
    aggregate = _aggregate(cell, metric) if cell is not None and cell.rounds else None
    if cell is None or aggregate is None:
        return "–"
    per_client = _per_client(cell, metric)
    if cell.clients == 1 or per_client is None:
        return f"{aggregate:.1f}"
    return f"{aggregate:.1f} ({per_client:.1f})"


def _round_rate(round_: Round, metric: str) -> float | None:
    return round_.aggregate if metric == END_TO_END else round_.decode_aggregate


def paired_ratios(
    top: Cell | None, bottom: Cell | None, metric: str = END_TO_END
) -> tuple[float, ...]:
    """Run r's aggregate over the other system's run r, per run: run r of every system sends
    the same prompts, so each pair compares like with like (and superfluid auto's run r and
    off's were measured one right after the other)."""
    if top is None or bottom is None:
        return ()
    pairs = []
    for a, b in zip(top.rounds, bottom.rounds, strict=False):
        over, under = _round_rate(a, metric), _round_rate(b, metric)
        if over is not None and under is not None and under > 0:
            pairs.append(over / under)
    return tuple(pairs)


def paired_ratio(top: Cell | None, bottom: Cell | None, metric: str = END_TO_END) -> float | None:
    """The median of `paired_ratios`."""
    pairs = paired_ratios(top, bottom, metric)
    return statistics.median(pairs) if pairs else None


def _targets_for(numerator: str, denominator: str, key: tuple[str, float, int]) -> list[Target]:
    return [
        target
        for target in TARGETS
        if (target.numerator, target.denominator) == (numerator, denominator)
        and target.applies(*key)
    ]


def _mark(ratio: float, target: Target) -> str:
    return "✓" if ratio >= target.minimum else "✗"


def _ratio(results: Results, column: RatioColumn, key: tuple[str, float, int]) -> str:
    ratio = paired_ratio(
        cell_for(results, column.numerator, key, column.metric),
        cell_for(results, column.denominator, key, column.metric),
        column.metric,
    )
    if ratio is None:
        return "–"
    text = f"{ratio:.2f}×"
    for target in _targets_for(column.numerator, column.denominator, key):
        text += f" (≥ {target.minimum:g} {_mark(ratio, target)})"
    return text


def _gates(cell: Cell | None) -> str:
    if cell is None or cell.spec is None:
        return "–"
    parts = []
    for gate in cell.gates:
        if gate.lanes > cell.clients:
            continue  # state left from an earlier cell of a larger client count (none: restarts)
        phase = gate.phase or ("speculate" if gate.speculating is not False else "plain")
        parts.append(f"{gate.lanes}: {phase}, d{gate.depth}")
    if cell.abandoned:
        parts.append("**strategy abandoned by the yield floor**")
    return "; ".join(parts) or "–"


def _spec_columns(cell: Cell | None) -> tuple[str, str]:
    if cell is None:
        return "–", "–"
    acceptance = cell.acceptance
    rate = f"{acceptance:.0%}" if acceptance is not None else "none drafted"
    spec = cell.spec
    if spec is None or spec.accepted_per_step is None:
        return rate, "–"
    hit = spec.accepted_per_hit
    per_round = f"{spec.accepted_per_step:.2f}"
    if hit is not None:
        per_round += f" – {hit:.2f}"
    return rate, per_round


def _keys(results: Results, workload: str) -> list[tuple[str, float, int]]:
    return sorted(
        {c.key for c in results.cells if c.workload == workload and c.system != RAW},
        key=lambda k: (k[1], k[2]),
    )


def _rows(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def table(results: Results, workload: str) -> list[str]:
    """Rates and ratios, end to end and decode-only."""
    rows = []
    for key in _keys(results, workload):
        _, temperature, clients = key
        rows.append(
            [
                temperature_label(temperature),
                str(clients),
                *(_rate(results.cell(system, *key), metric) for system, metric in RATE_COLUMNS),
                *(_ratio(results, column, key) for column in RATIO_COLUMNS),
            ]
        )
    return _rows(COLUMNS, rows)


def _ttft(cell: Cell | None) -> str:
    ttft = cell.ttft if cell is not None else None
    return "–" if ttft is None else f"{ttft * 1000:.0f}"


def spec_table(results: Results, workload: str) -> list[str]:
    """Time to the first content chunk, and what speculation did."""
    rows = []
    for key in _keys(results, workload):
        _, temperature, clients = key
        auto = results.cell(AUTO, *key)
        acceptance, per_round = _spec_columns(auto)
        rows.append(
            [
                temperature_label(temperature),
                str(clients),
                _ttft(auto),
                _ttft(results.cell(PLAIN, *key)),
                acceptance,
                per_round,
                _gates(auto),
            ]
        )
    return _rows(SPEC_COLUMNS, rows)


LLAMA_COLUMNS = (
    "T",
    "clients",
    "auto tok/s",
    "auto tok/s (decode-only)",
    "llama-server tok/s",
    "llama-server tok/s (decode-only)",
    "llama-server best",
    "best tok/s",
    "best tok/s (decode-only)",
    "auto / best",
    "auto / best (decode-only)",
    "auto TTFT ms",
    "best TTFT ms",
)


def _config(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    name = cell.system.removeprefix(LLAMA_SERVER).strip() or "plain"
    acceptance = cell.acceptance
    return f"{name} ({acceptance:.0%} accepted)" if acceptance is not None else name


def _best_names(results: Results, key: tuple[str, float, int]) -> str:
    best, best_decode = best_llama(results, key), best_llama(results, key, DECODE_ONLY)
    if best is None:
        return "–"
    if best_decode is None or best_decode.system == best.system:
        return _config(best)
    return f"{_config(best)}; decode-only: {_config(best_decode)}"


def _ratio_to(
    results: Results, top: str, bottom: str, key: tuple[str, float, int], metric: str
) -> str:
    return _ratio(results, RatioColumn(top, bottom, metric), key)


def llama_table(results: Results, workload: str) -> list[str]:
    """superfluid auto against llama.cpp's own server: plain, and the best configuration."""
    rows = []
    for key in _keys(results, workload):
        if not llama_cells(results, key):
            continue
        _, temperature, clients = key
        auto = results.cell(AUTO, *key)
        plain = results.cell(LLAMA_SERVER, *key)
        rows.append(
            [
                temperature_label(temperature),
                str(clients),
                _rate(auto, END_TO_END),
                _rate(auto, DECODE_ONLY),
                _rate(plain, END_TO_END),
                _rate(plain, DECODE_ONLY),
                _best_names(results, key),
                _rate(best_llama(results, key), END_TO_END),
                _rate(best_llama(results, key, DECODE_ONLY), DECODE_ONLY),
                _ratio_to(results, AUTO, LLAMA_BEST, key, END_TO_END),
                _ratio_to(results, AUTO, LLAMA_BEST, key, DECODE_ONLY),
                _ttft(auto),
                _ttft(best_llama(results, key)),
            ]
        )
    return _rows(LLAMA_COLUMNS, rows) if rows else []


def identical(cell: Cell | None, reference: Cell | None) -> tuple[int, int] | None:
    """(replies whose text equals the reference's reply to the same prompt, replies compared):
    run r of both cells sent the same prompts, client by client (and turn by turn)."""
    if cell is None or reference is None:
        return None
    same = total = 0
    for mine, theirs in zip(cell.rounds, reference.rounds, strict=False):
        for reply, other in zip(mine.replies, theirs.replies, strict=False):
            if reply.digest is None or other.digest is None:
                continue
            total += 1
            same += reply.digest == other.digest
    return (same, total) if total else None


def identity_table(results: Results, workload: str) -> list[str]:
    """Per greedy cell, how many replies of each drafting server equal its own plain greedy's."""
    pairs = [(AUTO, PLAIN)] + [
        (system, LLAMA_SERVER) for system in LLAMA_SERVERS if system != LLAMA_SERVER
    ]
    pairs = [pair for pair in pairs if any(c.system == pair[0] for c in results.cells)]
    rows = []
    for key in _keys(results, workload):
        if key[1] != 0.0:
            continue
        counts = [identical(results.cell(a, *key), results.cell(b, *key)) for a, b in pairs]
        if not any(counts):
            continue
        rows.append([str(key[2]), *("–" if c is None else f"{c[0]}/{c[1]}" for c in counts)])
    header = ("clients", *(f"{short(a)} = {short(b)}" for a, b in pairs))
    return _rows(header, rows) if rows else []


def timeline_table(results: Results) -> list[str]:
    """superfluid auto's gate at each cell's lane count after every round ("w": warm-up)."""
    rows = [
        [cell.workload, str(cell.clients), " → ".join(cell.timeline)]
        for cell in results.cells
        if cell.system == AUTO and cell.timeline and cell.temperature == 0.0
    ]
    return _rows(("workload", "clients", "gate after each round (phase, depth)"), rows)


def tick_time_table(results: Results) -> list[str]:
    """Where superfluid auto's and off's tick time went over each cell's measured runs, per lane
    count: seconds speculating / plain / prefilling, and the decode rate (tokens over the
    seconds of the ticks that did not prefill). A cell's ratio is split here into the lane
    counts its rounds passed through."""
    rows = []
    for auto in results.cells:
        off = results.cell(PLAIN, *auto.key)
        if auto.system != AUTO or not auto.ticks or off is None or not off.ticks:
            continue
        for lanes in sorted({t.lanes for t in (*auto.ticks, *off.ticks)}):
            mine = _tick_kinds(auto, lanes)
            theirs = _tick_kinds(off, lanes)
            if sum(s for _, s in (*mine.values(), *theirs.values())) < MIN_TICK_SECONDS:
                continue  # a lane count a round passed through in a tick or two
            auto_rate, off_rate = _decode_rate(mine), _decode_rate(theirs)
            ratio = f"{auto_rate / off_rate:.2f}×" if auto_rate and off_rate else "–"
            rows.append(
                [
                    auto.workload,
                    temperature_label(auto.temperature),
                    str(auto.clients),
                    str(lanes),
                    " / ".join(f"{mine[k][1]:.1f}" for k in TICK_KINDS),
                    " / ".join(_rate_text(mine[k]) for k in TICK_KINDS[:2]),
                    " / ".join(f"{theirs[k][1]:.1f}" for k in TICK_KINDS[1:]),
                    _rate_text(theirs["plain"]),
                    ratio,
                ]
            )
    header = (
        "workload",
        "T",
        "clients",
        "lanes",
        "auto s (spec / plain / prefill)",
        "auto tok/s (spec / plain)",
        "off s (plain / prefill)",
        "off tok/s",
        "auto / off decode",
    )
    return _rows(header, rows) if rows else []


#: Lane counts where auto and off ticked for less than this, together, are left out.
MIN_TICK_SECONDS = 0.05

#: superfluid_ticks_total's kinds, in the order the tick-time table shows them.
TICK_KINDS = ("speculative", "plain", "prefill")


def _tick_kinds(cell: Cell, lanes: int) -> dict[str, tuple[int, float]]:
    """(tokens, seconds) per kind of tick at `lanes` lanes in the cell's measured runs."""
    kinds = {kind: (0, 0.0) for kind in TICK_KINDS}
    for tick in cell.ticks:
        if tick.lanes == lanes and tick.kind in kinds:
            kinds[tick.kind] = (tick.tokens, tick.seconds)
    return kinds


def _decode_rate(kinds: dict[str, tuple[int, float]]) -> float | None:
    tokens = kinds["speculative"][0] + kinds["plain"][0]
    seconds = kinds["speculative"][1] + kinds["plain"][1]
    return tokens / seconds if seconds > 0.0 else None


def _rate_text(tokens_seconds: tuple[int, float]) -> str:
    tokens, seconds = tokens_seconds
    return f"{tokens / seconds:.0f}" if seconds > 0.0 else "–"


def configs_table(results: Results, workload: str) -> list[str]:
    """Every llama-server configuration: end-to-end aggregate (decode-only) and acceptance."""
    systems = sorted(
        {c.system for c in results.cells if is_llama_server(c.system) and c.workload == workload},
        key=lambda name: (name != LLAMA_SERVER, name),
    )
    if not systems:
        return []
    rows = []
    for key in _keys(results, workload):
        row = [temperature_label(key[1]), str(key[2])]
        for system in systems:
            cell = results.cell(system, *key)
            if cell is None or not cell.rounds:
                row.append("–")
                continue
            decode = cell.decode_aggregate
            text = f"{cell.aggregate:.1f}" + (f" / {decode:.1f}" if decode is not None else "")
            if cell.acceptance is not None:
                text += f", {cell.acceptance:.0%}"
            row.append(text)
        rows.append(row)
    header = ("T", "clients", *(s.removeprefix(LLAMA_SERVER).strip() or "plain" for s in systems))
    return _rows(header, rows)


@dataclass(frozen=True, slots=True)
class SessionTarget:
    """`auto's figure / llama-server's best figure ≤ maximum` on the multi-turn cells."""

    label: str
    maximum: float
    figure: Callable[[Cell], float | None]


SESSION_TARGETS = (
    SessionTarget(
        "multi-turn, greedy: auto's session time ≤ 0.9× llama-server best",
        0.9,
        lambda c: c.session_seconds,
    ),
    SessionTarget(
        "multi-turn, greedy: auto's later-turn TTFT ≤ 1.2× llama-server best",
        1.2,
        lambda c: c.later_ttft,
    ),
)
SESSION_COLUMNS = (
    "clients",
    "auto session s",
    "off session s",
    "llama-server session s",
    "best llama-server session s",
    "auto / best",
    "auto later-turn TTFT ms",
    "off later-turn TTFT ms",
    "llama-server later-turn TTFT ms",
    "best later-turn TTFT ms",
    "auto / best TTFT",
)


def _lowest(results: Results, key: tuple[str, float, int], target: SessionTarget) -> Cell | None:
    """The llama-server configuration with the lowest figure (session time or TTFT)."""
    rated = [(f, c) for c in llama_cells(results, key) if (f := target.figure(c)) is not None]
    return min(rated, key=lambda pair: pair[0])[1] if rated else None


def session_ratio(
    results: Results, key: tuple[str, float, int], target: SessionTarget
) -> float | None:
    auto, best = results.cell(AUTO, *key), _lowest(results, key, target)
    over = target.figure(auto) if auto is not None else None
    under = target.figure(best) if best is not None else None
    return over / under if over is not None and under else None


def _session_ratio_text(
    results: Results, key: tuple[str, float, int], target: SessionTarget
) -> str:
    ratio = session_ratio(results, key, target)
    if ratio is None:
        return "–"
    return f"{ratio:.2f}× (≤ {target.maximum:g} {'✓' if ratio <= target.maximum else '✗'})"


def _seconds(cell: Cell | None, figure: Callable[[Cell], float | None], scale: float) -> str:
    value = figure(cell) if cell is not None else None
    if value is None:
        return "–"
    return f"{value * scale:.0f}" if scale != 1 else f"{value:.2f}"


def session_table(results: Results, workload: str) -> list[str]:
    """Multi-turn: session time and the TTFT of turns 2–4, medians over sessions."""
    time_target, ttft_target = SESSION_TARGETS
    rows = []
    for key in _keys(results, workload):
        best_time, best_ttft = (
            _lowest(results, key, time_target),
            _lowest(results, key, ttft_target),
        )
        plain = results.cell(LLAMA_SERVER, *key)
        time_figure, ttft_figure = time_target.figure, ttft_target.figure

        def named(cell: Cell | None, figure: Callable[[Cell], float | None], scale: float) -> str:
            value = _seconds(cell, figure, scale)
            return value if cell is None or value == "–" else f"{value}: {_config(cell)}"

        rows.append(
            [
                str(key[2]),
                _seconds(results.cell(AUTO, *key), time_figure, 1),
                _seconds(results.cell(PLAIN, *key), time_figure, 1),
                _seconds(plain, time_figure, 1),
                named(best_time, time_figure, 1),
                _session_ratio_text(results, key, time_target),
                _seconds(results.cell(AUTO, *key), ttft_figure, 1000),
                _seconds(results.cell(PLAIN, *key), ttft_figure, 1000),
                _seconds(plain, ttft_figure, 1000),
                named(best_ttft, ttft_figure, 1000),
                _session_ratio_text(results, key, ttft_target),
            ]
        )
    return _rows(SESSION_COLUMNS, rows)


def _multi_turn(results: Results, workload: str) -> bool:
    return any(c.session_seconds is not None for c in results.cells if c.workload == workload)


@dataclass(frozen=True, slots=True)
class Verdict:
    target: Target
    cell: str
    ratio: float | None  # end to end
    decode_runs: tuple[float, ...]  # decode-only, each run's paired ratio

    @property
    def decode_ratio(self) -> float | None:
        """The median decode-only ratio; None where a system has no decode-only rate."""
        return statistics.median(self.decode_runs) if self.decode_runs else None

    def met(self, metric: str) -> bool | None:
        ratio = self.ratio if metric == END_TO_END else self.decode_ratio
        return None if ratio is None else ratio >= self.target.minimum


def verdicts(results: Results) -> list[Verdict]:
    found = []
    for target in TARGETS:
        for cell in results.cells:
            if cell.system != target.numerator or not target.applies(*cell.key):
                continue
            ratio = paired_ratio(cell, cell_for(results, target.denominator, cell.key), END_TO_END)
            decode_runs = paired_ratios(
                cell, cell_for(results, target.denominator, cell.key, DECODE_ONLY), DECODE_ONLY
            )
            if ratio is None and not decode_runs:
                continue
            label = f"{cell.workload}, {temperature_label(cell.temperature)}, {cell.clients} client{'s' if cell.clients > 1 else ''}"
            found.append(Verdict(target, label, ratio, decode_runs))
    return found


def _judged(verdict: Verdict, metric: str) -> list[str]:
    ratio = verdict.ratio if metric == END_TO_END else verdict.decode_ratio
    met = verdict.met(metric)
    if ratio is None or met is None:
        return ["–", "–"]
    return [f"{ratio:.2f}×", "✓" if met else "✗ miss"]


def _spread(verdict: Verdict) -> str:
    """The decode-only runs' lowest and highest paired ratio, and how many met the target: on a
    machine whose speed drifts, a median on few runs whose spread straddles the target is not
    a verdict either way."""
    runs = verdict.decode_runs
    if not runs:
        return "–"
    met = sum(1 for ratio in runs if ratio >= verdict.target.minimum)
    return f"{min(runs):.2f}–{max(runs):.2f}, {met} of {len(runs)} met"


def targets_table(results: Results) -> list[str]:
    header = ("target", "cell", "end-to-end", "met", "decode-only", "met", "decode-only runs")
    rows = [
        [
            verdict.target.label,
            verdict.cell,
            *_judged(verdict, END_TO_END),
            *_judged(verdict, DECODE_ONLY),
            _spread(verdict),
        ]
        for verdict in verdicts(results)
    ]
    for target in SESSION_TARGETS:
        for workload in results.settings.workloads:
            if not _multi_turn(results, workload):
                continue
            for key in _keys(results, workload):
                ratio = session_ratio(results, key, target)
                if ratio is None:
                    continue
                met = "✓" if ratio <= target.maximum else "✗ miss"
                cell = f"{workload}, {temperature_label(key[1])}, {key[2]} client{'s' if key[2] > 1 else ''}"
                rows.append([target.label, cell, f"{ratio:.2f}×", met, "–", "–", "–"])
    return _rows(header, rows)


def markdown(results: Results, *, plot: str | None = "throughput.png") -> str:
    m, s = results.machine, results.settings
    out = [
        "# HTTP benchmark: superfluid against plain decoding, llama.cpp's llama-server, "
        "llama-cpp-python and a raw loop",
        "",
        "Generated by `bench/http_bench.py`; do not edit by hand (run it again).",
        "",
        "## Machine and run",
        "",
        f"- CPU: {m.cpu}, `nproc` = {m.nproc}",
        f"- date: {m.date}; the whole run took {results.minutes:.1f} minutes",
        f"- `/proc/loadavg` when measuring began: `{m.load_before}`; at the end: `{m.load_after}`",
        f"- Python {m.python}, llama-cpp-python {m.llama_cpp_python}",
        f"- model: `{s.model}`; {s.max_tokens} tokens per request; {s.runs} measured run(s) per cell"
        + (
            f", more where that would measure fewer than {s.min_requests} requests "
            f"({', '.join(f'{c} client(s): {runs_at(s.runs, s.min_requests, c)}' for c in s.clients)})"
            if s.min_requests > s.runs
            else ""
        )
        + " (median); "
        f"{s.warmup_rounds} warm-up round(s) before each speculating cell"
        + (
            f", then more (up to {s.warmup_max}) until its lane count's gate has decided"
            if s.warmup_max > s.warmup_rounds
            else ""
        )
        + "; superfluid with "
        f"`--max-lanes {s.max_lanes} --ctx-size {s.ctx_size}`; llama-cpp-python at "
        f"{', '.join(map(str, s.llamacpp_clients))} client(s), "
        f"{', '.join(temperature_label(t) for t in s.llamacpp_temperatures)}; sampled cells at "
        f"{', '.join(map(str, s.sampled_clients))} client(s)"
        + (
            f"; llama-server at {', '.join(map(str, s.llama_server_clients))} client(s) "
            f"(`-np` = clients), {', '.join(temperature_label(t) for t in s.llama_server_temperatures)}"
            if s.llama_server_clients
            else ""
        )
        + (
            f"; multi-turn sessions at {', '.join(map(str, s.session_clients))} client(s)"
            if s.session_clients
            else ""
        )
        + ("; **quick smoke run**" if s.quick else ""),
        "",
        "Commands:",
        "",
        "```sh",
        results.command,
        *(f"# {system}:\n{command}" for system, command in results.servers.items()),
        "```",
        "",
        "## Results",
        "",
        "*auto* and *off* are superfluid with `--speculate auto` and `--speculate off`. "
        "Two rates per cell, in tokens per second. **End to end**: `usage.completion_tokens` over "
        "the wall time, prefill included. **Decode-only**: tokens after the first content chunk "
        "over the time from that chunk to the last (see Method for several clients). With several "
        "clients the figure is the aggregate, and in brackets the mean client's own rate (medians "
        "over runs). A ratio is the median over runs of the paired ratio of aggregates: run *r* "
        "of every system sends the same prompts. Targets are printed next to the ratios they "
        "apply to, end to end and decode-only; the second table per workload has the median time "
        "to the first content chunk (TTFT) and what speculation did.",
        "",
    ]
    for workload in s.workloads:
        out += [f"### {workload}", ""]
        if _multi_turn(results, workload):
            out += [*session_table(results, workload), ""]
        out += [*table(results, workload), "", *spec_table(results, workload), ""]
        same = identity_table(results, workload)
        if same:
            out += [
                "Greedy replies identical to the same server's plain greedy reply to the same "
                "prompt (superfluid auto against off; each llama-server configuration against "
                "plain llama-server):",
                "",
                *same,
                "",
            ]
        against = llama_table(results, workload)
        if against:
            out += [
                f"#### {workload}: superfluid auto against llama.cpp's llama-server",
                "",
                *against,
                "",
                "Every llama-server configuration (aggregate tok/s end to end / decode-only, "
                "acceptance):",
                "",
                *configs_table(results, workload),
                "",
            ]
    out += ["## Targets", "", *targets_table(results), ""]
    timelines = timeline_table(results)
    if len(timelines) > 2:
        out += [
            "## Gate timelines",
            "",
            "superfluid auto's throughput gate and deepest depth at each cell's lane count, "
            "read from `/metrics` after every round: warm-up rounds (w) until the gate has "
            "decided or the warm-up limit, then the measured runs.",
            "",
            *timelines,
            "",
        ]
    ticks = tick_time_table(results)
    if ticks:
        out += [
            "## Where decode time went",
            "",
            "superfluid auto's and off's tick time over each cell's measured runs, by the lanes "
            "decoding in a tick (`superfluid_tick_seconds_total` and "
            "`superfluid_tick_tokens_total` differences): a round of *N* clients passes through "
            "lane counts below *N* as its prompts arrive and as it drains. Seconds per kind of "
            "tick (speculative: it drafted; plain; prefill: a prompt shared the step), the "
            "rate of each decoding kind, and auto's decode rate (speculative and plain ticks "
            "together) over off's at that lane count.",
            "",
            *ticks,
            "",
        ]
    if plot:
        out += [f"![aggregate tokens per second, end to end and decode-only]({plot})", ""]
    out += method(s)
    if results.notes:
        out += ["## Notes from this run", "", *(f"- {note}" for note in results.notes), ""]
    return "\n".join(out)


def method(settings: Settings) -> list[str]:
    servers = INTERLEAVED if settings.interleaved else ONE_AT_A_TIME
    rest = METHOD[3:]
    if settings.peers_interleaved:
        servers += PEERS_INTERLEAVED
        rest = [line.replace(LLAMA_SERVER_ALONE, LLAMA_SERVER_BESIDE) for line in rest]
    if settings.raw_interleaved:
        servers = servers.replace(RAW_BEFORE, RAW_BESIDE)
    return [*METHOD[:3], servers, *rest]


# How runs saved before the servers were interleaved were measured.
ONE_AT_A_TIME = (
    "- **One server at a time.** Each server is started on a free loopback port, waited for "
    "(`/v1/models`), and stopped after its cells; a fresh server serves each workload × "
    "temperature group, so no gate state or abandoned strategy carries from one workload to the "
    "next. Every server answers one untimed request before its first cell."
)
INTERLEAVED = (
    "- **superfluid auto and off interleaved.** Load on a shared machine drifts over minutes, so "
    "the two are measured together: for each workload × temperature group both servers are "
    "started (each on a free loopback port, waited for on `/v1/models`; a fresh pair per group, "
    "so no gate state or abandoned strategy carries from one workload to the next), and for "
    "each client count, after auto's warm-up rounds, run *r* of off and run *r* of auto go one "
    "right after the other — off first for even *r*, auto first for odd *r* — before run "
    "*r* + 1 of either. A paired ratio therefore compares runs seconds apart. The idle server "
    "does not compete: its llama.cpp threads sleep between requests (measured: an idle "
    "superfluid server used about 0.4% of one core over 10 s, by `/proc/PID/task/*/stat`). "
    "llama-cpp-python's server is started on its own after the pair, and the raw loop runs "
    "in-process before the servers of each workload. Every server answers one untimed request "
    "before its first cell."
)
RAW_BEFORE = "the raw loop runs in-process before the servers of each workload."
# Since the raw loop joined superfluid's 1-client runs (`Settings.raw_interleaved`).
RAW_BESIDE = (
    "the raw loop, in-process, joins the greedy 1-client runs as one more system, on the "
    "prompts the servers are sent there (they sleep meanwhile), so that `off / raw loop` too "
    "compares runs seconds apart."
)

# Since llama-server was measured beside superfluid's pair (`Settings.peers_interleaved`).
PEERS_INTERLEAVED = (
    " **llama-server interleaved too.** At each client count, llama-server's configurations "
    "are started beside the pair (a server each, `-np` = clients) and join the same runs: run "
    "*r* walks every server in turn, off, auto, then each configuration, and run *r* + 1 walks "
    "them backwards, so a drift in the machine's speed over a cell falls on every system alike "
    "and a ratio against llama-server also compares runs seconds apart. Idle llama-server "
    "processes sleep as superfluid's do. They are stopped after that count's cells."
)
LLAMA_SERVER_ALONE = "One server per configuration and client count, on its own, with"
LLAMA_SERVER_BESIDE = (
    "One server per configuration and client count, up beside superfluid's pair (see above), with"
)

METHOD = [
    "## Method",
    "",
    "- **Systems.** `superfluid serve MODEL --speculate auto` (prompt-lookup with every gate on, "
    "the real path) and `--speculate off` (plain decoding, same server); llama-cpp-python's own "
    "server (`python -m llama_cpp.server`, its defaults but for threads, context and, for a "
    "GGUF without a chat template such as the demo model's, `--chat_format gemma`); and the raw "
    "loop: llama.cpp's C API in-process, one context, `llama_decode` one token per step, numpy "
    "argmax, no server (`bench/raw_loop.py`), fed the chat turn superfluid renders from the "
    "model's template. The raw loop runs greedy and one client only. llama-cpp-python's "
    "server decodes one request at a time, so its N-client cells take N times as long; it is "
    "measured at the client counts and temperatures in the settings above (by default greedy, 1 "
    "and 4 clients: the cells its target needs).",
    "- **llama.cpp's llama-server** (the peer), built by `bench/build_llama_server.sh` from the "
    "llama.cpp vendored in the pinned llama-cpp-python's sdist, with the wheel's CPU flags. One "
    "server per configuration and client count, on its own, with `-np` = clients and "
    "`--ctx-size` = clients × the per-lane context; the GGUF's own chat template (`--jinja`), "
    "or for a GGUF without one (the demo model) `--no-jinja --chat-template gemma`, renders the "
    "prompt superfluid renders (the raw JSON keeps every reply's `prompt_tokens` to check). "
    "Configurations: plain, `--spec-default` (ngram-mod) and ngram-simple / ngram-map-k with "
    "small keys and drafts (commands above). **llama-server best** is, per cell and per rate, "
    "the fastest configuration, plain included; every configuration's figures are listed too. "
    "It is streamed with `timings_per_token`, whose `predicted_n` counts tokens per chunk as "
    "superfluid's per-chunk usage does, and `draft_n` / `draft_n_accepted` give its "
    "acceptance. Speculating configurations get the same warm-up rounds (`--warmup`) before "
    "each cell. Both servers keep their prompt caches on, as a user gets them, wherever "
    "prompts are fresh (superfluid's prefix reuse, llama-server's `cache_prompt`): fresh "
    "prompts share only the chat template's first tokens, so neither is handed an answer. On "
    "the named repeated cells, whose prompts repeat as only a bench's do, both are off "
    "(`--no-prefix-reuse`, `cache_prompt: false`).",
    "- **Multi-turn** sessions: 4 greedy turns per client, each sending the whole conversation "
    "so far plus one new user line; sessions carry a unique tag, so a prompt cache reuses a "
    "session's own turns and never another session. *Session time* is the sum of a session's "
    "four request latencies; *later-turn TTFT* the TTFT of turns 2–4; medians over sessions. "
    "Targets: session time ≤ 0.9× and later-turn TTFT ≤ 1.2× the llama-server configuration "
    "that did best on that figure.",
    "- **Workloads** (`bench/http_workloads.py`). Every measured workload sends **fresh "
    "prompts**: each (round, client) of each cell, warm-ups too, is handed a prompt no server "
    "was sent before, and every server measured in that round gets the same ones, so neither a "
    "prompt cache nor a cross-request n-gram pool (llama-server's `--spec-default`) is handed "
    "an answer. copy-heavy: chat completions that give a function cut from the Python "
    "standard library CPython ships (12–40 lines, modules taken in turn) and ask for a rename "
    "(the function, or one of its parameters) while printing the whole function. long-prompt: "
    "a task followed by a document of 380–700 words (660–1,730 tokens with the chat turn) that "
    "the reply must quote from, cut from the Python reference manual (`pydoc_data.topics`). "
    "open-ended: text completions of story openings assembled from a person, a place and a "
    "turn of events (2,016 distinct), through `/v1/completions`, because the demo model is a "
    "small base model that answers every chat prompt by echoing it, which would make any chat "
    "workload copy-heavy. multi-turn: sessions on a copy-heavy prompt, then a second edit, a "
    "question and a final copy. **copy-heavy repeated** is the named exception: three fixed "
    "prompts (a module to repeat, a file to return with one rename, paragraphs to quote), client "
    "*i* of run *r* sending variant (*i* + *r*) mod 3, so from the second round on a server "
    "has seen every prompt before; it shows what a cross-request pool gains on repeats. "
    "Greedy is `temperature=0`; sampled is "
    "`temperature=0.7` with `seed = 1000·run + client`. llama-cpp-python is also sent "
    "`top_p=1, top_k=0, min_p=0, repeat_penalty=1` so that it samples the same distribution "
    "(its defaults would add a repeat penalty and top-k/min-p filtering).",
    "- **Warm-up.** The throughput gate measures speculation against plain decoding on live "
    "traffic (a warm-up tick, 24 speculative and 24 plain probe ticks per lane count) and the "
    "adaptive depth learns per-position acceptance, so before measuring a speculating cell the "
    "harness sends warm-up rounds of the same workload at the same client count, and keeps "
    "sending them (up to `--warmup-max` rounds) until `/metrics` shows the gate at that lane "
    "count decided (`speculate` or `plain`): a long-running server probes each lane count once, "
    "so a cell measures its steady state, not a fresh server's probes. Warm-up rounds are not "
    "counted; re-checks the gate makes during the measured runs are.",
    "- **Streaming, TTFT and the two rates.** superfluid is sent `stream=true` with "
    "`stream_options: {include_usage, continuous_usage_stats}`, so every content chunk carries "
    "the reply's committed-token count so far (an accepted draft leaves as one chunk of several "
    "tokens) and the closing chunk carries `superfluid.spec`. TTFT is the time from sending the "
    "request to the first chunk with text. A reply's end-to-end rate is `completion_tokens` over "
    "its whole request; its decode-only rate is the tokens after its first content chunk over "
    "the time from that chunk to its closing chunk. A round's end-to-end aggregate is all its "
    "tokens over the time from its first request to its last reply. Its decode-only aggregate "
    "starts when the last of the *N* clients has had its first content chunk — from then on no "
    "prompt is waiting to be prefilled — and ends at the last client's closing chunk; it counts "
    "the tokens committed in that window (each client's total less what its chunks had counted "
    "by the window's start). Taking the window from the earliest first chunk instead would "
    "count other clients' prefills as decoding; summing per-client rates would count time in "
    "which clients overlap twice. With one client both reduce to the reply's own rate. "
    "llama-cpp-python's server sends no usage in a stream, so it is sent non-streaming requests "
    "and has no TTFT or decode-only figure (–). The raw loop's decode-only rate is its tokens "
    "after the first over the time after the prefill produced the first.",
    "- **Acceptance** is accepted / proposed draft tokens, summed over the replies' "
    "`superfluid.spec`. **Accepted per round** is a range from `/metrics` counter differences "
    "over the measured runs: every lane-step commits exactly one token that is not an accepted "
    "draft token (the correction or bonus token, or a plain step's token), so "
    "`accepted / (generated − accepted)` is accepted tokens per lane-step — a lower bound on "
    "the mean per drafted round, since steps that drafted nothing count as rounds; "
    "`accepted / accepted_position{1}` divides by the rounds whose first draft token was "
    "accepted — an upper bound, since rounds that accepted nothing are not counted.",
    "- **Gates** are read from `/metrics` after each speculating cell: "
    "`superfluid_spec_gate_phase` (speculate, plain, probe-spec, probe-plain, warm-up) and "
    "`superfluid_spec_depth` per lane count; a run at *N* clients passes through lane counts "
    "*N*…1 as replies finish.",
    "- **Noise.** On 2 cores, llama.cpp's two compute threads spin at a barrier between "
    "operations; any other busy process (a test suite, another server) stalls every step, and "
    "a second busy llama.cpp process on the machine slows decoding by an order of magnitude. "
    "The harness waits for a quiet machine before measuring; the load is printed above. "
    "Decode-only rates leave out prefill, whose share of a short request varies most with the "
    "prompt; interleaving leaves out drift between the two servers' runs.",
    "- Raw per-request replies, per-round figures and counters are written to "
    "`http_bench.raw.json` beside this report (ignored by git).",
    "",
]


def plot(results: Results, path: Path) -> None:
    """Grouped bars of aggregate tokens per second: a row per rate (end to end, decode-only), a
    panel per workload, a group per temperature × clients, a bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(results.settings.workloads)
    fig, axes = plt.subplots(
        len(METRICS),
        len(workloads),
        figsize=(7 * len(workloads), 4.2 * len(METRICS)),
        squeeze=False,
    )
    colours = {
        AUTO: "#1f77b4",
        PLAIN: "#9e9e9e",
        LLAMACPP: "#ff7f0e",
        RAW: "#2ca02c",
        LLAMA_BEST: "#d62728",
    }
    shown = (*SYSTEMS, LLAMA_BEST)
    width = 0.16
    labelled: dict[str, object] = {}
    for row, metric in zip(axes, METRICS, strict=True):
        for ax, workload in zip(row, workloads, strict=True):
            keys = _keys(results, workload)
            # Sessions have no decode-only window: their second panel is the session time.
            sessions = metric == DECODE_ONLY and _multi_turn(results, workload)
            for index, system in enumerate(shown):
                xs, ys = [], []
                for position, key in enumerate(keys):
                    if sessions:
                        cell = (
                            _lowest(results, key, SESSION_TARGETS[0])
                            if system == LLAMA_BEST
                            else results.cell(system, *key)
                        )
                        value = cell.session_seconds if cell is not None else None
                    else:
                        cell = cell_for(results, system, key, metric)
                        value = (
                            _aggregate(cell, metric) if cell is not None and cell.rounds else None
                        )
                    if value is not None:
                        xs.append(position + (index - (len(shown) - 1) / 2) * width)
                        ys.append(value)
                if xs:
                    labelled[system] = ax.bar(xs, ys, width, label=system, color=colours[system])
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([f"{temperature_label(t)}\n{c} cl." for _, t, c in keys])
            if sessions:
                ax.set_title(f"{workload}, session time (lower is better)")
                ax.set_ylabel("median seconds per 4-turn session")
            else:
                ax.set_title(f"{workload}, {metric}")
                ax.set_ylabel(f"aggregate tokens/s, {metric}")
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(
        [labelled[name] for name in shown if name in labelled],
        [name for name in shown if name in labelled],
        loc="upper left",
        fontsize=8,
    )
    fig.suptitle(f"{results.settings.model}, {results.machine.nproc} cores, {results.machine.date}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
