"""The serving-overhead floor: a minimal greedy loop on llama.cpp's C API, in-process.

One context, one sequence, one row per step: prefill the prompt with `llama_batch_get_one`
(logits for the last token only), then `llama_decode` one token at a time, taking the argmax of
the last row with numpy, until an end-of-generation token or `max_tokens`. No server, no
sampler chain, no drafting. Its tokens per second, prefill included, are what a plain request
through a server can at best approach.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from superfluid.adapters.llamacpp.chat_template import gguf_chat_template
from superfluid.adapters.llamacpp.vocab import Vocabulary


@dataclass(frozen=True, slots=True)
class LoopRun:
    prompt_tokens: int
    tokens: int
    seconds: float  # prefill + decode
    decode_seconds: float  # after the first token

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_rate(self) -> float:
        return (self.tokens - 1) / self.decode_seconds if self.decode_seconds > 0 else 0.0


#: The one log callback every RawLoop installs (see RawLoop.__init__).
_QUIET: Any = None


class RawLoop:
    """A loaded model and context; `generate` runs one greedy request from an empty cache."""

    def __init__(self, model: Path, *, ctx_size: int, threads: int) -> None:
        import llama_cpp as lib

        self._lib = lib
        # llama.cpp logs every tensor it loads; the floor has nothing to say. The callback lives
        # as long as the process: llama.cpp keeps calling it after this loop is gone.
        global _QUIET
        if _QUIET is None:
            _QUIET = lib.llama_log_callback(lambda level, text, data: None)
        lib.llama_log_set(_QUIET, ctypes.c_void_p(0))
        lib.llama_backend_init()
        self._model = lib.llama_model_load_from_file(
            str(model).encode(), lib.llama_model_default_params()
        )
        if not self._model:
            raise RuntimeError(f"llama.cpp cannot load {model}")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = ctx_size
        cparams.n_batch = 512
        cparams.n_ubatch = 512
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise RuntimeError("llama.cpp cannot create a context")
        self._vocab = lib.llama_model_get_vocab(self._model)
        self._n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self._mem = lib.llama_get_memory(self._ctx)
        self._chat = gguf_chat_template(lib, self._model, Vocabulary(lib, self._model))

    def chat_turn(self, text: str) -> str:
        """One user message in the model's own chat template, as superfluid renders it (the
        demo GGUF has none: Gemma's turn, which both servers render for it too)."""
        return self._chat([{"role": "user", "content": text}])

    def tokenize(self, text: str) -> list[int]:
        """With BOS, special tokens parsed (`<start_of_turn>`), as the servers tokenize."""
        lib = self._lib
        data = text.encode()
        room = len(data) + 16
        buf = (lib.llama_token * room)()
        n = lib.llama_tokenize(self._vocab, data, len(data), buf, room, True, True)
        if n < 0:
            raise RuntimeError("tokenization overflowed")
        return list(buf[:n])

    def generate(self, prompt: list[int], max_tokens: int) -> LoopRun:
        lib = self._lib
        lib.llama_memory_clear(self._mem, True)
        began = time.perf_counter()
        for start in range(0, len(prompt), 512):
            chunk = prompt[start : start + 512]
            self._decode((lib.llama_token * len(chunk))(*chunk))
        token = self._argmax()
        first = time.perf_counter()
        count = 1
        one = (lib.llama_token * 1)()
        while count < max_tokens and not lib.llama_vocab_is_eog(self._vocab, token):
            one[0] = token
            self._decode(one)
            token = self._argmax()
            count += 1
        done = time.perf_counter()
        return LoopRun(len(prompt), count, done - began, done - first)

    def _decode(self, tokens: Any) -> None:
        rc = self._lib.llama_decode(self._ctx, self._lib.llama_batch_get_one(tokens, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc})")

    def _argmax(self) -> int:
        row = self._lib.llama_get_logits_ith(self._ctx, -1)
        return int(np.ctypeslib.as_array(row, shape=(self._n_vocab,)).argmax())

    def close(self) -> None:
        if self._ctx:
            self._lib.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            self._lib.llama_model_free(self._model)
            self._model = None
