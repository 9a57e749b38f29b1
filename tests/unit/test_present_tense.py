"""The docs and the source say what is: no issue numbers and no work sessions as explanations.

A reader of the repository cannot look up an issue number or a work session ("the fourth stop",
"this stop"), so neither may stand in for a reason. Stop tokens, stop sequences and a measuring
window's early stop are the product's own words and stay allowed.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    r"\d+(?:st|nd|rd|th)"
)
_SESSION_STOP = re.compile(
    rf"\b(?:this|last|next|later|earlier|previous|same|{_ORDINALS})\s+stop(?:'s)?(?![\w-])"
    r"(?!\s+(?:token|sequence|string|word|marker|reason|condition|id))",
    re.IGNORECASE,
)
_STOP_NUMBER = re.compile(r"\bstop\s+\d+\b", re.IGNORECASE)
_ISSUE_NUMBER = re.compile(r"\b(?:issue|task)s?\s+#?\d+\b|(?<![\w&/#])#\d{1,3}\b", re.IGNORECASE)
_REVISION_HEADING = re.compile(r"^#+\s*Revision\b", re.IGNORECASE | re.MULTILINE)

PATTERNS = {
    "a work session as time": _SESSION_STOP,
    "a numbered stop": _STOP_NUMBER,
    "an issue number": _ISSUE_NUMBER,
    "a dated revision section": _REVISION_HEADING,
}


def _files():
    """Docs, source, benches and scripts; tests stay out (this file holds example phrases)."""
    for folder, suffix in (("docs", "*.md"), ("src", "*.py")):
        yield from sorted((ROOT / folder).rglob(suffix))
    for folder in ("bench", "scripts"):
        for suffix in ("*.py", "*.sh"):
            yield from sorted((ROOT / folder).glob(suffix))
    yield ROOT / "README.md"


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_sessions_as_explanations(path):
    text = path.read_text()
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {what}:"
        f" {match.group(0)!r}"
        for what, pattern in PATTERNS.items()
        for match in pattern.finditer(text)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("as measured this stop", True),
        ("the thirteenth stop's bench", True),
        ("(issue 23, later stop)", True),
        ("see #23 for why", True),
        ("## Revision (fourth session)", True),
        ("stop 57 landed", True),
        ("the window's early stop needs 48 ticks", False),
        ("a stop token ends the lane", False),
        ("a client that stops reading", False),
        ("the last stop sequence in the list", False),
        ("ADR 0014 keeps the figures", False),
        ("`&#39;` is an HTML entity", False),
    ],
)
def test_the_patterns_tell_sessions_from_the_products_own_words(text, flagged):
    assert any(p.search(text) for p in PATTERNS.values()) is flagged
