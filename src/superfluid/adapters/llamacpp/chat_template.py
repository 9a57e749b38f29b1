"""Chat templates of GGUF models: the file's `tokenizer.chat_template`, else a built-in per
architecture (superfluid.adapters.chat_templates, shared by every runtime).

The rendered prompt is meant to be tokenised with `add_special=True`, which adds BOS when the
vocabulary asks for it. Embedded templates usually write `{{ bos_token }}` themselves, so that
leading BOS text is stripped there rather than doubled here; built-ins never write it.
"""

from __future__ import annotations

from superfluid.adapters.chat_templates import (
    BUILTIN,
    ChatTemplate,
    ChatTemplateError,
    Messages,
    gemma_turns,
    jinja_template,
    plain_turns,
    select_chat_template,
    template_file,
)

__all__ = [
    "BUILTIN",
    "ChatTemplate",
    "ChatTemplateError",
    "Messages",
    "gemma_turns",
    "jinja_template",
    "plain_turns",
    "select_chat_template",
    "template_file",
]
