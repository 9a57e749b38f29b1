"""Chat prompts: the tokenizer's own chat template when it has one, else a plain format.

The rendered prompt is tokenised with `add_special=True` (see the HTTP layer), which adds BOS
when the tokenizer's post-processor does. Hugging Face templates usually write
`{{ bos_token }}` themselves, so that leading BOS text is stripped here rather than doubled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from superfluid.domain.errors import SuperfluidError

Messages = Sequence[Mapping[str, str]]


class ChatTemplateError(SuperfluidError):
    """A conversation the model's chat template refuses (a 4xx for the client)."""


def plain_turns(messages: Messages) -> str:
    """A last resort for a model with no template: readable, and no special tokens assumed."""
    lines = [f"{m.get('role', 'user')}: {m.get('content', '').strip()}" for m in messages]
    return "\n".join([*lines, "assistant:"])


class ChatFormat:
    """Renders a conversation for one tokenizer (an mlx-lm TokenizerWrapper)."""

    def __init__(self, tokenizer: Any, *, adds_bos: bool) -> None:
        self._tokenizer = tokenizer
        self.origin = "tokenizer" if getattr(tokenizer, "has_chat_template", False) else "plain"
        bos = getattr(tokenizer, "bos_token", None)
        self._strip = bos if adds_bos and isinstance(bos, str) and bos else ""

    def __call__(self, messages: Messages) -> str:
        if self.origin == "plain":
            return plain_turns(messages)
        from jinja2 import TemplateError

        try:
            text = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=True, tokenize=False
            )
        except TemplateError as exc:
            raise ChatTemplateError(
                f"the model's chat template refused the conversation: {exc}"
            ) from exc
        if not isinstance(text, str):
            raise ChatTemplateError("the model's chat template did not render to text")
        if self._strip and text.startswith(self._strip):
            text = text[len(self._strip) :]
        return text
