"""Request bodies of the OpenAI-compatible routes, as pydantic models.

Validation is strict about types (a temperature of `"1"` is refused, not coerced) and about
ranges (OpenAI's: temperature 0..2, penalties -2..2, up to 4 stop strings), and lenient about
fields this server does not use: unknown fields are ignored, as OpenAI's own SDKs send fields
that servers are expected to skip. Checks of what this server supports (content parts, `n`, `echo`) happen in `intake`;
checks that need the model (prompt length, tools) in `RequestDefaults`, where the message can
name the model's numbers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: OpenAI allows at most this many stop sequences.
MAX_STOP_STRINGS = 4

_BODY_CONFIG = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class StreamOptions(BaseModel):
    model_config = _BODY_CONFIG

    include_usage: bool = False
    #: vLLM's extension: cumulative `usage` on every content chunk.
    continuous_usage_stats: bool = False


class SamplingFields(BaseModel):
    """What chat and text completions share: the model, sampling, limits and streaming."""

    model_config = _BODY_CONFIG

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    #: Not OpenAI's, but common: 0 or -1 means off.
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four_stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop sequences are allowed")
        return stop

    @field_validator("logit_bias")
    @classmethod
    def _token_ids_and_bias_range(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for token, value in (bias or {}).items():
            if not token.isdigit():
                raise ValueError(f"keys must be token ids, got {token!r}")
            if not -100.0 <= value <= 100.0:
                raise ValueError(f"biases must be in [-100, 100], got {value} for token {token}")
        return bias

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    @property
    def options(self) -> StreamOptions:
        return self.stream_options or StreamOptions()

    @property
    def stop_strings(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return tuple(s for s in stops if s)


class ContentPart(BaseModel):
    """One part of OpenAI's list-of-parts content; only `text` parts are served (see intake)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: str
    text: str | None = None


#: OpenAI's rule for function names.
FUNCTION_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(pattern=FUNCTION_NAME)
    arguments: str  # a JSON object, as a string (OpenAI's shape)


class ToolCallIn(BaseModel):
    """A call an earlier assistant turn made, sent back as part of the conversation."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    # `developer` is OpenAI's newer name for `system`.
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # tool turns: the call they answer


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON Schema; none means no arguments
    strict: bool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: FunctionName


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionBody(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @property
    def token_limit(self) -> int | None:
        # OpenAI deprecated `max_tokens` for `max_completion_tokens`: the newer field wins.
        return self.max_completion_tokens or self.max_tokens


class CompletionBody(SamplingFields):
    prompt: str | list[str]
    #: Text completions ask for logprobs with a count (0..5) rather than a flag.
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = False
    best_of: int | None = None
    suffix: str | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens


# -- for the OpenAPI schema only ------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """OpenAI's error body, as every refusal leaves (errors.py)."""

    error: ErrorDetail


def openapi_request_body(model: type[BaseModel]) -> dict[str, Any]:
    """An OpenAPI `requestBody` for a route that reads `model` itself (intake.read_body).

    The routes read their bodies by hand (to cap the size before parsing), so FastAPI cannot
    document them; this does, with pydantic's schema and its `$defs` inlined.
    """
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    content = {"application/json": {"schema": inline(schema)}}
    return {"requestBody": {"required": True, "content": content}}
