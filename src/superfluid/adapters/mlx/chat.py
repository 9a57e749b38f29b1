"""Chat prompts of MLX models: the tokenizer's own chat template when it has one, else plain
`role: text` lines (superfluid.adapters.chat_templates renders both, as for every runtime).

The rendered prompt is tokenised with `add_special=True` (see the HTTP layer), which adds BOS
when the tokenizer's post-processor does. Hugging Face templates usually write
`{{ bos_token }}` themselves, so that leading BOS text is stripped rather than doubled.
"""

from __future__ import annotations

from typing import Any

from superfluid.adapters.chat_templates import (
    PLAIN,
    ChatTemplate,
    jinja_template,
    template_file,
)


def _special(tokenizer: Any, name: str) -> str:
    value = getattr(tokenizer, name, None)
    return value if isinstance(value, str) else ""


def chat_template_of(tokenizer: Any, *, adds_bos: bool) -> ChatTemplate:
    """The template an mlx-lm TokenizerWrapper carries, or plain turns without one."""
    source = getattr(tokenizer, "chat_template", None)
    if not getattr(tokenizer, "has_chat_template", False) or not isinstance(source, str):
        return PLAIN
    return jinja_template(
        source,
        bos_token=_special(tokenizer, "bos_token"),
        eos_token=_special(tokenizer, "eos_token"),
        strip_bos=adds_bos,
        origin="tokenizer",
    )


def chat_template_file(path: str, tokenizer: Any, *, adds_bos: bool) -> ChatTemplate:
    return template_file(
        path,
        bos_token=_special(tokenizer, "bos_token"),
        eos_token=_special(tokenizer, "eos_token"),
        strip_bos=adds_bos,
    )
