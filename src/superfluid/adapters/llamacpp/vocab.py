"""Tokenising and detokenising through llama.cpp's vocabulary.

Detokenising is a concatenation of per-token pieces, so `detokenize(a + b) ==
detokenize(a) + detokenize(b)`: the caller streams bytes token by token and assembles UTF-8
itself. Pieces are cached because a stream asks for the same few thousand tokens again and again.
Control tokens (turn markers, EOS) render as nothing: they are structure, not text.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from superfluid.application.ports import RuntimeFault

# Up to this many tokens, asking is_eog of every token is a one-time scan at load, cheap enough.
_EOG_SCAN_LIMIT = 1 << 20


class Vocabulary:
    def __init__(self, lib: ModuleType, model: Any) -> None:
        self._lib = lib
        self._vocab = lib.llama_model_get_vocab(model)
        self.size = int(lib.llama_vocab_n_tokens(self._vocab))
        self.adds_bos = bool(lib.llama_vocab_get_add_bos(self._vocab))
        self._pieces: list[bytes | None] = [None] * self.size
        self.eos_tokens = self._end_of_generation()

    def _end_of_generation(self) -> frozenset[int]:
        lib, vocab = self._lib, self._vocab
        found = {int(lib.llama_vocab_eos(vocab)), int(lib.llama_vocab_eot(vocab))}
        if self.size <= _EOG_SCAN_LIMIT:
            # llama.cpp marks more ends than EOS/EOT (Gemma's <end_of_turn>, <|im_end|>, …).
            is_eog = lib.llama_vocab_is_eog
            found.update(t for t in range(self.size) if is_eog(vocab, t))
        return frozenset(t for t in found if 0 <= t < self.size)

    def token_text(self, token: int) -> str:
        """A token's text as the vocabulary spells it (special tokens included)."""
        raw = self._piece(token, special=True)
        return raw.decode("utf-8", "replace")

    @property
    def bos(self) -> int:
        return int(self._lib.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(self._lib.llama_vocab_eos(self._vocab))

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        # parse_special: chat templates spell turn markers as text that must become their tokens.
        raw = text.encode("utf-8")
        capacity = len(raw) + 8
        while True:
            buf = (ctypes.c_int32 * capacity)()
            n = self._lib.llama_tokenize(
                self._vocab, raw, len(raw), buf, capacity, add_special, True
            )
            if n >= 0:
                return buf[:n]
            if -n <= capacity:
                raise RuntimeFault(f"llama_tokenize failed ({n})")
            capacity = -n

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        pieces = self._pieces
        out: list[bytes] = []
        for token in tokens:
            t = int(token)
            if not 0 <= t < self.size:
                raise RuntimeFault(f"token {t} is outside the vocabulary (0..{self.size - 1})")
            piece = pieces[t]
            if piece is None:
                piece = pieces[t] = self._piece(t, special=False)
            out.append(piece)
        return b"".join(out)

    def _piece(self, token: int, *, special: bool) -> bytes:
        size = 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, size, 0, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n
