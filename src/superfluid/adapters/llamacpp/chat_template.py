"""Chat templates of GGUF models: the file's `tokenizer.chat_template`, else a built-in per
architecture (superfluid.adapters.chat_templates, shared by every runtime).

The rendered prompt is meant to be tokenised with `add_special=True`, which adds BOS when the
vocabulary asks for it. Embedded templates usually write `{{ bos_token }}` themselves, so that
leading BOS text is stripped there rather than doubled here; built-ins never write it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from superfluid.adapters.chat_templates import (
    ChatTemplate,
    select_chat_template,
)
from superfluid.adapters.llamacpp.native import c_string, model_meta
from superfluid.adapters.llamacpp.vocab import Vocabulary


def gguf_chat_template(lib: ModuleType, model: Any, vocab: Vocabulary) -> ChatTemplate:
    """The chat template a loaded GGUF model is served with (`select_chat_template`)."""
    return select_chat_template(
        model_meta(lib, model, "general.architecture") or "unknown",
        c_string(lib.llama_model_chat_template(model, None)),
        bos_token=vocab.token_text(vocab.bos) if vocab.bos >= 0 else "",
        eos_token=vocab.token_text(vocab.eos) if vocab.eos >= 0 else "",
        adds_bos=vocab.adds_bos,
        # `tokenizer.chat_template.tool_use`, where a converter kept Hugging Face's named one.
        tool_use=c_string(lib.llama_model_chat_template(model, b"tool_use")),
    )
