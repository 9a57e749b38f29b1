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
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.domain.tool_calls.replies import parse_reply

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
    assert config(ASKED) == "[user]"
    assert config.origin == f"--chat-template-file {tmp_path / 'tokenizer_config.json'}"
    with pytest.raises(ChatTemplateError, match="chat_template"):
        (tmp_path / "bad.json").write_text("{}")
        template_file(str(tmp_path / "bad.json"), bos_token="", eos_token="", strip_bos=False)
    with pytest.raises(ChatTemplateError, match="--chat-template-file"):
        template_file(str(tmp_path / "missing.jinja"), bos_token="", eos_token="", strip_bos=False)


CHATML_NO_TOOLS = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_TURNS = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
HERMES_TOOLS = "{% for t in tools or [] %}{{ t | tojson }}{% endfor %}<tool_call>" + CHATML_NO_TOOLS


def test_a_template_s_end_of_turn_marker_is_read_off_its_rendering() -> None:
    def ends(source: str, eos: str = "") -> tuple[str, ...]:
        return jinja_template(source, bos_token="", eos_token=eos, strip_bos=False).turn_ends

    assert ends(CHATML_NO_TOOLS) == ("<|im_end|>",)
    assert ends(LLAMA3_TURNS) == ("<|eot_id|>",)
    assert ends("{{ messages[0].content }}") == ()  # no turns: no marker
    assert ends(CHATML_NO_TOOLS, eos="<|im_end|>") == ()  # the model's own EOS already ends it
    assert GEMMA.turn_ends == ("<end_of_turn>",) and CHATML.turn_ends == ("<|im_end|>",)


def test_a_chatml_template_without_tools_takes_them_through_the_chatml_builtin() -> None:
    from superfluid.adapters.chat_templates import select_chat_template

    template = select_chat_template(
        "llama", CHATML_NO_TOOLS, bos_token="", eos_token="", adds_bos=False
    )
    assert template.tool_family is ToolFamily.HERMES
    assert "<tools>" in template(ASKED, [TOOL]) and "<tools>" not in template(ASKED)
    assert template.turn_ends == ("<|im_end|>",)


def test_a_gguf_s_tool_use_template_renders_tool_requests() -> None:
    from superfluid.adapters.chat_templates import select_chat_template

    template = select_chat_template(
        "llama",
        LLAMA3_TURNS,
        bos_token="",
        eos_token="",
        adds_bos=False,
        tool_use=HERMES_TOOLS,
    )
    assert template.tool_family is ToolFamily.HERMES
    assert '"name": "lookup"' in template(ASKED, [TOOL])
    assert "<|eot_id|>" in template(ASKED)  # conversations without tools keep the default
    assert set(template.turn_ends) == {"<|eot_id|>", "<|im_end|>"}


def test_a_tokenizer_config_s_list_of_templates_gives_tool_requests_its_tool_use_one(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "default", "template": LLAMA3_TURNS},
                    {"name": "tool_use", "template": HERMES_TOOLS},
                ]
            }
        )
    )
    template = template_file(str(config), bos_token="", eos_token="", strip_bos=False)
    assert template.tool_family is ToolFamily.HERMES
    assert '"name": "lookup"' in template(ASKED, [TOOL])
    assert template(ASKED).startswith("<|start_header_id|>user")
    config.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "x"}]}))
    with pytest.raises(ChatTemplateError, match="names no `default` template"):
        template_file(str(config), bos_token="", eos_token="", strip_bos=False)


def test_a_template_file_that_does_not_parse_is_refused_naming_the_flag_and_the_file(
    tmp_path: Path,
) -> None:
    from superfluid.adapters.chat_templates import check_template_file

    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }}")
    with pytest.raises(ChatTemplateError) as refused:
        check_template_file(str(broken))
    message = str(refused.value)
    assert message.startswith(f"the chat template from --chat-template-file {broken} does not")
    assert "\n" not in message
    listed = tmp_path / "tokenizer_config.json"
    listed.write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "default", "template": CHATML_NO_TOOLS},
                    {"name": "tool_use", "template": "{% if %}"},
                ]
            }
        )
    )
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config.json \(tool_use\) does not"):
        check_template_file(str(listed))
