"""`mtp-head` and `eagle3:<path>`: heads that draft from the target's hidden states, one token
per step, chained.

Both read, for a lane, the target's hidden state at the last KV position p (taps kept by the
runtime, row for row with the KV) together with the embedding of the pending token x_{p+1} — the
last committed token, which the KV does not hold yet (executor.py) — and predict x_{p+2}, the
first draft token. For a deeper draft the head feeds its own output hidden state back in place
of the target's, with the token it just drafted (DeepSeek-V3's MTP and EAGLE's recipe).

Each head has one decoder layer (layers.py) that attends over its own per-lane KV: position p of
that cache holds the head's input for (target hidden at p, token p+1), so it covers the same
positions as the target's KV. Before drafting, the lane feeds the positions the target's KV
gained since the last round ("catch-up"), whose hidden states and next tokens are committed and
never change; chained positions are drafts and are cut off again at the next round, so the
head's cache never holds anything the target did not confirm.

- MTP (the target bundle's own head, `speculator.config.kind == "mtp"`): taps the target's last
  layer output (tap num_layers, before the final norm); z = eh_proj · [embed_norm(e);
  hidden_norm(h)]; one decoder layer shaped as a target layer (residual z); mtp.norm; the
  target's output head.
- EAGLE-3 (a drafter bundle, arch `eagle3`): taps three layers (config.target_layer_ids: low,
  mid, high); f = fc · [h_low; h_mid; h_high]; its layer's attention reads
  [embed_norm(e); hidden_norm(f)] (2 × hidden, as EAGLE-3's checkpoints are shaped) while its
  residual stream is f; norm; its own lm_head over the full vocabulary (or the target's).

Tensor names and header fields: docs/adr/0005-basert-drafter-format.md.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from superfluid.adapters.basert.bundle import Bundle, BundleError
from superfluid.adapters.basert.drafters.common import (
    Proposal,
    ProposingLane,
    config_of,
    kv_lagging,
    layer_config,
    open_drafter,
    optional,
    refusing,
    tap_ids,
)
from superfluid.adapters.basert.layers import (
    F32,
    KVCache,
    LayerWeights,
    Pass,
    decoder_layer,
    linear,
    read_layer,
    rms_norm,
    rope_tables,
)
from superfluid.adapters.basert.model_config import ModelConfig
from superfluid.adapters.basert.target import DraftTarget
from superfluid.application.ports import DraftState, EngineRefusal
from superfluid.domain.strategies import Strategy

#: (residual stream, attention input or None for `attn_norm(residual)`) for the head's layer.
LayerInput = tuple[F32, F32 | None]


@dataclass(frozen=True, slots=True)
class HeadWeights:
    """What MTP and EAGLE-3 heads share: their taps, one decoder layer, norms and the head."""

    taps: tuple[int, ...]  # the target's taps the head reads, in the order it reads them
    config: ModelConfig  # of its one layer (num_layers 1)
    layer: LayerWeights
    embed: F32  # [vocab, hidden]
    embed_norm: F32
    hidden_norm: F32
    norm: F32
    head: F32  # [hidden, vocab], for x @ W
    context_size: int


class ChainedHead(abc.ABC):
    """The maths of one head; subclasses say how its layer's inputs are formed."""

    strategy: Strategy

    def __init__(self, weights: HeadWeights) -> None:
        self.weights = weights
        self.taps = weights.taps
        self.config = weights.config
        self.context_size = weights.context_size
        self.cos, self.sin = rope_tables(
            weights.config.head_dim, weights.config.rope_theta, weights.context_size
        )

    @abc.abstractmethod
    def from_target(self, tapped: F32, tokens: Sequence[int]) -> LayerInput:
        """Inputs for positions whose target hidden states are `tapped` [n, taps, hidden],
        each followed by the token in `tokens`."""

    @abc.abstractmethod
    def from_self(self, hidden: F32, token: int) -> LayerInput:
        """Inputs for a chained step: the head's own output hidden state [1, hidden] and the
        token it drafted from it."""

    def logits(self, out: F32) -> F32:
        w = self.weights
        return linear(rms_norm(out, w.norm, w.config.rms_norm_eps), w.head)

    def run(self, cache: KVCache, inputs: LayerInput) -> F32:
        """The head's layer over new positions appended to `cache`; its output rows."""
        residual, attn_in = inputs
        start, n = cache.length, residual.shape[0]
        cache.reserve(start + n)
        where = slice(start, start + n)
        out = decoder_layer(
            self.weights.layer,
            self.config,
            0,
            residual,
            self.cos[where],
            self.sin[where],
            [Pass(cache, ())],
            [start],
            [n],
            attn_in=attn_in,
        )
        cache.length = start + n
        return out

    def _normed(self, tokens: Sequence[int]) -> F32:
        rows = self.weights.embed[np.asarray(tokens, dtype=np.int64)]
        return rms_norm(rows, self.weights.embed_norm, self.config.rms_norm_eps)


class MtpHead(ChainedHead):
    strategy = Strategy.MTP_HEAD

    def __init__(self, weights: HeadWeights, eh_proj: F32) -> None:
        super().__init__(weights)
        self.eh_proj = eh_proj  # [2 * hidden, hidden], for x @ W

    def _z(self, hidden: F32, tokens: Sequence[int]) -> LayerInput:
        eps = self.config.rms_norm_eps
        both = np.concatenate(
            [self._normed(tokens), rms_norm(hidden, self.weights.hidden_norm, eps)], axis=1
        )
        return linear(both, self.eh_proj), None

    def from_target(self, tapped: F32, tokens: Sequence[int]) -> LayerInput:
        return self._z(np.ascontiguousarray(tapped[:, 0]), tokens)

    def from_self(self, hidden: F32, token: int) -> LayerInput:
        return self._z(hidden, [token])


class Eagle3Head(ChainedHead):
    strategy = Strategy.EAGLE3

    def __init__(self, weights: HeadWeights, fc: F32) -> None:
        super().__init__(weights)
        self.fc = fc  # [3 * hidden, hidden], for x @ W

    def _input(self, fused: F32, tokens: Sequence[int]) -> LayerInput:
        normed = rms_norm(fused, self.weights.hidden_norm, self.config.rms_norm_eps)
        return fused, np.concatenate([self._normed(tokens), normed], axis=1)

    def from_target(self, tapped: F32, tokens: Sequence[int]) -> LayerInput:
        side_by_side = np.ascontiguousarray(tapped.reshape(tapped.shape[0], -1))
        return self._input(linear(side_by_side, self.fc), tokens)

    def from_self(self, hidden: F32, token: int) -> LayerInput:
        return self._input(hidden, [token])


class HeadDrafter:
    """The `mtp-head` or `eagle3` strategy over one loaded head (one cache per open lane)."""

    def __init__(self, head: ChainedHead, target: DraftTarget) -> None:
        self.head = head
        self.target = target
        self.stops = target.capabilities.eos_tokens
        target.require_taps(head.taps)

    @property
    def strategy(self) -> Strategy:
        return self.head.strategy

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        return _HeadLane(self, seq, prompt)


class _HeadLane(ProposingLane):
    """One lane: the head's cache over the target's committed positions, then a draft chain."""

    __slots__ = ("_cache", "_drafter", "_history", "_last", "_real", "_seq")

    def __init__(self, drafter: HeadDrafter, seq: int, prompt: Sequence[int]) -> None:
        self._drafter = drafter
        self._seq = seq
        self._history = list(prompt)
        self._cache = KVCache(drafter.head.config, drafter.head.context_size)
        self._real = 0  # cache positions fed from the target's hidden states
        self._last: F32 | None = None  # the head's output at position _real - 1

    def commit(self, tokens: Sequence[int]) -> None:
        self._history.extend(tokens)

    def _propose(self, k: int, proposal: Proposal) -> Proposal:
        head, target = self._drafter.head, self._drafter.target
        kv = target.length(self._seq)
        if kv_lagging(kv, self._history) or k <= 0:
            return proposal
        cache = self._cache
        if kv < self._real:  # never expected: the target's KV only grows between rounds
            self._real, self._last = 0, None
        cache.cut(self._real)  # drop the last round's chained (drafted) positions
        if self._real < kv:
            tapped = target.hidden(self._seq, head.taps, start=self._real)
            next_tokens = self._history[self._real + 1 : kv + 1]
            self._last = head.run(cache, head.from_target(tapped, next_tokens))[-1:]
            self._real = kv
        last = self._last
        assert last is not None
        # A chained step takes a cache cell: stay inside the head's context.
        k = min(k, cache.limit - cache.length + 1)
        while True:
            token = proposal.choose(head.logits(last)[0])
            if len(proposal.tokens) >= k or token in self._drafter.stops:
                return proposal
            last = head.run(cache, head.from_self(last, token))


def load_mtp_head(target: DraftTarget) -> HeadDrafter:
    """The MTP head inside the target's own bundle; EngineRefusal says why not."""
    header, name = target.header, target.path.name
    speculator = header.raw.get("speculator")
    spec_config = speculator.get("config") if isinstance(speculator, dict) else None
    if header.speculator_kind != "mtp" or not isinstance(spec_config, dict):
        raise EngineRefusal(f"{name} carries no MTP head (no speculator of kind mtp in its header)")
    modules = spec_config.get("num_layers", 1)
    if modules != 1:
        raise EngineRefusal(
            f"{name}'s MTP head has {modules} modules; the reference backend runs one, chained"
        )
    cfg = target.model.config
    d = cfg.hidden_size
    layers = cfg.num_layers
    try:
        with Bundle.open(target.path) as bundle:
            weights = HeadWeights(
                taps=(layers,),
                config=dataclasses.replace(cfg, num_layers=1),
                layer=read_layer(bundle, "mtp.layers.0.", cfg),
                embed=target.model.embedding,
                embed_norm=bundle.tensor("mtp.embed_norm.weight", (d,)),
                hidden_norm=bundle.tensor("mtp.hidden_norm.weight", (d,)),
                norm=bundle.tensor("mtp.norm.weight", (d,)),
                head=target.model.output_head,
                context_size=target.capabilities.context_size,
            )
            eh_proj = bundle.tensor("mtp.eh_proj.weight", (d, 2 * d))
            head = MtpHead(weights, np.ascontiguousarray(eh_proj.T))
    except BundleError as err:
        raise refusing(err) from None
    return HeadDrafter(head, target)


def load_eagle3(path: Path, *, target: DraftTarget) -> HeadDrafter:
    """An EAGLE-3 head for `target`; EngineRefusal says why not."""
    bundle = open_drafter(path, Strategy.EAGLE3, target)
    cfg = target.model.config
    d, vocab = cfg.hidden_size, cfg.vocab_size
    try:
        with bundle:
            shown = bundle.shown
            taps = tap_ids(bundle.header, shown, count=3)
            draft_vocab = config_of(bundle.header).get("draft_vocab_size", vocab)
            if draft_vocab != vocab:
                raise EngineRefusal(
                    f"{shown} drafts over a reduced vocabulary ({draft_vocab} of {vocab} tokens); "
                    "the reference backend runs full-vocabulary EAGLE-3 heads"
                )
            own = layer_config(bundle.header, shown, d, vocab)
            model = target.model
            weights = HeadWeights(
                taps=taps,
                config=own,
                layer=read_layer(bundle, "layers.0.", own, input_size=2 * d),
                embed=optional(bundle, "embed_tokens.weight", (vocab, d), model.embedding),
                embed_norm=bundle.tensor("embed_norm.weight", (d,)),
                hidden_norm=bundle.tensor("hidden_norm.weight", (d,)),
                norm=bundle.tensor("norm.weight", (d,)),
                head=_head(bundle, vocab, d, model.output_head),
                context_size=target.capabilities.context_size,
            )
            fc = bundle.tensor("fc.weight", (d, 3 * d))
            head = Eagle3Head(weights, np.ascontiguousarray(fc.T))
    except BundleError as err:
        raise refusing(err) from None
    return HeadDrafter(head, target)


def _head(bundle: Bundle, vocab: int, hidden: int, shared: F32) -> F32:
    if "lm_head.weight" not in bundle:
        return shared
    return np.ascontiguousarray(bundle.tensor("lm_head.weight", (vocab, hidden)).T)
