"""The basert runtime on its reference backend: a `.base` bundle run by numpy, behind the port.

The closed libbaseRT engine runs only on macOS arm64 and Linux arm64 + GB10, and its C API
returns last-position logits only, so it could not be driven from outside for drafting anyway.
Everywhere, this runtime runs the bundle on the reference backend (`model.py`): slow, but
exact and batch-invariant, so the executor's speculative output equals plain output token for
token. It says so once per loaded bundle.

Sequences are KV caches of at most `ctx_size` positions each, `max_sequences` of them, handed
out lowest id first. A step runs every feed in one forward pass; a feed that breaks a promise
(wrong start, twice in a step, past the context) fails the whole step before anything is
computed, so no cache is left half-written.

Hidden states for drafters: a head drafter (MTP, EAGLE-3, DFlash, DSpark) says at registration
which tap layers it reads (`require_taps`); from then on every step also keeps, per sequence and
row for row with its KV, the residual stream at those taps (`hidden`). The store lives and is cut
with the KV, so a drafter never reads a hidden state of a token that was cut off.

Not thread-safe: one executor thread owns a runtime.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from superfluid.adapters.basert.bundle import Bundle, BundleError
from superfluid.adapters.basert.drafters import FILE_DRAFTERS, HEAD_DRAFTERS, load_drafter
from superfluid.adapters.basert.hidden_store import F32, HiddenStore
from superfluid.adapters.basert.layers import KVCache, Pass
from superfluid.adapters.basert.model import DenseModel
from superfluid.adapters.basert.model_config import ModelConfig, cut_refusal
from superfluid.adapters.basert.tokenizer import BundleTokenizer
from superfluid.adapters.chat_templates import (
    CHATML,
    PLAIN,
    ChatTemplate,
    TemplatedChat,
    template_file,
)
from superfluid.adapters.sequences import take_free_id
from superfluid.application.ports import (
    Capabilities,
    Drafter,
    EngineRefusal,
    Feed,
    Logits,
    RuntimeFault,
)
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.strategies import Strategy

MAX_VERIFY_ROWS = 16
#: What the reference backend registers on a dense bundle; `mtp-head` only when it carries one.
STRATEGIES: tuple[Strategy, ...] = (Strategy.PROMPT_LOOKUP, *FILE_DRAFTERS)
#: What it registers besides on a bundle that carries a head.
HEAD_STRATEGIES: tuple[Strategy, ...] = tuple(HEAD_DRAFTERS)

log = logging.getLogger("superfluid")


class BaseRTRuntime(TemplatedChat):
    """A loaded `.base` bundle behind the `Runtime` port (see application/ports.py)."""

    def __init__(
        self,
        *,
        path: Path,
        header: BundleHeader,
        model: DenseModel,
        tokenizer: BundleTokenizer,
        ctx_size: int,
        max_sequences: int,
    ) -> None:
        self.path = path
        self.header = header
        self.model = model
        self.tokenizer = tokenizer
        self._ctx_size = ctx_size
        self._max_sequences = max_sequences
        self._free = list(range(max_sequences))
        self._caches: dict[int, KVCache] = {}
        self._taps: tuple[int, ...] = ()
        self._stores: dict[int, HiddenStore] = {}
        # ChatML (Hermes-style tools) when the tokenizer has its turn markers, else plain lines.
        chatml = all(tokenizer.token_id(m) is not None for m in ("<|im_start|>", "<|im_end|>"))
        self.chat_template: ChatTemplate = CHATML if chatml else PLAIN
        refusal = cut_refusal(header)
        strategies = (*STRATEGIES, *HEAD_STRATEGIES) if header.has_mtp_head else STRATEGIES
        self._capabilities = Capabilities(
            runtime="basert",
            verify_rows=True,
            verify_batches=True,
            cut_refusal=refusal,
            strategies=strategies if refusal is None else (),
            max_verify_rows=MAX_VERIFY_ROWS,
            context_size=ctx_size,
            eos_tokens=tokenizer.eos_tokens,
            max_sequences=max_sequences,
        )

    @classmethod
    def load(
        cls, path: Path | str, *, ctx_size: int = 4096, max_sequences: int = 4
    ) -> BaseRTRuntime:
        """Load a bundle: `max_sequences` lanes of `ctx_size` positions each."""
        if ctx_size < 1 or max_sequences < 1:
            raise ValueError("ctx_size and max_sequences must be positive")
        path = Path(path).expanduser()
        with Bundle.open(path) as bundle:
            config = ModelConfig.from_header(bundle.header, bundle.shown)
            tokenizer = BundleTokenizer.from_header(bundle.header, bundle.shown)
            bad = sorted(t for t in tokenizer.eos_tokens if t >= config.vocab_size)
            if bad:
                raise BundleError(
                    f"{bundle.shown}: end token {bad[0]} is outside the model's vocabulary "
                    f"of {config.vocab_size}"
                )
            model = DenseModel.from_bundle(bundle, max_positions=ctx_size, config=config)
            log.info("basert: %s", engine_note(bundle.shown))
            header = bundle.header
        return cls(
            path=path,
            header=header,
            model=model,
            tokenizer=tokenizer,
            ctx_size=ctx_size,
            max_sequences=max_sequences,
        )

    # The Runtime port.

    @property
    def name(self) -> str:
        return "basert"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return self.tokenizer.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        vocab = self.model.config.vocab_size
        bad = next((t for t in tokens if not 0 <= t < vocab), None)
        if bad is not None:
            raise RuntimeFault(f"token {bad} is outside the vocabulary (0..{vocab - 1})")
        return self.tokenizer.detokenize(tokens)

    def use_chat_template_file(self, path: str) -> None:
        self.chat_template = template_file(path, bos_token="", eos_token="", strip_bos=False)

    def new_sequence(self, prefer: int | None = None) -> int:
        seq = take_free_id(self._free, prefer, self._max_sequences)
        self._caches[seq] = self.model.new_cache(self._ctx_size)
        if self._taps:
            hidden = self.model.config.hidden_size
            self._stores[seq] = HiddenStore(len(self._taps), hidden, self._ctx_size)
        return seq

    def free_sequence(self, seq: int) -> None:
        # Freeing twice would wipe a lane that was handed the id in between: refuse instead.
        if self._caches.pop(seq, None) is None:
            raise RuntimeFault(f"sequence {seq} is not in use")
        self._stores.pop(seq, None)
        self._free.append(seq)
        self._free.sort()

    @property
    def open_sequences(self) -> int:
        """Sequences handed out and not yet freed."""
        return len(self._caches)

    def length(self, seq: int) -> int:
        """Positions `seq` holds (the `start` its next feed must carry)."""
        return self._cache(seq).length

    def cut(self, seq: int, length: int) -> None:
        cache = self._cache(seq)
        if not 0 <= length <= cache.length:
            raise RuntimeFault(
                f"cannot cut sequence {seq} to {length}: it holds {cache.length} positions"
            )
        refusal = self._capabilities.cut_refusal
        if refusal is not None and 0 < length < cache.length:
            raise RuntimeFault(f"cannot cut sequence {seq} to {length}: this model's {refusal}")
        cache.cut(length)

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        return self.forward(feeds)[0]

    # Beyond the port: hidden-state taps for drafters that read the target's hidden states.

    @property
    def taps(self) -> tuple[int, ...]:
        """The tap layers every step keeps per sequence (ascending)."""
        return self._taps

    def require_taps(self, layer_ids: Sequence[int]) -> None:
        """Keep the hidden states at `layer_ids` (0..num_layers) for every fed token from now on.

        Called when a drafter registers, before any sequence is open: a sequence opened earlier
        would lack the rows of the tokens it already holds.
        """
        layers = self.model.config.num_layers
        bad = next((i for i in layer_ids if not 0 <= i <= layers), None)
        if bad is not None:
            raise ValueError(f"tap {bad} is not in 0..{layers}")
        wanted = tuple(sorted(set(self._taps) | set(layer_ids)))
        if wanted == self._taps:
            return
        if self._caches:
            raise RuntimeFault("hidden-state taps must be required before any sequence opens")
        self._taps = wanted

    def hidden(self, seq: int, taps: Sequence[int] | None = None, *, start: int = 0) -> F32:
        """The target's hidden states for `seq` at positions start..length-1 and the given taps
        (default: all kept, in `taps` order): [length - start, len(taps), hidden], a copy."""
        length = self._cache(seq).length
        wanted = self._taps if taps is None else tuple(taps)
        missing = next((t for t in wanted if t not in self._taps), None)
        if missing is not None:
            raise RuntimeFault(f"hidden-state tap {missing} is not kept (require_taps it first)")
        if not 0 <= start <= length:
            raise RuntimeFault(f"sequence {seq} holds {length} positions, not {start}")
        store = self._stores.get(seq)
        if store is None:  # no taps are kept at all, so none were asked for
            return np.zeros((length - start, 0, self.model.config.hidden_size), dtype=np.float32)
        return store.read(start, length, [self._taps.index(t) for t in wanted])

    def forward(
        self, feeds: Sequence[Feed], *, taps: Sequence[int] = ()
    ) -> tuple[list[Logits], list[dict[int, Logits]]]:
        """`step`, plus per feed the residual stream at each tap, one row per fed token
        (tap numbering in model.py)."""
        if not feeds:
            return [], []
        seen: set[int] = set()
        passes = [self._pass(feed, seen) for feed in feeds]
        try:
            out = self.model.forward(passes, taps=sorted(set(taps) | set(self._taps)))
        except ValueError as err:  # checked above; a bug if it happens, still only a step fault
            raise RuntimeFault(str(err)) from None
        if self._taps:
            for feed, rows in zip(feeds, out.hidden, strict=True):
                stacked = np.stack([rows[t] for t in self._taps], axis=1)
                self._stores[feed.seq].write(feed.start, stacked)
        asked = set(taps)
        return out.logits, [{t: r for t, r in rows.items() if t in asked} for rows in out.hidden]

    def drafter(self, strategy: Strategy, path: Path | None) -> Drafter:
        """A drafter for this model (the registration's DrafterEngine); EngineRefusal says why not."""
        if self._capabilities.cut_refusal is not None:
            raise EngineRefusal(
                f"drafts are cut off after rejection, and this model's {self._capabilities.cut_refusal}"
            )
        if strategy is Strategy.PROMPT_LOOKUP:
            return PromptLookupDrafter()
        return load_drafter(strategy, path, self)

    def _cache(self, seq: int) -> KVCache:
        cache = self._caches.get(seq)
        if cache is None:
            raise RuntimeFault(f"sequence {seq} is not in use")
        return cache

    def _pass(self, feed: Feed, seen: set[int]) -> Pass:
        cache = self._cache(feed.seq)
        if feed.seq in seen:
            raise RuntimeFault(f"sequence {feed.seq} is fed twice in one step")
        seen.add(feed.seq)
        if not feed.tokens:
            raise RuntimeFault(f"an empty feed for sequence {feed.seq}")
        if feed.start != cache.length:
            raise RuntimeFault(
                f"a feed for sequence {feed.seq} starts at {feed.start}, "
                f"but it holds {cache.length} positions"
            )
        if cache.length + len(feed.tokens) > self._ctx_size:
            raise RuntimeFault(
                f"sequence {feed.seq} would pass the context size "
                f"({cache.length} + {len(feed.tokens)} > {self._ctx_size})"
            )
        vocab = self.model.config.vocab_size
        bad = next((t for t in feed.tokens if not 0 <= t < vocab), None)
        if bad is not None:
            raise RuntimeFault(f"token {bad} is outside the vocabulary (0..{vocab - 1})")
        return Pass(cache, feed.tokens, feed.all_rows)


#: Where the closed libbaseRT engine has builds (macOS arm64; Linux arm64 with a GB10).
_ENGINE_PLATFORMS = {("Darwin", "arm64"), ("Linux", "aarch64")}


def engine_note(shown: str, system: str | None = None, machine: str | None = None) -> str:
    """What startup says about the engine that runs `shown`, true on the platform it runs on."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if (system, machine) in _ENGINE_PLATFORMS:
        return (
            f"running {shown} on the reference backend (numpy); superfluid does not drive the"
            " libbaseRT engine, whose C API gives last-row logits only (docs/contract.md §10)"
        )
    return (
        f"the libbaseRT engine has no build for {system} {machine}; running {shown} on the"
        " reference backend (numpy)"
    )
