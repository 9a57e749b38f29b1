"""Ports: what the application needs from the outside world, as Protocols.

A runtime is a loaded model. It knows its own capabilities, tokenises, and runs **one packed
step**: tokens for several sequences at once, returning logits rows. Everything about drafting,
verifying and gating lives above it, so a runtime stays a thin, testable adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a loaded model can do for speculation (docs/contract.md §1).

    `cut_refusal` is None when a sequence's KV can be cut back to any length; otherwise it is
    the runtime's own reason, phrased to follow "this model's …" (for example "sliding-window
    state cuts only at its head").
    """

    runtime: str
    verify_rows: bool
    verify_batches: bool
    cut_refusal: str | None
    strategies: tuple[str, ...]
    max_verify_rows: int
    context_size: int
    eos_tokens: frozenset[int]
    max_sequences: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def truncate_partial(self) -> bool:
        return self.cut_refusal is None


@dataclass(frozen=True, slots=True)
class Feed:
    """Tokens to append to one sequence in a packed step.

    `start` is the position of the first token, which must equal the sequence's current KV
    length. With `all_rows` the step returns a logits row after every fed token (verification);
    otherwise only after the last one (prefill and plain decoding).
    """

    seq: int
    tokens: Sequence[int]
    start: int
    all_rows: bool = False


class RuntimeFault(Exception):
    """A runtime fault that fails the lanes of one step (never a whole server)."""


class Runtime(Protocol):
    """A loaded model behind one runtime (llamacpp, mlx, basert)."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def tokenize(self, text: str, *, add_special: bool) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> bytes: ...

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        """The model's chat template applied, ending with the assistant turn's opening."""
        ...

    def new_sequence(self) -> int: ...

    def free_sequence(self, seq: int) -> None: ...

    def cut(self, seq: int, length: int) -> None:
        """Keep the first `length` positions of `seq`; raise RuntimeFault if it did not hold."""
        ...

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        """Run all feeds in one forward pass (chunked by the runtime if it must).

        Returns, per feed and in order, a 2-D array: one row per fed token with `all_rows`,
        else one row (after the last token).
        """
        ...
