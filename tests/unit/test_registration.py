import pytest

from superfluid.application.registration import register_prompt_lookup_runtime
from superfluid.domain.directive import parse_directive
from superfluid.domain.errors import DirectiveError
from tests.fakes import FakeRuntime

SWA = "sliding-window state cuts only at its head"


def directive(value, files=()):
    return parse_directive(value, home="/home/ada", is_file=lambda p: p in files)


def caps(cut_refusal=None):
    return FakeRuntime(cut_refusal=cut_refusal).capabilities


def test_prompt_lookup_registers_on_a_model_that_can_cut():
    reg = register_prompt_lookup_runtime(directive("prompt-lookup"), caps(), "m.gguf")
    assert reg.strategy == "prompt-lookup" and reg.speculates
    assert reg.log == ("speculation: prompt-lookup",)


def test_prompt_lookup_on_a_model_that_cannot_cut_is_refused_with_the_runtimes_reason():
    with pytest.raises(DirectiveError) as err:
        register_prompt_lookup_runtime(directive("prompt-lookup"), caps(SWA), "m.gguf")
    assert err.value.message == (
        "--speculate prompt-lookup: prompt-lookup cuts a rejected draft off, and this model's"
        " sliding-window state cuts only at its head"
    )


def test_auto_means_prompt_lookup_and_says_so():
    reg = register_prompt_lookup_runtime(directive("auto"), caps(), "m.gguf")
    assert reg.strategy == "prompt-lookup"
    assert reg.log == ("speculation: auto: prompt-lookup on the fake runtime",)


def test_auto_on_a_model_that_cannot_cut_decodes_plainly_and_says_why():
    reg = register_prompt_lookup_runtime(directive("auto"), caps(SWA), "m.gguf")
    assert not reg.speculates and reg.strategy is None
    assert reg.log == (
        "speculation: auto: m.gguf on the fake runtime verifies no drafts"
        f" ({SWA}) — decoding plainly",
    )


def test_off_decodes_plainly_and_names_the_model_when_there_are_several():
    reg = register_prompt_lookup_runtime(directive("off"), caps(), "m.gguf", name_model=True)
    assert not reg.speculates
    assert reg.log == ("speculation: m.gguf: off",)


@pytest.mark.parametrize("value", ["mtp-head", "dflash:/d.base", "eagle3:~/e.base", "/d.base"])
def test_any_other_strategy_is_refused_on_a_prompt_lookup_only_runtime(value):
    parsed = directive(value, files={"/d.base"})
    with pytest.raises(DirectiveError) as err:
        register_prompt_lookup_runtime(parsed, caps(), "m.gguf")
    assert err.value.message == (
        f"--speculate {value}: the fake runtime runs prompt-lookup only;"
        " use --speculate prompt-lookup or auto"
    )
