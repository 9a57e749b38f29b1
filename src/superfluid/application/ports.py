"""Ports: what the application needs from the outside world, as Protocols, all in one place.

- `Runtime` (with `Capabilities`, `Feed`): a loaded model; `RuntimeLoader` loads one.
- `Drafter` / `DraftState` / `SampledDraftState`: where draft tokens come from, per lane.
- `DrafterEngine`: a runtime that builds drafters for its own model.
- `TokenConstraint`: a grammar a lane's every token must satisfy.
- Startup (`serving.py`): `ModelFiles` (a model file's runtime and header, read once),
  `DrafterSources` (where installed drafters lie), `CatalogSource` (the hub catalog's rows),
  `Digests` (whether a file is the catalog's bytes), `SamplingDefaultsSource` (a model's own
  sampling defaults).

A runtime is a loaded model. It knows its own capabilities, tokenises, and runs **one packed
step**: tokens for several sequences at once, returning logits rows. Everything about drafting,
verifying and gating lives above it, so a runtime stays a thin, testable adapter.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.catalog import CatalogRow
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.gates.policy import TickPlan
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.sampling_defaults import SamplingDefaults
from superfluid.domain.strategies import Strategy
from superfluid.domain.tool_calls.families import ToolFamily

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
    strategies: tuple[Strategy, ...]
    max_verify_rows: int
    context_size: int
    eos_tokens: frozenset[int]
    max_sequences: int = 1
    #: None when a finished request's KV may serve a later prompt with the same prefix: a
    #: token's KV is then the same whether it was prefilled, verified or decoded alone.
    #: Otherwise why not, phrased to follow "prefix reuse is off: ".
    reuse_refusal: str | None = None
    #: None when a token's logits row is the same in any batch (alone, in a verify step, in a
    #: prefill chunk, beside other lanes), so speculation cannot change greedy output; otherwise
    #: why not, and the runtime registers no strategy: the model is served plainly.
    exactness_refusal: str | None = None

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

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The model's chat template applied, ending with the assistant turn's opening.

        Messages carry `role`, `content`, an assistant turn's `tool_calls` (arguments parsed) and
        a tool turn's `tool_call_id`; `tools` are OpenAI's function tools. A template that cannot
        take tools raises a SuperfluidError (a 400) when `tools` is given.
        """
        ...

    @property
    def tool_family(self) -> ToolFamily | None:
        """The format the chat template teaches for tool calls; None if it takes no tools."""
        ...

    @property
    def turn_ends(self) -> tuple[str, ...]:
        """The text markers that end an assistant turn in the chat template (`<|im_end|>`):
        a chat reply stops at them even where the model's end-of-generation token differs."""
        ...

    @property
    def chat_template_origin(self) -> str:
        """Where the chat template came from, as an error message names it."""
        ...

    def use_chat_template_file(self, path: str) -> None:
        """Replace the model's chat template with the one in `path` (`--chat-template-file`)."""
        ...

    def new_sequence(self, prefer: int | None = None) -> int:
        """A free sequence id: `prefer` when that one is free, else the runtime's choice (on
        llama.cpp, lanes on neighbouring ids share a step's pass: `SequencePool`)."""
        ...

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


class EngineRefusal(SuperfluidError):
    """The runtime will not run this drafter (its reason is the message)."""


class RuntimeLoader(Protocol):
    def __call__(self, path: Path, *, ctx_size: int, max_lanes: int) -> Runtime: ...


class DraftState(Protocol):
    def propose(self, k: int) -> list[int]:
        """Up to k tokens to verify (greedy/deterministic)."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """The tokens the round committed (accepted draft tokens and the one after them)."""
        ...


@runtime_checkable
class MatchedDraftState(DraftState, Protocol):
    """A draft state that can say how sure its next draft is (prompt-lookup's match length)."""

    def match_length(self) -> int:
        """How many tokens of the lane's tail the next draft's source matches (0: no draft)."""
        ...


@runtime_checkable
class SampledDraftState(DraftState, Protocol):
    def propose_sampled(
        self, k: int, params: SamplingParams, pos: int
    ) -> tuple[list[int], npt.NDArray[np.float64]]:
        """Up to k tokens drawn from the drafter's own distributions, and those distributions
        (one row per token, over the target's vocabulary). Draw token i with the counter RNG at
        `uniform(params.seed, pos + i, STREAM_DRAFT)` so the draft is independent of the
        verifier's coins."""
        ...


class Drafter(Protocol):
    @property
    def strategy(self) -> Strategy: ...

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState: ...


@runtime_checkable
class DrafterEngine(Protocol):
    """A runtime that builds drafters for its own model (the basert runtime)."""

    def drafter(self, strategy: Strategy, path: Path | None) -> Drafter:
        """A drafter for `strategy` (and its file); raises EngineRefusal with the reason."""
        ...


class TokenConstraint(Protocol):
    def allowed(self, token: int) -> bool: ...

    def commit(self, token: int) -> None: ...

    @property
    def complete(self) -> bool:
        """Nothing more may be generated: the lane ends (finish reason "stop")."""
        ...


@runtime_checkable
class ReportsDepth(Protocol):
    """A drafter that knows its own default depth (a block drafter's block width, an MTP head's
    engine choice); other drafters take their strategy's default (docs/contract.md §4)."""

    def default_depth(self) -> int | None: ...


@runtime_checkable
class ClassifiesMatches(Protocol):
    """A drafter whose draft states are `MatchedDraftState`s: the gates keep one depth per
    match class for it (`domain/gates/depth.py`); other drafters have one class."""

    @property
    def match_classes(self) -> int: ...


# -- startup ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model file as startup sees it, read once: the runtime it belongs to and, for a `.base`
    bundle whose header reads, that header (None for every other file)."""

    path: Path
    runtime: str
    header: BundleHeader | None = None


class ModelFiles(Protocol):
    def open(self, path: Path) -> ModelFile:
        """The file's runtime and header; a SuperfluidError when no runtime can serve it."""
        ...

    def read_header(self, path: Path) -> BundleHeader:
        """A drafter bundle's header; HeaderError when it does not read as `.base`."""
        ...

    def is_file(self, path: str) -> bool:
        """Whether `path` names an existing regular file (a bare-path directive)."""
        ...


@dataclass(frozen=True, slots=True)
class DrafterSearch:
    """The `.base` files found for a target, and the directories searched, in order."""

    bundles: tuple[Path, ...]
    searched: tuple[str, ...]


class DrafterSources(Protocol):
    def search(self, target: Path) -> DrafterSearch:
        """Where `auto` looks for installed drafters of `target` (docs/contract.md §3)."""
        ...


class CatalogSource(Protocol):
    def load(self) -> tuple[CatalogRow, ...]:
        """The hub catalog's rows (fetched, cached or offline); never raises for a bad fetch."""
        ...


class Digests(Protocol):
    def catalog_problem(self, path: Path, rows: Sequence[CatalogRow]) -> str | None:
        """Why `path` is not the catalog's file it claims to be, or None (docs/contract.md §5)."""
        ...


SamplingFound = tuple[SamplingDefaults | None, list[str]]


class SamplingDefaultsSource(Protocol):
    def read(self, file: ModelFile, runtime: Runtime) -> SamplingFound:
        """The defaults the model sets (None: it sets none), and notes on what was not read."""
        ...


class SpeculationPolicy(Protocol):
    """What the executor asks the gates (one policy per served model; see domain.gates.policy)."""

    def plan(self, lane_count: int) -> TickPlan:
        """This tick's draft depth at this lane count; depth 0 decodes plainly."""
        ...

    def may_draft(self, request_id: Hashable) -> bool: ...

    def request_started(self, request_id: Hashable) -> None: ...

    def request_finished(self, request_id: Hashable) -> None: ...

    def record_round(
        self,
        request_id: Hashable,
        lane_count: int,
        *,
        drafted: int,
        accepted: int,
        klass: int = 0,
        asked: int | None = None,
    ) -> None:
        """One lane's verified round; `klass` is its draft's match class (`TickPlan.by_class`),
        `asked` the depth the tick's plan asked of its draft."""
        ...

    def record_spec_tick(
        self, lane_count: int, *, drafted: int, committed: int, seconds: float, rows: int
    ) -> None: ...

    def record_plain_tick(self, lane_count: int, *, committed: int, seconds: float) -> None: ...
