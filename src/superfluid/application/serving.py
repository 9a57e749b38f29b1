"""Serving models: from what `superfluid serve` was told to loaded, registered, gated models.

For each model file, in order: read the file once (its runtime and, for a `.base` bundle, its
header), parse the `--speculate` directive (docs/contract.md §2), check a drafter the user named
before minutes of loading, load the runtime, register a strategy (auto's ranked picks, or the
named one), say what was registered, and build the model's policy and executor.

`superfluid drafters` asks the same questions without loading anything (`explain`), so it says
exactly what `serve` would register.

Everything outside comes in through ports (`ports.py`): model files, drafter sources, the
catalog, digests, sampling defaults and runtime loaders. Drafters are discovered for a target
whose file has a `.base` header; whether a loaded model runs them is its runtime's own answer
(`DrafterEngine`), never its name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from superfluid.application.admission import Admission
from superfluid.application.drafter_resolution import AutoResolution, check_explicit, rank_auto
from superfluid.application.executor import Executor
from superfluid.application.ports import (
    CatalogSource,
    ClassifiesMatches,
    Digests,
    DrafterEngine,
    DrafterSources,
    ModelFile,
    ModelFiles,
    ReportsDepth,
    Runtime,
    RuntimeLoader,
    SamplingDefaultsSource,
)
from superfluid.application.registration import (
    Registration,
    register_auto,
    register_explicit,
    register_prompt_lookup_runtime,
)
from superfluid.application.service import ModelHost
from superfluid.domain import announcements as say
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.catalog import CatalogRow
from superfluid.domain.directive import Directive, Mode, check_mtp_head, parse_directive
from superfluid.domain.errors import DirectiveError, ModelFileError, SettingsError
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.knobs import SPEC, as_switch_off, as_temperature, as_whole, in_range, knob
from superfluid.domain.sampling_defaults import BUILT_IN_SAMPLING, SamplingDefaults
from superfluid.domain.spec_settings import SpecSettings, depth_for
from superfluid.domain.strategies import Pick, Strategy, directive_help
from superfluid.domain.temperature_cap import max_temperature_notice
from superfluid.domain.tool_calls.families import ToolFamily

log = logging.getLogger("superfluid")


def _as_paths(_name: str, raw: Sequence[str]) -> tuple[Path, ...]:
    """The `--model` and `--chat-template-file` rule: each path with `~` expanded."""
    return tuple(Path(p).expanduser() for p in raw)


def _as_names(name: str, raw: Sequence[str]) -> tuple[str, ...]:
    """Names without spaces or control characters, blanks around each forgiven."""
    names = []
    for given in raw:
        shown = given.strip()
        if not shown or any(not ch.isprintable() or ch.isspace() for ch in shown):
            raise SettingsError(
                f"{name} must be a name without spaces or control characters, got {given!r}"
            )
        names.append(shown)
    return tuple(names)


def _as_tool_families(name: str, raw: Sequence[str]) -> tuple[ToolFamily, ...]:
    """`--tool-call-parser`: each value a family's name, in any case."""
    families = []
    for given in raw:
        try:
            families.append(ToolFamily(given.strip().lower()))
        except ValueError:
            known = ", ".join(f.value for f in ToolFamily)
            raise SettingsError(f"{name} must be one of {known}, got {given!r}") from None
    return tuple(families)


@dataclass(frozen=True, kw_only=True)
class ServePlan:
    """Everything `serve` was told, validated.

    A field declared with `knob()` is a `serve` option: its flag, variable, default and help
    (domain/knobs.py); `serve` offers them in field order. `settings` holds the speculation
    knobs; `env` is the environment the plan was made in.
    """

    settings: SpecSettings
    env: Mapping[str, str] = field(default_factory=dict)
    models: tuple[Path, ...] = knob(
        (),
        flag="--model",
        help="Serve another model too (repeatable); requests pick by name.",
        rule=_as_paths,
        metavar="PATH",
        kind="repeat",
        shown=None,
    )
    #: One per model in order (fewer: the rest keep their file names).
    served_names: tuple[str, ...] = knob(
        (),
        flag="--served-model-name",
        help="The id clients use for a model, instead of its file name (repeatable: the first"
        " names MODEL, the next each --model in order). The file name is still accepted."
        " Default: the file name.",
        rule=_as_names,
        metavar="NAME",
        kind="repeat",
        shown=None,
    )
    #: One per model in order (fewer: the rest keep their own).
    chat_templates: tuple[Path, ...] = knob(
        (),
        flag="--chat-template-file",
        help="A Jinja chat template (or a tokenizer_config.json) that replaces a model's own"
        " (repeatable: the first for MODEL, the next each --model in order). Default: the"
        " model's template, else a built-in for its family.",
        rule=_as_paths,
        metavar="PATH",
        kind="repeat",
        shown=None,
    )
    #: One per model in order (fewer: the rest read their template's).
    tool_parsers: tuple[ToolFamily, ...] = knob(
        (),
        flag="--tool-call-parser",
        help="How a model writes tool calls: "
        + ", ".join(f.value for f in ToolFamily)
        + " (repeatable, per model in order). Default: read off the chat template.",
        rule=_as_tool_families,
        metavar="NAME",
        kind="repeat",
        shown=None,
    )
    speculate: str | None = knob(
        None,
        flag="--speculate",
        help=directive_help(),
        env="SUPERFLUID_SPECULATE",
        metavar="DIRECTIVE",
        shown="off",
        panel=SPEC,
    )
    host: str = knob(
        "127.0.0.1",
        flag="--host",
        help="Address to bind (loopback unless told otherwise).",
        metavar="ADDRESS",
    )
    port: int = knob(
        8453,
        flag="--port",
        help="Port to listen on, 0..=65535; 0 picks a free port, which the log's `listening on`"
        " line shows.",
        rule=in_range(0, 65535, "in 0..=65535 (0 picks a free port)", kind=int),
        metavar="INTEGER",
    )
    api_key: str | None = knob(
        None,
        flag="--api-key",
        help="Require this Bearer token on /v1/*.",
        env="SUPERFLUID_API_KEY",
        metavar="TOKEN",
        shown=None,
    )
    offline: bool = knob(
        False,
        flag="--offline/--no-offline",
        help="Never fetch the hub catalog.",
        kind="switch",
    )
    temperature: float | None = knob(
        None,
        flag="--temperature",
        help="Default temperature for requests that set none.",
        rule=as_temperature,
        metavar="NUMBER",
        shown="the model file's own, else 0.8",
    )
    seed: int | None = knob(
        None,
        flag="--seed",
        help="Default seed for requests that set none.",
        rule=as_whole,
        metavar="INTEGER",
        shown="a fresh one per request",
    )
    max_lanes: int = knob(
        4,
        flag="--max-lanes",
        help="Requests decoded at once, per model.",
        metavar="INTEGER",
        bounds=(1, 64),
    )
    #: Requests that may wait for a lane, per model, beyond those decoding.
    max_queue: int = knob(
        16,
        flag="--max-queue",
        help="Requests that may wait for a lane, per model; past lanes + queue a request gets"
        " 429 with Retry-After at once (default {default}).",
        rule=in_range(0, 100_000, "in 0..=100000", kind=int),
        metavar="INTEGER",
        shown=None,
    )
    ctx_size: int = knob(
        4096,
        flag="--ctx-size",
        help="Context window per lane, in tokens.",
        metavar="INTEGER",
        bounds=(16, None),
    )
    #: Seconds a draining server lets running requests finish before it ends them: inside
    #: Kubernetes' default 30-second grace period, with time left to end the rest cleanly.
    shutdown_timeout: float = knob(
        25.0,
        flag="--shutdown-timeout",
        help="Seconds SIGTERM or SIGINT lets running requests finish before it ends them with an"
        " error (a second signal ends them at once); the server then exits 0.",
        rule=in_range(0, 86_400, "in 0..=86400 seconds"),
        env="SUPERFLUID_SHUTDOWN_TIMEOUT",
        metavar="NUMBER",
        shown="{default}, inside Kubernetes' 30 s grace period",
    )
    monitor: bool = knob(
        True,
        flag="--no-monitor",
        help="No live terminal view; a status line in the log every few seconds instead.",
        rule=as_switch_off,
        kind="switch",
        shown="the live view when stderr is a terminal",
    )
    prefix_reuse: bool = knob(
        True,
        flag="--prefix-reuse/--no-prefix-reuse",
        help="Keep a finished request's KV for a later prompt that starts the same way (a chat's"
        " next turn); the longest shared prefix is not prefilled again.",
        kind="switch",
    )
    #: A runtime may serve a model from a faster copy of its weights that computes the same
    #: numbers (llamacpp: Q5_0 as Q8_0, ADR 0018), kept in the cache.
    widen_weights: bool = knob(
        True,
        flag="--widen-weights/--no-widen-weights",
        help="On x86, serve a GGUF's Q5_0 weights as Q8_0: the same values and replies, faster"
        " prefill and decoding, from a copy written once under $SUPERFLUID_HOME/cache/weights"
        " (a little larger than the model).",
        kind="switch",
    )


@dataclass
class Explanation:
    """What `serve` would register for a model, and why (`superfluid drafters`)."""

    model: str
    runtime: str
    directive: str
    resolved: Pick | None  # the strategy that would register; None = plain decoding
    note: str | None = None
    auto: AutoResolution | None = None


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
        file_name = path.name
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


def _checked_names(plan: ServePlan) -> list[tuple[str, tuple[str, ...]]]:
    """`served_names(plan)`, once the per-model flags are known not to outnumber the models."""
    for flag, given in (
        ("--chat-template-file", plan.chat_templates),
        ("--tool-call-parser", plan.tool_parsers),
    ):
        if len(given) > len(plan.models):
            raise ModelFileError(
                f"{len(given)} {flag} values for {len(plan.models)} model(s); give at most"
                " one per model, in the order the models are given"
            )
    return served_names(plan)


class Serving:
    """The serve use case over its ports; the composition root builds one."""

    def __init__(
        self,
        *,
        files: ModelFiles,
        drafters: DrafterSources,
        catalog: CatalogSource,
        digests: Digests,
        loaders: Mapping[str, RuntimeLoader],
        sampling: SamplingDefaultsSource,
        clock: Callable[[], float],
    ) -> None:
        self._files = files
        self._drafters = drafters
        self._catalog = catalog
        self._digests = digests
        self._loaders = loaders
        self._sampling = sampling
        self._clock = clock
        self._rows: tuple[CatalogRow, ...] | None = None

    # -- serve -----------------------------------------------------------------------------

    def check(self, plan: ServePlan) -> list[str]:
        """Refuse `plan` (a SuperfluidError) for what can be told without loading weights:
        flags given more often than models, a directive that does not parse, a model file
        that cannot be read or that no runtime of this build serves, a named strategy the
        model cannot run. The served names, in order, when all is well."""
        names = _checked_names(plan)
        for path in plan.models:
            self._prepare(path, plan)
        return [name for name, _ in names]

    def hosts(
        self, plan: ServePlan, loaded: Callable[[ModelHost], None] | None = None
    ) -> list[ModelHost]:
        """Every model of `plan`, loaded and registered, in order; `loaded` is told of each as
        it is ready. A SuperfluidError stops startup."""
        names = _checked_names(plan)
        several = len(plan.models) > 1
        hosts = []
        for index, (path, (name, aliases)) in enumerate(zip(plan.models, names, strict=True)):
            host = self._host(path, name, aliases, plan, several)
            self._chat_setup(host, plan, index)
            hosts.append(host)
            if loaded is not None:
                loaded(host)
        return hosts

    @staticmethod
    def _chat_setup(host: ModelHost, plan: ServePlan, index: int) -> None:
        """Apply this model's --chat-template-file and --tool-call-parser, and say what tool
        calling will do for it."""
        if index < len(plan.chat_templates):
            host.runtime.use_chat_template_file(str(plan.chat_templates[index]))
            log.info("%s: chat template from %s", host.name, plan.chat_templates[index])
        if index < len(plan.tool_parsers):
            host.tool_parser = plan.tool_parsers[index]
        family = host.tool_family
        if host.runtime.tool_family is None:
            log.debug(
                "%s: its chat template takes no tools; requests with `tools` get a 400"
                " (--chat-template-file gives it one that does)",
                host.name,
            )
        elif family is not None:
            log.debug("%s: tool calls are read in the %s format", host.name, family.value)

    def _host(
        self, path: Path, name: str, aliases: tuple[str, ...], plan: ServePlan, several: bool
    ) -> ModelHost:
        file, loader, directive = self._prepare(path, plan)
        runtime = loader(path, ctx_size=plan.ctx_size, max_lanes=plan.max_lanes)
        caps = runtime.capabilities
        if isinstance(runtime, DrafterEngine):
            if directive.mode is Mode.AUTO:
                resolution = self._auto(file, self._header(file))
                registration = register_auto(resolution, runtime, model=name, name_model=several)
            else:
                registration = register_explicit(directive, runtime, model=name, name_model=several)
        else:
            registration = register_prompt_lookup_runtime(directive, caps, name, name_model=several)
        for line in registration.log:
            log.info(line)
        notice = max_temperature_notice(plan.settings.max_temperature, registration.speculates)
        if notice is not None:
            log.info(notice)
        policy = policy_for(registration, plan, caps.max_verify_rows, file.header)
        executor = Executor(
            runtime,
            max_lanes=plan.max_lanes,
            clock=self._clock,
            drafter=registration.drafter,
            policy=policy,
            reuse_prefixes=plan.prefix_reuse,
        )
        if plan.prefix_reuse and not executor.reuses_prefixes:
            why = caps.reuse_refusal or f"this model's {caps.cut_refusal}"
            log.info("%s: prefix reuse is off: %s", name, why)
        return ModelHost(
            name,
            runtime,
            registration,
            policy,
            executor,
            sampling=self._sampling_defaults(file, runtime, name),
            aliases=aliases,
            admission=Admission(executor.max_lanes, plan.max_queue),
        )

    def _prepare(self, path: Path, plan: ServePlan) -> tuple[ModelFile, RuntimeLoader, Directive]:
        """The model file opened, its runtime's loader, and the directive that applies to it,
        all checked before any weights load (a refusal here is exit 2, in a moment)."""
        directive = self._parse(plan.speculate, plan.env)
        file = self._files.open(path)
        loader = self._loaders.get(file.runtime)
        if loader is None:
            raise ModelFileError(
                f"{path}: the {file.runtime} runtime is not available in this build"
            )
        if directive.mode not in (Mode.OFF, Mode.PROMPT_LOOKUP, Mode.AUTO):
            if file.header is None:
                raise DirectiveError(say.strategy_not_on_runtime(directive.raw, file.runtime))
            directive = self._explicit(file, file.header, directive)
        return file, loader, directive

    def _sampling_defaults(self, file: ModelFile, runtime: Runtime, name: str) -> SamplingDefaults:
        """The model's own defaults, said once at startup; the built-in ones where it sets none."""
        found, notes = self._sampling.read(file, runtime)
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

    # -- drafters ------------------------------------------------------------------------------

    def explain(self, model: Path, speculate: str | None, env: Mapping[str, str]) -> Explanation:
        """What `serve` would register for `model` with `--speculate speculate` (no weights read)."""
        directive = self._parse(speculate, env)
        file = self._files.open(model)
        explanation = Explanation(str(model), file.runtime, directive.raw, None)
        if directive.mode is Mode.OFF:
            return explanation
        if file.header is None:
            if directive.mode not in (Mode.AUTO, Mode.PROMPT_LOOKUP):
                raise DirectiveError(say.strategy_not_on_runtime(directive.raw, file.runtime))
            explanation.resolved = Pick(Strategy.PROMPT_LOOKUP)
            explanation.note = (
                "if the model can cut its KV back; serve checks that when it loads the model"
            )
            return explanation
        if directive.mode is Mode.PROMPT_LOOKUP:
            explanation.resolved = Pick(Strategy.PROMPT_LOOKUP)
        elif directive.mode is Mode.AUTO:
            explanation.auto = self._auto(file, file.header)
            picks = explanation.auto.picks()
            explanation.resolved = picks[0] if picks else None
            if len(picks) > 1:
                explanation.note = (
                    "if the engine refuses the first pick, serve tries the next in order"
                )
        else:
            explanation.resolved = self._explicit(file, file.header, directive).pick
        return explanation

    def _parse(self, speculate: str | None, env: Mapping[str, str]) -> Directive:
        return parse_directive(speculate, home=env.get("HOME"), is_file=self._files.is_file)

    def _header(self, file: ModelFile) -> BundleHeader:
        return file.header if file.header is not None else self._files.read_header(file.path)

    def _catalog_rows(self) -> tuple[CatalogRow, ...]:
        """The catalog, loaded when a drafter first needs it (never for a plain model)."""
        if self._rows is None:
            self._rows = self._catalog.load()
        return self._rows

    def _check_catalog(self, path: Path) -> str | None:
        return self._digests.catalog_problem(path, self._catalog_rows())

    def _auto(self, file: ModelFile, header: BundleHeader) -> AutoResolution:
        found = self._drafters.search(file.path)
        return rank_auto(
            file.path,
            header,
            found.bundles,
            read_header=self._files.read_header,
            check_catalog=self._check_catalog,
            rows=self._catalog_rows(),
            searched=found.searched,
        )

    def _explicit(self, file: ModelFile, header: BundleHeader, directive: Directive) -> Directive:
        """Check a named strategy; raises DirectiveError with the contract's message."""
        if directive.mode is Mode.MTP_HEAD:
            check_mtp_head(str(file.path), header)
            return directive
        return check_explicit(
            directive,
            header,
            read_header=self._files.read_header,
            check_catalog=self._check_catalog,
        )


def policy_for(
    registration: Registration,
    plan: ServePlan,
    max_verify_rows: int,
    target_header: BundleHeader | None,
) -> SpecPolicy | None:
    """The gates for a registered strategy (None when nothing speculates), starting at the
    depth docs/contract.md §4 gives: a drafter that knows its own depth says it."""
    strategy = registration.strategy
    if strategy is None:
        return None
    drafter = registration.drafter
    own = drafter.default_depth() if isinstance(drafter, ReportsDepth) else None
    arch = target_header.arch if target_header is not None else None
    depth = depth_for(strategy, plan.settings, plan.env, block_size=own, arch=arch)
    classes = drafter.match_classes if isinstance(drafter, ClassifiesMatches) else 1
    return SpecPolicy(
        plan.settings,
        default_depth=depth,
        depth_cap=max_verify_rows - 1,
        match_classes=classes,
    )
