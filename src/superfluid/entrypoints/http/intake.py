"""From an HTTP request to a `GenerationRequest`: body, model, prompt, sampling and limits.

Everything a client can get wrong is refused here with a 400/404/413 before anything is
submitted, so the executor only ever sees requests that fit. No field names a file: a model is
picked by name among the served ones, never opened.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from fastapi import Request

from superfluid.application.grammar import JsonObjectConstraint, SchemaConstraint
from superfluid.application.ports import TokenConstraint
from superfluid.application.requests import GenerationRequest
from superfluid.application.service import GenerationService, ModelHost
from superfluid.application.tool_calling import FunctionTool, ToolChoice, ToolPlan
from superfluid.domain.json_schema import SchemaUnsupported
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import effective_temperature
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

#: Without `max_tokens`, a reply may use the rest of the context window, up to this many tokens.
DEFAULT_MAX_TOKENS = 2048

#: Model-file suffixes a client may include or leave off when naming a served model.
_MODEL_FILE_SUFFIXES = (".gguf", ".base", ".safetensors")


@dataclass(frozen=True, slots=True)
class ServerDefaults:
    """What the command line says about requests that leave a choice open."""

    cli_temperature: float | None = None
    cli_seed: int | None = None
    max_temperature: float | None = None


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


def tool_plan(body: ChatCompletionBody, host: ModelHost) -> ToolPlan | None:
    """What the request's `tools` and `tool_choice` ask of this model (None: no tools)."""
    tools = body.tools or []
    choice = body.tool_choice
    if not tools:
        if choice is not None and choice != "none":
            raise bad_request(
                "`tool_choice` needs `tools`: send the functions the model may call",
                "tool_choice",
            )
        return None
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if tool.function.name in seen:
            where = f"tools[{index}].function.name"
            raise bad_request(f"`{where}`: two tools are named {tool.function.name!r}", where)
        seen.add(tool.function.name)
    functions = tuple(FunctionTool(t.function.name, t.function.parameters) for t in tools)
    named = None
    if choice is None or choice == "auto":
        kind = ToolChoice.AUTO
    elif choice == "none":
        kind = ToolChoice.NONE
    elif choice == "required":
        kind = ToolChoice.REQUIRED
    else:
        kind, named = ToolChoice.NAMED, choice.function.name
        if named not in seen:
            raise bad_request(
                f"`tool_choice.function.name` names {named!r}, which is not among `tools`",
                "tool_choice.function.name",
            )
    family = host.tool_family
    if kind is ToolChoice.AUTO and not host.template_takes_tools:
        raise bad_request(
            f"{host.chat_template_origin} of {host.name} cannot take tools, so the"
            " model cannot call them; serve it with --chat-template-file naming a template"
            " that can, or force a call with `tool_choice`",
            "tools",
        )
    plan = ToolPlan(kind, functions, family, named, parallel=body.parallel_tool_calls is not False)
    if plan.forced:
        try:
            plan = plan.with_grammar()
        except SchemaUnsupported as why:
            raise bad_request(f'{why}; use `tool_choice: "auto"` for this tool', "tools") from None
    return plan


def template_tools(
    body: ChatCompletionBody, plan: ToolPlan | None, host: ModelHost
) -> list[dict[str, Any]] | None:
    """The tools the prompt shows: none for `tool_choice: none`, and none for a forced call on
    a template that cannot take them (the grammar writes the call either way)."""
    if plan is None or not plan.shows_tools or not host.template_takes_tools:
        return None
    return [tool.model_dump(exclude_none=True) for tool in body.tools or []]


def completion_prompt(body: CompletionBody) -> str:
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt
    if len(prompt) != 1:
        raise bad_request(
            f"`prompt` holds {len(prompt)} prompts; send one prompt per request", "prompt"
        )
    return prompt[0]


def check_prompt_fits(host: ModelHost, prompt: Sequence[int], param: str) -> None:
    context = host.capabilities.context_size
    if not prompt:
        raise bad_request("the prompt is empty; send some text to complete", param)
    if len(prompt) >= context:
        raise bad_request(
            f"the prompt is {len(prompt)} tokens, and the context window of {host.name} holds "
            f"{context} tokens (the reply needs at least one); shorten the prompt",
            param,
        )


# -- what the request asks of the sampler ---------------------------------------------------------


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


def sampling_params(
    body: SamplingFields, host: ModelHost, defaults: ServerDefaults
) -> SamplingParams:
    temperature = effective_temperature(
        body.temperature,
        defaults.cli_temperature,
        model_default=host.sampling.temperature,
        max_temperature=defaults.max_temperature,
        strategy_registered=host.registration.speculates,
    )
    # Every request gets a seed: without one from the client or the command line, a fresh
    # random one, so two requests never share the counter-based noise stream.
    seed = body.seed if body.seed is not None else defaults.cli_seed
    if seed is None:
        seed = secrets.randbits(63)
    # Unset filters take the model's own defaults (its file's, else off); the request wins.
    model = host.sampling
    top_k = body.top_k if body.top_k is not None else model.top_k
    top_p = body.top_p if body.top_p is not None else model.top_p
    min_p = body.min_p if body.min_p is not None else model.min_p
    repeat = body.repeat_penalty if body.repeat_penalty is not None else model.repeat_penalty
    return SamplingParams(
        temperature=temperature,
        top_k=max(top_k or 0, 0),
        top_p=top_p if top_p is not None else 1.0,
        min_p=min_p or 0.0,
        repeat_penalty=repeat or 1.0,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        seed=seed,
        logit_bias=tuple(sorted((int(t), float(b)) for t, b in (body.logit_bias or {}).items())),
    )


def reply_stops(
    body: ChatCompletionBody | CompletionBody, host: ModelHost, *, chat: bool
) -> tuple[str, ...]:
    """The strings that end a reply: the request's `stop`, and for a chat the template's
    end-of-turn markers, so a model whose end-of-generation token is another never writes on
    into a turn it invents (and no tool call is read from one)."""
    if not chat:
        return body.stop_strings
    return tuple(dict.fromkeys((*body.stop_strings, *host.turn_ends)))


def generation_request(
    body: ChatCompletionBody | CompletionBody,
    host: ModelHost,
    prompt: list[int],
    defaults: ServerDefaults,
    tools: ToolPlan | None = None,
) -> GenerationRequest:
    check_prompt_fits(
        host, prompt, "messages" if isinstance(body, ChatCompletionBody) else "prompt"
    )
    room = host.capabilities.context_size - len(prompt)
    # An explicit limit past the window is kept: the reply then ends at the window, "length".
    max_tokens = body.token_limit or min(room, DEFAULT_MAX_TOKENS)
    json_mode = (
        isinstance(body, ChatCompletionBody)
        and body.response_format is not None
        and body.response_format.type == "json_object"
    )
    constraint: TokenConstraint | None = None
    if tools is not None and tools.grammar is not None:
        # A forced call is a grammar lane; it never speculates (docs/contract.md §8).
        constraint = SchemaConstraint(
            host.token_pieces(), host.capabilities.eos_tokens, tools.grammar
        )
    elif json_mode:
        constraint = JsonObjectConstraint(host.token_pieces(), host.capabilities.eos_tokens)
    chat = isinstance(body, ChatCompletionBody)
    return GenerationRequest(
        prompt=prompt,
        params=sampling_params(body, host, defaults),
        max_tokens=max_tokens,
        stop_tokens=host.turn_end_tokens() if chat else frozenset(),
        # Whether the lane may draft is GenerationRequest.may_draft's call (one rule).
        constraint=constraint,
        logprobs=logprobs_wanted(body),
    )
