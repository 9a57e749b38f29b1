"""The `--speculate` grammar (docs/contract.md §2).

A directive is parsed once per served model, in the order the contract gives: `off`/empty,
`prompt-lookup`, `mtp-head`, `<kind>:<path>`, `auto`, an existing file, else a refusal.
Whether a path names an existing file is a question for the filesystem, so the caller passes
the answer in as a predicate; the rules themselves stay pure.

Resolution steps that need a `.base` header (is there an MTP head? what kind is a bare path?)
take the already-parsed header as input.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.drafters import kind_of
from superfluid.domain.errors import DirectiveError
from superfluid.domain.strategies import PREFIXES, Pick, Strategy, directive_forms


class Mode(enum.StrEnum):
    OFF = "off"
    AUTO = "auto"
    PROMPT_LOOKUP = "prompt-lookup"
    MTP_HEAD = "mtp-head"
    DRAFTER = "drafter"  # `<kind>:<path>`: the kind is named
    BUNDLE_PATH = "path"  # a bare path: the kind comes from the file's header


@dataclass(frozen=True, slots=True)
class Directive:
    """A parsed `--speculate` value. `raw` is the trimmed text the user gave.

    `kind` is the strategy the directive names: set by the parser for every form but `off`,
    `auto` and a bare path, whose kind comes from its file's header (`resolve_bundle_path`).
    """

    mode: Mode
    raw: str
    path: str | None = None
    kind: Strategy | None = None

    @property
    def pick(self) -> Pick | None:
        """The strategy this directive names, once resolved (None: off, auto, or a bare path
        whose kind is not read yet)."""
        return None if self.kind is None else Pick(self.kind, self.path)

    @property
    def speculates(self) -> bool:
        return self.mode is not Mode.OFF


OFF = Directive(Mode.OFF, "off")


def expand_home(path: str, home: str | None) -> str:
    """Expand `~` and `~/…` to `home`; `~user` is left alone (it names someone else's home)."""
    if home is None:
        return path
    if path == "~":
        return home
    if path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def unrecognised(raw: str) -> DirectiveError:
    return DirectiveError(f"--speculate {raw}: expected {directive_forms()}")


def parse_directive(
    value: str | None,
    *,
    home: str | None,
    is_file: Callable[[str], bool],
) -> Directive:
    """Parse a `--speculate` value; raise DirectiveError with the contract's message."""
    raw = (value or "").strip()
    if raw in ("", "off"):
        return OFF
    if raw == "prompt-lookup":
        return Directive(Mode.PROMPT_LOOKUP, raw, kind=Strategy.PROMPT_LOOKUP)
    if raw == "mtp-head":
        return Directive(Mode.MTP_HEAD, raw, kind=Strategy.MTP_HEAD)
    prefix, sep, rest = raw.partition(":")
    if sep and prefix in PREFIXES:
        if not rest.strip():
            raise unrecognised(raw)
        path = expand_home(rest.strip(), home)
        return Directive(Mode.DRAFTER, raw, path=path, kind=Strategy.named(prefix))
    if raw == "auto":
        return Directive(Mode.AUTO, raw)
    # A bare path: `~` is expanded as for prefixed paths (ADR 0002), then it must be a file.
    path = expand_home(raw, home)
    if is_file(path):
        return Directive(Mode.BUNDLE_PATH, raw, path=path)
    raise unrecognised(raw)


def not_a_bundle(raw: str) -> str:
    """The refusal of a drafter path whose file is not a `.base` bundle at all."""
    return f"--speculate {raw}: not a .base bundle (convert the drafter first)"


def resolve_bundle_path(directive: Directive, header: BundleHeader | None) -> Directive:
    """Give a bare-path directive its kind from the file's header (None: it did not read)."""
    if directive.mode is not Mode.BUNDLE_PATH:
        return directive
    if header is None:
        raise DirectiveError(not_a_bundle(directive.raw))
    return Directive(Mode.BUNDLE_PATH, directive.raw, path=directive.path, kind=kind_of(header))


def check_mtp_head(target: str, header: BundleHeader | None) -> None:
    """Refuse `mtp-head` for a target whose header reads and carries no MTP head.

    A header that does not read (a GGUF, an MLX directory) is left to the runtime, which
    refuses strategies it cannot run in its own words.
    """
    if header is None or header.has_mtp_head:
        return
    kind = header.speculator_kind
    if kind is not None:
        raise DirectiveError(
            f"--speculate mtp-head: {target}'s speculator head is `{kind}`, not an MTP head"
        )
    converted = f" (converted by baseRT {header.baserT_version})" if header.baserT_version else ""
    raise DirectiveError(
        f"--speculate mtp-head: {target} carries no speculator head{converted}; reconvert it with"
        " base-convert >= 0.2.5 from a checkpoint that ships an MTP head, or use --speculate auto"
        " to pair an installed drafter"
    )
