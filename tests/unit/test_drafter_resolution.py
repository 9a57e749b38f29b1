"""`auto` and explicit drafters for a .base target, on real files (docs/contract.md §3, §5)."""

import hashlib
from pathlib import Path

import pytest

from superfluid.adapters.bundle_files import read_header, write_bundle
from superfluid.adapters.catalog_check import check_against_catalog
from superfluid.adapters.digests import DigestCache
from superfluid.application.drafter_resolution import check_explicit, rank_auto
from superfluid.domain.catalog import CatalogRow
from superfluid.domain.directive import parse_directive
from superfluid.domain.errors import DirectiveError

SHAPE = {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 4}


def bundle(
    path: Path, arch="qwen3", *, config=None, created="2026-01-01T00:00:00Z", quant="f32", **extra
):
    header = {
        "arch": arch,
        "created": created,
        "config": {**SHAPE, **(config or {})},
        "tensors": [
            {
                "name": "layers.0.q_proj.weight",
                "dtype": quant,
                "shape": [64, 64],
                "offset": 0,
                "length": 0,
            }
        ],
        **extra,
    }
    write_bundle(path, header)
    return path


@pytest.fixture
def layout(tmp_path):
    target = bundle(tmp_path / "models" / "Qwen3-4B-Q4.base")
    return tmp_path, target


def resolve(target, files, rows=(), home=None):
    digests = DigestCache(home or target.parent / ".home")
    return rank_auto(
        target,
        read_header(target),
        files,
        read_header=read_header,
        check_catalog=lambda p: check_against_catalog(p, rows, digests),
        rows=list(rows),
    )


def _names(resolution):
    """The picks as the log writes them (`mtp-head`, `dflash:/abs/path.base`)."""
    return [str(pick) for pick in resolution.picks()]


def test_kind_order_is_dspark_then_dflash_then_eagle3(layout):
    root, target = layout
    d = root / "models" / "drafters"
    files = [
        bundle(d / "a.base", "eagle3"),
        bundle(d / "b.base", "dflash"),
        bundle(d / "c.base", "dspark"),
    ]
    assert _names(resolve(target, files)) == [
        f"dspark:{d / 'c.base'}",
        f"dflash:{d / 'b.base'}",
        f"eagle3:{d / 'a.base'}",
    ]


def test_a_drafter_named_for_the_target_beats_a_better_kind(layout):
    root, target = layout
    d = root / "models" / "drafters"
    named = bundle(d / "Qwen3-4B-EAGLE3.base", "eagle3")
    other = bundle(d / "generic-dspark.base", "dspark")
    assert _names(resolve(target, [other, named]))[0] == f"eagle3:{named}"


def test_catalog_pairing_beats_everything_and_lower_rank_comes_first(layout):
    root, target = layout
    hub = root / "hub"
    paired_a = bundle(hub / "org" / "drafter-a" / "q4" / "model.base", "eagle3")
    paired_b = bundle(hub / "org" / "drafter-b" / "q4" / "model.base", "eagle3")
    named = bundle(root / "models" / "Qwen3-4B-DSpark.base", "dspark")
    rows = [
        CatalogRow("org/target", "Qwen3-4B-Q4.base", "q4", 1, "0" * 64, None, None),
        CatalogRow("org/drafter-a", "x.base", "q4", None, None, "org/target", 2),
        CatalogRow("org/drafter-b", "y.base", "q4", None, None, "org/target", 1),
    ]
    picks = _names(resolve(target, [named, paired_a, paired_b], rows))
    assert picks == [f"eagle3:{paired_b}", f"eagle3:{paired_a}", f"dspark:{named}"]


def test_same_quantisation_then_newest_then_path_break_ties(layout):
    root, target = layout
    d = root / "models" / "drafters"
    other_quant = bundle(d / "a.base", "dflash", quant="bf16", created="2026-06-01T00:00:00Z")
    old = bundle(d / "b.base", "dflash", created="2025-01-01T00:00:00Z")
    new = bundle(d / "c.base", "dflash", created="2026-05-01T00:00:00Z")
    twin = bundle(d / "d.base", "dflash", created="2026-05-01T00:00:00Z")
    assert _names(resolve(target, [other_quant, old, twin, new])) == [
        f"dflash:{new}",
        f"dflash:{twin}",
        f"dflash:{old}",
        f"dflash:{other_quant}",
    ]


def test_the_targets_own_head_comes_first(tmp_path):
    target = bundle(tmp_path / "t.base", speculator={"config": {"kind": "mtp"}})
    drafter = bundle(tmp_path / "d.base", "dflash")
    assert _names(resolve(target, [drafter])) == ["mtp-head", f"dflash:{drafter}"]


def test_every_file_not_ranked_is_reported_with_its_reason(layout):
    root, target = layout
    d = root / "models" / "drafters"
    plain = bundle(d / "small.base", "qwen3")
    wide = bundle(d / "wide.base", "dflash", config={"hidden_size": 128})
    layers = bundle(d / "deep.base", "eagle3", config={"target_layer_ids": [1, 9]})
    backend = bundle(d / "cuda.base", "dflash", target_backend="cuda")
    broken = d / "broken.base"
    broken.write_bytes(b"BASE\x02\x00\x00\x00" + b"\x00" * 8)
    resolution = resolve(target, [plain, wide, layers, backend, broken])
    assert resolution.candidates == ()
    reasons = {Path(s.path).name: s.reason for s in resolution.skipped}
    assert reasons["small.base"] == "a plain draft model; auto never picks one"
    assert reasons["wide.base"].startswith("does not fit: hidden size")
    assert reasons["deep.base"].startswith("does not fit:") and "9" in reasons["deep.base"]
    assert reasons["cuda.base"].startswith("does not fit:") and "backend" in reasons["cuda.base"]
    assert (
        reasons["broken.base"].startswith("header unreadable:")
        and "version" in reasons["broken.base"]
    )


def test_a_listed_drafter_with_the_wrong_bytes_is_skipped_and_the_matching_one_picked(layout):
    root, target = layout
    d = root / "models" / "drafters"
    good = bundle(d / "good-dflash.base", "dflash")
    bad = bundle(d / "bad-dflash.base", "dflash")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    rows = [
        CatalogRow("org/good", "good-dflash.base", "q4", good.stat().st_size, digest, None, None),
        CatalogRow("org/bad", "bad-dflash.base", "q4", bad.stat().st_size, "f" * 64, None, None),
    ]
    resolution = resolve(target, [good, bad], rows)
    assert _names(resolution) == [f"dflash:{good}"]
    (skip,) = resolution.skipped
    assert skip.catalog and skip.reason.startswith(
        f"{bad} is not the catalog's org/bad q4 (sha256 "
    )
    assert skip.reason.endswith("; pull it again, or rename it if it is a conversion of your own")


def explicit(value, target_header, rows=(), home=None, files=()):
    directive = parse_directive(value, home="/home/ada", is_file=lambda p: p in files)
    digests = DigestCache(home)
    return check_explicit(
        directive,
        target_header,
        read_header=read_header,
        check_catalog=lambda p: check_against_catalog(p, rows, digests),
    )


def test_an_explicit_drafter_is_checked_and_resolved(layout):
    root, target = layout
    drafter = bundle(root / "d.base", "eagle3")
    resolved = explicit(f"{drafter}", read_header(target), home=root, files={str(drafter)})
    assert str(resolved.pick) == f"eagle3:{drafter}"
    assert (
        str(explicit(f"eagle3:{drafter}", read_header(target), home=root).pick)
        == f"eagle3:{drafter}"
    )


def test_an_explicit_drafter_with_the_wrong_bytes_is_a_startup_error(layout):
    root, target = layout
    drafter = bundle(root / "d.base", "dflash")
    rows = [CatalogRow("org/d", "d.base", "q4", 7, "0" * 64, None, None)]
    with pytest.raises(DirectiveError) as err:
        explicit(f"dflash:{drafter}", read_header(target), rows, home=root)
    size = drafter.stat().st_size
    assert err.value.message == (
        f"{drafter} is not the catalog's org/d q4 ({size} bytes, not 7); pull it again,"
        " or rename it if it is a conversion of your own"
    )


def test_an_explicit_drafter_that_does_not_fit_or_is_of_another_kind_is_refused(layout):
    root, target = layout
    wide = bundle(root / "wide.base", "dflash", config={"hidden_size": 32})
    with pytest.raises(DirectiveError, match="does not fit: hidden size"):
        explicit(f"dflash:{wide}", read_header(target), home=root)
    dflash = bundle(root / "df.base", "dflash")
    with pytest.raises(DirectiveError) as err:
        explicit(f"dspark:{dflash}", read_header(target), home=root)
    assert err.value.message.endswith(
        "is a dflash drafter, not a dspark one (dspark needs a Markov head)"
    )


def test_an_explicit_path_that_is_not_a_bundle_is_refused(layout):
    root, target = layout
    gguf = root / "m.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(DirectiveError) as err:
        explicit(str(gguf), read_header(target), home=root, files={str(gguf)})
    assert (
        err.value.message == f"--speculate {gguf}: not a .base bundle (convert the drafter first)"
    )
    # A kind in front of the path gets the same line.
    with pytest.raises(DirectiveError) as err:
        explicit(f"dflash:{gguf}", read_header(target), home=root)
    assert err.value.message == (
        f"--speculate dflash:{gguf}: not a .base bundle (convert the drafter first)"
    )
