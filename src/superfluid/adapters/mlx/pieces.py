"""Detokenising as a concatenation of per-token byte pieces.

The caller streams bytes token by token and assembles UTF-8 itself, so `detokenize(a + b)`
must equal `detokenize(a) + detokenize(b)`; a Hugging Face `decode` does not promise that (it
cleans up spaces, strips a leading one, and turns half a UTF-8 sequence into U+FFFD). Each
token's bytes are read off its vocabulary entry instead, by the tokenizer's decoder kind:

- byte-level BPE (GPT-2, Llama 3, Qwen): every byte is spelt as one printable character;
- SentencePiece (Llama 2, Mistral, Gemma): `▁` is a space and `<0xNN>` is a raw byte;
- anything else: the token decoded alone (exact for whole characters, lossy for split ones).

Special tokens (turn markers, EOS) render as nothing: they are structure, not text. Non-special
added tokens (`<think>` in some vocabularies) are text and render as written. The table is
built once at load, so detokenising never calls into the tokenizer from the worker thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from superfluid.application.ports import RuntimeFault

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPM_SPACE = "\u2581"


def _byte_level_alphabet() -> dict[str, int]:
    """The character byte-level BPE writes for each byte value: printable Latin-1 bytes stand
    for themselves, the rest are moved past 255 in byte order so that none is whitespace."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    chars: dict[str, int] = {chr(b): b for b in printable}
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            chars[chr(256 + shifted)] = byte
            shifted += 1
    return chars


def decoder_kind(tokenizer: Any) -> str:
    """`byte-level`, `sentencepiece` or `decode`, from the fast tokenizer's decoder."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "decode"
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    types = {part.get("type") for part in parts}
    if "ByteLevel" in types:
        return "byte-level"
    replaces_space = any(
        part.get("type") == "Replace" and part.get("pattern", {}).get("String") == _SPM_SPACE
        for part in parts
    )
    if "Metaspace" in types or "ByteFallback" in types or replaces_space:
        return "sentencepiece"
    return "decode"


class Pieces:
    """Every token's bytes, read once from a Hugging Face tokenizer."""

    def __init__(self, tokenizer: Any, *, vocab_size: int) -> None:
        self.kind = decoder_kind(tokenizer)
        vocab: dict[str, int] = tokenizer.get_vocab()
        size = max(vocab_size, max(vocab.values(), default=-1) + 1)
        # Ids the tokenizer does not know (a model's padded vocabulary) render as nothing.
        table: list[bytes] = [b""] * size
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        alphabet = _byte_level_alphabet() if self.kind == "byte-level" else {}
        for text, token in vocab.items():
            if self.kind == "sentencepiece" and _BYTE_TOKEN.fullmatch(text):
                # A raw byte, even where a vocabulary lists its byte tokens as special.
                table[token] = _sentencepiece_piece(text)
                continue
            if token in special or (token in added and added[token].special):
                continue
            if token in added:
                table[token] = added[token].content.encode("utf-8")
            elif self.kind == "byte-level":
                table[token] = _byte_level_piece(text, alphabet)
            elif self.kind == "sentencepiece":
                table[token] = _sentencepiece_piece(text)
            else:
                table[token] = tokenizer.decode([token]).encode("utf-8")
        self._table = table

    @property
    def size(self) -> int:
        return len(self._table)

    def __call__(self, tokens: Sequence[int]) -> bytes:
        table, size = self._table, len(self._table)
        out: list[bytes] = []
        for token in tokens:
            t = int(token)
            if not 0 <= t < size:
                raise RuntimeFault(f"token {t} is outside the vocabulary (0..{size - 1})")
            out.append(table[t])
        return b"".join(out)


def _byte_level_piece(text: str, alphabet: dict[str, int]) -> bytes:
    if all(c in alphabet for c in text):
        return bytes(alphabet[c] for c in text)
    return text.encode("utf-8")  # not spelt in the byte alphabet: plain text


def _sentencepiece_piece(text: str) -> bytes:
    match = _BYTE_TOKEN.fullmatch(text)
    if match:
        return bytes([int(match.group(1), 16)])
    return text.replace(_SPM_SPACE, " ").encode("utf-8")
