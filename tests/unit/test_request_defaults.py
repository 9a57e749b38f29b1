"""Request defaults as a use case: the sampling order, the tool plan and the request to submit,
read off plain records (no HTTP, no runtime)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from superfluid.application.grammar import TokenPieces
from superfluid.application.ports import Capabilities
from superfluid.application.request_defaults import (
    DEFAULT_MAX_TOKENS,
    Asked,
    RequestDefaults,
    RequestRefused,
    SamplingAsked,
    ToolsAsked,
)
from superfluid.application.tool_calling import FunctionTool, ToolChoice
from superfluid.domain.sampling_defaults import BUILT_IN_SAMPLING, SamplingDefaults
from superfluid.domain.tool_calls.families import ToolFamily


@dataclass
class Model:
    """A served model as the use case sees it."""

    name: str = "m"
    sampling: SamplingDefaults = BUILT_IN_SAMPLING
    speculates: bool = True
    tool_family: ToolFamily | None = ToolFamily.HERMES
    template_takes_tools: bool = True
    chat_template_origin: str = "the chat template in m.gguf"
    turn_ends: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
    context: int = 4096

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            runtime="fake",
            verify_rows=True,
            verify_batches=True,
            cut_refusal=None,
            strategies=(),
            max_verify_rows=8,
            context_size=self.context,
            eos_tokens=frozenset({0}),
        )

    def turn_end_tokens(self) -> frozenset[int]:
        return frozenset({7})

    def token_pieces(self) -> TokenPieces:
        return TokenPieces(lambda tokens: "".join(chr(97 + t % 26) for t in tokens).encode())


OWN = SamplingDefaults(
    temperature=1.0, top_k=20, top_p=0.9, min_p=0.05, repeat_penalty=1.1, source="m.gguf"
)
DEFAULTS = RequestDefaults()


# -- sampling -------------------------------------------------------------------------------------


def test_the_temperature_comes_from_the_request_then_the_flag_then_the_model_then_built_in() -> (
    None
):
    flag = RequestDefaults(temperature=0.4)
    assert flag.sampling(SamplingAsked(temperature=0.2), Model(sampling=OWN)).temperature == 0.2
    assert flag.sampling(SamplingAsked(), Model(sampling=OWN)).temperature == 0.4
    assert DEFAULTS.sampling(SamplingAsked(), Model(sampling=OWN)).temperature == 1.0
    assert DEFAULTS.sampling(SamplingAsked(), Model()).temperature == 0.8


def test_filters_come_from_the_request_then_the_model_else_they_are_off() -> None:
    mine = DEFAULTS.sampling(SamplingAsked(top_k=0, top_p=1.0, min_p=0.0), Model(sampling=OWN))
    assert (mine.top_k, mine.top_p, mine.min_p, mine.repeat_penalty) == (0, 1.0, 0.0, 1.1)
    off = DEFAULTS.sampling(SamplingAsked(top_k=-1), Model())
    assert (off.top_k, off.top_p, off.min_p, off.repeat_penalty) == (0, 1.0, 0.0, 1.0)
    assert (off.presence_penalty, off.frequency_penalty, off.logit_bias) == (0.0, 0.0, ())


def test_the_cap_lowers_only_a_temperature_nobody_asked_for_on_a_speculating_model() -> None:
    capped = RequestDefaults(max_temperature=0.3)
    assert capped.sampling(SamplingAsked(), Model(sampling=OWN)).temperature == 0.3
    assert capped.sampling(SamplingAsked(temperature=1.5), Model()).temperature == 1.5
    flag = RequestDefaults(temperature=1.2, max_temperature=0.3)
    assert flag.sampling(SamplingAsked(), Model()).temperature == 1.2
    # Nothing drafts on a model without a strategy, so its default is left alone.
    assert capped.sampling(SamplingAsked(), Model(speculates=False)).temperature == 0.8


def test_seeds_come_from_the_request_then_the_flag_then_fresh_randomness() -> None:
    flag = RequestDefaults(seed=9)
    assert flag.sampling(SamplingAsked(seed=5), Model()).seed == 5
    assert flag.sampling(SamplingAsked(), Model()).seed == 9
    fresh = {DEFAULTS.sampling(SamplingAsked(), Model()).seed for _ in range(8)}
    assert len(fresh) == 8 and all(0 <= seed < 2**63 for seed in fresh)


# -- tools ----------------------------------------------------------------------------------------

DONE = FunctionTool("done", {"type": "object"})
LOOK = FunctionTool("look", {"type": "object", "properties": {"path": {"type": "string"}}})


def refusal(asked: ToolsAsked, model: Model | None = None) -> RequestRefused:
    with pytest.raises(RequestRefused) as refused:
        DEFAULTS.tool_plan(asked, model or Model())
    return refused.value


def test_no_tools_is_no_plan_and_a_choice_without_tools_is_refused() -> None:
    assert DEFAULTS.tool_plan(ToolsAsked(), Model()) is None
    assert DEFAULTS.tool_plan(ToolsAsked(choice=ToolChoice.NONE), Model()) is None
    assert refusal(ToolsAsked(choice=ToolChoice.AUTO)).param == "tool_choice"


def test_tools_without_a_choice_are_auto_in_the_models_family() -> None:
    plan = DEFAULTS.tool_plan(ToolsAsked((DONE, LOOK)), Model())
    assert plan is not None and plan.choice is ToolChoice.AUTO
    assert plan.family is ToolFamily.HERMES and plan.grammar is None
    assert plan.first_call_end() is None
    one = DEFAULTS.tool_plan(ToolsAsked((DONE,), parallel=False), Model())
    assert one is not None and one.first_call_end() is not None


def test_two_tools_of_one_name_and_a_choice_naming_no_tool_are_refused() -> None:
    assert refusal(ToolsAsked((DONE, LOOK, DONE))).param == "tools[2].function.name"
    named = ToolsAsked((DONE,), ToolChoice.NAMED, "look")
    assert refusal(named).param == "tool_choice.function.name"


def test_auto_needs_a_template_that_takes_tools_and_a_forced_call_does_not() -> None:
    plain = Model(template_takes_tools=False, tool_family=None)
    why = refusal(ToolsAsked((DONE,)), plain)
    assert why.param == "tools" and "cannot take tools" in why.message
    forced = DEFAULTS.tool_plan(ToolsAsked((DONE, LOOK), ToolChoice.NAMED, "look"), plain)
    assert forced is not None and forced.named == "look" and forced.grammar is not None
    required = DEFAULTS.tool_plan(ToolsAsked((DONE,), ToolChoice.REQUIRED), plain)
    assert required is not None and required.forced and required.grammar is not None


def test_a_forced_call_whose_schema_the_grammar_cannot_enforce_is_refused() -> None:
    odd = FunctionTool(
        "odd", {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}
    )
    why = refusal(ToolsAsked((odd,), ToolChoice.REQUIRED))
    assert why.param == "tools" and 'use `tool_choice: "auto"`' in why.message
    assert DEFAULTS.tool_plan(ToolsAsked((odd,)), Model()) is not None


# -- the request to submit ------------------------------------------------------------------------


def test_a_prompt_must_leave_the_reply_a_token() -> None:
    with pytest.raises(RequestRefused) as empty:
        DEFAULTS.work(Asked(chat=True), Model(), [])
    assert empty.value.param == "messages"
    with pytest.raises(RequestRefused) as full:
        DEFAULTS.work(Asked(chat=False), Model(context=4), [1, 2, 3, 4])
    assert full.value.param == "prompt" and "4 tokens" in full.value.message
    assert DEFAULTS.work(Asked(chat=False), Model(context=4), [1, 2, 3]).request.max_tokens == 1


def test_the_reply_may_use_the_rest_of_the_window_up_to_a_cap_or_what_it_asks() -> None:
    assert DEFAULTS.work(Asked(chat=True), Model(context=100), [1] * 40).request.max_tokens == 60
    assert DEFAULTS.work(Asked(chat=True), Model(), [1]).request.max_tokens == DEFAULT_MAX_TOKENS
    asked = Asked(chat=True, max_tokens=500)
    assert DEFAULTS.work(asked, Model(context=100), [1]).request.max_tokens == 500


def test_a_chat_stops_at_the_templates_turn_ends_and_a_text_completion_at_its_own_stops() -> None:
    chat = DEFAULTS.work(Asked(chat=True, stop=("END", "<|im_end|>")), Model(), [1])
    assert chat.stops == ("END", "<|im_end|>", "<|endoftext|>")
    assert chat.request.stop_tokens == frozenset({7})
    text = DEFAULTS.work(Asked(chat=False, stop=("END",)), Model(), [1])
    assert text.stops == ("END",) and text.request.stop_tokens == frozenset()


def test_json_mode_forced_calls_and_logprobs_make_plain_lanes() -> None:
    assert DEFAULTS.work(Asked(chat=True), Model(), [1]).request.may_draft
    json_mode = DEFAULTS.work(Asked(chat=True, json_object=True), Model(), [1]).request
    assert json_mode.constraint is not None and not json_mode.may_draft
    logprobs = DEFAULTS.work(Asked(chat=True, logprobs=2), Model(), [1]).request
    assert logprobs.logprobs == 2 and not logprobs.may_draft
    plan = DEFAULTS.tool_plan(ToolsAsked((DONE,), ToolChoice.NAMED, "done"), Model())
    forced = DEFAULTS.work(Asked(chat=True), Model(), [1], plan)
    assert forced.request.constraint is not None and not forced.request.may_draft
    one = DEFAULTS.tool_plan(ToolsAsked((DONE,), parallel=False), Model())
    assert DEFAULTS.work(Asked(chat=True), Model(), [1], one).first_call_end is not None
