"""Chat templates for every runtime: a model's own Jinja template, or a built-in per family.

A template turns a conversation (and, for tool calling, the request's `tools`) into the prompt
text. Messages arrive in the shape Hugging Face templates expect: `role`, `content`, an
assistant turn's `tool_calls` (`{"id", "type": "function", "function": {"name", "arguments"}}`,
arguments as a parsed object) and a `tool` turn's `tool_call_id`.

Whether a template can take tools is not guessed from its name: it is rendered once with a probe
tool, and takes tools when the probe's name shows up in the prompt (llama.cpp's chat layer checks
its templates the same way). The call format it teaches is read off its markers
(`superfluid.domain.tool_calls.families.family_of_template`). The built-ins: Gemma's turns (tools as
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
from typing import Any, Protocol

from superfluid.domain.errors import SuperfluidError
from superfluid.domain.tool_calls.families import ToolFamily, family_of_template

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
    """A renderer, where it came from (`gguf`, `tokenizer`, `--chat-template-file PATH`,
    `builtin:<name>`), its tool format (None: it cannot take tools), and the markers that end
    an assistant turn in it (`turn_ends`: generation stops at them, whatever the model's own
    end-of-generation token, so a model never runs on into a turn it invents)."""

    origin: str
    render: Render
    tool_family: ToolFamily | None = None
    turn_ends: tuple[str, ...] = ()

    def __call__(self, messages: Messages, tools: Tools | None = None) -> str:
        if tools and self.tool_family is None:
            raise ChatTemplateError(
                f"{describe_origin(self.origin)} cannot take tools; serve the model with"
                " --chat-template-file naming a template that does, or send the request"
                " without `tools`"
            )
        return self.render(messages, tools or None)


def describe_origin(origin: str) -> str:
    """A template's origin as a log line or an error names it."""
    if origin.startswith("--"):
        return f"the chat template from {origin}"
    return f"the model's chat template ({origin})"


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

    @property
    def turn_ends(self) -> tuple[str, ...]:
        return self.chat_template.turn_ends

    @property
    def chat_template_origin(self) -> str:
        return describe_origin(self.chat_template.origin)


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


GEMMA = ChatTemplate("builtin:gemma", gemma_turns, ToolFamily.PYTHONIC, ("<end_of_turn>",))
CHATML = ChatTemplate("builtin:chatml", chatml_turns, ToolFamily.HERMES, ("<|im_end|>",))
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

    named = describe_origin(origin)

    def raise_exception(message: str) -> None:
        raise ChatTemplateError(f"{named} refused the conversation: {message}")

    def strftime_now(pattern: str) -> str:
        return datetime.now().strftime(pattern)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    try:
        template = env.from_string(source)
    except TemplateError as exc:
        raise ChatTemplateError(f"{named} does not parse: {exc}") from exc

    def render_with(messages: Messages, tools: Tools | None, *, opening: bool = True) -> str:
        try:
            text = template.render(
                messages=[dict(m) for m in messages],
                tools=list(tools) if tools else None,
                add_generation_prompt=opening,
                bos_token=bos_token,
                eos_token=eos_token,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"{named} failed: {exc}") from exc
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token) :]
        return text

    def render(messages: Messages, tools: Tools | None) -> str:
        return render_with(messages, tools)

    return ChatTemplate(
        origin, render, _tool_family(source, render), _turn_ends(render_with, eos_token)
    )


_PROBE_REPLY = "superfluid probe reply"


class _RenderWith(Protocol):
    def __call__(self, messages: Messages, tools: Tools | None, *, opening: bool = ...) -> str: ...


def _turn_ends(render_with: _RenderWith, eos_token: str) -> tuple[str, ...]:
    """The marker a template writes after an assistant's words, read off two renderings: a
    user turn with the assistant's opening, and the same conversation answered. What follows
    the answer, up to the next assistant opening, is the marker (`<|im_end|>`, `<|eot_id|>`,
    `<end_of_turn>`). Empty when the template shows none, or refuses the probe."""
    asked = [{"role": "user", "content": "hello"}]
    answered = [*asked, {"role": "assistant", "content": _PROBE_REPLY}]
    try:
        closed = render_with(asked, None, opening=False)
        opened = render_with(asked, None, opening=True)
        after = render_with(answered, None, opening=False)
    except (ChatTemplateError, TypeError, ValueError, KeyError, AttributeError):
        return ()
    opening = opened[len(closed) :] if opened.startswith(closed) else ""
    at = after.find(_PROBE_REPLY)
    if at < 0:
        return ()
    tail = after[at + len(_PROBE_REPLY) :]
    if opening and opening.strip() and opening.strip() in tail:
        tail = tail[: tail.index(opening.strip())]
    marker = tail.strip()
    if not marker or len(marker) > 32 or any(c.isspace() for c in marker):
        return ()
    return (marker,) if marker != eos_token else ()


def _tool_family(source: str, render: Render) -> ToolFamily | None:
    """The template's call format if it shows tools to the model, else None."""
    try:
        probed = render(_PROBE_MESSAGES, _PROBE_TOOLS)
    except (ChatTemplateError, TypeError, ValueError, KeyError, AttributeError):
        return None
    return family_of_template(source) if _PROBE_NAME in probed else None


def _chatml(source: str) -> bool:
    return "<|im_start|>" in source and "<|im_end|>" in source


def select_chat_template(
    architecture: str,
    embedded: str | None,
    *,
    bos_token: str,
    eos_token: str,
    adds_bos: bool,
    tool_use: str | None = None,
) -> ChatTemplate:
    """The model's own template if it has one, else the architecture's built-in.

    Tool requests render with, in order: the model's `tool_use` template (Hugging Face's named
    templates; a GGUF's `tokenizer.chat_template.tool_use`) when it takes tools; the model's own
    template when it takes tools; else a built-in that speaks the same turns: Gemma's for Gemma
    architectures (Gemma's official template has no tools), ChatML with Hermes-style calls for a
    ChatML template (SmolLM2's, for one, shows no tools).
    """
    builtin = BUILTIN.get(architecture, PLAIN)
    if not embedded:
        return builtin
    own = jinja_template(embedded, bos_token=bos_token, eos_token=eos_token, strip_bos=adds_bos)
    if tool_use:
        for_tools = jinja_template(
            tool_use,
            bos_token=bos_token,
            eos_token=eos_token,
            strip_bos=adds_bos,
            origin=f"{own.origin} tool_use",
        )
        if for_tools.tool_family is not None:
            return with_tools_from(own, for_tools)
    if own.tool_family is not None:
        return own
    if builtin.tool_family is None and _chatml(embedded):
        builtin = CHATML
    if builtin.tool_family is None:
        return own
    return with_tools_from(own, builtin)


def with_tools_from(own: ChatTemplate, fallback: ChatTemplate) -> ChatTemplate:
    """`own` for conversations without tools, `fallback` for those with; either's turn markers
    end a reply."""

    def render(messages: Messages, tools: Tools | None) -> str:
        return fallback.render(messages, tools) if tools else own.render(messages, None)

    ends = tuple(dict.fromkeys((*own.turn_ends, *fallback.turn_ends)))
    return ChatTemplate(
        f"{own.origin}+{fallback.origin} for tools", render, fallback.tool_family, ends
    )


def template_file(path: str, *, bos_token: str, eos_token: str, strip_bos: bool) -> ChatTemplate:
    """A template read from `--chat-template-file`: a Jinja file, or a JSON tokenizer config
    with a `chat_template` field, as Hugging Face ships them (a string, or a list of named
    templates: `default` for conversations, `tool_use` for requests with tools)."""
    origin = f"--chat-template-file {path}"
    default, tool_use = read_template_file(path)
    own = jinja_template(
        default, bos_token=bos_token, eos_token=eos_token, strip_bos=strip_bos, origin=origin
    )
    if tool_use is None:
        return own
    for_tools = jinja_template(
        tool_use,
        bos_token=bos_token,
        eos_token=eos_token,
        strip_bos=strip_bos,
        origin=f"{origin} (tool_use)",
    )
    return with_tools_from(own, for_tools) if for_tools.tool_family is not None else own


def read_template_file(path: str) -> tuple[str, str | None]:
    """The default template in `path`, and its `tool_use` template if it names one. Raises
    ChatTemplateError naming the flag and the file."""
    where = f"--chat-template-file {path}"
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ChatTemplateError(f"{where}: {why}") from None
    if not path.endswith(".json"):
        return source, None
    try:
        field = json.loads(source)["chat_template"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ChatTemplateError(f"{where}: a .json file must hold a `chat_template`") from None
    if isinstance(field, list):  # Hugging Face's named templates
        named = {
            entry.get("name"): entry.get("template")
            for entry in field
            if isinstance(entry, dict) and isinstance(entry.get("template"), str)
        }
        default, tool_use = named.get("default"), named.get("tool_use")
        if not default:
            raise ChatTemplateError(
                f"{where}: its `chat_template` list names no `default` template"
            )
        return default, tool_use or None
    if not isinstance(field, str) or not field:
        raise ChatTemplateError(f"{where}: its `chat_template` is not a template string")
    return field, None


def check_template_file(path: str) -> None:
    """Read and parse a `--chat-template-file` before any model loads: a template that cannot
    be read or does not parse is refused at startup, naming the flag and the file."""
    default, tool_use = read_template_file(path)
    for source, origin in ((default, path), (tool_use, f"{path} (tool_use)")):
        if source is not None:
            jinja_template(
                source,
                bos_token="",
                eos_token="",
                strip_bos=False,
                origin=f"--chat-template-file {origin}",
            )
