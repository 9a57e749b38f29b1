"""From an HTTP request to what it asks: body, model, prompt, and the `Asked` records.

A body the server cannot read, or that asks for what it does not support, is refused here with
a 400/404/413; what the request asks of the model goes to `RequestDefaults`
(application/request_defaults.py), which fills the open choices and refuses what the request
and the model cannot do together (tools, prompt length). No field names a file: a model is
picked by name among the served ones, never opened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import pydantic
from fastapi import Request

from superfluid.application.request_defaults import Asked, SamplingAsked, ToolsAsked
from superfluid.application.service import GenerationService, ModelHost
from superfluid.application.tool_calling import FunctionTool, ToolChoice, ToolPlan
from superfluid.entrypoints.http.errors import (
    NOT_FOUND,
    ApiError,
    bad_request,
    from_validation_errors,
)
from superfluid.entrypoints.http.schemas import (
    ChatCompletionBody,
    ChatMessage,
    CompletionBody,
    SamplingFields,
    ToolCallIn,
)

Body = TypeVar("Body", bound=pydantic.BaseModel)

#: Model-file suffixes a client may include or leave off when naming a served model.
_MODEL_FILE_SUFFIXES = (".gguf", ".base", ".safetensors")


# -- the body -------------------------------------------------------------------------------------


async def read_body(request: Request, schema: type[Body], max_bytes: int) -> Body:
    """The body parsed into `schema`; 413 past `max_bytes`, whatever Content-Length claims."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        # A chunked upload (or a lying Content-Length) is cut off as soon as it passes the limit.
        if len(received) > max_bytes:
            raise _too_large(max_bytes)
    try:
        return schema.model_validate_json(bytes(received))
    except pydantic.ValidationError as error:
        raise from_validation_errors(error.errors()) from None


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(
        413,
        f"the request body is larger than this server accepts ({max_bytes} bytes); "
        "send a shorter prompt",
        code="request_too_large",
    )


# -- the model ------------------------------------------------------------------------------------


def _file_stem(name: str) -> str:
    for suffix in _MODEL_FILE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def find_host(service: GenerationService, requested: str | None) -> ModelHost:
    """The served model a request names.

    An absent or empty name picks the first served model. Otherwise the name must be a served
    model's id or one of its aliases (the file name, when `--served-model-name` gave it another
    id) exactly, or equal one once a model-file suffix (`.gguf`, `.base`, `.safetensors`) is
    taken off either side, so `Qwen3-4B-Q4` and `Qwen3-4B-Q4.gguf` both reach the model served
    from `Qwen3-4B-Q4.gguf`. Anything else is a 404: a server serving one model still refuses a
    name it does not serve, so a client that asked for another model learns it did not get it.
    """
    hosts = service.hosts
    if not requested:
        return hosts[0]
    for host in hosts:
        if requested == host.name or requested in host.aliases:
            return host
    stem = _file_stem(requested)
    for host in hosts:
        if any(_file_stem(name) == stem for name in (host.name, *host.aliases)):
            return host
    served = ", ".join(host.name for host in hosts)
    raise ApiError(
        404,
        f"the model `{requested}` is not served here; this server serves {served}",
        type=NOT_FOUND,
        param="model",
        code="model_not_found",
    )


# -- the prompt -----------------------------------------------------------------------------------


def _message_text(message: ChatMessage, index: int) -> str:
    content = message.content
    if content is None:
        if message.role == "assistant":
            return ""  # an assistant turn that only called tools carries no text
        raise bad_request(f"messages[{index}] has no content", f"messages[{index}].content")
    if isinstance(content, str):
        return content
    texts = []
    for number, part in enumerate(content):
        where = f"messages[{index}].content[{number}]"
        if part.type != "text":
            raise bad_request(
                f"`{where}` is a `{part.type}` part; this server reads text parts only",
                f"{where}.type",
            )
        if part.text is None:
            raise bad_request(f"`{where}` is a text part without `text`", f"{where}.text")
        texts.append(part.text)
    # Parts are separate blocks of one message; a newline keeps their words apart.
    return "\n".join(texts)


def chat_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as chat templates take them: role and text, an assistant turn's calls with
    their arguments parsed, and a tool turn's call id and function name."""
    called: dict[str, str] = {}  # call id -> function name, from earlier assistant turns
    shaped: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = "system" if message.role == "developer" else message.role
        turn: dict[str, Any] = {"role": role, "content": _message_text(message, index)}
        if message.tool_calls and role == "assistant":
            turn["tool_calls"] = [
                _call_turn(call, f"messages[{index}].tool_calls[{number}]")
                for number, call in enumerate(message.tool_calls)
            ]
            called.update((call.id, call.function.name) for call in message.tool_calls)
        if role == "tool":
            where = f"messages[{index}].tool_call_id"
            if not message.tool_call_id:
                raise bad_request(f"`{where}` is missing: a tool message answers a call", where)
            if message.tool_call_id not in called:
                raise bad_request(
                    f"`{where}` ({message.tool_call_id!r}) matches no call of an earlier"
                    " assistant message",
                    where,
                )
            turn["tool_call_id"] = message.tool_call_id
            turn["name"] = called[message.tool_call_id]
        shaped.append(turn)
    return shaped


def _call_turn(call: ToolCallIn, where: str) -> dict[str, Any]:
    try:
        arguments = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise bad_request(
            f"`{where}.function.arguments` must be a JSON object, as a string",
            f"{where}.function.arguments",
        )
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }


# -- tools ----------------------------------------------------------------------------------------


def tools_asked(body: ChatCompletionBody) -> ToolsAsked:
    """The request's `tools`, `tool_choice` and `parallel_tool_calls`, as sent."""
    functions = tuple(
        FunctionTool(t.function.name, t.function.parameters) for t in body.tools or []
    )
    choice = body.tool_choice
    parallel = body.parallel_tool_calls is not False
    if choice is None or isinstance(choice, str):
        kind = None if choice is None else ToolChoice(choice)
        return ToolsAsked(functions, kind, parallel=parallel)
    return ToolsAsked(functions, ToolChoice.NAMED, choice.function.name, parallel)


def template_tools(body: ChatCompletionBody, plan: ToolPlan | None) -> list[dict[str, Any]] | None:
    """The tools the prompt shows, as the plan says (`ToolPlan.shows_tools`)."""
    if plan is None or not plan.shows_tools:
        return None
    return [tool.model_dump(exclude_none=True) for tool in body.tools or []]


def chat_prompt_tokens(
    host: ModelHost, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[int]:
    """The chat prompt's tokens: the model's template applied, then its tokenizer."""
    return host.tokenize(host.chat_prompt(messages, tools), add_special=True)


def completion_prompt(body: CompletionBody) -> str:
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt
    if len(prompt) != 1:
        raise bad_request(
            f"`prompt` holds {len(prompt)} prompts; send one prompt per request", "prompt"
        )
    return prompt[0]


# -- what the request asks ------------------------------------------------------------------------


def check_supported(body: SamplingFields) -> None:
    """Refuse what this server cannot honour rather than quietly doing something else."""
    if body.n not in (None, 1):
        raise bad_request(f"`n` must be 1 (one choice per request), got {body.n}", "n")
    if isinstance(body, ChatCompletionBody):
        if body.response_format is not None and body.response_format.type == "json_schema":
            raise bad_request(
                "`response_format` json_schema is not supported; use json_object or text",
                "response_format.type",
            )
        if body.top_logprobs is not None and not body.logprobs:
            # OpenAI refuses this too: the count means nothing without the log-probabilities.
            raise bad_request(
                "`top_logprobs` needs `logprobs: true`; send both or neither", "top_logprobs"
            )
    if isinstance(body, CompletionBody):
        if body.echo:
            raise bad_request("`echo` is not supported; send the request without it", "echo")
        if body.best_of not in (None, 1):
            raise bad_request(f"`best_of` must be 1, got {body.best_of}", "best_of")
        if body.suffix:
            raise bad_request("`suffix` is not supported; send the request without it", "suffix")


def logprobs_wanted(body: SamplingFields) -> int | None:
    """How many top tokens each logprobs entry lists, or None when logprobs are off."""
    if isinstance(body, ChatCompletionBody):
        return (body.top_logprobs or 0) if body.logprobs else None
    if isinstance(body, CompletionBody):
        return body.logprobs
    return None


def asked(body: ChatCompletionBody | CompletionBody) -> Asked:
    """What the request asks of its reply, as `RequestDefaults` reads it."""
    sampling = SamplingAsked(
        temperature=body.temperature,
        top_k=body.top_k,
        top_p=body.top_p,
        min_p=body.min_p,
        repeat_penalty=body.repeat_penalty,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        seed=body.seed,
        logit_bias=tuple(sorted((int(t), float(b)) for t, b in (body.logit_bias or {}).items())),
    )
    chat = isinstance(body, ChatCompletionBody)
    json_object = (
        isinstance(body, ChatCompletionBody)
        and body.response_format is not None
        and body.response_format.type == "json_object"
    )
    return Asked(
        chat=chat,
        sampling=sampling,
        max_tokens=body.token_limit,
        stop=body.stop_strings,
        json_object=json_object,
        logprobs=logprobs_wanted(body),
    )
