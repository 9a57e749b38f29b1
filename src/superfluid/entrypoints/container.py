"""The composition root: the one place that names concrete adapters.

Tests override providers (a fake runtime loader, a fixed clock) instead of monkeypatching:

    container = Container(plan=plan)
    container.runtime_loaders.override(providers.Dict(llamacpp=providers.Object(fake_loader)))
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import prometheus_client
from dependency_injector import containers, providers

from superfluid.adapters.metrics import PrometheusMetrics
from superfluid.adapters.monitor import TerminalMonitor
from superfluid.adapters.observers import FanOut
from superfluid.application.service import GenerationService, ModelHost
from superfluid.entrypoints.hosts import ServePlan, build_hosts, load_basert, load_llamacpp
from superfluid.entrypoints.http.app import create_app
from superfluid.entrypoints.mlx_loader import load_mlx

# `*_created` series double /metrics for no reader we serve; process-wide, so set here.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def lane_capacity(hosts: Sequence[ModelHost]) -> dict[str, int]:
    return {host.name: host.executor.max_lanes for host in hosts}


def live_view(plan: ServePlan) -> bool | None:
    """--no-monitor: periodic log lines; otherwise a live view when stderr is a terminal."""
    return None if plan.monitor else False


class Container(containers.DeclarativeContainer):
    plan = providers.Dependency(instance_of=ServePlan)

    clock = providers.Object(time.perf_counter)
    runtime_loaders = providers.Dict(
        llamacpp=providers.Object(load_llamacpp),
        mlx=providers.Object(load_mlx),
        basert=providers.Object(load_basert),
    )

    hosts = providers.Singleton(build_hosts, plan=plan, loaders=runtime_loaders, clock=clock)
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
