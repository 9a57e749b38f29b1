from superfluid.domain import announcements as say


def test_the_registered_strategy_is_named_and_with_several_models_the_model_too():
    assert say.registered("mtp-head") == "speculation: mtp-head"
    assert say.registered("dflash:/abs/path.base") == "speculation: dflash:/abs/path.base"
    assert say.registered("prompt-lookup", "gemma.gguf") == "speculation: gemma.gguf: prompt-lookup"


def test_auto_on_llamacpp_and_mlx_is_prompt_lookup():
    assert (
        say.auto_prompt_lookup("llamacpp")
        == "speculation: auto: prompt-lookup on the llamacpp runtime"
    )
    assert say.auto_prompt_lookup("mlx") == "speculation: auto: prompt-lookup on the mlx runtime"


def test_auto_on_a_model_that_cannot_cut_decodes_plainly_and_says_why():
    assert say.auto_cannot_cut("m.gguf", "llamacpp", "recurrent state cuts only at its head") == (
        "speculation: auto: m.gguf on the llamacpp runtime verifies no drafts"
        " (recurrent state cuts only at its head) — decoding plainly"
    )


def test_an_explicit_prompt_lookup_is_refused_in_the_runtimes_words():
    assert say.prompt_lookup_cannot_cut("sliding-window state cuts only at its head") == (
        "--speculate prompt-lookup: prompt-lookup cuts a rejected draft off, and this model's"
        " sliding-window state cuts only at its head"
    )


def test_other_strategies_on_a_prompt_lookup_only_runtime_are_refused():
    assert say.strategy_not_on_runtime("mtp-head", "llamacpp") == (
        "--speculate mtp-head: the llamacpp runtime runs prompt-lookup only;"
        " use --speculate prompt-lookup or auto"
    )


def test_auto_reports_skips_an_empty_search_and_engine_refusals():
    assert say.skipping_drafter("d.base: header unreadable") == (
        "speculation: skipping a drafter: d.base: header unreadable"
    )
    assert say.auto_found_nothing("/m/t.base", ["/m", "/m/drafters", "/cache"]) == (
        "speculation: auto found no head in /m/t.base and no fitting drafter in"
        " /m, /m/drafters, /cache — decoding plainly"
    )
    assert say.auto_refused("dflash:/a.base", "bad tensor", "eagle3:/b.base") == (
        "speculation: auto picked dflash:/a.base, but the engine refused it (bad tensor)"
        " — trying eagle3:/b.base"
    )
    assert say.auto_refused("eagle3:/b.base", "no", None) == (
        "speculation: auto picked eagle3:/b.base, but the engine refused it (no) — decoding plainly"
    )


def test_every_speculation_line_can_name_its_model() -> None:
    from superfluid.domain import announcements as say

    assert say.skipping_drafter("why", "m") == "speculation: m: skipping a drafter: why"
    assert say.auto_refused("d", "no", None, "m").startswith("speculation: m: auto picked d")
    assert (
        say.auto_prompt_lookup("mlx", "m")
        == "speculation: m: auto: prompt-lookup on the mlx runtime"
    )
    assert say.skipping_drafter("why") == "speculation: skipping a drafter: why"
