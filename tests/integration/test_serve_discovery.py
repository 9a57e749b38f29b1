"""`serve` on a .base target: the startup lines of §3, and `drafters` agreeing on the pick."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from superfluid.adapters.bundle_files import read_header, write_bundle
from superfluid.adapters.fixtures.basert import make_fixtures
from superfluid.entrypoints.cli import app
from tests.integration.serving import startup as serving_startup

SUPERFLUID = Path(sys.executable).parent / "superfluid"


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return make_fixtures(tmp_path_factory.mktemp("bundles"))


def layout(tmp_path, fixtures):
    """A target in models/, its drafters beside it; returns (target, drafters dir, env)."""
    models = tmp_path / "models"
    models.mkdir()
    target = models / fixtures["target"].name
    target.write_bytes(fixtures["target"].read_bytes())
    env = {"HOME": str(tmp_path), "SUPERFLUID_HOME": str(tmp_path / "sf"), "PATH": "/usr/bin:/bin"}
    return target, models / "drafters", env


def drafter(path: Path, target: Path, arch: str, **config) -> Path:
    header = read_header(target)
    shape = {
        "hidden_size": header.hidden_size,
        "vocab_size": header.vocab_size,
        "num_hidden_layers": 1,
    }
    write_bundle(
        path, {"arch": arch, "config": {**shape, **config}, "created": "2026-05-01T00:00:00Z"}
    )
    return path


def startup(target: Path, env: dict, *args: str) -> tuple[int | None, list[str]]:
    """Start `serve` on `target`: (exit status, or None once it listened; its stderr lines)."""
    return serving_startup([str(target), "--offline", *args], env)


def speculation_lines(lines):
    return [line for line in lines if line.startswith("superfluid: speculation")]


def test_auto_tries_each_fitting_drafter_the_engine_refuses_then_decodes_plainly(
    tmp_path, fixtures
):
    target, drafters, env = layout(tmp_path, fixtures)
    first = drafter(drafters / "Tiny-Qwen3-64-DFlash.base", target, "dflash")
    second = drafter(drafters / "other-eagle3.base", target, "eagle3")
    drafter(drafters / "wide-dflash.base", target, "dflash", hidden_size=8)
    code, lines = startup(target, env, "--speculate", "auto")
    assert code is None, lines

    # Headers without weights: they fit on paper, and the engine refuses each when it loads it.
    def refused(path, count=""):
        return f"{path}: config.target_layer_ids must list {count}target layer ids (the taps it reads), got []"

    assert speculation_lines(lines) == [
        f"superfluid: speculation: auto picked dflash:{first}, but the engine refused it ({refused(first)}) — trying eagle3:{second}",
        f"superfluid: speculation: auto picked eagle3:{second}, but the engine refused it ({refused(second, '3 ')}) — decoding plainly",
    ]
    report = json.loads(
        CliRunner().invoke(app, ["drafters", str(target), "--offline", "--json"], env=env).stdout
    )
    assert [c["directive"] for c in report["candidates"]] == [f"dflash:{first}", f"eagle3:{second}"]


def test_auto_that_finds_nothing_names_where_it_looked(tmp_path, fixtures):
    target, _, env = layout(tmp_path, fixtures)
    code, lines = startup(target, env, "--speculate", "auto")
    assert code is None, lines
    (line,) = speculation_lines(lines)
    models = target.parent
    assert line == (
        f"superfluid: speculation: auto found no head in {target.name} and no fitting drafter in"
        f" {models}, {models / 'drafters'}, {models.parent / 'drafters'}, {tmp_path / '.cache/baseRT/models'}"
        " — decoding plainly"
    )


def test_auto_skips_a_catalog_listed_drafter_whose_bytes_differ_and_says_so(tmp_path, fixtures):
    target, drafters, env = layout(tmp_path, fixtures)
    listed = drafter(drafters / "Tiny-Qwen3-64-DSpark.base", target, "dspark")
    cache = tmp_path / "sf" / "cache"
    cache.mkdir(parents=True)
    row = {
        "id": "org/spark",
        "file": listed.name,
        "quant": "f32",
        "size": listed.stat().st_size,
        "sha256": "0" * 64,
    }
    (cache / "hub-catalog.json").write_text(json.dumps({"models": [row]}))
    code, lines = startup(target, env, "--speculate", "auto")
    assert code is None, lines
    got = hashlib.sha256(listed.read_bytes()).hexdigest()
    assert speculation_lines(lines)[0] == (
        f"superfluid: speculation: skipping a drafter: {listed} is not the catalog's org/spark f32"
        f" (sha256 {got}, not {'0' * 64}); pull it again, or rename it if it is a conversion of your own"
    )
    # Named explicitly, the same file is a startup error.
    code, lines = startup(target, env, "--speculate", f"dspark:{listed}")
    assert code == 2
    assert lines[-1].startswith(f"superfluid: {listed} is not the catalog's org/spark f32 (sha256 ")


def test_explicit_strategies_register_or_stop_startup(tmp_path, fixtures):
    target, drafters, env = layout(tmp_path, fixtures)
    draft = fixtures["draft"]
    code, lines = startup(target, env, "--speculate", f"draft-model:{draft}")
    assert code is None and speculation_lines(lines) == [
        f"superfluid: speculation: draft-model:{draft}"
    ]
    code, lines = startup(target, env, "--speculate", "prompt-lookup")
    assert code is None and speculation_lines(lines) == ["superfluid: speculation: prompt-lookup"]
    code, lines = startup(target, env, "--speculate", "mtp-head")
    assert code == 2 and "carries no speculator head" in lines[-1]
    dflash = drafter(drafters / "d.base", target, "dflash")
    code, lines = startup(target, env, "--speculate", f"dflash:{dflash}")
    assert code == 2 and lines[-1] == (
        f"superfluid: --speculate dflash:{dflash}: {dflash}: config.target_layer_ids must list"
        " target layer ids (the taps it reads), got []"
    )
    assert any(re.search(r"running .* on the reference backend \(numpy\)", line) for line in lines)
