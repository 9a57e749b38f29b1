"""The speculation strategies and their facts, in one table (docs/contract.md §2–§4).

A strategy is what drafts: prompt-lookup, the target's own MTP head, or a drafter bundle of
some kind. Each member carries what the rest of the code asks about it:

- `needs_file`: it is named by its bundle, `<id>:<path>` (the directive's prefixes);
- `arch`: a bundle whose header `arch` is this declares this kind (None: only by name);
- `auto_rank`: its place among the installed drafters `auto` may pick, lower first (None:
  `auto` never picks it);
- `depth`: its default draft depth, or None where the drafter decides (a block drafter's block
  width, the engine's choice for an MTP head);
- `depth_env`: the environment variable that overrides that depth;
- `drafter`: what drafts, in words (`--help`).

The directive's grammar, its refusal message and `--help` are generated from this table, so
a new kind is one member here plus its drafter in the runtime that runs it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Strategy(enum.StrEnum):
    """A speculation strategy; the value is its id as the directive writes it."""

    needs_file: bool
    arch: str | None
    auto_rank: int | None
    depth: int | None
    depth_env: str | None
    drafter: str

    def __new__(
        cls,
        value: str,
        needs_file: bool,
        arch: str | None,
        auto_rank: int | None,
        depth: int | None,
        depth_env: str | None,
        drafter: str,
    ) -> Strategy:
        member = str.__new__(cls, value)
        member._value_ = value
        member.needs_file = needs_file
        member.arch = arch
        member.auto_rank = auto_rank
        member.depth = depth
        member.depth_env = depth_env
        member.drafter = drafter
        return member

    # id, needs_file, arch, auto_rank, depth, depth_env, drafter
    OFF = "off", False, None, None, None, None, "none"
    PROMPT_LOOKUP = (
        "prompt-lookup",
        False,
        None,
        None,
        4,
        None,
        "n-grams from the lane's own context",
    )
    MTP_HEAD = (
        "mtp-head",
        False,
        None,
        None,
        None,
        "SUPERFLUID_MTP_DRAFTS",
        "the multi-token-prediction head in the target bundle",
    )
    # Measured on Qwen3-4B q4 at one lane: DSpark, DFlash, EAGLE-3 in that order of throughput
    # (auto_rank 0, 1, 2).
    DFLASH = "dflash", True, "dflash", 1, None, "SUPERFLUID_DFLASH_DRAFTS", "a DFlash block drafter"
    # DSpark is a DFlash-family block drafter: it shares DFlash's depth variable.
    DSPARK = "dspark", True, "dspark", 0, None, "SUPERFLUID_DFLASH_DRAFTS", "a DSpark drafter"
    EAGLE3 = "eagle3", True, "eagle3", 2, 2, "SUPERFLUID_EAGLE_DRAFTS", "an EAGLE-3 head"
    DRAFT_MODEL = (
        "draft-model",
        True,
        None,
        None,
        4,
        None,
        "a smaller model with the same tokenizer",
    )

    @classmethod
    def named(cls, value: str) -> Strategy:
        """The strategy with this id; ValueError for any other text."""
        for strategy in cls:
            if strategy.value == value:
                return strategy
        raise ValueError(f"{value!r} is not a speculation strategy")

    @property
    def by_auto(self) -> bool:
        """Whether `auto` may pick an installed drafter of this kind."""
        return self.auto_rank is not None


#: The strategies named `<id>:<path>`, in the order the directive's message lists them.
FILE_STRATEGIES: tuple[Strategy, ...] = tuple(s for s in Strategy if s.needs_file)

#: The prefixes a directive may carry.
PREFIXES: tuple[str, ...] = tuple(s.value for s in FILE_STRATEGIES)


def strategy_by_arch(arch: str) -> Strategy:
    """The kind a drafter bundle's header `arch` declares; any other arch is a draft model."""
    for strategy in FILE_STRATEGIES:
        if strategy.arch == arch:
            return strategy
    return Strategy.DRAFT_MODEL


def directive_forms() -> str:
    """What `--speculate` accepts, as its refusal lists it (docs/contract.md §2 item 7)."""
    named = "/".join(PREFIXES)
    return (
        f"auto | {Strategy.PROMPT_LOOKUP} | {Strategy.MTP_HEAD} | a drafter .base path"
        f" | {named}:<path>"
    )


def directive_help() -> str:
    """`--speculate`'s help text."""
    kinds = ", ".join(f"{s.value} ({s.drafter})" for s in FILE_STRATEGIES)
    return (
        f"off | auto | {Strategy.PROMPT_LOOKUP} | {Strategy.MTP_HEAD} | <kind>:<path> | <path>."
        f" Kinds: {kinds}."
    )


@dataclass(frozen=True, slots=True)
class Pick:
    """A resolved strategy: what drafts, and the bundle it comes from when it needs one."""

    strategy: Strategy
    path: str | None = None

    def __str__(self) -> str:
        """As the log and `superfluid drafters` write it: `dflash:/abs/path.base`, `mtp-head`."""
        return (
            f"{self.strategy.value}:{self.path}" if self.path is not None else self.strategy.value
        )
