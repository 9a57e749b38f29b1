"""The router-affinity bench end to end: `--quick` sessions through HAProxy and smg (whichever
is installed) write the report and the raw JSON, with no errors, every session's turns on one
replica and its later turns reusing the earlier turns' KV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import affinity_bench
from bench.replicas import router_missing

pytestmark = pytest.mark.slow


def test_quick_affinity_runs_keep_sessions_on_one_replica_and_reuse_their_kv(
    tmp_path: Path, instruct_gguf: Path
) -> None:
    routers = [r for r in ("haproxy", "smg") if router_missing(r) is None]
    if not routers:
        pytest.skip("neither haproxy nor smg is installed (scripts/install.sh installs them)")
    out = tmp_path / "report"
    affinity_bench.main(["--quick", "--model", str(instruct_gguf), "--out", str(out)])
    page = (out / "README.md").read_text()
    raw = json.loads((out / affinity_bench.RAW).read_text())
    assert {"command", "date", "minutes", "machine", "settings", "runs", "summary"} <= set(raw)
    expected = {f"{router}-affinity" for router in routers}
    assert set(raw["summary"]) == expected
    assert len(raw["runs"]) == len(expected)
    for name, figures in raw["summary"].items():
        assert f"**{name}**" in page
        assert figures["errors"] == 0
        assert figures["requests"] == 4  # 2 sessions of 2 turns
        assert figures["counters_agree"], figures["per_replica"]
        assert figures["one_replica"] == 1.0
        assert figures["reused"] > 0
        # A second turn's prompt is the first's plus the reply and a question: most is reused.
        assert figures["reused_share"] > 0.5
        for key in ("session_s", "ttft_first", "ttft_later", "ttft_later_p90"):
            assert figures[key] is not None and figures[key] > 0
        assert figures["ttft_later"] < figures["ttft_first"]
    assert "`/proc/loadavg` when measuring began" in page
    assert raw["command"].startswith(".venv/bin/python -m bench.affinity_bench --quick")
