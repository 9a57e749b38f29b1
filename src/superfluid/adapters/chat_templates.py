"""Chat templates for every runtime: a model's own Jinja template, or a built-in per family.

A template turns a conversation (and, for tool calling, the request's `tools`) into the prompt
text. Messages arrive in the shape Hugging Face templates expect: `role`, `content`, an
assistant turn's `tool_calls` (`{"id", "type": "function", "function": {"name", "arguments"}}`,
arguments as a parsed object) and a `tool` turn's `tool_call_id`.

Whether a template can take tools is not guessed from its name: it is rendered once with a probe
tool, and takes tools when the probe's name shows up in the prompt (llama.cpp's chat layer checks
its templates the same way). The call format it teaches is read off its markers
(`superfluid.domain.tool_calls.family_of_template`). The built-ins: Gemma's turns (tools as
Gemma's function-calling guide describes them: definitions in the first user turn, calls as
Python-style `[f(a=1)]`, results in a `tool_output` block), ChatML (Hermes-style tools, for
`.base` models with ChatML markers) and plain `role: text` lines, which take no tools.

Embedded templates are model data: they run in Jinja's sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from superfluid.domain.errors import SuperfluidError
from superfluid.domain.tool_calls import ToolFamily, family_of_template

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]]
Render = Callable[[Messages, Tools | None], str]

_PROBE_NAME = "superfluid_probe_tool"
_PROBE_TOOLS = (
    {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "description": "A probe.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    },
)
_PROBE_MESSAGES = ({"role": "user", "content": "hello"},)


class ChatTemplateError(SuperfluidError):
    """A conversation the model's chat template refuses (a 4xx for the client)."""


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A renderer, where it came from (`gguf`, `file`, `builtin:<name>`), and its tool format
    (None: it cannot take tools)."""

    origin: str
    render: Render
    tool_family: ToolFamily | None = None

    def __call__(self, messages: Messages, tools: Tools | None = None) -> str:
        if tools and self.tool_family is None:
            raise ChatTemplateError(
                f"this model's chat template ({self.origin}) cannot take tools; serve it with"
                " --chat-template-file naming a template that does, or send the request"
                " without `tools`"
            )
        return self.render(messages, tools or None)


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _python_literal(value: Any) -> str:
    return repr(value)  # JSON values read back with ast.literal_eval (the pythonic parser)


def _tool_lines(tools: Tools) -> str:
    return "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)


class TemplatedChat:
    """What every runtime's chat port does with its `chat_template` (a mixin)."""

    chat_template: ChatTemplate

    def chat_prompt(self, messages: Messages, tools: Tools | None = None) -> str:
        return self.chat_template(messages, tools)

    @property
    def tool_family(self) -> ToolFamily | None:
        return self.chat_template.tool_family


# -- built-ins ------------------------------------------------------------------------------------


def _gemma_call(call: Mapping[str, Any]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments") or {}
    shown = ", ".join(f"{key}={_python_literal(value)}" for key, value in arguments.items())
    return f"{function.get('name', '')}({shown})"


def gemma_turns(messages: Messages, tools: Tools | None = None) -> str:
    """Gemma's turn format. Gemma has no system role: system text (and the tool definitions)
    open the first user turn. Tool results are user turns holding a `tool_output` block."""
    system = ""
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = _text(rest.pop(0)).strip()
    if tools:
        instructions = (
            "You can call these functions. To call one or more, reply with only a Python list"
            " of calls, [name(argument=value, ...), ...], and nothing else.\n"
            f"{_tool_lines(tools)}"
        )
        system = f"{system}\n\n{instructions}" if system else instructions
    parts: list[str] = []
    if system and not rest:
        parts.append(f"<start_of_turn>user\n{system}<end_of_turn>\n")
    for index, message in enumerate(rest):
        role = message.get("role")
        if role == "tool":
            content = f"```tool_output\n{_text(message).strip()}\n```"
            role_name = "user"
        elif role in ("assistant", "model"):
            role_name = "model"
            content = _text(message).strip()
            calls = message.get("tool_calls") or []
            if calls:
                listed = "[" + ", ".join(_gemma_call(c) for c in calls) + "]"
                content = f"{content}\n{listed}" if content else listed
        else:
            role_name, content = "user", _text(message).strip()
        if index == 0 and system:
            content = f"{system}\n\n{content}"
        parts.append(f"<start_of_turn>{role_name}\n{content}<end_of_turn>\n")
    parts.append("<start_of_turn>model\n")
    return "".join(parts)


def chatml_turns(messages: Messages, tools: Tools | None = None) -> str:
    """ChatML turns; tools in the Hermes style (definitions in the system turn, calls in
    `<tool_call>` blocks, results in `<tool_response>` blocks of a user turn)."""
    start, end = "<|im_start|>", "<|im_end|>"
    rest = list(messages)
    system = _text(rest.pop(0)) if rest and rest[0].get("role") == "system" else ""
    if tools:
        instructions = (
            "You may call functions to answer. Their signatures, one per line:\n"
            f"<tools>\n{_tool_lines(tools)}\n</tools>\n"
            "To call one, write a JSON object with its name and arguments in a block:\n"
            '<tool_call>\n{"name": "<name>", "arguments": {<arguments>}}\n</tool_call>'
        )
        system = f"{system}\n\n{instructions}" if system else instructions
    parts = [f"{start}system\n{system}{end}\n"] if system else []
    for message in rest:
        role = message.get("role", "user")
        if role == "tool":
            parts.append(f"{start}user\n<tool_response>\n{_text(message)}\n</tool_response>{end}\n")
            continue
        content = _text(message)
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            body = json.dumps(
                {"name": function.get("name"), "arguments": function.get("arguments") or {}},
                ensure_ascii=False,
            )
            content += f"\n<tool_call>\n{body}\n</tool_call>"
        parts.append(f"{start}{role}\n{content}{end}\n")
    parts.append(f"{start}assistant\n")
    return "".join(parts)


def plain_turns(messages: Messages, tools: Tools | None = None) -> str:
    """A last resort for a model with no template: readable, and no special tokens assumed."""
    lines = [f"{m.get('role', 'user')}: {_text(m).strip()}" for m in messages]
    return "\n".join([*lines, "assistant:"])


GEMMA = ChatTemplate("builtin:gemma", gemma_turns, ToolFamily.PYTHONIC)
CHATML = ChatTemplate("builtin:chatml", chatml_turns, ToolFamily.HERMES)
PLAIN = ChatTemplate("builtin:plain", plain_turns, None)

#: Built-ins by GGUF architecture.
BUILTIN: dict[str, ChatTemplate] = {
    "gemma": GEMMA,
    "gemma2": GEMMA,
    "gemma3": GEMMA,
    "gemma3n": GEMMA,
}


# -- embedded templates ---------------------------------------------------------------------------


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    # Hugging Face's filter: plain JSON, non-ASCII kept (Jinja's own escapes HTML characters).
    return json.dumps(value, ensure_ascii=False, indent=indent)


def jinja_template(
    source: str, *, bos_token: str, eos_token: str, strip_bos: bool, origin: str = "gguf"
) -> ChatTemplate:
    """Render a (Hugging Face style) template in Jinja's sandbox: it is model data."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ChatTemplateError(f"the model's chat template refused the conversation: {message}")

    def strftime_now(pattern: str) -> str:
        return datetime.now().strftime(pattern)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    try:
        template = env.from_string(source)
    except TemplateError as exc:
        raise ChatTemplateError(f"the model's chat template does not parse: {exc}") from exc

    def render(messages: Messages, tools: Tools | None) -> str:
        try:
            text = template.render(
                messages=[dict(m) for m in messages],
                tools=list(tools) if tools else None,
                add_generation_prompt=True,
                bos_token=bos_token,
                eos_token=eos_token,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template failed: {exc}") from exc
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    return ChatTemplate(origin, render, _tool_family(source, render))


def _tool_family(source: str, render: Render) -> ToolFamily | None:
    """The template's call format if it shows tools to the model, else None."""
    try:
        probed = render(_PROBE_MESSAGES, _PROBE_TOOLS)
    except (ChatTemplateError, TypeError, ValueError, KeyError, AttributeError):
        return None
    return family_of_template(source) if _PROBE_NAME in probed else None


def select_chat_template(
    architecture: str,
    embedded: str | None,
    *,
    bos_token: str,
    eos_token: str,
    adds_bos: bool,
) -> ChatTemplate:
    """The model's own template if it has one, else the architecture's built-in.

    An embedded template that cannot take tools, on an architecture whose built-in can (Gemma's
    official template has no tools), renders tool requests with the built-in.
    """
    builtin = BUILTIN.get(architecture, PLAIN)
    if not embedded:
        return builtin
    own = jinja_template(embedded, bos_token=bos_token, eos_token=eos_token, strip_bos=adds_bos)
    if own.tool_family is not None or builtin.tool_family is None:
        return own
    return with_tools_from(own, builtin)


def with_tools_from(own: ChatTemplate, fallback: ChatTemplate) -> ChatTemplate:
    """`own` for conversations without tools, `fallback` for those with."""

    def render(messages: Messages, tools: Tools | None) -> str:
        return fallback.render(messages, tools) if tools else own.render(messages, None)

    return ChatTemplate(f"{own.origin}+{fallback.origin} for tools", render, fallback.tool_family)


def template_file(path: str, *, bos_token: str, eos_token: str, strip_bos: bool) -> ChatTemplate:
    """A template read from `--chat-template-file` (a Jinja file, or a JSON tokenizer config
    with a `chat_template` field, as Hugging Face ships them)."""
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError as error:
        raise ChatTemplateError(f"--chat-template-file {path}: {error.strerror or error}") from None
    if path.endswith(".json"):
        try:
            source = json.loads(source)["chat_template"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ChatTemplateError(
                f"--chat-template-file {path}: a .json file must hold a `chat_template` string"
            ) from None
        if isinstance(source, list):  # several named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), "")
        if not isinstance(source, str) or not source:
            raise ChatTemplateError(f"--chat-template-file {path}: no usable `chat_template`")
    return jinja_template(
        source, bos_token=bos_token, eos_token=eos_token, strip_bos=strip_bos, origin="file"
    )
