"""What startup says about speculation (docs/contract.md §1–§3), one function per line.

The words are part of the contract: users grep their logs for them. Each function returns the
text after the `superfluid: ` prefix, which the edge that prints it adds.
"""

from __future__ import annotations

from collections.abc import Sequence


def registered(resolved: str, model: str | None = None) -> str:
    """`speculation: <resolved>`; with several models, the model is named too (as in every
    line here that takes `model`)."""
    return f"{_speculation(model)}{resolved}"


def _speculation(model: str | None) -> str:
    """The line's head: `speculation: `, and the model's name when several are served."""
    return "speculation: " if model is None else f"speculation: {model}: "


def auto_prompt_lookup(runtime: str, model: str | None = None) -> str:
    return f"{_speculation(model)}auto: prompt-lookup on the {runtime} runtime"


def auto_cannot_cut(model: str, runtime: str, why: str) -> str:
    return (
        f"speculation: auto: {model} on the {runtime} runtime verifies no drafts ({why})"
        " — decoding plainly"
    )


def auto_inexact(model: str, why: str) -> str:
    """Speculation refused where it could change greedy output; `why` is the runtime's words."""
    return (
        f"speculation: auto: {model} decodes plainly: speculation would change its greedy"
        f" output ({why})"
    )


def prompt_lookup_inexact(why: str) -> str:
    """The refusal of an explicit prompt-lookup on a model whose rows depend on their batch."""
    return (
        "--speculate prompt-lookup: speculation would change this model's greedy output"
        f" ({why}); serve it with --speculate off or auto"
    )


def prompt_lookup_cannot_cut(why: str) -> str:
    """The refusal of an explicit prompt-lookup; `why` is the runtime's own words."""
    return (
        "--speculate prompt-lookup: prompt-lookup cuts a rejected draft off,"
        f" and this model's {why}"
    )


def strategy_not_on_runtime(directive: str, runtime: str) -> str:
    return (
        f"--speculate {directive}: the {runtime} runtime runs prompt-lookup only;"
        " use --speculate prompt-lookup or auto"
    )


def skipping_drafter(why: str, model: str | None = None) -> str:
    return f"{_speculation(model)}skipping a drafter: {why}"


def auto_found_nothing(model: str, searched: Sequence[str]) -> str:
    return (
        f"speculation: auto found no head in {model} and no fitting drafter in"
        f" {', '.join(searched)} — decoding plainly"
    )


def auto_refused(
    candidate: str, error: str, next_candidate: str | None, model: str | None = None
) -> str:
    then = f"trying {next_candidate}" if next_candidate is not None else "decoding plainly"
    return (
        f"{_speculation(model)}auto picked {candidate}, but the engine refused it ({error})"
        f" — {then}"
    )
