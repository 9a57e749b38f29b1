"""Tool-call parsers, one per family, against each family's documented format; the stream watch."""

from __future__ import annotations

import json

import pytest

from superfluid.domain.tool_calls import (
    ParsedCall,
    ToolCallWatch,
    ToolFamily,
    family_of_template,
    parse_reply,
)


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


# -- streams --------------------------------------------------------------------------------------


def feed(watch: ToolCallWatch, pieces: list[str]) -> str:
    return "".join(watch.push(piece) for piece in pieces)


def test_the_watch_streams_content_and_holds_a_call_from_its_marker_on() -> None:
    watch = ToolCallWatch(ToolFamily.HERMES)
    shown = feed(watch, ["Let me ", "check. <tool", "_call>", '{"name": "f", ', '"arguments": {}}'])
    assert shown == "Let me check. "
    parsed = watch.finish()
    assert parsed.calls == (call("f"),)


def test_the_watch_releases_a_marker_prefix_that_turned_out_to_be_text() -> None:
    watch = ToolCallWatch(ToolFamily.HERMES)
    shown = feed(watch, ["a <tool", "box> b"])
    assert shown == "a <toolbox> b"
    assert watch.finish().content is None


def test_the_watch_holds_a_reply_that_opens_like_a_bare_call() -> None:
    watch = ToolCallWatch(ToolFamily.LLAMA3)
    assert feed(watch, ["  ", '{"name": "f",', ' "parameters": {}}']) == ""
    assert watch.finish().calls == (call("f"),)


def test_the_watch_gives_back_a_malformed_call_as_content() -> None:
    watch = ToolCallWatch(ToolFamily.HERMES)
    shown = feed(watch, ["ok <tool_call>{broken"])
    parsed = watch.finish()
    assert shown + (parsed.content or "") == "ok <tool_call>{broken"
    assert parsed.calls == () and parsed.problem is not None


def test_the_watch_gives_back_a_bracket_that_was_not_a_call() -> None:
    watch = ToolCallWatch(ToolFamily.PYTHONIC)
    shown = feed(watch, ["[note] nothing to call"])
    parsed = watch.finish()
    assert shown + (parsed.content or "") == "[note] nothing to call"
    assert parsed.calls == ()


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
