"""The llama.cpp runtime: one GGUF model, one llama context, many sequences, one packed step.

Layout of the context. Every sequence (lane) has a KV stream of its own, `ctx_size` cells, so
a lane's cells stay in position order whatever the other lanes do (see `kernels.py`: attention
sums in cell order, and exactness depends on it). llama.cpp cuts a batch over several streams
into pieces that carry the same number of tokens for consecutive sequence ids, so a step's
feeds are laid out in sequence order; lanes that feed different numbers of tokens share the
first piece and the longer ones go on in further pieces.

A step is one `llama_decode` whenever its tokens fit in `n_batch` (512); longer prefills are
split into several decodes, in order, and the rows are gathered as each decode finishes. The
kernels are batch-invariant (`kernels.served_kernels`), so how a step is split changes no row.

Cutting. `llama_memory_seq_rm` removes a sequence's tail, but its boolean result is not to be
trusted (a sliding-window cache says yes and keeps a wrong window), so every cut is checked
against `llama_memory_seq_pos_max`. Gemma 3 and other sliding-window models cut exactly only
with the full-size SWA cache (`swa_full`), which is the default here.

Not thread-safe: one executor thread owns a runtime.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from superfluid.adapters.chat_templates import ChatTemplate, TemplatedChat, template_file
from superfluid.adapters.closing import ClosedOnExit
from superfluid.adapters.llamacpp.batch import PackedBatch
from superfluid.adapters.llamacpp.chat_template import gguf_chat_template
from superfluid.adapters.llamacpp.gguf_layout import UnreadableHeader, read_layout
from superfluid.adapters.llamacpp.kernel_inventory import (
    Build,
    Inventory,
    fallback_line,
    inventory,
    startup_line,
)
from superfluid.adapters.llamacpp.kernels import (
    KernelConflict,
    Kernels,
    apply_process_switches,
    served_kernels,
)
from superfluid.adapters.llamacpp.native import llama, model_meta
from superfluid.adapters.llamacpp.vocab import Vocabulary
from superfluid.adapters.llamacpp.widened_weights import widened_copy, widening_pays
from superfluid.adapters.sequences import SequenceTable
from superfluid.application.ports import Capabilities, Feed, Logits, RuntimeFault
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.strategies import Strategy

#: A verify step carries up to 65 rows per lane: a 64-token draft and the pending token (the
#: deepest draft the contract allows, §7). A step of more rows than `N_BATCH` is split into
#: several decodes, exactly (the kernels are batch-invariant).
MAX_VERIFY_ROWS = 65
#: Steps this wide or narrower may be padded into one pass: past 16 rows a row costs as much
#: as a pass saves (docs/benchmarks/verify-step-cost-8-lanes-65-rows/), so wider steps are
#: left as they come.
MAX_PADDED_WIDTH = 16
#: Throwaway rows worth one pass fewer (see `_padded_widths`): a padding row runs every layer
#: but the vocabulary head, a pass saved saves a read of every weight, and about ten rows is
#: where the two cross (`bench/llamacpp_padding_cost.py`; ADR 0008 has the measurements).
PADDING_ROWS_PER_PASS = 10


def cheap_logit_rows(rows: int) -> int:
    """The fewest logits rows, at least `rows`, that the vocabulary head computes cheaply.

    The head's matrix kernel works on blocks of rows, so 3 logits rows cost more than 4, 5-7
    more than 8, and past 8 an odd count more than the next even one
    (`bench/llamacpp_step_cost.py --logit-rows`; ADR 0013 has the measurements). A pass asks for
    throwaway logits rows up to the next count here. One or two rows are left alone: the one-row
    pass is the plain decode, and 4 rows cost more than 2.
    """
    if rows <= 2:
        return rows
    if rows <= 4:
        return 4
    if rows <= 8:
        return 8
    return rows + (rows & 1)


N_BATCH = 512

log = logging.getLogger("superfluid")

_DECODE_ERRORS = {
    1: "no free KV cells for the batch",
    2: "aborted",
    -1: "invalid input batch",
}


class ModelLoadError(SuperfluidError):
    """A GGUF file that llama.cpp cannot load."""


def _inventory(weights: Path, kernels: Kernels, build: Build) -> Inventory | None:
    """The kernel inventory of the file llama.cpp loaded (its header read again here)."""
    try:
        with weights.open("rb") as handle:
            return inventory(read_layout(handle), kernels, build)
    except (OSError, UnreadableHeader):
        return None


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS has no affinity API
        return max(1, os.cpu_count() or 1)


class LlamaCppRuntime(TemplatedChat, ClosedOnExit):
    """A loaded GGUF model behind the `Runtime` port (see application/ports.py)."""

    def __init__(
        self,
        lib: ModuleType,
        model: Any,
        ctx: Any,
        *,
        path: Path,
        ctx_size: int,
        max_sequences: int,
        kernels: Kernels,
        swa_full: bool,
        weights_path: Path | None = None,
    ) -> None:
        self._lib = lib
        self._model = model
        self._ctx = ctx
        self._mem = lib.llama_get_memory(ctx)
        self.path = path
        #: The file llama.cpp loaded: `path`, or its widened copy (`widened_weights`).
        self.weights_path = weights_path or path
        self.kernels = kernels
        self.architecture = model_meta(lib, model, "general.architecture") or "unknown"
        self.vocab = Vocabulary(lib, model)
        self._n_vocab = self.vocab.size
        self._row_bytes = self._n_vocab * 4
        self._ctx_size = ctx_size
        self._max_sequences = max_sequences
        n_batch = int(lib.llama_n_batch(ctx))
        self._batch = PackedBatch(lib, n_batch)
        # Tokens per llama_decode: a step longer than this runs as several decodes, in order.
        self.tokens_per_decode = n_batch
        self._sequences = SequenceTable(max_sequences, ctx_size)
        self.chat_template: ChatTemplate = gguf_chat_template(lib, model, self.vocab)
        #: The kernel each weight runs on; None when the header cannot be read here.
        self.inventory = _inventory(self.weights_path, kernels, Build.of(lib))
        self._capabilities = self._describe(swa_full)

    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as text, None when absent (model sampling defaults read it)."""
        return model_meta(self._lib, self._model, key)

    @classmethod
    def load(
        cls,
        path: Path | str,
        *,
        ctx_size: int = 4096,
        max_sequences: int = 4,
        swa_full: bool = True,
        n_threads: int | None = None,
        kernels: Kernels | None = None,
        weights_cache: Path | None = None,
    ) -> LlamaCppRuntime:
        """Load a GGUF file: `max_sequences` lanes of `ctx_size` positions each.

        `kernels` is for the benchmarks that measure other configurations; a served model always
        runs on batch-invariant ones (`served_kernels`: F16 with the patch, else BF16). With
        `weights_cache`, on x86 the file's Q5_0 weights are served as Q8_0 from a copy kept
        there (`widened_weights`: the same logits, faster; `weights_path` says which file).
        """
        path = Path(path).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"{path}: no such model file")
        if ctx_size < 1 or max_sequences < 1:
            raise ValueError("ctx_size and max_sequences must be positive")
        lib = llama()
        kernels = kernels or served_kernels(lib)
        try:
            apply_process_switches(lib, kernels)
        except KernelConflict as exc:
            raise ModelLoadError(f"{path}: {exc}") from exc
        weights = path
        if weights_cache is not None and widening_pays():
            weights = widened_copy(path, weights_cache) or path
        mparams = lib.llama_model_default_params()
        mparams.use_extra_bufts = kernels.repack_weights
        model = lib.llama_model_load_from_file(str(weights).encode(), mparams)
        if not model and weights != path:
            # A damaged copy in the cache must not stop a good file from being served.
            log.warning("%s: its widened copy %s does not load; serving the file", path, weights)
            weights = path
            model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise ModelLoadError(f"{path}: llama.cpp cannot load this file as a GGUF model")
        threads = n_threads or _default_threads()
        cparams = lib.llama_context_default_params()
        # Each sequence's stream gets n_ctx / n_seq_max cells; a unified cache shares them all.
        cparams.n_ctx = ctx_size * max_sequences
        cparams.n_batch = N_BATCH
        cparams.n_ubatch = N_BATCH
        cparams.n_seq_max = max_sequences
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.type_k = cparams.type_v = kernels.kv_type
        cparams.flash_attn_type = {
            None: lib.LLAMA_FLASH_ATTN_TYPE_AUTO,
            True: lib.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: lib.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[kernels.flash_attention]
        cparams.swa_full = swa_full
        cparams.kv_unified = not kernels.stream_per_sequence
        cparams.no_perf = True
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            lib.llama_model_free(model)
            raise ModelLoadError(
                f"{path}: llama.cpp cannot create a context of {max_sequences} x {ctx_size} positions; try a smaller --ctx-size or fewer lanes"
            )
        return cls(
            lib,
            model,
            ctx,
            path=path,
            ctx_size=ctx_size,
            max_sequences=max_sequences,
            kernels=kernels,
            swa_full=swa_full,
            weights_path=weights,
        )

    def _describe(self, swa_full: bool) -> Capabilities:
        refusal = self._cut_refusal(swa_full)
        inexact = self.inventory.refusal if self.inventory is not None else None
        return Capabilities(
            runtime="llamacpp",
            verify_rows=True,
            verify_batches=True,
            cut_refusal=refusal,
            strategies=(Strategy.PROMPT_LOOKUP,) if refusal is None and inexact is None else (),
            max_verify_rows=MAX_VERIFY_ROWS,
            context_size=self._ctx_size,
            eos_tokens=self.vocab.eos_tokens,
            max_sequences=self._max_sequences,
            reuse_refusal=inexact
            or (
                None
                if self.kernels.batch_invariant
                else "these kernels compute a token's KV differently in a batch and alone"
            ),
            exactness_refusal=inexact,
        )

    def kernel_lines(self) -> list[str]:
        """What the startup log says about this model's kernels: one line, and one more naming
        the types served on a slower exact fallback."""
        if self.inventory is None:
            return []
        lines = [f"{self.path.name} {startup_line(self.inventory, self.kernels)}"]
        fallback = fallback_line(self.inventory)
        if fallback is not None:
            lines.append(f"{self.path.name}: {fallback}")
        return lines

    def _cut_refusal(self, swa_full: bool) -> str | None:
        lib, model = self._lib, self._model
        is_hybrid = getattr(lib, "llama_model_is_hybrid", None)
        if lib.llama_model_is_recurrent(model) or (is_hybrid is not None and is_hybrid(model)):
            return "recurrent state cuts only at its head"
        if self.sliding_window() > 0 and not swa_full:
            return "sliding-window state cuts only at its head"
        return None

    def sliding_window(self) -> int:
        """The model's attention window in tokens; 0 when it attends to the whole context."""
        n_swa = getattr(self._lib, "llama_model_n_swa", None)
        if n_swa is not None:
            return int(n_swa(self._model))
        raw = model_meta(self._lib, self._model, f"{self.architecture}.attention.sliding_window")
        return int(raw) if raw and raw.isdigit() else 0

    # The Runtime port.

    @property
    def name(self) -> str:
        return "llamacpp"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        self._open()
        return self.vocab.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        self._open()
        return self.vocab.detokenize(tokens)

    def use_chat_template_file(self, path: str) -> None:
        self.chat_template = template_file(
            path,
            bos_token=self.vocab.token_text(self.vocab.bos) if self.vocab.bos >= 0 else "",
            eos_token=self.vocab.token_text(self.vocab.eos) if self.vocab.eos >= 0 else "",
            strip_bos=self.vocab.adds_bos,
        )

    def new_sequence(self, prefer: int | None = None) -> int:
        self._open()
        return self._sequences.allocate(prefer)

    def free_sequence(self, seq: int) -> None:
        self._sequences.release(seq)
        self._lib.llama_memory_seq_rm(self._mem, seq, -1, -1)

    def length(self, seq: int) -> int:
        """Positions `seq` holds (the `start` its next feed must carry)."""
        return self._sequences.held(seq)

    def cut(self, seq: int, length: int) -> None:
        held = self._sequences.check_cut(seq, length)
        if length == held:
            return
        refusal = self._capabilities.cut_refusal
        if refusal is not None and length > 0:
            raise RuntimeFault(f"cannot cut sequence {seq} to {length}: this model's {refusal}")
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, seq, length, -1)
        kept = int(lib.llama_memory_seq_pos_max(self._mem, seq)) + 1
        if kept != length:
            self._sequences.set(seq, kept)
            raise RuntimeFault(
                f"cutting sequence {seq} to {length} positions left {kept}: llama.cpp did not cut this model's KV"
            )
        self._sequences.set(seq, length)

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        if not feeds:
            return []
        self._open()
        batch, n_vocab = self._batch, self._n_vocab
        self._sequences.check_feeds(feeds)
        widths = self._padded_widths(feeds)
        fillers = self._gap_fillers(feeds, widths)
        widths, pads, row_fillers = self._logit_padding(feeds, widths, fillers)
        # (index of the feed's result, or None for a filler; the feed; its width in the batch;
        # throwaway logits rows after its real tokens, or from its start for a filler), in
        # sequence order: llama.cpp packs consecutive sequence ids into one pass.
        entries: list[tuple[int | None, Feed, int, int]] = [
            (i, feed, width, pad)
            for i, (feed, width, pad) in enumerate(zip(feeds, widths, pads, strict=True))
        ]
        entries += [(None, filler, len(filler.tokens), 0) for filler in fillers]
        entries += [(None, filler, len(filler.tokens), logits) for filler, logits in row_fillers]
        fillers = [*fillers, *(filler for filler, _ in row_fillers)]
        entries.sort(key=lambda entry: entry[1].seq)
        total = sum(width for _, _, width, _ in entries)
        batch.reserve(total)
        results: list[Logits] = [np.empty(0, np.float32)] * len(feeds)
        # (batch row, destination address): rows come out in batch order, chunk by chunk.
        wanted: list[tuple[int, int]] = []
        row_bytes = self._row_bytes
        offset = 0
        for index, feed, width, pad in entries:
            n = len(feed.tokens)
            end = offset + n
            batch.tokens[offset:end] = feed.tokens
            batch.tokens[end : offset + width] = feed.tokens[-1]
            batch.positions[offset : offset + width] = np.arange(
                feed.start, feed.start + width, dtype=np.int32
            )
            batch.seq_ids[offset : offset + width] = feed.seq
            batch.outputs[offset : offset + width] = 0
            if index is None:
                batch.outputs[offset : offset + pad] = 1  # computed, never read
                offset += width
                continue  # a filler: no rows of its own
            batch.outputs[end : end + pad] = 1  # throwaway rows after the real ones
            offset += width
            if feed.all_rows:
                batch.outputs[end - n : end] = 1
                first = end - n
            else:
                batch.outputs[end - 1] = 1
                first = end - 1
            rows = np.empty((end - first, n_vocab), dtype=np.float32)
            base = rows.ctypes.data
            wanted.extend((first + r, base + r * row_bytes) for r in range(end - first))
            results[index] = rows
        self._decode(feeds, total, wanted, fillers)
        self._drop_padding(feeds, widths, fillers)
        self._sequences.advance(feeds)
        return results

    def _padded_widths(self, feeds: Sequence[Feed]) -> list[int]:
        """Tokens each feed takes in the batch: its own, or padded to the step's longest.

        With a KV stream per sequence, llama.cpp runs a step's lanes in one pass only while they
        feed equal numbers of tokens; otherwise the longer lanes go on in further passes, each
        paying for every weight again. A verify step's shorter feeds are therefore padded with
        throwaway tokens (no logits row, cut off after the decode). That is exact: padding sits
        after the lane's real tokens, so no real row attends to it, and the kernels compute a
        row the same whatever else is in the batch. Prefill chunks are never padded.
        """
        widths = [len(feed.tokens) for feed in feeds]
        longest = max(widths)
        if len(feeds) == 1 or longest > MAX_PADDED_WIDTH or not self.kernels.stream_per_sequence:
            return widths
        padded = [
            longest if feed.start + longest <= self._ctx_size else width
            for feed, width in zip(feeds, widths, strict=True)
        ]
        # Padding rows run every layer but the vocabulary head; a pass saved saves a read of
        # every weight. Pad only while the rows added stay below what the saved passes cost.
        passes_saved = len(set(widths)) - len(set(padded))
        added = sum(padded) - sum(widths)
        return padded if added <= PADDING_ROWS_PER_PASS * passes_saved else widths

    def _gap_fillers(self, feeds: Sequence[Feed], widths: list[int]) -> list[Feed]:
        """Throwaway feeds for the sequence ids between the fed ones, so that one pass runs all.

        llama.cpp packs only consecutive sequence ids into a pass, and parked (reused) or free
        sequences leave gaps: lanes 0 and 2 would take two passes. A filler appends `width`
        tokens to the gap's sequence (after what it holds, or at 0 when it is free) and is cut
        off after the decode; like padding, it cannot move any other sequence's row.
        """
        if len(feeds) < 2 or not self.kernels.stream_per_sequence or len(set(widths)) != 1:
            return []
        width = widths[0]
        fed = sorted(feed.seq for feed in feeds)
        gaps = sorted(set(range(fed[0], fed[-1] + 1)) - set(fed))
        # Each run of consecutive ids is a pass of its own; filling the gaps joins them.
        passes_saved = sum(1 for a, b in itertools.pairwise(fed) if b > a + 1)
        added = len(gaps) * width
        if not gaps or width > MAX_PADDED_WIDTH or added > PADDING_ROWS_PER_PASS * passes_saved:
            return []
        fillers = []
        for seq in gaps:
            filler = self._throwaway_feed(seq, width, feeds[0].tokens[-1])
            if filler is None:
                return []  # let llama.cpp split the step
            fillers.append(filler)
        return fillers

    def _throwaway_feed(self, seq: int, width: int, token: int) -> Feed | None:
        """`width` copies of `token` appended to a sequence no lane feeds this step (after what
        it holds, or at 0 when it is free), to be cut off after the decode; None when the
        sequence is broken or has no room."""
        start = self._sequences.held(seq) if seq in self._sequences else 0
        if start < 0 or start + width > self._ctx_size:
            return None
        return Feed(seq, [token] * width, start)

    def _logit_padding(
        self, feeds: Sequence[Feed], widths: list[int], fillers: list[Feed]
    ) -> tuple[list[int], list[int], list[tuple[Feed, int]]]:
        """Throwaway logits rows that bring a one-pass step to a count `cheap_logit_rows` likes.

        Returns the feeds' widths (a lone feed may grow), how many of each feed's padding rows
        ask for logits, and filler feeds on the sequence ids after the fed ones, each with how
        many of its first rows ask for logits. Like all padding it is exact only on
        batch-invariant kernels: a row computes the same whatever else is in the pass, and
        nothing real attends to padding. Steps that llama.cpp would split into several passes
        anyway are left alone.
        """
        pads = [0] * len(feeds)
        rows = sum(len(feed.tokens) if feed.all_rows else 1 for feed in feeds)
        missing = cheap_logit_rows(rows) - rows
        if missing <= 0 or not self.kernels.batch_invariant:
            return widths, pads, []
        if len(feeds) == 1 and not fillers:
            feed = feeds[0]
            if feed.start + len(feed.tokens) + missing > self._ctx_size:
                return widths, pads, []
            return [len(feed.tokens) + missing], [missing], []
        width = widths[0]
        if len(set(widths)) != 1 or width > MAX_PADDED_WIDTH:
            return widths, pads, []
        fed = sorted([*(feed.seq for feed in feeds), *(filler.seq for filler in fillers)])
        if fed[-1] - fed[0] + 1 != len(fed):
            return widths, pads, []  # not one run of ids: llama.cpp splits it anyway
        for i, feed in enumerate(feeds):  # padding rows already in the batch come first
            pads[i] = min(width - len(feed.tokens), missing)
            missing -= pads[i]
        extra: list[tuple[Feed, int]] = []
        seq = fed[-1] + 1
        while missing > 0:
            filler = None
            if seq < self._max_sequences:
                filler = self._throwaway_feed(seq, width, feeds[0].tokens[-1])
            if filler is None:
                return widths, [0] * len(feeds), []
            extra.append((filler, min(width, missing)))
            missing -= width
            seq += 1
        return widths, pads, extra

    def _drop_padding(self, feeds: Sequence[Feed], widths: list[int], fillers: list[Feed]) -> None:
        lib = self._lib
        cuts = [
            (feed.seq, feed.start + len(feed.tokens))
            for feed, width in zip(feeds, widths, strict=True)
            if width != len(feed.tokens)
        ]
        cuts += [(filler.seq, filler.start) for filler in fillers]
        for seq, end in cuts:
            lib.llama_memory_seq_rm(self._mem, seq, end, -1)
            if int(lib.llama_memory_seq_pos_max(self._mem, seq)) + 1 != end:
                self._roll_back(feeds, fillers)
                raise RuntimeFault(f"llama.cpp did not cut the padding off sequence {seq}")

    def _decode(
        self,
        feeds: Sequence[Feed],
        total: int,
        wanted: list[tuple[int, int]],
        fillers: Sequence[Feed] = (),
    ) -> None:
        lib, ctx, batch = self._lib, self._ctx, self._batch
        get_row, memmove, row_bytes = lib.llama_get_logits_ith, ctypes.memmove, self._row_bytes
        next_row = 0
        per_decode = self.tokens_per_decode
        for chunk in range(0, total, per_decode):
            count = min(per_decode, total - chunk)
            rc = lib.llama_decode(ctx, batch.view(chunk, count))
            if rc != 0:
                self._roll_back(feeds, fillers)
                why = _DECODE_ERRORS.get(rc, "fatal error")
                raise RuntimeFault(f"llama_decode failed ({rc}: {why})")
            end = chunk + count
            while next_row < len(wanted) and wanted[next_row][0] < end:
                index, dest = wanted[next_row]
                src = get_row(ctx, index - chunk)
                if not src:
                    self._roll_back(feeds, fillers)
                    raise RuntimeFault(f"llama.cpp returned no logits for batch row {index}")
                memmove(dest, src, row_bytes)
                next_row += 1

    def _roll_back(self, feeds: Sequence[Feed], fillers: Sequence[Feed] = ()) -> None:
        # A failed or partly decoded step leaves each sequence as it was before the step.
        for feed in feeds:
            self._lib.llama_memory_seq_rm(self._mem, feed.seq, feed.start, -1)
            self._sequences.set(feed.seq, feed.start)
        for filler in fillers:
            self._lib.llama_memory_seq_rm(self._mem, filler.seq, filler.start, -1)

    def _open(self) -> None:
        # After close() the C pointers are freed: a call through them would crash the process.
        if self._ctx is None:
            raise RuntimeFault(f"{self.path.name} has been unloaded")

    # Lifetime.

    def close(self) -> None:
        """Free the context and the model; the runtime is unusable afterwards."""
        self._sequences.clear()
        if self._ctx is not None:
            self._lib.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            self._lib.llama_model_free(self._model)
            self._model = None
