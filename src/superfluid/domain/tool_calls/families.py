"""The tool-call families, one record each: the only list of what a family is made of.

A family's record names how a chat template shows that it teaches the family, the parser that
reads a whole reply, and the grammar that reads a streaming one. `family_of_template`,
`parse_reply` and `ToolCallReader` read this table; `ToolFamily` names its rows.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from superfluid.domain.tool_calls import hermes, llama3, mistral, pythonic
from superfluid.domain.tool_calls.calls import ParsedReply
from superfluid.domain.tool_calls.stream import Reading, Stream


class ToolFamily(enum.StrEnum):
    HERMES = "hermes"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    PYTHONIC = "pythonic"


@dataclass(frozen=True, slots=True)
class ToolFamilyRecord:
    """One family: how a template shows it, and how its replies are read."""

    family: ToolFamily
    #: Text whose presence in a chat template says the template teaches this family; None for
    #: the one family of templates that take tools but show no marker.
    template_marker: str | None
    #: A whole reply's calls and the text around them; None when the reply makes no call.
    #: Raises Malformed for a call-shaped reply that does not parse.
    parse: Callable[[str], ParsedReply | None]
    #: The stream grammar: sent a reply's characters as it is generated (see `stream`).
    read: Callable[[Stream], Reading[None]]


#: Templates are matched against the markers in this order.
FAMILIES: tuple[ToolFamilyRecord, ...] = (
    ToolFamilyRecord(ToolFamily.HERMES, hermes.OPEN, hermes.parse, hermes.read),
    ToolFamilyRecord(ToolFamily.LLAMA3, None, llama3.parse, llama3.read),
    ToolFamilyRecord(ToolFamily.MISTRAL, mistral.MARKER, mistral.parse, mistral.read),
    ToolFamilyRecord(ToolFamily.PYTHONIC, pythonic.TOOL_CODE, pythonic.parse, pythonic.read),
)

_BY_FAMILY = {record.family: record for record in FAMILIES}
_UNMARKED = next(record.family for record in FAMILIES if record.template_marker is None)


def family_record(family: ToolFamily) -> ToolFamilyRecord:
    """`family`'s row of the table."""
    return _BY_FAMILY[family]


def family_of_template(source: str) -> ToolFamily:
    """The format a chat template teaches its model, read off the template's own markers."""
    for record in FAMILIES:
        if record.template_marker is not None and record.template_marker in source:
            return record.family
    return _UNMARKED
