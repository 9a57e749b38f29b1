"""The tokenizer a `.base` bundle carries in its header, through HF `tokenizers`.

Header shape (this project's convention for the reference backend):

    "tokenizer": {
        "tokenizer_type": "hf",             # optional; anything else is refused
        "tokenizer_json": "<tokenizer.json>",  # the file's text, or the same JSON as an object
        "add_bos_token": false              # optional: prepend config.bos_token_id when asked
    }
    "config": {"bos_token_id": 1, "eos_token_id": 2 | [2, 7], ...}

Token ids for begin and end come from `config` (an int or a list for EOS). A config without
`eos_token_id` falls back to the tokenizer's own end tokens (`<|endoftext|>`, `<|im_end|>`,
`</s>`, `<|eot_id|>`, `<|end_of_text|>`), whichever it has.

Detokenising works token by token from a table built once, so that the bytes of a
concatenation are the concatenation of the bytes — the property streaming needs, since an
accepted draft arrives as a chunk of several tokens and a character may be split across chunks:
- byte-level BPE (decoder `ByteLevel`): each token's characters map back to the bytes they
  stand for (the GPT-2 byte alphabet), exactly, including half a UTF-8 character;
- other vocabularies (SentencePiece style): `▁` is a space and `<0xNN>` the byte NN. The leading
  space such decoders strip at the very start of a text is kept (as llama.cpp does per piece);
- special tokens (turn markers, EOS) detokenise to nothing, as llama.cpp renders them without
  its `special` flag; added tokens that are not special keep their text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer

from superfluid.adapters.basert.bundle import BundleError
from superfluid.domain.bundle_header import BundleHeader

_END_TOKENS = ("<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>", "<|end_of_text|>")
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def byte_alphabet() -> dict[str, int]:
    """The GPT-2 byte-level alphabet, character → byte: printable Latin-1 bytes stand for
    themselves, the other 68 bytes take the characters from U+0100 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    kept = set(keep)
    chars: dict[str, int] = {chr(b): b for b in keep}
    extra = 0
    for b in range(256):
        if b not in kept:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class BundleTokenizer:
    """Tokenize and detokenize for one bundle; `pieces[i]` is token i's bytes."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        document: Mapping[str, Any],
        *,
        bos: int | None,
        eos: frozenset[int],
        add_bos: bool,
    ) -> None:
        self._tokenizer = tokenizer
        self.bos = bos
        self.eos_tokens = eos
        self.add_bos = add_bos
        self.size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.byte_level = _is_byte_level(document.get("decoder"))
        self.pieces = self._pieces()

    @classmethod
    def from_header(cls, header: BundleHeader, shown: str) -> BundleTokenizer:
        """The bundle's tokenizer, or one BundleError saying what is missing or wrong."""
        spec = header.raw.get("tokenizer")
        if not isinstance(spec, Mapping):
            raise BundleError(f"{shown}: the header carries no tokenizer object")
        kind = spec.get("tokenizer_type", "hf")
        if kind != "hf":
            raise BundleError(
                f"{shown}: tokenizer_type {kind!r} is not one the reference backend reads (hf)"
            )
        embedded = spec.get("tokenizer_json")
        if isinstance(embedded, str):
            text = embedded
            try:
                document = json.loads(text)
            except ValueError:
                raise BundleError(f"{shown}: tokenizer.tokenizer_json is not JSON") from None
        elif isinstance(embedded, Mapping):
            document, text = embedded, json.dumps(embedded)
        else:
            raise BundleError(f"{shown}: the header's tokenizer has no tokenizer_json")
        if not isinstance(document, Mapping):
            raise BundleError(f"{shown}: tokenizer.tokenizer_json is not a JSON object")
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as err:  # the library raises bare Exceptions for bad JSON shapes
            raise BundleError(f"{shown}: the embedded tokenizer does not load ({err})") from None
        config = header.raw.get("config")
        config = config if isinstance(config, Mapping) else {}
        add_bos = spec.get("add_bos_token", False)
        if not isinstance(add_bos, bool):
            raise BundleError(f"{shown}: tokenizer.add_bos_token must be true or false")
        bos = _ids(config.get("bos_token_id"), shown, "bos_token_id")
        eos = _ids(config.get("eos_token_id"), shown, "eos_token_id")
        if not eos:
            found = (tokenizer.token_to_id(name) for name in _END_TOKENS)
            eos = [t for t in found if t is not None]
        return cls(
            tokenizer,
            document,
            bos=bos[0] if bos else None,
            eos=frozenset(eos),
            add_bos=add_bos,
        )

    def token_id(self, text: str) -> int | None:
        """The id of a token spelled exactly `text` (a special token, say), else None."""
        found = self._tokenizer.token_to_id(text)
        return None if found is None else int(found)

    def vocabulary(self) -> dict[str, int]:
        """Every token (added ones included) and its id: two tokenizers agree when these do."""
        return dict(self._tokenizer.get_vocab(with_added_tokens=True))

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Token ids; special tokens spelled in `text` become their ids (chat templates)."""
        ids = list(self._tokenizer.encode(text, add_special_tokens=add_special).ids)
        if add_special and self.add_bos and self.bos is not None and ids[:1] != [self.bos]:
            ids.insert(0, self.bos)
        return ids

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """The bytes of `tokens`; ids past the tokenizer's vocabulary (padding rows of a
        larger model vocabulary) are empty. Raises IndexError for a negative id."""
        pieces, size = self.pieces, self.size
        out = []
        for token in tokens:
            t = int(token)
            if t < 0:
                raise IndexError(f"token {t} is not a token id")
            out.append(pieces[t] if t < size else b"")
        return b"".join(out)

    def _pieces(self) -> list[bytes]:
        added = self._tokenizer.get_added_tokens_decoder()
        alphabet = byte_alphabet()
        pieces: list[bytes] = []
        for token in range(self.size):
            special = added.get(token)
            if special is not None:
                pieces.append(b"" if special.special else special.content.encode("utf-8"))
                continue
            text = self._tokenizer.id_to_token(token) or ""
            pieces.append(self._piece(text, alphabet))
        return pieces

    def _piece(self, text: str, alphabet: Mapping[str, int]) -> bytes:
        if self.byte_level:
            if all(ch in alphabet for ch in text):
                return bytes(alphabet[ch] for ch in text)
            return text.encode("utf-8")  # not a byte-level token after all: take its text
        byte = _BYTE_TOKEN.fullmatch(text)
        if byte is not None:
            return bytes([int(byte.group(1), 16)])
        return text.replace("\u2581", " ").encode("utf-8")


def _is_byte_level(decoder: object) -> bool:
    if not isinstance(decoder, Mapping):
        return False
    if decoder.get("type") == "ByteLevel":
        return True
    parts = decoder.get("decoders")
    return isinstance(parts, list) and any(_is_byte_level(part) for part in parts)


def _ids(value: object, shown: str, key: str) -> list[int]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    ids = [i for i in items if isinstance(i, int) and not isinstance(i, bool) and i >= 0]
    if len(ids) != len(items):
        raise BundleError(f"{shown}: config.{key} must be a token id or a list of them")
    return ids
