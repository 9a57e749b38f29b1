"""Tool-call parsers, one per family, against each family's documented format; the stream reader
(what each piece of a reply settles), where a one-call reply ends, and the family table (every
family complete, and the recipe for a new one naming real files)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
from pathlib import Path

import pytest

from superfluid.domain.tool_calls.calls import ParsedCall
from superfluid.domain.tool_calls.events import (
    ArgumentsFragment,
    CallClosed,
    CallOpened,
    CallProblem,
    Content,
    ToolCallEvent,
)
from superfluid.domain.tool_calls.families import (
    FAMILIES,
    ToolFamily,
    ToolFamilyRecord,
    family_of_template,
)
from superfluid.domain.tool_calls.reader import FirstCallEnd, ToolCallReader
from superfluid.domain.tool_calls.replies import ends_inside_call, parse_reply, read_reply


def call(name: str, **arguments: object) -> ParsedCall:
    return ParsedCall(name, json.dumps(arguments, separators=(",", ":")))


# -- hermes (Qwen 2.5/3, Hermes) ------------------------------------------------------------------


def test_hermes_reads_one_block_and_keeps_the_text_around_it() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    parsed = parse_reply(ToolFamily.HERMES, text)
    assert parsed.calls == (call("read_file", path="a.py"),)
    assert parsed.content == "Let me look."
    assert parsed.problem is None


def test_hermes_reads_parallel_blocks_in_order() -> None:
    text = (
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": "{\\"y\\": [1, 2]}"}\n</tool_call>'
    )
    parsed = parse_reply(ToolFamily.HERMES, text)
    assert parsed.calls == (call("a", x=1), call("b", y=[1, 2]))
    assert parsed.content is None


def test_hermes_takes_a_last_block_the_stop_token_cut_before_its_closing_tag() -> None:
    parsed = parse_reply(ToolFamily.HERMES, '<tool_call>\n{"name": "f", "arguments": {}}\n')
    assert parsed.calls == (call("f"),)


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "f", "arguments": {"x": 1}',  # unclosed
        '{"arguments": {}}',  # no name
        '{"name": "f", "arguments": [1]}',  # arguments not an object
        "not json at all",
    ],
)
def test_a_malformed_hermes_call_leaves_the_whole_reply_as_content(body: str) -> None:
    text = f"Sure.<tool_call>{body}</tool_call>"
    parsed = parse_reply(ToolFamily.HERMES, text)
    assert parsed.calls == ()
    assert parsed.content == text
    assert parsed.problem is not None and "hermes" in parsed.problem


def test_a_reply_without_a_call_is_content_untouched() -> None:
    text = "  Plain text, spaces kept.  "
    for family in ToolFamily:
        parsed = parse_reply(family, text)
        assert parsed.calls == () and parsed.content == text and parsed.problem is None


# -- llama3 (bare JSON) ---------------------------------------------------------------------------


def test_llama3_reads_a_bare_json_call_with_parameters() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert parse_reply(ToolFamily.LLAMA3, text).calls == (call("get_weather", city="Paris"),)


def test_llama3_reads_the_python_tag_and_several_calls() -> None:
    text = '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": true}}'
    assert parse_reply(ToolFamily.LLAMA3, text).calls == (call("a"), call("b", k=True))
    listed = '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]'
    assert parse_reply(ToolFamily.LLAMA3, listed).calls == (call("a"), call("b"))


def test_llama3_leaves_prose_in_brackets_alone() -> None:
    text = "[1] See the footnote."
    assert parse_reply(ToolFamily.LLAMA3, text).calls == ()
    assert parse_reply(ToolFamily.LLAMA3, text).problem is None


# -- mistral --------------------------------------------------------------------------------------


def test_mistral_reads_its_call_list_after_the_marker() -> None:
    text = 'Checking.[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}]'
    parsed = parse_reply(ToolFamily.MISTRAL, text)
    assert parsed.calls == (call("f", a=1),)
    assert parsed.content == "Checking."


def test_mistral_reads_the_newer_name_args_form() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]noop[ARGS]{}'
    assert parse_reply(ToolFamily.MISTRAL, text).calls == (
        call("get_weather", city="Oslo"),
        call("noop"),
    )


def test_mistral_reads_a_bare_call_list_when_the_marker_was_not_rendered() -> None:
    text = '[{"name": "f", "arguments": {}}]'
    assert parse_reply(ToolFamily.MISTRAL, text).calls == (call("f"),)


# -- pythonic (Llama 4, Gemma 3) ------------------------------------------------------------------


def test_pythonic_reads_a_call_list() -> None:
    text = '[get_weather(city="Paris", days=3), noop()]'
    assert parse_reply(ToolFamily.PYTHONIC, text).calls == (
        call("get_weather", city="Paris", days=3),
        call("noop"),
    )


def test_pythonic_reads_a_gemma_tool_code_block_with_text_around() -> None:
    text = "I will check.\n```tool_code\nlookup(query='x', exact=True, limit=None)\n```"
    parsed = parse_reply(ToolFamily.PYTHONIC, text)
    assert parsed.calls == (call("lookup", query="x", exact=True, limit=None),)
    assert parsed.content == "I will check."


def test_pythonic_refuses_what_is_not_a_literal_without_running_it() -> None:
    text = "[f(x=__import__('os').getcwd())]"
    parsed = parse_reply(ToolFamily.PYTHONIC, text)
    assert parsed.calls == () and parsed.content == text and parsed.problem is not None


# -- which family a template teaches --------------------------------------------------------------


@pytest.mark.parametrize(
    ("marker", "family"),
    [
        ("{{- '<tool_call>' }}", ToolFamily.HERMES),
        ("[TOOL_CALLS]", ToolFamily.MISTRAL),
        ("```tool_code", ToolFamily.PYTHONIC),
        ("{{ tools | tojson }}", ToolFamily.LLAMA3),
    ],
)
def test_the_family_is_read_off_the_templates_markers(marker: str, family: ToolFamily) -> None:
    assert family_of_template(f"{{% for m in messages %}}{marker}{{% endfor %}}") is family


def test_hermes_reads_parallel_calls_when_the_reply_ends_inside_the_last_closing_tag() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_ca'
    parsed = parse_reply(ToolFamily.HERMES, text)
    assert parsed.calls == (call("a"), call("b")) and parsed.content is None


def test_a_call_cut_short_after_complete_ones_stays_text_and_the_others_stand() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call> <tool_call>{"name": "b", "argu'
    parsed = parse_reply(ToolFamily.HERMES, text)
    assert parsed.calls == (call("a"),)
    assert parsed.content == '<tool_call>{"name": "b", "argu'
    assert parsed.problem is not None


# -- the stream reader ----------------------------------------------------------------------------


def read(family: ToolFamily, *pieces: str) -> list[ToolCallEvent]:
    """Every event of a reply written in `pieces`, then ended."""
    reader = ToolCallReader(family)
    events = [event for piece in pieces for event in reader.push(piece)]
    return events + reader.finish()


def content_of(events: list[ToolCallEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, Content))


def calls_of(events: list[ToolCallEvent]) -> list[tuple[str, str]]:
    """(name, the call's fragments joined), per call."""
    names = [event.name for event in events if isinstance(event, CallOpened)]
    return [
        (
            name,
            "".join(
                e.text for e in events if isinstance(e, ArgumentsFragment) and e.index == index
            ),
        )
        for index, name in enumerate(names)
    ]


def problems_of(events: list[ToolCallEvent]) -> list[str]:
    return [event.why for event in events if isinstance(event, CallProblem)]


def test_content_leaves_at_once_and_a_call_as_soon_as_its_name_is_known() -> None:
    reader = ToolCallReader(ToolFamily.HERMES)
    assert reader.push("Let me look. ") == [Content("Let me look.")]
    assert reader.push("<tool_call>\n") == []
    assert reader.push('{"name": "read_fi') == []  # the name may go on
    assert reader.push('le", ') == [CallOpened(0, "read_file")]
    assert reader.push('"arguments": {"path": "a') == [ArgumentsFragment(0, '{"path": "a')]
    first = 'Let me look. <tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}'
    assert reader.push('.py"}}') == [ArgumentsFragment(0, '.py"}'), CallClosed(0, len(first))]
    assert reader.push("\n</tool_call>\n<tool_call>") == []
    second = '{"name": "grep", "arguments": {}}'
    assert reader.push(second) == [
        CallOpened(1, "grep"),
        ArgumentsFragment(1, "{}"),
        CallClosed(1, len(first) + len("\n</tool_call>\n<tool_call>") + len(second)),
    ]
    assert reader.push("</tool_call>") == []
    assert reader.finish() == []


def test_arguments_written_before_the_name_wait_for_it() -> None:
    reader = ToolCallReader(ToolFamily.HERMES)
    held = '<tool_call>{"arguments": {"x": [1, {"y": null}]}'
    assert reader.push(held) == []
    assert reader.push(', "name": "f"}') == [
        CallOpened(0, "f"),
        ArgumentsFragment(0, '{"x": [1, {"y": null}]}'),
        CallClosed(0, len(held) + len(', "name": "f"}')),
    ]


def test_arguments_written_as_a_json_string_or_left_out_leave_as_an_object() -> None:
    events = read(
        ToolFamily.HERMES,
        '<tool_call>{"name": "a", "arguments": "{\\"y\\": [1, 2]}"}</tool_call>',
        '<tool_call>{"name": "b"}</tool_call><tool_call>{"name": "c", "arguments": null}',
    )
    assert calls_of(events) == [("a", '{"y":[1,2]}'), ("b", "{}"), ("c", "{}")]
    assert problems_of(events) == []


def test_openais_own_call_shape_echoed_is_a_call() -> None:
    text = '{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}'
    events = read(ToolFamily.LLAMA3, text)
    assert calls_of(events) == [("f", "{}")] and problems_of(events) == []


def test_a_marker_prefix_that_turns_out_to_be_text_leaves_as_content() -> None:
    events = read(ToolFamily.HERMES, "a <tool", "box> b")
    assert events == [Content("a"), Content(" <toolbox> b")]


def test_a_call_that_breaks_before_its_name_left_is_all_content() -> None:
    text = 'ok <tool_call>{"arguments": {}, "nam'
    events = read(ToolFamily.HERMES, text, 'e": 3}</tool_call> bye')
    assert content_of(events) == text + 'e": 3}</tool_call> bye'
    assert calls_of(events) == []
    (problem,) = problems_of(events)
    assert problem.startswith("hermes tool call not parsed: a call has no function name")


def test_a_call_that_breaks_after_its_name_left_stands_and_the_rest_is_content() -> None:
    text = 'Sure. <tool_call>{"name": "f", "arguments": {"x": 1</tool_call> more'
    events = read(ToolFamily.HERMES, *text)
    assert calls_of(events) == [("f", '{"x": 1')]  # what was sent stands
    assert content_of(events) == "Sure. </tool_call> more"  # from where the call broke on
    (problem,) = problems_of(events)
    assert "'f' broke off (a call is not valid JSON)" in problem
    assert not any(isinstance(event, CallClosed) for event in events)


def test_no_call_is_read_after_a_broken_one() -> None:
    text = '<tool_call>{"name": 1}</tool_call> <tool_call>{"name": "g"}</tool_call>'
    events = read(ToolFamily.HERMES, text)
    assert calls_of(events) == [] and content_of(events) == text


def test_a_reply_that_ends_inside_a_call_leaves_it_as_streamed() -> None:
    reader = ToolCallReader(ToolFamily.HERMES)
    events = reader.push('<tool_call>{"name": "f", "arguments": {"path": "src/')
    assert calls_of(events) == [("f", '{"path": "src/')]
    ended = reader.finish()
    assert [type(event) for event in ended] == [CallProblem]
    assert "the reply ended inside it" in problems_of(ended)[0]
    assert reader.ended_inside_call


@pytest.mark.parametrize(
    ("family", "text", "inside"),
    [
        (
            ToolFamily.HERMES,
            '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> So',
            False,
        ),
        (ToolFamily.HERMES, '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_c', False),
        (ToolFamily.HERMES, "Let me <tool_c", False),
        (ToolFamily.HERMES, '<tool_call>{"na', True),
        (ToolFamily.MISTRAL, "[TOOL_CALLS]f[AR", True),
        (ToolFamily.PYTHONIC, "[f(x='a", True),
        (ToolFamily.PYTHONIC, "[f(x='a'), g()", False),
    ],
)
def test_the_reader_knows_whether_the_reply_ended_inside_a_call(
    family: ToolFamily, text: str, inside: bool
) -> None:
    assert ends_inside_call(family, text) is inside


def test_a_reply_that_ends_before_a_calls_name_gives_it_back_as_content() -> None:
    events = read(ToolFamily.HERMES, 'Hm. <tool_call>{"name": "rea')
    assert content_of(events) == 'Hm. <tool_call>{"name": "rea' and calls_of(events) == []
    assert "the reply ended inside it" in problems_of(events)[0]


def test_whitespace_leaves_with_the_content_after_it_and_not_after_the_last_call() -> None:
    events = read(ToolFamily.HERMES, "  Hi \n<tool_call>{", '"name": "f"}</tool_call>\n\n Bye \n')
    assert content_of(events) == "  Hi \n\n\n Bye"
    called = read(ToolFamily.HERMES, "Hi \n<tool_call>", '{"name": "f"}</tool_call>\n')
    assert content_of(called) == "Hi"
    plain = read(ToolFamily.HERMES, "  Plain, ", "spaces kept.  ")
    assert content_of(plain) == "  Plain, spaces kept.  "


def test_llama3_calls_are_the_whole_reply() -> None:
    events = read(
        ToolFamily.LLAMA3,
        '<|python_tag|>{"name": "a", "parameters": {}}; ',
        '{"name": "b", "parameters": {"k": true}}',
    )
    assert calls_of(events) == [("a", "{}"), ("b", '{"k": true}')] and content_of(events) == ""
    listed = read(ToolFamily.LLAMA3, '[{"name": "a", "arguments": {}},\n {"name": "b"}]')
    assert calls_of(listed) == [("a", "{}"), ("b", "{}")]


def test_llama3_prose_in_brackets_or_braces_is_content() -> None:
    prose = read(ToolFamily.LLAMA3, "[1] See", " the footnote.")
    assert content_of(prose) == "[1] See the footnote." and problems_of(prose) == []
    events = read(ToolFamily.LLAMA3, '{"answer": 42}')
    assert content_of(events) == '{"answer": 42}' and calls_of(events) == []
    assert "no function name" in problems_of(events)[0]
    assert content_of(read(ToolFamily.LLAMA3, "<|python_tag|>print(1)")) == "<|python_tag|>print(1)"


def test_llama3_text_after_the_calls_is_content_and_logged() -> None:
    events = read(ToolFamily.LLAMA3, '{"name": "a", "parameters": {}} and then')
    assert calls_of(events) == [("a", "{}")] and content_of(events) == "and then"
    assert "text follows the calls" in problems_of(events)[0]


def test_mistral_reads_its_list_after_the_marker_and_the_name_args_form() -> None:
    events = read(ToolFamily.MISTRAL, 'Checking.[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}]')
    assert content_of(events) == "Checking." and calls_of(events) == [("f", '{"a": 1}')]
    reader = ToolCallReader(ToolFamily.MISTRAL)
    assert reader.push("[TOOL_CALLS]get_weather[AR") == []
    assert reader.push("GS]") == [CallOpened(0, "get_weather")]
    assert reader.push('{"city": "Os') == [ArgumentsFragment(0, '{"city": "Os')]
    first = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}'
    assert reader.push('lo"}[TOOL_CALLS]noop[ARGS]{}') == [
        ArgumentsFragment(0, 'lo"}'),
        CallClosed(0, len(first)),
        CallOpened(1, "noop"),
        ArgumentsFragment(1, "{}"),
        CallClosed(1, len(first + "[TOOL_CALLS]noop[ARGS]{}")),
    ]
    assert reader.finish() == []


def test_mistral_reads_a_bare_call_list_and_leaves_other_brackets_alone() -> None:
    assert calls_of(read(ToolFamily.MISTRAL, '[{"name": "f", "arguments": {}}]')) == [("f", "{}")]
    assert content_of(read(ToolFamily.MISTRAL, "[note] fine")) == "[note] fine"


def test_a_pythonic_call_opens_at_its_parenthesis_and_its_arguments_leave_when_it_closes() -> None:
    reader = ToolCallReader(ToolFamily.PYTHONIC)
    assert reader.push("[get_weather") == []
    assert reader.push('(city="Paris (FR)", ') == [CallOpened(0, "get_weather")]
    assert reader.push("days=[1, 2]") == []
    first = '[get_weather(city="Paris (FR)", days=[1, 2])'
    assert reader.push("), noop()]") == [
        ArgumentsFragment(0, '{"city":"Paris (FR)","days":[1,2]}'),
        CallClosed(0, len(first)),
        CallOpened(1, "noop"),
        ArgumentsFragment(1, "{}"),
        CallClosed(1, len(first + ", noop()")),
    ]
    assert reader.finish() == []


def test_pythonic_reads_a_tool_code_block_and_what_surrounds_it_is_content() -> None:
    events = read(
        ToolFamily.PYTHONIC,
        "I will check.\n```tool",
        '_code\nlookup(query=\'x\', exact=True, note="""a) b""")\n```\nDone.',
    )
    assert calls_of(events) == [("lookup", '{"query":"x","exact":true,"note":"a) b"}')]
    assert content_of(events) == "I will check.\n\nDone."
    assert content_of(read(ToolFamily.PYTHONIC, "```python\nx = 1\n```")) == "```python\nx = 1\n```"


def test_a_pythonic_call_that_is_no_literal_stands_without_arguments() -> None:
    events = read(ToolFamily.PYTHONIC, "[f(x=__import__('os').getcwd())]")
    assert calls_of(events) == [("f", "")]
    assert content_of(events) == "(x=__import__('os').getcwd())]"
    assert "not a literal" in problems_of(events)[0]
    assert content_of(read(ToolFamily.PYTHONIC, "[note] nothing")) == "[note] nothing"


def test_the_reader_takes_nothing_after_the_reply_ended() -> None:
    reader = ToolCallReader(ToolFamily.HERMES)
    reader.finish()
    with pytest.raises(RuntimeError, match="already ended"):
        reader.push("x")


# -- where a one-call reply ends ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "text", "kept"),
    [
        (
            ToolFamily.HERMES,
            'Hi <tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"}',
            'Hi <tool_call>{"name": "a", "arguments": {}}',
        ),
        (
            ToolFamily.LLAMA3,
            '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {}}',
            '{"name": "a", "parameters": {}}',
        ),
        (
            ToolFamily.MISTRAL,
            '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]',
            '[TOOL_CALLS][{"name": "a", "arguments": {}}',
        ),
        (ToolFamily.MISTRAL, "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}", "[TOOL_CALLS]a[ARGS]{}"),
        (ToolFamily.PYTHONIC, "[a(x=1), b()]", "[a(x=1)"),
        (ToolFamily.PYTHONIC, "```tool_code\na(x=1), b()\n```", "```tool_code\na(x=1)"),
    ],
)
def test_a_one_call_reply_ends_where_its_first_call_closes(
    family: ToolFamily, text: str, kept: str
) -> None:
    ends = FirstCallEnd(family)
    at = 0
    for size in (3, 5, 4, 7) * 40:  # uneven pieces, as tokens and drafts come
        piece = text[at : at + size]
        keep = ends.push(piece)
        if keep is not None:
            assert text[: at + keep] == kept
            break
        at += size
    else:
        raise AssertionError("the first call never closed")
    # The cut reply reads as that one call, streamed or not.
    assert read_reply(family, kept).calls == (call("a", **({"x": 1} if "x=1" in text else {})),)


def test_a_reply_without_a_call_never_ends_early() -> None:
    ends = FirstCallEnd(ToolFamily.HERMES)
    assert ends.push("no <tool") is None and ends.push("box> here") is None


def test_a_whole_reply_is_read_by_the_parser_when_it_can() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"x": 1</tool_call>'
    assert read_reply(ToolFamily.HERMES, text) == parse_reply(ToolFamily.HERMES, text)
    complete = '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]'
    assert read_reply(ToolFamily.MISTRAL, complete) == parse_reply(ToolFamily.MISTRAL, complete)


# -- the family table -----------------------------------------------------------------------------


def test_every_family_has_one_complete_record() -> None:
    assert sorted(r.family for r in FAMILIES) == sorted(ToolFamily)
    for record in FAMILIES:
        for field in dataclasses.fields(ToolFamilyRecord):
            if field.name != "template_marker":
                assert getattr(record, field.name) is not None, (record.family, field.name)
        assert callable(record.parse) and callable(record.read)
        assert inspect.isgeneratorfunction(record.read), record.family  # a stream grammar
        assert record.parse("Nothing to call here.") is None, record.family
    unmarked = [r.family for r in FAMILIES if r.template_marker is None]
    assert len(unmarked) == 1  # the family of templates that take tools but show no marker
    markers = [r.template_marker for r in FAMILIES if r.template_marker is not None]
    assert all(markers) and len(set(markers)) == len(markers)


@pytest.mark.parametrize("record", FAMILIES, ids=lambda r: r.family.value)
def test_each_family_is_read_off_its_own_template_marker(record: ToolFamilyRecord) -> None:
    marker = record.template_marker or "{{ tools | tojson }}"
    assert family_of_template(f"{{% if tools %}}{marker}{{% endif %}}") is record.family


ROOT = Path(__file__).resolve().parents[2]
RECIPE = "### A new tool-call family"


def _recipe() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert RECIPE in text, f"docs/architecture.md has no {RECIPE!r} section"
    section = text.split(RECIPE, 1)[1]
    return re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.M)[0]


def test_the_recipe_for_a_new_family_names_files_that_exist_and_the_table() -> None:
    recipe = _recipe()
    named = re.findall(r"`([^`\s]+)`", recipe)
    paths = [p for p in named if re.search(r"/|\.(py|md|toml)$", p)]
    for path in paths:
        # `<family>` stands for the new family's name: its folder exists.
        exists = ROOT / path.split("<")[0] if "<" in path else ROOT / path
        assert exists.exists(), f"{RECIPE} names {path}, which does not exist"
    table = {sys.modules[t.__module__].__file__ for t in (ToolFamily, ToolFamilyRecord)}
    for file in table:
        assert file is not None
        assert str(Path(file).relative_to(ROOT)) in paths, f"{RECIPE} does not name {file}"
