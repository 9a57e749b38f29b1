"""The HTTP benchmark's report, built from a synthetic result set (no servers are started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.http_load import GateState, Reply, Round, SpecCounts
from bench.http_report import COLUMNS, TARGETS, markdown, verdicts
from bench.http_results import AUTO, LLAMACPP, PLAIN, RAW, Cell, Machine, Results, Settings

pytestmark = pytest.mark.slow

RATES = {AUTO: 80.0, PLAIN: 30.0, LLAMACPP: 28.0, RAW: 31.0}


def _cell(system: str, workload: str, temperature: float, clients: int) -> Cell:
    rate = RATES[system] * (clients if system != LLAMACPP else 1)
    replies = tuple(
        Reply(
            "variant",
            128,
            128 * clients / rate,
            "length",
            *((100, 90) if system == AUTO else (0, 0)),
        )
        for _ in range(clients)
    )
    rounds = (Round(replies, 128 * clients / rate),) * 3
    if system != AUTO:
        return Cell(system, workload, temperature, clients, rounds)
    spec = SpecCounts(300, 270, 384, (30, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 3, 2, 2))
    gates = tuple(GateState(lanes, 7, True, "speculate") for lanes in range(1, clients + 1))
    return Cell(system, workload, temperature, clients, rounds, spec, gates, False)


def synthetic_results() -> Results:
    cells = []
    for workload in ("copy-heavy", "open-ended"):
        cells.append(_cell(RAW, workload, 0.0, 1))
        for temperature in (0.0, 0.7):
            for clients in (1, 2, 4, 8):
                for system in (AUTO, PLAIN):
                    cells.append(_cell(system, workload, temperature, clients))
                if clients in (1, 4) and temperature == 0.0:
                    cells.append(_cell(LLAMACPP, workload, temperature, clients))
    return Results(
        machine=Machine(
            2, "Test CPU", "2026-01-01 00:00 UTC", "0.1 0.1 0.1 1/1 1", "0.2", "3.11", "0.3.36"
        ),
        settings=Settings(
            model="demo.gguf",
            max_tokens=128,
            runs=3,
            warmup_rounds=2,
            clients=(1, 2, 4, 8),
            sampled_clients=(1, 2, 4, 8),
            llamacpp_clients=(1, 4),
            llamacpp_temperatures=(0.0,),
            temperatures=(0.0, 0.7),
            workloads=("copy-heavy", "open-ended"),
            max_lanes=8,
            ctx_size=2048,
            threads=2,
            quick=False,
        ),
        command=".venv/bin/python -m bench.http_bench",
        servers={
            AUTO: "superfluid serve --speculate auto",
            PLAIN: "superfluid serve --speculate off",
        },
        cells=tuple(cells),
        minutes=18.0,
    )


def test_the_report_has_every_column_in_a_table_per_workload():
    page = markdown(synthetic_results())
    header = "| " + " | ".join(COLUMNS) + " |"
    assert page.count(header) == 2
    assert "### copy-heavy" in page and "### open-ended" in page
    for row in [
        line
        for line in page.splitlines()
        if line.startswith("| greedy") or line.startswith("| 0.7")
    ]:
        assert row.count("|") == len(COLUMNS) + 1, row


def test_the_report_names_the_machine_the_commands_and_the_plot():
    page = markdown(synthetic_results())
    assert "Test CPU, `nproc` = 2" in page
    assert "`0.1 0.1 0.1 1/1 1`" in page
    assert ".venv/bin/python -m bench.http_bench" in page
    assert "superfluid serve --speculate auto" in page
    assert "![aggregate tokens per second](throughput.png)" in page


def test_every_target_is_judged_next_to_its_ratio():
    page = markdown(synthetic_results())
    found = {v.target.label for v in verdicts(synthetic_results())}
    assert found == {t.label for t in TARGETS}
    assert "2.67× (≥ 2.2 ✓)" in page  # copy-heavy greedy 1 client: 80 / 30
    assert "(≥ 0.95 ✓)" in page  # off / raw loop: 30 / 31 = 0.97
    assert "## Targets" in page


def test_a_saved_run_reports_the_same_after_loading(tmp_path: Path):
    results = synthetic_results()
    path = tmp_path / "run.raw.json"
    results.save(path)
    assert markdown(Results.load(path)) == markdown(results)
