"""What every head drafter of the reference backend shares: opening its bundle, the fit checks
that turn into the engine's refusals, and choosing a draft token greedily or by sampling.

Refusals are one line each (EngineRefusal, shown after `--speculate <d>: `): a drafter of another
kind, one that does not fit the target (the domain's fit rule, docs/contract.md §3, plus what the
reference backend itself needs), and a missing or mis-shaped tensor (the bundle reader's line,
which names the file and the tensor).

Sampling a draft: token i of a proposal is drawn from the drafter's own distribution q, shaped by
the lane's sampling parameters exactly as the verifier shapes p (temperature, top-k, top-p,
min-p; no penalties: a drafter predicts the unpenalised distribution, docs/contract.md §8), with
the uniform `uniform(seed, pos + i, STREAM_DRAFT)`, independent of the verifier's coins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from superfluid.adapters.basert.bundle import Bundle, BundleError
from superfluid.adapters.basert.layers import F32
from superfluid.adapters.basert.model_config import ConfigReader, ModelConfig
from superfluid.adapters.basert.target import DraftTarget
from superfluid.application.ports import EngineRefusal
from superfluid.domain.bundle_header import BundleHeader
from superfluid.domain.drafters import fit_problem
from superfluid.domain.rng import STREAM_DRAFT, uniform
from superfluid.domain.sampling import SamplingParams, draw_index, token_distribution
from superfluid.domain.strategies import Strategy

Q = npt.NDArray[np.float64]


def open_drafter(path: Path, strategy: Strategy, target: DraftTarget) -> Bundle:
    """The drafter bundle at `path`, checked to be a `strategy` drafter that fits `target`."""
    path = Path(path).expanduser()
    try:
        bundle = Bundle.open(path)
    except BundleError as err:
        raise EngineRefusal(err.message) from None
    try:
        arch = bundle.header.arch
        if arch != strategy:
            why = " (dspark needs a Markov head)" if strategy is Strategy.DSPARK else ""
            raise EngineRefusal(
                f"{bundle.shown} is a {arch or 'plain'} bundle, not {strategy}{why}"
            )
        problem = fit_problem(target.header, bundle.header)
        if problem is not None:
            raise EngineRefusal(f"{bundle.shown} does not fit {target.path.name}: {problem}")
    except EngineRefusal:
        bundle.close()
        raise
    return bundle


def tap_ids(header: BundleHeader, shown: str, *, count: int | None = None) -> tuple[int, ...]:
    """The drafter's `config.target_layer_ids` (taps into the target), `count` of them if given."""
    ids = header.target_layer_ids
    if not ids or (count is not None and len(ids) != count):
        wanted = f"{count} target layer ids" if count is not None else "target layer ids"
        raise EngineRefusal(
            f"{shown}: config.target_layer_ids must list {wanted} (the taps it reads), "
            f"got {list(ids)}"
        )
    return ids


def config_of(header: BundleHeader) -> Mapping[str, Any]:
    raw = header.raw.get("config")
    return raw if isinstance(raw, Mapping) else {}


def layer_config(header: BundleHeader, shown: str, hidden: int, vocab: int) -> ModelConfig:
    """The config of a drafter's own decoder layer (EAGLE-3), read as a target's would be."""
    read = ConfigReader(shown, config_of(header))
    heads = read.count("num_attention_heads")
    kv_heads = read.count("num_key_value_heads", heads)
    head_dim = read.count("head_dim", hidden // heads)
    if heads % kv_heads or head_dim % 2:
        raise EngineRefusal(
            f"{shown}: num_attention_heads ({heads}) must be a multiple of num_key_value_heads "
            f"({kv_heads}) and head_dim ({head_dim}) even"
        )
    return ModelConfig(
        arch=header.arch,
        hidden_size=hidden,
        vocab_size=vocab,
        num_layers=1,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=read.count("intermediate_size"),
        rms_norm_eps=read.number("rms_norm_eps", 1e-6),
        rope_theta=read.number("rope_theta", 10000.0),
        tie_word_embeddings=False,
    )


def optional(bundle: Bundle, name: str, shape: tuple[int, ...], shared: F32) -> F32:
    """Tensor `name` if the bundle has it, else the target's (`shared`)."""
    return bundle.tensor(name, shape) if name in bundle else shared


def refusing(err: BundleError) -> EngineRefusal:
    return EngineRefusal(err.message)


class Proposal:
    """A draft being built: tokens, and for a sampled draft the q row of each."""

    __slots__ = ("_params", "_pos", "q", "tokens")

    def __init__(self, params: SamplingParams | None, pos: int) -> None:
        self._params = params if params is not None and not params.is_greedy else None
        self._pos = pos
        self.tokens: list[int] = []
        self.q: list[Q] = []

    def choose(self, logits: F32) -> int:
        """The next draft token from one logits row (argmax, or a draw from q), recorded."""
        params = self._params
        if params is None:
            token = int(np.argmax(logits))
        else:
            q = token_distribution(logits, params, ())
            u = uniform(params.seed, self._pos + len(self.tokens), STREAM_DRAFT)
            token = draw_index(q, u)
            self.q.append(q)
        self.tokens.append(token)
        return token

    def sampled(self) -> tuple[list[int], Q]:
        if not self.q:
            return self.tokens, np.zeros((0, 0), dtype=np.float64)
        return self.tokens, np.stack(self.q)


class ProposingLane:
    """A lane's draft state whose greedy and sampled drafts are one `_propose` with a
    greedy or a sampling `Proposal`."""

    __slots__ = ()

    def propose(self, k: int) -> list[int]:
        return self._propose(k, Proposal(None, 0)).tokens

    def propose_sampled(self, k: int, params: SamplingParams, pos: int) -> tuple[list[int], Q]:
        return self._propose(k, Proposal(params, pos)).sampled()

    def _propose(self, k: int, proposal: Proposal) -> Proposal:
        raise NotImplementedError


def kv_lagging(kv: int, history: Sequence[int]) -> bool:
    """Whether the target's KV is not `history` minus its pending token (then draft nothing)."""
    return kv == 0 or kv != len(history) - 1
