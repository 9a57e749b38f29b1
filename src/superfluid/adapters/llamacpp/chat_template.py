"""Chat templates: the GGUF's own Jinja template when it has one, else a built-in per architecture.

The rendered prompt is meant to be tokenised with `add_special=True`, which adds BOS when the
vocabulary asks for it. Embedded templates usually write `{{ bos_token }}` themselves, so that
leading BOS text is stripped here rather than doubled there; built-ins never write it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from superfluid.domain.errors import SuperfluidError

Messages = Sequence[Mapping[str, str]]


class ChatTemplateError(SuperfluidError):
    """A conversation the model's chat template refuses (a 4xx for the client)."""


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A renderer plus where it came from (`gguf` or `builtin:<name>`), for logs."""

    origin: str
    render: Callable[[Messages], str]

    def __call__(self, messages: Messages) -> str:
        return self.render(messages)


def gemma_turns(messages: Messages) -> str:
    """Gemma's turn format. Gemma has no system role: system text opens the first user turn."""
    system = ""
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = rest.pop(0).get("content", "").strip()
    parts: list[str] = []
    if system and not rest:
        parts.append(f"<start_of_turn>user\n{system}<end_of_turn>\n")
    for index, message in enumerate(rest):
        role = "model" if message.get("role") in ("assistant", "model") else "user"
        content = message.get("content", "").strip()
        if index == 0 and system:
            content = f"{system}\n\n{content}"
        parts.append(f"<start_of_turn>{role}\n{content}<end_of_turn>\n")
    parts.append("<start_of_turn>model\n")
    return "".join(parts)


def plain_turns(messages: Messages) -> str:
    """A last resort for a model with no template: readable, and no special tokens assumed."""
    lines = [f"{m.get('role', 'user')}: {m.get('content', '').strip()}" for m in messages]
    return "\n".join([*lines, "assistant:"])


BUILTIN: dict[str, tuple[str, Callable[[Messages], str]]] = {
    "gemma": ("gemma", gemma_turns),
    "gemma2": ("gemma", gemma_turns),
    "gemma3": ("gemma", gemma_turns),
    "gemma3n": ("gemma", gemma_turns),
}


def jinja_template(source: str, *, bos_token: str, eos_token: str, strip_bos: bool) -> ChatTemplate:
    """Render an embedded (Hugging Face style) template in Jinja's sandbox: it is model data."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ChatTemplateError(f"the model's chat template refused the conversation: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        template = env.from_string(source)
    except TemplateError as exc:
        raise ChatTemplateError(f"the model's chat template does not parse: {exc}") from exc

    def render(messages: Messages) -> str:
        try:
            text = template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=True,
                bos_token=bos_token,
                eos_token=eos_token,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template failed: {exc}") from exc
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    return ChatTemplate("gguf", render)


def select_chat_template(
    architecture: str,
    embedded: str | None,
    *,
    bos_token: str,
    eos_token: str,
    adds_bos: bool,
) -> ChatTemplate:
    """The GGUF's `tokenizer.chat_template` if present, else the architecture's built-in."""
    if embedded:
        return jinja_template(
            embedded, bos_token=bos_token, eos_token=eos_token, strip_bos=adds_bos
        )
    name, render = BUILTIN.get(architecture, ("plain", plain_turns))
    return ChatTemplate(f"builtin:{name}", render)
