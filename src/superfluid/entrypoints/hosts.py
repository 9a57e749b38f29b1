"""Turning `superfluid serve`'s arguments into served models: load, register, gate.

The directive is resolved per model (docs/contract.md §2): each model's runtime says what it can
run, and an explicit directive it cannot honour stops startup with the contract's message.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from superfluid.adapters.bundle_files import read_header
from superfluid.adapters.model_defaults import model_sampling_defaults
from superfluid.adapters.model_files import ModelFileError, runtime_for
from superfluid.application.admission import Admission
from superfluid.application.executor import Executor
from superfluid.application.ports import DrafterEngine, Runtime, RuntimeLoader
from superfluid.application.registration import (
    Registration,
    register_auto,
    register_explicit,
    register_prompt_lookup_runtime,
)
from superfluid.application.service import ModelHost
from superfluid.domain.directive import Mode, parse_directive
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.sampling_defaults import (
    BUILT_IN_SAMPLING,
    SamplingDefaults,
)
from superfluid.domain.spec_settings import SpecSettings, depth_for, max_temperature_notice
from superfluid.entrypoints.discovery import Discovery

log = logging.getLogger("superfluid")

#: Requests that may wait for a lane, per model, beyond those decoding (`--max-queue`).
DEFAULT_MAX_QUEUE = 16


@dataclass(frozen=True)
class ServePlan:
    """Everything `serve` was told, validated."""

    models: tuple[Path, ...]
    speculate: str | None
    settings: SpecSettings
    host: str = "127.0.0.1"
    port: int = 8453
    api_key: str | None = None
    offline: bool = False
    temperature: float | None = None
    seed: int | None = None
    max_lanes: int = 4
    ctx_size: int = 4096
    monitor: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    #: `--served-model-name`, one per model in order (fewer: the rest keep their file names).
    served_names: tuple[str, ...] = ()
    max_queue: int = DEFAULT_MAX_QUEUE


def load_llamacpp(path: Path, *, ctx_size: int, max_lanes: int) -> Runtime:
    # Imported here so that a machine without llama-cpp-python can still serve other runtimes.
    from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime

    return LlamaCppRuntime.load(path, ctx_size=ctx_size, max_sequences=max_lanes)


def superfluid_home(env: Mapping[str, str]) -> Path:
    """`$SUPERFLUID_HOME`, else `~/.superfluid`: caches (catalog, digests) and the demo model."""
    return Path(env.get("SUPERFLUID_HOME") or Path.home() / ".superfluid").expanduser()


def load_basert(path: Path, *, ctx_size: int, max_lanes: int) -> Runtime:
    from superfluid.adapters.basert.runtime import BaseRTRuntime

    return BaseRTRuntime.load(path, ctx_size=ctx_size, max_sequences=max_lanes)


def model_name(path: Path) -> str:
    return path.name


def served_names(plan: ServePlan) -> list[tuple[str, tuple[str, ...]]]:
    """Each model's id and the other names it answers to, in the order the models were given.

    A served name (`--served-model-name`) becomes the id; the file name stays an alias, so a
    client that used it keeps working. Every name must be unique across the models.
    """
    if len(plan.served_names) > len(plan.models):
        raise ModelFileError(
            f"{len(plan.served_names)} --served-model-name values for {len(plan.models)}"
            " model(s); give at most one per model, in the order the models are given"
        )
    named: list[tuple[str, tuple[str, ...]]] = []
    for index, path in enumerate(plan.models):
        file_name = model_name(path)
        if index < len(plan.served_names):
            served = plan.served_names[index]
            named.append((served, () if served == file_name else (file_name,)))
        else:
            named.append((file_name, ()))
    seen: set[str] = set()
    for name, aliases in named:
        for each in (name, *aliases):
            if each in seen:
                raise ModelFileError(
                    f"two models answer to the name {each}; requests could not tell them apart"
                    " (give each a distinct --served-model-name)"
                )
            seen.add(each)
    return named


def build_hosts(
    plan: ServePlan,
    loaders: Mapping[str, RuntimeLoader],
    clock: Callable[[], float],
) -> list[ModelHost]:
    names = served_names(plan)
    several = len(plan.models) > 1
    return [
        _build_host(path, name, aliases, plan, loaders, clock, several)
        for path, (name, aliases) in zip(plan.models, names, strict=True)
    ]


def _build_host(
    path: Path,
    name: str,
    aliases: tuple[str, ...],
    plan: ServePlan,
    loaders: Mapping[str, RuntimeLoader],
    clock: Callable[[], float],
    several: bool,
) -> ModelHost:
    directive = parse_directive(plan.speculate, home=plan.env.get("HOME"), is_file=os.path.isfile)
    kind = runtime_for(path)
    loader = loaders.get(kind)
    if loader is None:
        raise ModelFileError(f"{path}: the {kind} runtime is not available in this build")
    discovery = Discovery(path, superfluid_home(plan.env), plan.env, plan.offline)
    if kind == "basert" and directive.mode not in (Mode.OFF, Mode.PROMPT_LOOKUP, Mode.AUTO):
        # Check a named drafter before minutes of loading: a refusal here is exit 2.
        directive = discovery.explicit(directive)
    runtime = loader(path, ctx_size=plan.ctx_size, max_lanes=plan.max_lanes)
    caps = runtime.capabilities
    if isinstance(runtime, DrafterEngine):
        if directive.mode is Mode.AUTO:
            registration = register_auto(discovery.auto(), runtime, model=name, name_model=several)
        else:
            registration = register_explicit(directive, runtime, model=name, name_model=several)
    else:
        registration = register_prompt_lookup_runtime(directive, caps, name, name_model=several)
    for line in registration.log:
        log.info(line)
    notice = max_temperature_notice(plan.settings, registration.speculates)
    if notice is not None:
        log.info(notice)
    policy = _policy(
        registration, plan, caps.max_verify_rows, discovery if kind == "basert" else None
    )
    executor = Executor(
        runtime,
        max_lanes=plan.max_lanes,
        clock=clock,
        drafter=registration.drafter,
        policy=policy,
    )
    sampling = _sampling_defaults(kind, path, runtime, name)
    return ModelHost(
        name,
        runtime,
        registration,
        policy,
        executor,
        sampling=sampling,
        aliases=aliases,
        admission=Admission(executor.max_lanes, plan.max_queue),
    )


def _sampling_defaults(kind: str, path: Path, runtime: Runtime, name: str) -> SamplingDefaults:
    """The model's own defaults, said once at startup; the built-in ones where it sets none."""
    found, notes = model_sampling_defaults(kind, path, runtime)
    for note in notes:
        log.info("%s: sampling default ignored: %s", name, note)
    if found is None:
        log.info(
            "%s: the model sets no sampling defaults; requests that set none get %s (built-in)",
            name,
            BUILT_IN_SAMPLING.describe(),
        )
        return BUILT_IN_SAMPLING
    log.info("%s: sampling defaults from %s: %s", name, found.source, found.describe())
    return found


def _policy(
    registration: Registration,
    plan: ServePlan,
    max_verify_rows: int,
    discovery: Discovery | None,
) -> SpecPolicy | None:
    strategy = registration.strategy
    if strategy is None:
        return None
    # §4: a block drafter drafts its block width, an MTP head as its target's arch says.
    block_size = arch = None
    if discovery is not None:
        arch = discovery.target_header.arch
        if registration.drafter_path is not None:
            block_size = read_header(registration.drafter_path).block_size
    depth = depth_for(strategy, plan.settings, plan.env, block_size=block_size, arch=arch)
    return SpecPolicy(plan.settings, default_depth=depth, depth_cap=max_verify_rows - 1)
