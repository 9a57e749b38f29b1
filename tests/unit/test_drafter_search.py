"""Where `auto` looks for drafters (§3) and which files it finds there, on a real directory tree."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from superfluid.adapters.drafter_search import SearchRoot, find_bundles, search_locations


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"BASE")
    return path


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """models/qwen3-4b/<target> with drafters beside it, one level up, and a models cache."""
    models = tmp_path / "models"
    target = touch(models / "qwen3-4b" / "Qwen3-4B-Q4.base")
    return {
        "root": tmp_path,
        "models": models,
        "target": target,
        "target_dir": target.parent,
        "cache": tmp_path / "cache" / "baseRT" / "models",
    }


def found(layout: dict[str, Path], env: dict[str, str] | None = None) -> list[Path]:
    environment = env if env is not None else {"BASERT_MODELS_DIR": str(layout["cache"])}
    return find_bundles(layout["target"], search_locations(layout["target"], environment))


# --- the locations -----------------------------------------------------------------------------


def test_the_locations_are_the_targets_directory_its_drafters_and_the_models_cache() -> None:
    target = Path("/m/qwen3-4b/Qwen3-4B-Q4.base")
    roots = search_locations(target, {"BASERT_MODELS_DIR": "/hub"}, platform="linux")
    assert roots == [
        SearchRoot(Path("/m/qwen3-4b"), 0),
        SearchRoot(Path("/m/qwen3-4b/drafters"), 0),
        SearchRoot(Path("/m/drafters"), 0),
        SearchRoot(Path("/hub"), 3),
    ]


def test_a_relative_target_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    roots = search_locations(Path("qwen3-4b/../qwen3-4b/t.base"), {}, platform="linux")
    assert [r.path for r in roots] == [
        tmp_path / "qwen3-4b",
        tmp_path / "qwen3-4b" / "drafters",
        tmp_path / "drafters",
    ]


def test_basert_models_dir_replaces_the_per_user_caches() -> None:
    env = {"BASERT_MODELS_DIR": "/hub", "HOME": "/home/u"}
    roots = search_locations(Path("/m/t.base"), env, platform="darwin")
    assert [r for r in roots if r.depth == 3] == [SearchRoot(Path("/hub"), 3)]


def test_without_basert_models_dir_the_cache_under_home_is_searched() -> None:
    for env in ({"HOME": "/home/u"}, {"HOME": "/home/u", "BASERT_MODELS_DIR": ""}):
        roots = search_locations(Path("/m/t.base"), env, platform="linux")
        assert [r for r in roots if r.depth == 3] == [
            SearchRoot(Path("/home/u/.cache/baseRT/models"), 3)
        ]


def test_on_macos_the_library_caches_directory_is_searched_too() -> None:
    roots = search_locations(Path("/m/t.base"), {"HOME": "/Users/u"}, platform="darwin")
    assert [r for r in roots if r.depth == 3] == [
        SearchRoot(Path("/Users/u/.cache/baseRT/models"), 3),
        SearchRoot(Path("/Users/u/Library/Caches/baseRT/models"), 3),
    ]


def test_without_home_or_basert_models_dir_only_the_local_directories_are_searched() -> None:
    roots = search_locations(Path("/m/x/t.base"), {}, platform=sys.platform)
    assert all(r.depth == 0 for r in roots)
    assert len(roots) == 3


def test_a_target_at_the_filesystem_root_lists_each_directory_once() -> None:
    roots = search_locations(Path("/t.base"), {}, platform="linux")
    assert roots == [SearchRoot(Path("/"), 0), SearchRoot(Path("/drafters"), 0)]


# --- what is found -----------------------------------------------------------------------------


def test_bundles_beside_the_target_are_found_and_the_target_itself_is_not(
    layout: dict[str, Path],
) -> None:
    beside = touch(layout["target_dir"] / "Qwen3-4B-DFlash.base")
    touch(layout["target_dir"] / "notes.txt")
    touch(layout["target_dir"] / "Qwen3-4B.gguf")
    assert found(layout) == [beside]


def test_drafters_beside_and_one_level_up_are_found(layout: dict[str, Path]) -> None:
    beside = touch(layout["target_dir"] / "drafters" / "a.base")
    up = touch(layout["models"] / "drafters" / "b.base")
    assert found(layout) == sorted([beside, up])


def test_the_local_directories_are_not_searched_recursively(layout: dict[str, Path]) -> None:
    touch(layout["target_dir"] / "sub" / "deep.base")
    touch(layout["target_dir"] / "drafters" / "sub" / "deep.base")
    touch(layout["models"] / "drafters" / "sub" / "deep.base")
    assert found(layout) == []


def test_a_pulled_bundle_in_the_hub_layout_is_found(layout: dict[str, Path]) -> None:
    pulled = touch(
        layout["cache"] / "basecompute" / "Qwen3-4B-DFlash" / "default-q4" / "model.base"
    )
    assert found(layout) == [pulled]


def test_the_per_user_cache_under_home_is_searched(layout: dict[str, Path]) -> None:
    home = layout["root"] / "home"
    pulled = touch(home / ".cache" / "baseRT" / "models" / "org" / "repo" / "q4" / "model.base")
    assert found(layout, {"HOME": str(home)}) == [pulled]


def test_the_models_cache_is_searched_three_levels_deep_and_no_deeper(
    layout: dict[str, Path],
) -> None:
    cache = layout["cache"]
    shallow = [touch(cache / "a.base"), touch(cache / "x" / "b.base"), touch(cache / "x/y/c.base")]
    deepest = touch(cache / "x" / "y" / "z" / "d.base")
    touch(cache / "x" / "y" / "z" / "w" / "too-deep.base")
    assert found(layout) == sorted([*shallow, deepest])


def test_dot_directories_are_skipped(layout: dict[str, Path]) -> None:
    cache = layout["cache"]
    touch(cache / ".trash" / "old.base")
    touch(cache / "org" / ".git" / "x.base")
    touch(cache / "org" / "repo" / ".partial" / "model.base")
    kept = touch(cache / "org" / "repo" / "q4" / "model.base")
    assert found(layout) == [kept]


def test_only_files_named_base_count(layout: dict[str, Path]) -> None:
    cache = layout["cache"]
    (cache / "dir.base").mkdir(parents=True)
    (cache / "dangling.base").symlink_to(cache / "missing")
    touch(cache / "model.base.partial")
    touch(cache / "MODEL.BASE")
    assert found(layout) == []


def test_a_symlink_loop_ends(layout: dict[str, Path]) -> None:
    cache = layout["cache"]
    kept = touch(cache / "org" / "a.base")
    (cache / "org" / "loop").symlink_to(cache)
    (cache / "org" / "self").symlink_to(cache / "org")
    assert found(layout) == [kept]


def test_a_symlinked_directory_is_followed(layout: dict[str, Path]) -> None:
    elsewhere = touch(layout["root"] / "disk2" / "repo" / "q4" / "model.base")
    (layout["cache"] / "org").mkdir(parents=True)
    (layout["cache"] / "org" / "repo").symlink_to(elsewhere.parent.parent)
    assert found(layout) == [layout["cache"] / "org" / "repo" / "q4" / "model.base"]


def test_two_paths_to_one_file_count_once_and_the_first_roots_path_is_kept(
    layout: dict[str, Path],
) -> None:
    pulled = touch(layout["cache"] / "org" / "repo" / "q4" / "model.base")
    link = layout["target_dir"] / "drafters" / "Qwen3-4B-DFlash.base"
    link.parent.mkdir()
    link.symlink_to(pulled)
    assert found(layout) == [link]


def test_a_symlink_to_the_target_is_the_target(layout: dict[str, Path]) -> None:
    link = layout["models"] / "drafters" / "again.base"
    link.parent.mkdir()
    link.symlink_to(layout["target"])
    assert found(layout) == []


def test_overlapping_roots_list_each_file_once(layout: dict[str, Path]) -> None:
    # The models cache is the target's own parent: its files are reached from two roots.
    beside = touch(layout["target_dir"] / "d.base")
    other = touch(layout["models"] / "other" / "e.base")
    env = {"BASERT_MODELS_DIR": str(layout["models"])}
    assert found(layout, env) == sorted([beside, other])


def test_a_root_searched_shallow_first_is_still_searched_deep_later(
    layout: dict[str, Path],
) -> None:
    # The target lies in the models cache itself: its directory is first listed without
    # descending, and the cache walk must still go below it.
    cache = layout["cache"]
    target = touch(cache / "t.base")
    deep = touch(cache / "org" / "repo" / "q4" / "model.base")
    roots = search_locations(target, {"BASERT_MODELS_DIR": str(cache)})
    assert find_bundles(target, roots) == [deep]


def test_missing_directories_are_not_an_error(tmp_path: Path) -> None:
    roots = [SearchRoot(tmp_path / "nowhere", 3), SearchRoot(tmp_path / "file.txt", 0)]
    touch(tmp_path / "file.txt")
    assert find_bundles(tmp_path / "t.base", roots) == []


def test_an_unreadable_directory_is_skipped(
    layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = layout["cache"]
    touch(cache / "locked" / "x.base")
    kept = touch(cache / "open" / "y.base")
    real_scandir = os.scandir

    def scandir(path: Path) -> object:
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("superfluid.adapters.drafter_search.os.scandir", scandir)
    assert found(layout) == [kept]


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0,
    reason="root reads directories whatever their mode",
)
def test_a_directory_without_read_permission_is_skipped(layout: dict[str, Path]) -> None:
    cache = layout["cache"]
    touch(cache / "locked" / "x.base")
    (cache / "locked").chmod(0)
    try:
        assert found(layout) == []
    finally:
        (cache / "locked").chmod(0o700)


def test_the_order_is_sorted_whatever_the_listing_order(layout: dict[str, Path]) -> None:
    names = ["zeta.base", "alpha.base", "Mid.base", "beta.base"]
    files = [touch(layout["cache"] / name) for name in names]
    assert found(layout) == sorted(files)
