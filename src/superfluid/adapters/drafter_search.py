"""Where `auto` looks for installed drafters, and which `.base` files lie there (docs/contract.md §3).

Searched, in this order: the target's directory, `drafters/` beside it and `drafters/` one level
up, each without descending; then the baseRT models cache, descending three directory levels so
that a pulled bundle `<models dir>/<org>/<repo>/<variant>/model.base` is found. Nothing here reads
a header: the caller decides what a file is. Finding files must never fail a startup, so an
unreadable directory is skipped, and a directory reached twice (a symlink loop, or two roots that
overlap) is listed once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from superfluid.application.ports import DrafterSearch

BUNDLE_SUFFIX = ".base"
DRAFTERS_DIR = "drafters"
# org / repo / variant: the depth of a pulled bundle's directory below the models dir.
MODELS_CACHE_DEPTH = 3


@dataclass(frozen=True, slots=True)
class SearchRoot:
    """A directory to search; `depth` is how many directory levels below it are searched too.

    Depth 0 lists the directory's own files; depth 3 also lists `a/`, `a/b/` and `a/b/c/`.
    """

    path: Path
    depth: int


def search_locations(
    target: Path, env: Mapping[str, str], *, platform: str = sys.platform
) -> list[SearchRoot]:
    """The directories `auto` searches for drafters of `target`, in the order §3 names them.

    `target` is made absolute against the working directory without resolving symlinks: the
    drafters beside a model are the ones beside the path the user gave.
    """
    directory = Path(os.path.abspath(target)).parent
    roots = [
        SearchRoot(directory, 0),
        SearchRoot(directory / DRAFTERS_DIR, 0),
        SearchRoot(directory.parent / DRAFTERS_DIR, 0),
    ]
    roots.extend(SearchRoot(path, MODELS_CACHE_DEPTH) for path in models_dirs(env, platform))
    # A target at the filesystem root makes `drafters/` beside it and one level up the same.
    return list(dict.fromkeys(roots))


def models_dirs(env: Mapping[str, str], platform: str = sys.platform) -> list[Path]:
    """baseRT's models cache: `$BASERT_MODELS_DIR`, else the per-user cache directories.

    An empty variable counts as unset, as a shell's `VAR= cmd` means "no value". Without a HOME
    there is no per-user cache to search.
    """
    configured = env.get("BASERT_MODELS_DIR")
    if configured:
        return [Path(os.path.abspath(configured))]
    home = env.get("HOME")
    if not home:
        return []
    dirs = [Path(home) / ".cache" / "baseRT" / "models"]
    if platform == "darwin":
        dirs.append(Path(home) / "Library" / "Caches" / "baseRT" / "models")
    return dirs


def find_bundles(target: Path, roots: Iterable[SearchRoot]) -> list[Path]:
    """Every `.base` file under `roots` except `target`, each file once, sorted by path.

    Files are compared by canonical path, so a symlink to a bundle found elsewhere (or to the
    target) does not count twice; of several paths to one file the first root's is kept.
    """
    skip = {_canonical(target)}
    found: list[Path] = []
    # Real directory -> the most levels below it already searched; a directory met again with
    # no more levels to search adds nothing, which is also what ends a symlink loop.
    searched: dict[str, int] = {}
    for root in roots:
        for path in _walk(root.path, root.depth, searched):
            real = _canonical(path)
            if real not in skip:
                skip.add(real)
                found.append(path)
    return sorted(found)


def _walk(directory: Path, depth: int, searched: dict[str, int]) -> Iterator[Path]:
    """`.base` files in `directory` and, `depth` levels down, its non-dot subdirectories."""
    real = _canonical(directory)
    if searched.get(real, -1) >= depth:
        return
    searched[real] = depth
    files: list[Path] = []
    subdirectories: list[Path] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if _is_bundle(entry):
                    files.append(Path(entry.path))
                elif depth > 0 and not entry.name.startswith(".") and _is_directory(entry):
                    subdirectories.append(Path(entry.path))
    except OSError:
        # Missing, unreadable or not a directory: there is nothing here to find.
        return
    # Sorted so which of two paths to one file is kept never depends on listing order.
    yield from sorted(files)
    for subdirectory in sorted(subdirectories):
        yield from _walk(subdirectory, depth - 1, searched)


def _is_bundle(entry: os.DirEntry[str]) -> bool:
    """A regular file (or a link to one) named `*.base`, with a name before the suffix."""
    if not entry.name.endswith(BUNDLE_SUFFIX) or len(entry.name) == len(BUNDLE_SUFFIX):
        return False
    try:
        return entry.is_file()
    except OSError:
        return False


def _is_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _canonical(path: Path) -> str:
    return os.path.realpath(path)


class InstalledDrafters:
    """The `DrafterSources` port: the places of docs/contract.md §3, searched on the filesystem."""

    def __init__(self, env: Mapping[str, str], *, platform: str = sys.platform) -> None:
        self._env = env
        self._platform = platform

    def search(self, target: Path) -> DrafterSearch:
        roots = search_locations(target, self._env, platform=self._platform)
        return DrafterSearch(
            tuple(find_bundles(target, roots)), tuple(str(root.path) for root in roots)
        )
