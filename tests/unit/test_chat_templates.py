"""Chat templates shared by the runtimes: tools in the built-ins, the probe, template files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superfluid.adapters.chat_templates import (
    CHATML,
    GEMMA,
    PLAIN,
    ChatTemplateError,
    jinja_template,
    template_file,
)
from superfluid.domain.tool_calls import ToolFamily, parse_reply

TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
ASKED = [{"role": "user", "content": "Find it."}]
CALLED = [
    *ASKED,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": {"q": "x", "n": 2}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "found"},
]


def test_gemma_shows_tools_in_the_first_user_turn_and_earlier_calls_as_its_parser_reads_them() -> (
    None
):
    prompt = GEMMA(CALLED, [TOOL])
    assert prompt.startswith("<start_of_turn>user\nYou can call these functions.")
    assert json.dumps(TOOL) in prompt
    model_turn = prompt.split("<start_of_turn>model\n")[1].split("<end_of_turn>")[0]
    assert parse_reply(ToolFamily.PYTHONIC, model_turn).calls[0].name == "lookup"
    assert "```tool_output\nfound\n```" in prompt
    assert prompt.endswith("<start_of_turn>model\n")


def test_chatml_shows_tools_in_the_system_turn_and_calls_as_hermes_blocks() -> None:
    prompt = CHATML(CALLED, [TOOL])
    assert prompt.startswith("<|im_start|>system\n") and "<tools>" in prompt
    assistant = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    (call,) = parse_reply(ToolFamily.HERMES, assistant).calls
    assert call.name == "lookup" and json.loads(call.arguments) == {"q": "x", "n": 2}
    assert "<tool_response>\nfound\n</tool_response>" in prompt


def test_without_tools_the_builtins_render_as_before() -> None:
    assert CHATML(ASKED) == "<|im_start|>user\nFind it.<|im_end|>\n<|im_start|>assistant\n"
    assert GEMMA(ASKED) == "<start_of_turn>user\nFind it.<end_of_turn>\n<start_of_turn>model\n"


def test_a_template_that_cannot_take_tools_refuses_them_by_name() -> None:
    assert PLAIN.tool_family is None
    with pytest.raises(ChatTemplateError, match="cannot take tools"):
        PLAIN(ASKED, [TOOL])
    assert PLAIN(ASKED) == "user: Find it.\nassistant:"


def test_the_probe_tells_a_template_that_shows_tools_from_one_that_ignores_them() -> None:
    shows = (
        "{% for t in tools or [] %}{{ t | tojson }}{% endfor %}<tool_call>{{ messages[0].content }}"
    )
    ignores = "{{ messages[0].content }}"
    taking = jinja_template(shows, bos_token="", eos_token="", strip_bos=False)
    assert taking.tool_family is ToolFamily.HERMES
    assert '"name": "lookup"' in taking(ASKED, [TOOL])  # tojson as Hugging Face writes it
    assert jinja_template(ignores, bos_token="", eos_token="", strip_bos=False).tool_family is None


def test_a_template_file_may_be_jinja_or_a_tokenizer_config(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("{{ messages[0].content }}!")
    assert (
        template_file(str(tmp_path / "t.jinja"), bos_token="", eos_token="", strip_bos=False)(ASKED)
        == "Find it.!"
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "[{{ messages[0].role }}]"})
    )
    config = template_file(
        str(tmp_path / "tokenizer_config.json"), bos_token="", eos_token="", strip_bos=False
    )
    assert config(ASKED) == "[user]" and config.origin == "file"
    with pytest.raises(ChatTemplateError, match="chat_template"):
        (tmp_path / "bad.json").write_text("{}")
        template_file(str(tmp_path / "bad.json"), bos_token="", eos_token="", strip_bos=False)
    with pytest.raises(ChatTemplateError, match="--chat-template-file"):
        template_file(str(tmp_path / "missing.jinja"), bos_token="", eos_token="", strip_bos=False)
