"""The MLX runtime: one MLX model directory through mlx-lm, a prompt cache per sequence.

MLX verifies one lane at a time. mlx-lm's caches hold one sequence each (its batched caches
pad and mask lanes instead of packing them), so a step runs its feeds one forward pass after
another, each over that sequence's own cache. The capability record says so
(`verify_batches=False`) and the executor drafts only while at most one lane decodes: a
verify pass for several lanes would cost several passes, which speculation does not repay.

Cutting goes through `kv.cut_exactly`: trimmability is checked before, every layer's offset
after, and a cache that did not cut fails the lane (RuntimeFault) instead of decoding on from
positions that should be gone. Models whose caches cannot cut (sliding windows shorter than
the context, recurrent state) say so in `cut_refusal`, and register no strategy.

Offline by construction: the model must be a local directory; mlx-lm would otherwise take the
path for a Hugging Face repository id and download it.

Threads. Since mlx 0.31.2 an array with pending work belongs to the stream of the thread that
built it. Loading evaluates every weight (mlx-lm's `lazy=False`), caches are made in
`new_sequence` and every step evaluates its results and the caches before returning, so no
pending work crosses from the loading thread to the executor's worker. Tokenising runs on
other threads (the HTTP layer's pool) and Hugging Face fast tokenizers are not safe to share
across threads, so it takes a lock; detokenising reads a table built at load.

Not thread-safe otherwise: one executor thread owns a runtime.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from superfluid.adapters.chat_templates import Messages, TemplatedChat, Tools
from superfluid.adapters.closing import ClosedOnExit
from superfluid.adapters.mlx import ModelLoadError
from superfluid.adapters.mlx.chat import chat_template_file, chat_template_of
from superfluid.adapters.mlx.kv import CutFailed, cut_exactly, cut_refusal, offsets
from superfluid.adapters.mlx.pieces import Pieces
from superfluid.adapters.sequences import BROKEN, SequenceTable
from superfluid.application.ports import Capabilities, Feed, Logits, RuntimeFault
from superfluid.domain.strategies import Strategy

MAX_VERIFY_ROWS = 16
# Prompt tokens per forward pass: a longer feed (prefill) runs as several, over the same cache.
PREFILL_STEP = 512


class MlxRuntime(TemplatedChat, ClosedOnExit):
    """A loaded MLX model behind the `Runtime` port (see application/ports.py)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: dict[str, Any],
        *,
        path: Path,
        ctx_size: int,
        max_sequences: int,
    ) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self.path = path
        self.architecture = str(config.get("model_type", "unknown"))
        self._ctx_size = ctx_size
        self._max_sequences = max_sequences
        self._text_lock = threading.Lock()
        self._sequences = SequenceTable(max_sequences, ctx_size)
        self._caches: dict[int, list[Any]] = {}
        vocab_size = int(config.get("vocab_size") or _text_config(config).get("vocab_size") or 0)
        self.pieces = Pieces(tokenizer, vocab_size=vocab_size)
        self._bos = tokenizer.bos_token_id
        self._adds_bos = self._bos is not None and tokenizer.encode("")[:1] == [self._bos]
        self.chat_template = chat_template_of(tokenizer, adds_bos=self._adds_bos)
        self._capabilities = self._describe(_eos_tokens(tokenizer, path, self.pieces.size))

    @classmethod
    def load(cls, path: Path | str, *, ctx_size: int = 4096, max_sequences: int = 4) -> MlxRuntime:
        """Load an MLX model directory: `max_sequences` lanes of `ctx_size` positions each."""
        path = Path(path).expanduser()
        # A path that is not a directory here would send mlx-lm to the Hugging Face hub.
        if not path.is_dir():
            raise ModelLoadError(f"{path}: no such MLX model directory")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path}: not an MLX model directory (no config.json)")
        if ctx_size < 1 or max_sequences < 1:
            raise ValueError("ctx_size and max_sequences must be positive")
        try:
            loaded = mlx_lm.load(str(path), return_config=True)
        except Exception as exc:  # mlx-lm and transformers raise many kinds; all mean "cannot load"
            raise ModelLoadError(f"{path}: mlx-lm cannot load this directory ({exc})") from exc
        model, tokenizer, config = cast(tuple[Any, Any, dict[str, Any]], loaded)
        return cls(
            model, tokenizer, config, path=path, ctx_size=ctx_size, max_sequences=max_sequences
        )

    def _describe(self, eos_tokens: frozenset[int]) -> Capabilities:
        # The model's own cache layout decides; a fresh cache holds no arrays yet.
        refusal = cut_refusal(make_prompt_cache(self._model), context_size=self._ctx_size)
        return Capabilities(
            runtime="mlx",
            verify_rows=True,
            verify_batches=False,
            cut_refusal=refusal,
            strategies=(Strategy.PROMPT_LOOKUP,) if refusal is None else (),
            max_verify_rows=MAX_VERIFY_ROWS,
            context_size=self._ctx_size,
            eos_tokens=eos_tokens,
            max_sequences=self._max_sequences,
            reuse_refusal=(
                "MLX computes a prompt's KV with other kernels than a decoded token's, so a"
                " reused prefix could change the output"
            ),
        )

    # The Runtime port.

    @property
    def name(self) -> str:
        return "mlx"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        with self._text_lock:
            return list(self._tokenizer.encode(text, add_special_tokens=add_special))

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return self.pieces(tokens)

    def chat_prompt(self, messages: Messages, tools: Tools | None = None) -> str:
        # TemplatedChat's, under the lock the tokenizer's other users take.
        with self._text_lock:
            return self.chat_template(messages, tools)

    def use_chat_template_file(self, path: str) -> None:
        self.chat_template = chat_template_file(path, self._tokenizer, adds_bos=self._adds_bos)

    def new_sequence(self, prefer: int | None = None) -> int:
        self._open()
        seq = self._sequences.allocate(prefer)
        self._caches[seq] = make_prompt_cache(self._model)
        return seq

    def free_sequence(self, seq: int) -> None:
        self._sequences.release(seq)
        self._caches.pop(seq, None)

    def length(self, seq: int) -> int:
        """Positions `seq` holds (the `start` its next feed must carry)."""
        return self._sequences.held(seq)

    def cut(self, seq: int, length: int) -> None:
        held = self._sequences.check_cut(seq, length)
        if held == BROKEN:
            raise RuntimeFault(f"sequence {seq} failed a cut; free it and start again")
        if length == held:
            return
        if length == 0:  # a fresh cache is an exact cut to nothing, whatever the cache kind
            self._caches[seq] = make_prompt_cache(self._model)
            self._sequences.set(seq, 0)
            return
        refusal = self._capabilities.cut_refusal
        if refusal is not None:
            raise RuntimeFault(f"cannot cut sequence {seq} to {length}: this model's {refusal}")
        try:
            cut_exactly(self._caches[seq], held=held, length=length)
        except CutFailed as failure:
            # What the cache holds is now unknown: no feed may build on it.
            self._sequences.set(seq, BROKEN)
            raise RuntimeFault(
                f"cutting sequence {seq} from {held} to {length} positions failed: {failure}"
            ) from failure
        self._sequences.set(seq, length)

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        if not feeds:
            return []
        self._open()
        self._sequences.check_feeds(feeds)
        for feed in feeds:
            if any(not 0 <= int(t) < self.pieces.size for t in feed.tokens):
                raise RuntimeFault(
                    f"a feed for sequence {feed.seq} has a token outside the vocabulary"
                )
        results: list[Logits] = []
        done: list[Feed] = []
        try:
            for feed in feeds:
                done.append(feed)
                results.append(self._run(feed))
                self._sequences.advance([feed])
        except Exception as exc:
            self._roll_back(done)
            if isinstance(exc, RuntimeFault):
                raise
            raise RuntimeFault(
                f"the MLX forward pass failed ({type(exc).__name__}: {exc})"
            ) from exc
        return results

    def _run(self, feed: Feed) -> Logits:
        cache = self._caches[feed.seq]
        tokens = list(feed.tokens)
        # Rows are wanted for every token (verification) or for the last one only; a long
        # prefill runs in pieces whose rows, but for the last piece's last, nobody reads.
        pieces = [tokens] if feed.all_rows else _chunks(tokens, PREFILL_STEP)
        rows: Any = None
        for piece in pieces:
            logits = self._model(mx.array([piece], dtype=mx.int32), cache=cache)
            rows = logits[0] if feed.all_rows else logits[0, -1:]
            rows = rows.astype(mx.float32)
            # Evaluate the cache with the rows: no pending work outlives the step.
            mx.eval(rows, [entry.state for entry in cache])
        return np.array(rows, dtype=np.float32)

    def _roll_back(self, feeds: Sequence[Feed]) -> None:
        # A failed step leaves each sequence as it was before it, where the cache can cut;
        # one that cannot is marked so that no feed builds on it (the executor frees it).
        for feed in feeds:
            cache = self._caches.get(feed.seq)
            if cache is None:
                continue
            try:
                held = max(_layer_offsets(cache), default=feed.start)
                if held != feed.start:
                    cut_exactly(cache, held=held, length=feed.start)
                self._sequences.set(feed.seq, feed.start)
            except CutFailed:
                self._sequences.set(feed.seq, BROKEN)

    def _open(self) -> None:
        if self._model is None:
            raise RuntimeFault(f"{self.path.name} has been unloaded")

    # Lifetime.

    def close(self) -> None:
        """Drop the caches and the model; the runtime is unusable afterwards."""
        self._sequences.clear()
        self._caches.clear()
        self._model = None


def _chunks(tokens: list[int], size: int) -> list[list[int]]:
    return [tokens[i : i + size] for i in range(0, len(tokens), size)]


def _layer_offsets(cache: list[Any]) -> list[int]:
    try:
        return offsets(cache)
    except CutFailed:
        return []


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else {}


def _eos_tokens(tokenizer: Any, path: Path, vocab_size: int) -> frozenset[int]:
    """The tokenizer's ends (mlx-lm merges config.json's `eos_token_id` into them), plus
    generation_config.json's: chat models often list their end-of-turn tokens only there."""
    found = {int(t) for t in getattr(tokenizer, "eos_token_ids", ()) or ()}
    try:
        generation = json.loads((path / "generation_config.json").read_text())
    except (OSError, ValueError):
        generation = {}
    listed = generation.get("eos_token_id") if isinstance(generation, dict) else None
    if isinstance(listed, int):
        found.add(listed)
    elif isinstance(listed, list):
        found.update(int(t) for t in listed if isinstance(t, int))
    return frozenset(t for t in found if 0 <= t < vocab_size)
