"""The composition root, with the runtime loader overridden by a fake (no monkeypatching)."""

import dataclasses
import logging

import pytest
from dependency_injector import providers

from superfluid.adapters.basert.record import RECORD as BASERT
from superfluid.adapters.llamacpp.record import RECORD as LLAMACPP
from superfluid.adapters.mlx.record import RECORD as MLX
from superfluid.adapters.runtime_record import RuntimeRecord
from superfluid.application.serving import ServePlan
from superfluid.domain.errors import DirectiveError
from superfluid.domain.spec_settings import SpecSettings
from superfluid.domain.strategies import Strategy
from superfluid.domain.tool_calls.families import ToolFamily
from superfluid.entrypoints.container import Container
from tests.fakes import FakeRuntime

SWA = "sliding-window state cuts only at its head"


def gguf(tmp_path, name="m.gguf"):
    path = tmp_path / name
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    return path


def container_for(models, speculate, *, cut_refusal=None, settings=None, prefix_reuse=True, **more):
    plan = ServePlan(
        models=tuple(models),
        speculate=speculate,
        settings=settings or SpecSettings(),
        monitor=False,
        prefix_reuse=prefix_reuse,
        **more,
    )
    container = Container(plan=plan)

    def fake_loader(path, *, ctx_size, max_lanes):
        return FakeRuntime(cut_refusal=cut_refusal, max_sequences=max_lanes)

    container.runtime_loaders.override(providers.Dict(llamacpp=providers.Object(fake_loader)))
    return container


@pytest.fixture
def startup_lines(caplog):
    caplog.set_level(logging.INFO, logger="superfluid")
    return lambda: [
        r.getMessage()
        for r in caplog.records
        if r.name == "superfluid" and "sampling default" not in r.getMessage()
    ]


def test_a_model_without_sampling_defaults_says_so_once_and_gets_the_built_in_ones(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="superfluid")
    (host,) = container_for([gguf(tmp_path)], None).hosts()
    said = [r.getMessage() for r in caplog.records if "sampling default" in r.getMessage()]
    assert said == [
        "m.gguf: the model sets no sampling defaults; requests that set none get"
        " temperature 0.8 (built-in)"
    ]
    assert host.sampling.built_in and host.sampling.temperature == 0.8


@pytest.mark.parametrize(
    ("speculate", "line", "strategy"),
    [
        (None, "speculation: off", None),
        ("off", "speculation: off", None),
        ("auto", "speculation: auto: prompt-lookup on the fake runtime", "prompt-lookup"),
        ("prompt-lookup", "speculation: prompt-lookup", "prompt-lookup"),
    ],
)
def test_startup_names_the_strategy_it_registered(
    tmp_path, startup_lines, speculate, line, strategy
):
    (host,) = container_for([gguf(tmp_path)], speculate).hosts()
    assert startup_lines() == [line]
    assert host.registration.strategy == strategy
    assert (host.policy is not None) == (strategy is not None)


def test_auto_on_a_model_that_cannot_cut_decodes_plainly_and_says_why(tmp_path, startup_lines):
    (host,) = container_for([gguf(tmp_path)], "auto", cut_refusal=SWA).hosts()
    assert startup_lines() == [
        f"speculation: auto: m.gguf on the fake runtime verifies no drafts ({SWA}) — decoding plainly",
        f"m.gguf: prefix reuse is off: this model's {SWA}",
    ]
    assert host.policy is None


@pytest.mark.parametrize("prefix_reuse", [True, False])
def test_prefix_reuse_follows_the_flag_and_a_refusal_is_said_once(
    tmp_path, startup_lines, prefix_reuse
):
    (host,) = container_for([gguf(tmp_path)], "off", prefix_reuse=prefix_reuse).hosts()
    assert host.executor.reuses_prefixes is prefix_reuse
    assert not [line for line in startup_lines() if "prefix reuse" in line]
    (host,) = container_for(
        [gguf(tmp_path)], "off", cut_refusal=SWA, prefix_reuse=prefix_reuse
    ).hosts()
    said = [line for line in startup_lines() if "prefix reuse" in line]
    assert said == ([f"m.gguf: prefix reuse is off: this model's {SWA}"] if prefix_reuse else [])


@pytest.mark.parametrize(
    ("speculate", "cut_refusal", "message"),
    [
        (
            "prompt-lookup",
            SWA,
            f"--speculate prompt-lookup: prompt-lookup cuts a rejected draft off, and this model's {SWA}",
        ),
        (
            "mtp-head",
            None,
            "--speculate mtp-head: the llamacpp runtime runs prompt-lookup only; use --speculate prompt-lookup or auto",
        ),
    ],
)
def test_an_explicit_directive_the_runtime_cannot_honour_stops_startup(
    tmp_path, speculate, cut_refusal, message
):
    with pytest.raises(DirectiveError) as err:
        container_for([gguf(tmp_path)], speculate, cut_refusal=cut_refusal).hosts()
    assert err.value.message == message


def test_a_strategy_a_gguf_cannot_run_is_refused_before_the_model_loads(tmp_path):
    container = container_for([gguf(tmp_path)], "mtp-head")
    loaded = []
    container.runtime_loaders.override(
        providers.Dict(llamacpp=providers.Object(lambda path, **_: loaded.append(path)))
    )
    with pytest.raises(DirectiveError, match="runs prompt-lookup only"):
        container.hosts()
    assert loaded == []


def test_with_several_models_each_line_names_its_model(tmp_path, startup_lines):
    models = [gguf(tmp_path, "a.gguf"), gguf(tmp_path, "b.gguf")]
    hosts = container_for(models, "prompt-lookup").hosts()
    assert [h.name for h in hosts] == ["a.gguf", "b.gguf"]
    assert startup_lines() == [
        "speculation: a.gguf: prompt-lookup",
        "speculation: b.gguf: prompt-lookup",
    ]


def test_template_files_and_parsers_go_to_the_models_in_order(tmp_path):
    models = [gguf(tmp_path, "a.gguf"), gguf(tmp_path, "b.gguf")]
    template = tmp_path / "tools.jinja"
    hosts = container_for(
        models,
        "off",
        chat_templates=(template,),
        tool_parsers=(ToolFamily.MISTRAL,),
    ).hosts()
    assert [h.runtime.chat_template_file for h in hosts] == [str(template), None]
    # The first model reads calls as told; the second as its template teaches.
    assert [h.tool_family for h in hosts] == [ToolFamily.MISTRAL, ToolFamily.HERMES]


def test_the_cap_on_temperature_is_reported_ignored_when_nothing_speculates(
    tmp_path, startup_lines
):
    container_for([gguf(tmp_path)], "off", settings=SpecSettings(max_temperature=0.5)).hosts()
    assert (
        "--spec-max-temperature ignored: no --speculate strategy is configured" in startup_lines()
    )


def test_the_container_wires_a_service_and_an_app(tmp_path):
    container = container_for([gguf(tmp_path)], "auto")
    service = container.service()
    assert service.hosts == container.hosts()
    assert container.app().title


def test_a_block_drafter_drafts_its_block_width_and_an_mtp_head_follows_its_arch(tmp_path):
    from superfluid.application.registration import Registration
    from superfluid.application.serving import policy_for
    from superfluid.domain.bundle_header import header_from_json

    class BlockOfSix:
        strategy = Strategy.DFLASH

        def default_depth(self):
            return 6

    target = header_from_json({"arch": "glm_dsa", "config": {"num_hidden_layers": 2}})
    plan = ServePlan(models=(tmp_path / "t.base",), speculate="auto", settings=SpecSettings())
    dflash = policy_for(Registration(Strategy.DFLASH, BlockOfSix(), ()), plan, 16, target)
    assert dflash.default_depth == 6
    mtp = policy_for(Registration(Strategy.MTP_HEAD, None, ()), plan, 16, target)
    assert mtp.default_depth == 1  # GLM-DSA's head drafts one token (§4)
    assert policy_for(Registration(None, None, ()), plan, 16, target) is None


class ListedCatalog:
    """A catalog source that lists one drafter with a size its file does not have."""

    def __init__(self, rows):
        self.rows = rows
        self.loads = 0

    def load(self):
        self.loads += 1
        return self.rows


def test_the_catalog_source_and_the_runtime_are_swapped_through_the_root(tmp_path, caplog):
    from superfluid.adapters.bundle_files import write_bundle
    from superfluid.domain.catalog import CatalogRow

    shape = {"hidden_size": 8, "vocab_size": 16, "num_hidden_layers": 2}
    target = tmp_path / "t.base"
    write_bundle(target, {"arch": "qwen3", "config": shape})
    drafter = tmp_path / "d.base"
    write_bundle(drafter, {"arch": "dflash", "config": {**shape, "block_size": 4}})
    row = CatalogRow("org/d", "d.base", "q4", 1, "0" * 64, None, None)
    catalog = ListedCatalog((row,))
    plan = ServePlan(
        models=(target,), speculate="auto", settings=SpecSettings(), monitor=False, offline=True
    )
    container = Container(plan=plan)
    engine = FakeDrafterEngine()
    container.runtime_loaders.override(
        providers.Dict(basert=providers.Object(lambda path, *, ctx_size, max_lanes: engine))
    )
    container.catalog.override(providers.Object(catalog))
    caplog.set_level(logging.INFO, logger="superfluid")
    (host,) = container.hosts()
    assert catalog.loads == 1
    assert host.registration.strategy is None  # the only drafter is not the catalog's bytes
    said = [r.getMessage() for r in caplog.records]
    assert any("skipping a drafter" in line and "not the catalog's org/d" in line for line in said)
    assert engine.asked == []


class FakeDrafterEngine(FakeRuntime):
    """A fake runtime that also builds drafters (the `DrafterEngine` port)."""

    def __init__(self):
        super().__init__()
        self.asked = []

    def drafter(self, strategy, path):
        self.asked.append((strategy, path))
        raise AssertionError("no drafter should reach the engine")


def test_every_runtime_package_with_a_record_is_listed_once():
    import importlib
    from pathlib import Path

    from superfluid.entrypoints.container import RUNTIMES

    adapters = Path(__file__).parents[2] / "src" / "superfluid" / "adapters"
    records = [
        importlib.import_module(f"superfluid.adapters.{p.parent.name}.record").RECORD
        for p in sorted(adapters.glob("*/record.py"))
    ]
    assert sorted(r.name for r in records) == sorted(r.name for r in RUNTIMES)
    assert len({r.name for r in RUNTIMES}) == len(RUNTIMES)


def test_with_several_models_auto_names_the_model_too(tmp_path, startup_lines):
    models = [gguf(tmp_path, "a.gguf"), gguf(tmp_path, "b.gguf")]
    container_for(models, "auto").hosts()
    assert startup_lines() == [
        "speculation: a.gguf: auto: prompt-lookup on the fake runtime",
        "speculation: b.gguf: auto: prompt-lookup on the fake runtime",
    ]


@pytest.mark.parametrize("widen", [True, False])
def test_the_llamacpp_loader_keeps_widened_weights_in_the_cache_unless_told_not_to(tmp_path, widen):
    plan = ServePlan(
        models=(gguf(tmp_path),),
        speculate=None,
        settings=SpecSettings(),
        env={"SUPERFLUID_HOME": str(tmp_path / "home")},
        widen_weights=widen,
    )
    container = Container(plan=plan)
    cache = tmp_path / "home" / "cache" / "weights"
    assert container.weights_cache() == (cache if widen else None)
    loaders = container.runtime_loaders()
    llamacpp = loaders["llamacpp"]
    if widen:
        assert llamacpp.keywords == {"weights_cache": cache}
    else:
        assert llamacpp is LLAMACPP.load
    assert loaders["mlx"] is MLX.load and loaders["basert"] is BASERT.load


def test_a_runtime_record_without_copies_loads_as_it_is(tmp_path):
    kept = []
    record = RuntimeRecord(
        "r",
        "a file",
        lambda path, magic: True,
        lambda path, **_: "plain",
        lambda file, runtime: (None, []),
        load_keeping_copies=lambda cache: kept.append(cache) or (lambda path, **_: "copy"),
    )
    assert record.loader(None) is record.load
    assert record.loader(tmp_path)(tmp_path, ctx_size=8, max_lanes=1) == "copy"
    assert kept == [tmp_path]
    bare = dataclasses.replace(record, load_keeping_copies=None)
    assert bare.loader(tmp_path) is bare.load
