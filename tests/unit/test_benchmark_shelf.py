"""The benchmark shelf, docs/benchmarks: its README is an index that names every report folder,
and every relative link on the shelf leads to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

SHELF = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
INDEX = SHELF / "README.md"

#: `[text](target)` and `![alt](target)`; the target ends at the first space or parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def links(page: Path) -> list[str]:
    """The page's link targets outside code (a command may hold brackets), anchors dropped."""
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    return [target.split("#", 1)[0] for target in LINK.findall(text)]


def relative(target: str) -> bool:
    return bool(target) and not re.match(r"^[a-z][a-z0-9+.-]*:", target) and target[0] != "/"


def test_the_index_is_not_a_generated_report() -> None:
    # A bench that wrote its report here would overwrite the index; each writes to a folder.
    assert "do not edit by hand" not in INDEX.read_text()


def test_every_folder_on_the_shelf_is_linked_from_the_index() -> None:
    targets = [(SHELF / t).resolve() for t in links(INDEX) if relative(t)]
    folders = sorted(p for p in SHELF.rglob("*") if p.is_dir())
    assert folders, "no report folders"
    unlisted = [
        str(folder.relative_to(SHELF))
        for folder in folders
        if not any(target == folder or folder in target.parents for target in targets)
    ]
    assert not unlisted, f"folders the index does not link: {unlisted}"


def test_every_relative_link_on_the_shelf_resolves() -> None:
    pages = sorted(SHELF.rglob("*.md"))
    assert INDEX in pages
    broken = [
        f"{page.relative_to(SHELF)}: {target}"
        for page in pages
        for target in links(page)
        if relative(target) and not (page.parent / target).exists()
    ]
    assert not broken, f"links to nothing: {broken}"


def test_the_link_reader_finds_links_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "[a](one/README.md#x) ![b](two.png) [c](https://example.com)\n"
        "`[not](a-link)`\n```sh\n[nor](this)\n```\n"
    )
    assert links(page) == ["one/README.md", "two.png", "https://example.com"]
    assert [t for t in ["one/README.md", "https://example.com", "/abs", ""] if relative(t)] == [
        "one/README.md"
    ]
