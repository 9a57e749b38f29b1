"""Request defaults: what one request gets for every choice it leaves open.

Sampling takes each parameter from the first of these that sets it: the request, the command
line (`--temperature`, `--seed`), the model file's defaults, the built-in ones.
`--spec-max-temperature` lowers only a temperature nobody asked for (docs/contract.md §8). A
request without a seed gets a fresh random one, so no two requests share a noise stream.

Tools become a `ToolPlan`: `tool_choice` is `auto` when tools come without one, a forced choice
compiles its grammar here, and what the model cannot honour is refused (`RequestRefused`)
before anything is submitted. The reply's token budget, its stops and its constraint complete
the `GenerationRequest`. The HTTP layer parses a body into `Asked`, `SamplingAsked` and
`ToolsAsked` and renders what comes back; no rule here reads HTTP.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Protocol

from superfluid.application.grammar import JsonObjectConstraint, SchemaConstraint, TokenPieces
from superfluid.application.ports import Capabilities, TokenConstraint
from superfluid.application.requests import GenerationRequest
from superfluid.application.tool_calling import FunctionTool, ToolChoice, ToolPlan
from superfluid.domain.errors import SuperfluidError
from superfluid.domain.json_schema import SchemaUnsupported
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.sampling_defaults import SamplingDefaults
from superfluid.domain.temperature_cap import effective_temperature
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.domain.tool_calls.reader import FirstCallEnd

#: Without `max_tokens`, a reply may use the rest of the context window, up to this many tokens.
DEFAULT_MAX_TOKENS = 2048


class RequestRefused(SuperfluidError):
    """What a request asks that cannot be served; `param` names the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ModelFacts(Protocol):
    """What the defaults read of a served model (`ModelHost` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def sampling(self) -> SamplingDefaults: ...

    @property
    def speculates(self) -> bool: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def tool_family(self) -> ToolFamily | None: ...

    @property
    def template_takes_tools(self) -> bool: ...

    @property
    def chat_template_origin(self) -> str: ...

    @property
    def turn_ends(self) -> tuple[str, ...]: ...

    def turn_end_tokens(self) -> frozenset[int]: ...

    def token_pieces(self) -> TokenPieces: ...


@dataclass(frozen=True, slots=True)
class SamplingAsked:
    """The sampling a request sets; None leaves the parameter to the defaults."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    #: (token id, bias) pairs, sorted by token id.
    logit_bias: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolsAsked:
    """A request's `tools`, `tool_choice` (None: not sent) and `parallel_tool_calls`."""

    functions: tuple[FunctionTool, ...] = ()
    choice: ToolChoice | None = None
    #: The function a `NAMED` choice names.
    named: str | None = None
    parallel: bool = True


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asks of its reply: a chat or a text completion, its sampling, its limit
    (None: the default), its stop strings, JSON mode, and how many top logprobs (None: off)."""

    chat: bool
    sampling: SamplingAsked = field(default_factory=SamplingAsked)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    json_object: bool = False
    logprobs: int | None = None

    @property
    def prompt_param(self) -> str:
        """The field that holds the prompt, as a refusal names it."""
        return "messages" if self.chat else "prompt"


@dataclass(frozen=True, slots=True)
class Work:
    """A request ready to submit: the executor's request, the strings that end its reply, and
    where a one-call reply ends."""

    request: GenerationRequest
    stops: tuple[str, ...]
    first_call_end: FirstCallEnd | None = None


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    """The serve command's word on open choices, applied to each request."""

    #: `--temperature`: the temperature of a request that sets none.
    temperature: float | None = None
    #: `--seed`: the seed of a request that sets none.
    seed: int | None = None
    #: `--spec-max-temperature`: the cap on a temperature nobody asked for.
    max_temperature: float | None = None

    def sampling(self, asked: SamplingAsked, model: ModelFacts) -> SamplingParams:
        temperature = effective_temperature(
            asked.temperature,
            self.temperature,
            model_default=model.sampling.temperature,
            max_temperature=self.max_temperature,
            strategy_registered=model.speculates,
        )
        seed = asked.seed if asked.seed is not None else self.seed
        if seed is None:
            seed = secrets.randbits(63)
        # An unset filter takes the model's default (its file's, else off).
        own = model.sampling
        top_k = asked.top_k if asked.top_k is not None else own.top_k
        top_p = asked.top_p if asked.top_p is not None else own.top_p
        min_p = asked.min_p if asked.min_p is not None else own.min_p
        repeat = asked.repeat_penalty if asked.repeat_penalty is not None else own.repeat_penalty
        return SamplingParams(
            temperature=temperature,
            top_k=max(top_k or 0, 0),
            top_p=top_p if top_p is not None else 1.0,
            min_p=min_p or 0.0,
            repeat_penalty=repeat or 1.0,
            presence_penalty=asked.presence_penalty or 0.0,
            frequency_penalty=asked.frequency_penalty or 0.0,
            seed=seed,
            logit_bias=asked.logit_bias,
        )

    def tool_plan(self, asked: ToolsAsked, model: ModelFacts) -> ToolPlan | None:
        """What `asked` asks of `model` (None: no tools); RequestRefused for what cannot be."""
        choice = asked.choice
        if not asked.functions:
            if choice not in (None, ToolChoice.NONE):
                raise RequestRefused(
                    "`tool_choice` needs `tools`: send the functions the model may call",
                    "tool_choice",
                )
            return None
        names: set[str] = set()
        for index, tool in enumerate(asked.functions):
            if tool.name in names:
                where = f"tools[{index}].function.name"
                raise RequestRefused(f"`{where}`: two tools are named {tool.name!r}", where)
            names.add(tool.name)
        if choice is ToolChoice.NAMED and asked.named not in names:
            raise RequestRefused(
                f"`tool_choice.function.name` names {asked.named!r}, which is not among `tools`",
                "tool_choice.function.name",
            )
        kind = choice or ToolChoice.AUTO
        if kind is ToolChoice.AUTO and not model.template_takes_tools:
            raise RequestRefused(
                f"{model.chat_template_origin} of {model.name} cannot take tools, so the"
                " model cannot call them; serve it with --chat-template-file naming a template"
                " that can, or force a call with `tool_choice`",
                "tools",
            )
        named = asked.named if kind is ToolChoice.NAMED else None
        plan = ToolPlan(
            kind,
            asked.functions,
            model.tool_family,
            named,
            parallel=asked.parallel,
            template_takes_tools=model.template_takes_tools,
        )
        if not plan.forced:
            return plan
        try:
            return plan.with_grammar()
        except SchemaUnsupported as why:
            raise RequestRefused(
                f'{why}; use `tool_choice: "auto"` for this tool', "tools"
            ) from None

    def work(
        self, asked: Asked, model: ModelFacts, prompt: list[int], tools: ToolPlan | None = None
    ) -> Work:
        """The request to submit for `prompt`; RequestRefused when the prompt leaves the reply
        no room."""
        context = model.capabilities.context_size
        if not prompt:
            raise RequestRefused(
                "the prompt is empty; send some text to complete", asked.prompt_param
            )
        if len(prompt) >= context:
            raise RequestRefused(
                f"the prompt is {len(prompt)} tokens, and the context window of {model.name}"
                f" holds {context} tokens (the reply needs at least one); shorten the prompt",
                asked.prompt_param,
            )
        # An explicit limit past the window is kept: the reply then ends at the window, "length".
        max_tokens = asked.max_tokens or min(context - len(prompt), DEFAULT_MAX_TOKENS)
        request = GenerationRequest(
            prompt=prompt,
            params=self.sampling(asked.sampling, model),
            max_tokens=max_tokens,
            stop_tokens=model.turn_end_tokens() if asked.chat else frozenset(),
            # Whether the lane may draft is GenerationRequest.may_draft's call (one rule).
            constraint=_constraint(asked, model, tools),
            logprobs=asked.logprobs,
        )
        ends = tools.first_call_end() if tools is not None else None
        return Work(request, _stops(asked, model), ends)


def _constraint(asked: Asked, model: ModelFacts, tools: ToolPlan | None) -> TokenConstraint | None:
    eos = model.capabilities.eos_tokens
    if tools is not None and tools.grammar is not None:
        # A forced call is a grammar lane; it never speculates (docs/contract.md §8).
        return SchemaConstraint(model.token_pieces(), eos, tools.grammar)
    if asked.json_object:
        return JsonObjectConstraint(model.token_pieces(), eos)
    return None


def _stops(asked: Asked, model: ModelFacts) -> tuple[str, ...]:
    """The request's stop strings, and for a chat the template's end-of-turn markers, so a model
    whose end-of-generation token is another never writes on into a turn it invents (and no
    tool call is read from one)."""
    if not asked.chat:
        return asked.stop
    return tuple(dict.fromkeys((*asked.stop, *model.turn_ends)))
