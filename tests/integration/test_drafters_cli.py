"""`superfluid drafters` on real files, with the hub catalog served over loopback."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from superfluid.adapters.bundle_files import write_bundle
from superfluid.entrypoints.cli import app

CONFIG = {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 4}
runner = CliRunner()


def bundle(path: Path, arch: str, **config) -> Path:
    write_bundle(
        path, {"arch": arch, "config": {**CONFIG, **config}, "created": "2026-03-01T00:00:00Z"}
    )
    return path


class Catalog:
    """A hub catalog served on 127.0.0.1, counting its fetches."""

    def __init__(self, rows):
        self.body = json.dumps({"schema": 1, "models": rows}).encode()
        self.hits = 0
        catalog = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                catalog.hits += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(catalog.body)))
                self.end_headers()
                self.wfile.write(catalog.body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/catalog.json"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def layout(tmp_path):
    models = tmp_path / "models"
    target = bundle(models / "Qwen3-4B-Q4.base", "qwen3")
    drafters = models / "drafters"
    files = {
        "named": bundle(drafters / "Qwen3-4B-EAGLE3.base", "eagle3"),
        "dspark": bundle(drafters / "generic-dspark.base", "dspark"),
        "wide": bundle(drafters / "wide-dflash.base", "dflash", hidden_size=128),
        "plain": bundle(drafters / "Qwen3-0.6B.base", "qwen3"),
        "hub": bundle(
            tmp_path / "cache" / "org" / "Qwen3-4B-DFlash" / "q4" / "model.base", "dflash"
        ),
        "hidden": bundle(tmp_path / "cache" / ".trash" / "old-dflash.base", "dflash"),
    }
    env = {
        "HOME": str(tmp_path),
        "SUPERFLUID_HOME": str(tmp_path / "sf"),
        "BASERT_MODELS_DIR": str(tmp_path / "cache"),
    }
    return target, files, env


def drafters(target, env, *args):
    result = runner.invoke(app, ["drafters", str(target), *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_drafters_explains_the_pick_the_ranking_and_every_skip(layout):
    target, files, env = layout
    code, out, _ = drafters(target, env, "--offline", "--json")
    assert code == 0
    report = json.loads(out)
    order = [c["path"] for c in report["candidates"]]
    # Named for the target first (the hub layout names its repo), then DSpark.
    assert order == [str(files["hub"]), str(files["named"]), str(files["dspark"])]
    assert report["resolved"] == f"dflash:{files['hub']}"
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    assert skipped[str(files["wide"])].startswith("does not fit: hidden size 128")
    assert skipped[str(files["plain"])] == "a plain draft model; auto never picks one"
    assert str(files["hidden"]) not in skipped and str(files["hidden"]) not in order


def test_the_human_table_names_rank_keys_and_reasons(layout):
    target, files, env = layout
    code, out, _ = drafters(target, env, "--offline")
    assert code == 0
    assert "candidates, in the order auto tries them:" in out
    assert "paired  rank  named  kind" in out
    assert f"{files['wide']}: does not fit: hidden size 128, not the target's 64" in out


def test_an_explicit_directive_is_checked_like_serve_checks_it(layout):
    target, files, env = layout
    code, out, _ = drafters(target, env, "--offline", "--speculate", f"eagle3:{files['named']}")
    assert code == 0 and f"registers  eagle3:{files['named']}" in out
    code, _, err = drafters(target, env, "--offline", "--speculate", f"dflash:{files['wide']}")
    assert code == 2 and "does not fit: hidden size 128" in err
    code, _, err = drafters(target, env, "--offline", "--speculate", "mtp-head")
    assert code == 2 and err.startswith(
        f"superfluid: --speculate mtp-head: {target} carries no speculator head"
    )


def test_a_catalog_listed_drafter_with_other_bytes_is_skipped_and_the_catalog_fetched_once(layout):
    target, files, env = layout
    catalog = Catalog(
        [
            {
                "id": "org/Qwen3-4B-DFlash",
                "file": "model.base",
                "quant": "q4",
                "size": 1,
                "sha256": "0" * 64,
            }
        ]
    )
    try:
        env = {**env, "SUPERFLUID_CATALOG_URL": catalog.url}
        code, out, _ = drafters(target, env, "--json")
        assert code == 0 and catalog.hits == 1
        report = json.loads(out)
        reasons = {s["path"]: s["reason"] for s in report["skipped"]}
        assert reasons[str(files["hub"])].startswith(
            f"{files['hub']} is not the catalog's org/Qwen3-4B-DFlash q4 ("
        )
        assert report["resolved"] == f"eagle3:{files['named']}"
        drafters(target, env, "--json")
        assert catalog.hits == 1, "the catalog was fetched again within 24 hours"
        drafters(target, {**env, "SUPERFLUID_HOME": str(target.parent / "fresh")}, "--offline")
        assert catalog.hits == 1, "--offline fetched the catalog"
    finally:
        catalog.close()


@pytest.mark.slow
def test_a_large_catalog_listed_drafter_is_hashed_once_across_runs(tmp_path):
    models = tmp_path / "models"
    target = bundle(models / "Qwen3-4B-Q4.base", "qwen3")
    big = bundle(models / "drafters" / "Big-DFlash.base", "dflash")
    with big.open("r+b") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB on paper, a few KiB on disk
    digest = hashlib.sha256()
    with big.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    catalog = Catalog(
        [
            {
                "id": "org/Big",
                "file": "Big-DFlash.base",
                "quant": "q4",
                "size": 1 << 30,
                "sha256": digest.hexdigest(),
            }
        ]
    )
    env = {
        "HOME": str(tmp_path),
        "SUPERFLUID_HOME": str(tmp_path / "sf"),
        "SUPERFLUID_CATALOG_URL": catalog.url,
    }
    try:
        code, out, err = drafters(target, env, "--json")
        assert code == 0 and json.loads(out)["resolved"] == f"dflash:{big}"
        assert f"checking {big} against the hub catalog's sha256 (once per file)" in err
        records = list((tmp_path / "sf" / "cache" / "sha256").iterdir())
        stamp = [r.stat().st_mtime_ns for r in records]
        code, out, err = drafters(target, env, "--json")
        assert code == 0 and json.loads(out)["resolved"] == f"dflash:{big}"
        assert "checking" not in err, "the drafter was hashed again"
        assert [r.stat().st_mtime_ns for r in records] == stamp
    finally:
        catalog.close()
