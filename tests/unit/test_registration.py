from pathlib import Path

import pytest

from superfluid.application.drafter_resolution import AutoResolution, Skipped
from superfluid.application.ports import EngineRefusal
from superfluid.application.registration import (
    register_auto,
    register_explicit,
    register_prompt_lookup_runtime,
)
from superfluid.domain.directive import parse_directive
from superfluid.domain.errors import DirectiveError
from superfluid.domain.strategies import Pick, Strategy
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


INEXACT = "its F16 weights sum in another order alone than beside other rows"


def test_auto_on_a_model_whose_rows_depend_on_their_batch_decodes_plainly_and_says_why():
    refused = FakeRuntime(exactness_refusal=INEXACT).capabilities
    reg = register_prompt_lookup_runtime(directive("auto"), refused, "m.gguf")
    assert not reg.speculates
    assert reg.log == (
        f"speculation: auto: m.gguf decodes plainly: speculation would change its greedy output ({INEXACT})",
    )


def test_explicit_prompt_lookup_on_such_a_model_is_refused_and_off_is_served():
    refused = FakeRuntime(exactness_refusal=INEXACT).capabilities
    with pytest.raises(DirectiveError) as err:
        register_prompt_lookup_runtime(directive("prompt-lookup"), refused, "m.gguf")
    assert err.value.message == (
        "--speculate prompt-lookup: speculation would change this model's greedy output"
        f" ({INEXACT}); serve it with --speculate off or auto"
    )
    assert not register_prompt_lookup_runtime(directive("off"), refused, "m.gguf").speculates


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


# -- bundle runtimes: auto's fallback through the engine, explicit refusals ------------------


class Engine:
    """Refuses the strategies it is told to, hands out a marker drafter otherwise."""

    def __init__(self, refuse=()):
        self.refuse = dict(refuse)
        self.asked = []

    def drafter(self, strategy, path):
        self.asked.append((strategy, path))
        if strategy in self.refuse:
            raise EngineRefusal(self.refuse[strategy])
        return f"drafter for {strategy}"


def resolution(picks_paths, has_head=False, skipped=()):
    def pick(text):
        kind, _, path = text.partition(":")
        return Pick(Strategy.named(kind), path or None)

    candidates = tuple(type("C", (), {"pick": pick(p)})() for p in picks_paths)
    return AutoResolution("/m/t.base", has_head, candidates, tuple(skipped), ("/m", "/m/drafters"))


def test_auto_registers_its_first_pick_that_the_engine_accepts():
    reg = register_auto(resolution(["dflash:/d.base"], has_head=True), Engine(), model="t.base")
    assert reg.strategy == "mtp-head"
    assert reg.log == ("speculation: mtp-head",)


def test_auto_tries_the_next_pick_after_an_engine_refusal_and_says_so():
    engine = Engine({"mtp-head": "no head tensors"})
    reg = register_auto(resolution(["dflash:/d.base"], has_head=True), engine, model="t.base")
    assert reg.strategy == "dflash"
    assert engine.asked == [("mtp-head", None), ("dflash", Path("/d.base"))]
    assert reg.log == (
        "speculation: auto picked mtp-head, but the engine refused it (no head tensors) — trying dflash:/d.base",
        "speculation: dflash:/d.base",
    )


def test_auto_decodes_plainly_after_the_last_refusal():
    reg = register_auto(resolution(["eagle3:/e.base"]), Engine({"eagle3": "bad"}), model="t.base")
    assert not reg.speculates
    assert reg.log == (
        "speculation: auto picked eagle3:/e.base, but the engine refused it (bad) — decoding plainly",
    )


def test_auto_that_finds_nothing_says_where_it_looked_and_logs_catalog_skips():
    skipped = [
        Skipped("/x.base", "/x.base is not the catalog's …", catalog=True),
        Skipped("/y.base", "plain", catalog=False),
    ]
    reg = register_auto(resolution([], skipped=skipped), Engine(), model="/m/t.base")
    assert not reg.speculates
    assert reg.log == (
        "speculation: skipping a drafter: /x.base is not the catalog's …",
        "speculation: auto found no head in /m/t.base and no fitting drafter in /m, /m/drafters — decoding plainly",
    )


def test_an_explicit_directive_the_engine_refuses_is_a_startup_error():
    with pytest.raises(DirectiveError) as err:
        register_explicit(
            directive("dflash:/d.base"), Engine({"dflash": "tensor layers.0.fc missing"}), model="t"
        )
    assert err.value.message == "--speculate dflash:/d.base: tensor layers.0.fc missing"
    ok = register_explicit(directive("dflash:/d.base"), Engine(), model="t")
    assert ok.strategy == "dflash" and ok.log == ("speculation: dflash:/d.base",)


def test_the_basert_drafter_registry_is_keyed_by_the_strategies_that_name_it() -> None:
    from superfluid.adapters.basert.drafters import FILE_DRAFTERS, HEAD_DRAFTERS
    from superfluid.domain.strategies import FILE_STRATEGIES, Strategy

    assert set(FILE_DRAFTERS) == set(FILE_STRATEGIES)
    assert set(HEAD_DRAFTERS) == {Strategy.MTP_HEAD}
    assert all(isinstance(key, Strategy) for key in [*FILE_DRAFTERS, *HEAD_DRAFTERS])
