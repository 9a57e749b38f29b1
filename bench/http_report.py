"""The HTTP benchmark's report: a markdown page with one table per workload, the targets, and
a grouped-bar plot.

Ratios are of aggregate tokens per second (medians over runs). A target is printed next to the
ratio it applies to, with ✓ or ✗; a miss is reported, never an error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.http_results import AUTO, LLAMACPP, PLAIN, RAW, SYSTEMS, Cell, Results

COLUMNS = (
    "T",
    "clients",
    f"{AUTO} tok/s",
    f"{PLAIN} tok/s",
    f"{LLAMACPP} tok/s",
    f"{RAW} tok/s",
    "auto / off",
    "auto / llama-cpp-python",
    "off / raw loop",
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


TARGETS = (
    Target(
        "copy-heavy, 1 lane, greedy: auto ≥ 2.2× off",
        AUTO,
        PLAIN,
        2.2,
        lambda w, t, c: w == "copy-heavy" and t == 0.0 and c == 1,
    ),
    Target(
        "copy-heavy, 1 lane, T=0.7: auto ≥ 1.5× off",
        AUTO,
        PLAIN,
        1.5,
        lambda w, t, c: w == "copy-heavy" and t > 0.0 and c == 1,
    ),
    Target(
        "open-ended, any lane count: auto ≥ 0.98× off",
        AUTO,
        PLAIN,
        0.98,
        lambda w, t, c: w == "open-ended",
    ),
    Target(
        "4 clients, aggregate: auto ≥ 2× llama-cpp-python",
        AUTO,
        LLAMACPP,
        2.0,
        lambda w, t, c: c == 4,
    ),
    Target(
        "plain through the server ≥ 0.95× the raw loop (1 client, greedy)",
        PLAIN,
        RAW,
        0.95,
        lambda w, t, c: t == 0.0 and c == 1,
    ),
)

PAIRS = ((AUTO, PLAIN), (AUTO, LLAMACPP), (PLAIN, RAW))


def temperature_label(temperature: float) -> str:
    return "greedy" if temperature == 0.0 else f"{temperature:g}"


def _rate(cell: Cell | None) -> str:
    if cell is None or not cell.rounds:
        return "–"
    if cell.clients == 1:
        return f"{cell.aggregate:.1f}"
    return f"{cell.aggregate:.1f} ({cell.per_client:.1f})"


def paired_ratio(top: Cell | None, bottom: Cell | None) -> float | None:
    """Median over runs of run r's aggregate over the other system's run r: run r of every
    system sends the same prompts, so each pair compares like with like."""
    if top is None or bottom is None:
        return None
    pairs = [
        a.aggregate / b.aggregate
        for a, b in zip(top.rounds, bottom.rounds, strict=False)
        if b.aggregate > 0
    ]
    return statistics.median(pairs) if pairs else None


def _ratio(results: Results, numerator: str, denominator: str, key: tuple[str, float, int]) -> str:
    ratio = paired_ratio(results.cell(numerator, *key), results.cell(denominator, *key))
    if ratio is None:
        return "–"
    text = f"{ratio:.2f}×"
    for target in TARGETS:
        if (target.numerator, target.denominator) == (numerator, denominator) and target.applies(
            *key
        ):
            mark = "✓" if ratio >= target.minimum else "✗"
            text += f" (≥ {target.minimum:g} {mark})"
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


def table(results: Results, workload: str) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    keys = sorted(
        {c.key for c in results.cells if c.workload == workload and c.system != RAW},
        key=lambda k: (k[1], k[2]),
    )
    for key in keys:
        _, temperature, clients = key
        auto = results.cell(AUTO, *key)
        acceptance, per_round = _spec_columns(auto)
        row = [
            temperature_label(temperature),
            str(clients),
            *(_rate(results.cell(system, *key)) for system in SYSTEMS),
            *(_ratio(results, a, b, key) for a, b in PAIRS),
            acceptance,
            per_round,
            _gates(auto),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


@dataclass(frozen=True, slots=True)
class Verdict:
    target: Target
    cell: str
    ratio: float


def verdicts(results: Results) -> list[Verdict]:
    found = []
    for target in TARGETS:
        for cell in results.cells:
            if cell.system != target.numerator or not target.applies(*cell.key):
                continue
            ratio = paired_ratio(cell, results.cell(target.denominator, *cell.key))
            if ratio is None:
                continue
            label = f"{cell.workload}, {temperature_label(cell.temperature)}, {cell.clients} client{'s' if cell.clients > 1 else ''}"
            found.append(Verdict(target, label, ratio))
    return found


def targets_table(results: Results) -> list[str]:
    lines = ["| target | cell | measured | met |", "|---|---|---|---|"]
    for verdict in verdicts(results):
        met = "✓" if verdict.ratio >= verdict.target.minimum else "✗ miss"
        lines.append(f"| {verdict.target.label} | {verdict.cell} | {verdict.ratio:.2f}× | {met} |")
    return lines


def markdown(
    results: Results, *, plot: str | None = "throughput.png", extra: Sequence[str] = ()
) -> str:
    m, s = results.machine, results.settings
    out = [
        "# HTTP benchmark: superfluid against plain decoding, llama-cpp-python and a raw loop",
        "",
        "Generated by `bench/http_bench.py`; do not edit by hand (run it again).",
        "",
        "## Machine and run",
        "",
        f"- CPU: {m.cpu}, `nproc` = {m.nproc}",
        f"- date: {m.date}; the whole run took {results.minutes:.1f} minutes",
        f"- `/proc/loadavg` when measuring began: `{m.load_before}`; at the end: `{m.load_after}`",
        f"- Python {m.python}, llama-cpp-python {m.llama_cpp_python}",
        f"- model: `{s.model}`; {s.max_tokens} tokens per request; {s.runs} measured run(s) per cell (median); "
        f"{s.warmup_rounds} warm-up round(s) before each speculating cell; superfluid with "
        f"`--max-lanes {s.max_lanes} --ctx-size {s.ctx_size}`; llama-cpp-python at "
        f"{', '.join(map(str, s.llamacpp_clients))} client(s), "
        f"{', '.join(temperature_label(t) for t in s.llamacpp_temperatures)}; sampled cells at "
        f"{', '.join(map(str, s.sampled_clients))} client(s)"
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
        "Tokens per second are `usage.completion_tokens` over wall time, prefill included. With several "
        "clients the figure is the aggregate (all clients' tokens over the round's wall time), and in "
        "brackets the mean client's own rate (medians over runs). A ratio is the median over runs of "
        "the paired ratio of aggregates: run *r* of every system sends the same prompts. Targets "
        "are printed next to the ratio they apply to.",
        "",
    ]
    for workload in s.workloads:
        out += [f"### {workload}", "", *table(results, workload), ""]
    out += ["## Targets", "", *targets_table(results), ""]
    if plot:
        out += [f"![aggregate tokens per second]({plot})", ""]
    out += [*METHOD, *extra]
    if results.notes:
        out += ["## Notes from this run", "", *(f"- {note}" for note in results.notes), ""]
    return "\n".join(out)


METHOD = [
    "## Method",
    "",
    "- **Systems.** `superfluid serve MODEL --speculate auto` (prompt-lookup with every gate on, "
    "the real path) and `--speculate off` (plain decoding, same server); llama-cpp-python's own "
    "server (`python -m llama_cpp.server`, its defaults but for threads, context and "
    "`--chat_format gemma`: the GGUF carries no chat template); and the raw loop: llama.cpp's C "
    "API in-process, one context, `llama_decode` one token per step, numpy argmax, no server "
    "(`bench/raw_loop.py`). The raw loop runs greedy and one client only. llama-cpp-python's "
    "server decodes one request at a time, so its N-client cells take N times as long; it is "
    "measured at the client counts and temperatures in the settings above (by default greedy, 1 "
    "and 4 clients: the cells its target needs).",
    "- **One server at a time.** Each server is started on a free loopback port, waited for "
    "(`/v1/models`), and stopped after its cells; a fresh server serves each workload × "
    "temperature group, so no gate state or abandoned strategy carries from one workload to the "
    "next. Every server answers one untimed request before its first cell.",
    "- **Workloads** (`bench/http_workloads.py`). copy-heavy: chat completions whose reply "
    "copies context (a code block to repeat, a file to return with one rename, paragraphs to "
    "quote). open-ended: text completions of story, letter and "
    "essay openings with nothing repeated — through `/v1/completions`, because the demo model "
    "is a small base model that answers every chat prompt by echoing it, which would make any "
    "chat workload copy-heavy. Client *i* of run *r* sends variant (*i* + *r*) mod *n*, so "
    "concurrent clients send different prompts. Greedy is `temperature=0`; sampled is "
    "`temperature=0.7` with `seed = 1000·run + client`. llama-cpp-python is also sent "
    "`top_p=1, top_k=0, min_p=0, repeat_penalty=1` so that it samples the same distribution "
    "(its defaults would add a repeat penalty and top-k/min-p filtering).",
    "- **Warm-up.** The throughput gate measures speculation against plain decoding on live "
    "traffic (a warm-up tick, 8 speculative and 8 plain probe ticks per lane count) and the "
    "adaptive depth learns per-position acceptance, so before measuring a speculating cell the "
    "harness sends warm-up rounds of the same workload at the same client count; they are not "
    "counted.",
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
    "a second llama.cpp process on the machine slows decoding by an order of magnitude. The "
    "harness waits for a quiet machine before measuring; the load is printed above.",
    "- Raw per-request replies, per-round figures and counters are written to "
    "`docs/benchmarks/http_bench.raw.json` (ignored by git).",
    "",
]


def plot(results: Results, path: Path) -> None:
    """Grouped bars of aggregate tokens per second: one panel per workload, a group per
    temperature × clients, a bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(results.settings.workloads)
    fig, axes = plt.subplots(1, len(workloads), figsize=(7 * len(workloads), 4.6), squeeze=False)
    colours = {AUTO: "#1f77b4", PLAIN: "#9e9e9e", LLAMACPP: "#ff7f0e", RAW: "#2ca02c"}
    width = 0.2
    for ax, workload in zip(axes[0], workloads, strict=True):
        keys = sorted(
            {c.key for c in results.cells if c.workload == workload and c.system != RAW},
            key=lambda k: (k[1], k[2]),
        )
        for index, system in enumerate(SYSTEMS):
            xs, ys = [], []
            for position, key in enumerate(keys):
                cell = results.cell(system, *key)
                if cell is not None and cell.rounds:
                    xs.append(position + (index - 1.5) * width)
                    ys.append(cell.aggregate)
            ax.bar(xs, ys, width, label=system, color=colours[system])
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([f"{temperature_label(t)}\n{c} cl." for _, t, c in keys])
        ax.set_title(workload)
        ax.set_ylabel("aggregate tokens/s")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{results.settings.model}, {results.machine.nproc} cores, {results.machine.date}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
