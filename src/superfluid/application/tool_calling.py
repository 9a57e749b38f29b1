"""Tool calling for one request: what `tool_choice` asks, and how the reply becomes calls.

- `none`: the model is not shown the tools and nothing is parsed.
- `auto` (the default with tools): the model sees the tools through its chat template and may
  call them in its family's format; a stream reads the calls as they are written, a whole reply
  is read when it ends (domain.tool_calls). The lane is an ordinary lane: it speculates like any
  other, so a call that copies its context (a path, a block of code) is drafted too, and greedy
  output is the same with or without speculation. With `parallel_tool_calls` false the reply
  ends where its first call closes (`first_call_end`): a cut made on the text alone, so it too
  is the same with or without speculation.
- `required` or a named function: the promise is a call whose arguments validate against the
  function's `parameters`, whatever the model. That is a grammar lane (domain.json_schema):
  it writes the arguments object (a named function) or a list of
  `{"name": ..., "arguments": ...}` calls (`required`) as bare JSON, and like every grammar lane
  it never speculates (docs/contract.md §8). Schemas the grammar cannot enforce are refused
  when the request arrives.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from superfluid.domain.json_schema import Node, call_arguments, call_list
from superfluid.domain.tool_calls.calls import ParsedCall, ParsedReply
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.domain.tool_calls.reader import FirstCallEnd
from superfluid.domain.tool_calls.replies import ends_inside_call, read_reply


class ToolChoice(enum.Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True, slots=True)
class FunctionTool:
    name: str
    parameters: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ToolPlan:
    choice: ToolChoice
    functions: tuple[FunctionTool, ...]
    family: ToolFamily | None = None  # how an `auto` reply writes calls
    named: str | None = None  # the function a NAMED choice forces
    parallel: bool = True
    #: Whether the model's chat template can show tools; a forced call on one that cannot is
    #: written by its grammar alone.
    template_takes_tools: bool = True
    #: A forced choice's grammar, compiled once when the request is taken (`with_grammar`).
    grammar: Node | None = None

    @property
    def forced(self) -> bool:
        return self.choice in (ToolChoice.REQUIRED, ToolChoice.NAMED)

    @property
    def shows_tools(self) -> bool:
        """Whether the prompt shows the model the tools: not for `tool_choice: none`, nor on a
        template that cannot take them."""
        return self.choice is not ToolChoice.NONE and self.template_takes_tools

    def first_call_end(self) -> FirstCallEnd | None:
        """Where the reply ends when it may make one call only: `auto` with
        `parallel_tool_calls` false (a forced choice's grammar writes one call by itself)."""
        if self.choice is ToolChoice.AUTO and not self.parallel and self.family is not None:
            return FirstCallEnd(self.family)
        return None

    def with_grammar(self) -> ToolPlan:
        """This plan with its forced output's grammar compiled; raises SchemaUnsupported
        naming what the grammar cannot enforce."""
        return replace(self, grammar=self._compile())

    def _compile(self) -> Node:
        nodes = [
            (
                tool.name,
                call_arguments(tool.parameters, where=f"tools[{at}].function.parameters"),
            )
            for at, tool in enumerate(self.functions)
            if self.choice is ToolChoice.REQUIRED or tool.name == self.named
        ]
        if self.choice is ToolChoice.NAMED:
            return nodes[0][1]
        return call_list(nodes, parallel=self.parallel)

    def read(self, text: str, finish: str) -> ParsedReply:
        """The calls in a reply that ended with `finish` (and the content around them). A
        forced call the reply did not finish (`max_tokens`) is no call: its text is content."""
        if self.forced:
            return self._read_forced(text, finish)
        if self.choice is ToolChoice.AUTO and self.family is not None:
            return read_reply(self.family, text)
        return ParsedReply(text or None)

    def finish_reason(self, finish: str, *, called: bool, cut_inside_call: bool) -> str:
        """What a reply that ended with `finish` says: `tool_calls` when it called, unless
        `max_tokens` cut it inside a call (`length`, as OpenAI's say)."""
        if called and (finish == "stop" or (finish == "length" and not cut_inside_call)):
            return "tool_calls"
        return finish

    def ends_inside_call(self, text: str) -> bool:
        """Whether a reply of `text` ended inside a call: a forced reply whose grammar had not
        finished (its text is no JSON yet), or an `auto` reply inside a call it had begun."""
        if self.forced:
            try:
                json.loads(text)
            except json.JSONDecodeError:
                return True
            return False
        return self.family is not None and ends_inside_call(self.family, text)

    def _read_forced(self, text: str, finish: str) -> ParsedReply:
        # Only a reply cut short (max_tokens, a stop string) leaves the grammar unfinished.
        cut_short = ParsedReply(
            text or None, (), "the forced tool call was cut short; the reply is returned as text"
        )
        if finish != "stop":
            return cut_short
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return cut_short
        if self.choice is ToolChoice.NAMED:
            assert self.named is not None
            # The model's own text, as a stream sends it fragment by fragment.
            return ParsedReply(None, (ParsedCall(self.named, text.strip()),))
        calls = tuple(ParsedCall(item["name"], _compact(item["arguments"])) for item in value)
        return ParsedReply(None, calls)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
