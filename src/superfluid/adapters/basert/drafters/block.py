"""`dflash:<path>` and `dspark:<path>`: block drafters that propose a whole block per round.

A block drafter reads the target's hidden states at its taps (config.target_layer_ids) for the
last KV position p, and the embedding of the pending token x_{p+1}, and proposes x_{p+2} ..
x_{p+1+B} — B = config.block_size positions — in ONE forward pass: no position waits for the
token before it, which is what makes a block cheap to draft. The reference backbone, per block
position j:

    f   = fc · [h_tap1; …; h_tapN]                                 (fuse the taps)
    u_j = block_proj[j] · [embed_norm(e(x_{p+1})); hidden_norm(f)]
    logits_j = lm_head · norm(u_j)                                 (the target's head if absent)

(Real DFlash drafters run a small transformer over the block with the target's context injected
into its attention; this backbone is the same contract — taps in, a block of logits out in one
pass — at the size the reference backend needs.)

DSpark adds what a one-pass block lacks, knowledge of the tokens it drafted before position j:
- a Markov head, a low-rank token-transition term added to u_j from the previous draft token
  (x_{p+1} for j = 0): u_j += markov.proj[j] · markov.embed[previous token] (rank r = the
  header's config.markov_rank); the positions then follow one another, each one matrix-vector
  product away from the last;
- a confidence estimate: past the first position, the block stops where the drafter's own
  top probability (softmax of its logits) falls below config.confidence_threshold, so a round
  does not pay to verify tokens the drafter itself doubts.

A DFlash bundle named as `dspark:` is refused (it has no Markov head), and so is a DSpark bundle
without its Markov tensors. Tensor names and header fields: docs/adr/0005-basert-drafter-format.md.
"""

from __future__ import annotations

import math
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
    open_drafter,
    optional,
    refusing,
    tap_ids,
)
from superfluid.adapters.basert.layers import F32, linear, rms_norm
from superfluid.adapters.basert.target import DraftTarget
from superfluid.application.ports import DraftState, EngineRefusal
from superfluid.domain.strategies import Strategy

MARKOV_TENSORS = ("markov.embed.weight", "markov.proj.weight")


@dataclass(frozen=True, slots=True)
class MarkovHead:
    embed: F32  # [vocab, rank]: the previous token's code
    proj: F32  # [block, rank, hidden]: per position, code to hidden, for x @ W
    threshold: float  # 0: never stop a block early


@dataclass(frozen=True, slots=True)
class BlockWeights:
    taps: tuple[int, ...]
    fc: F32  # [taps * hidden, hidden], for x @ W
    embed: F32  # [vocab, hidden]
    embed_norm: F32
    hidden_norm: F32
    block_proj: F32  # [block, 2 * hidden, hidden], for x @ W
    norm: F32
    head: F32  # [hidden, vocab], for x @ W
    eps: float
    markov: MarkovHead | None

    @property
    def block_size(self) -> int:
        return int(self.block_proj.shape[0])


class BlockDrafter:
    """The `dflash` or `dspark` strategy over one loaded block drafter; lanes keep no cache."""

    def __init__(self, strategy: Strategy, weights: BlockWeights, target: DraftTarget) -> None:
        self.strategy = strategy
        self.weights = weights
        self.target = target
        self.stops = target.capabilities.eos_tokens
        target.require_taps(weights.taps)

    @property
    def block_size(self) -> int:
        """The drafter's block width: its default depth (docs/contract.md §4)."""
        return self.weights.block_size

    def default_depth(self) -> int:
        """Its block width (docs/contract.md §4): a block drafter never drafts past it."""
        return self.block_size

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        return _BlockLane(self, seq, prompt)

    def block(self, tapped: F32, pending: int, proposal: Proposal, k: int) -> None:
        """Draft up to k (≤ block) tokens after `pending` from its taps `tapped` [taps, hidden]."""
        w = self.weights
        fused = linear(np.ascontiguousarray(tapped.reshape(1, -1)), w.fc)
        inputs = np.concatenate(
            [
                rms_norm(w.embed[[pending]], w.embed_norm, w.eps),
                rms_norm(fused, w.hidden_norm, w.eps),
            ],
            axis=1,
        )
        k = min(k, w.block_size)
        # The one pass: every position's hidden state from the same input, [k, hidden].
        hidden = np.matmul(inputs, w.block_proj[:k])[:, 0, :]
        if w.markov is None:
            logits = linear(rms_norm(hidden, w.norm, w.eps), w.head)
            for j in range(k):
                if proposal.choose(logits[j]) in self.stops:
                    return
            return
        markov, previous = w.markov, pending
        for j in range(k):
            code = markov.embed[[previous]]
            row = hidden[j : j + 1] + linear(code, markov.proj[j])
            logits_j = linear(rms_norm(row, w.norm, w.eps), w.head)[0]
            if j and _confidence(logits_j) < markov.threshold:
                return
            previous = proposal.choose(logits_j)
            if previous in self.stops:
                return


class _BlockLane(ProposingLane):
    __slots__ = ("_drafter", "_history", "_seq")

    def __init__(self, drafter: BlockDrafter, seq: int, prompt: Sequence[int]) -> None:
        self._drafter = drafter
        self._seq = seq
        self._history = list(prompt)

    def commit(self, tokens: Sequence[int]) -> None:
        self._history.extend(tokens)

    def _propose(self, k: int, proposal: Proposal) -> Proposal:
        drafter = self._drafter
        kv = drafter.target.length(self._seq)
        if kv_lagging(kv, self._history) or k <= 0:
            return proposal
        tapped = drafter.target.hidden(self._seq, drafter.weights.taps, start=kv - 1)[0]
        drafter.block(tapped, self._history[-1], proposal, k)
        return proposal


def _confidence(logits: F32) -> float:
    """The drafter's own top probability for a row (softmax at temperature 1)."""
    shifted = logits.astype(np.float64) - float(logits.max())
    return 1.0 / float(np.exp(shifted).sum())


def load_block_drafter(strategy: Strategy, path: Path, *, target: DraftTarget) -> BlockDrafter:
    """A DFlash or DSpark drafter for `target`; EngineRefusal says why not."""
    bundle = open_drafter(path, strategy, target)
    cfg = target.model.config
    d, vocab = cfg.hidden_size, cfg.vocab_size
    try:
        with bundle:
            shown = bundle.shown
            taps = tap_ids(bundle.header, shown)
            block = bundle.header.block_size
            if not block:
                raise EngineRefusal(f"{shown}: config.block_size must be a positive integer")
            markov = _markov(bundle, block, d, vocab) if strategy is Strategy.DSPARK else None
            block_proj = bundle.tensor("block_proj.weight", (block, d, 2 * d))
            fc = bundle.tensor("fc.weight", (d, len(taps) * d))
            head = target.model.output_head
            if "lm_head.weight" in bundle:
                head = np.ascontiguousarray(bundle.tensor("lm_head.weight", (vocab, d)).T)
            weights = BlockWeights(
                taps=taps,
                fc=np.ascontiguousarray(fc.T),
                embed=optional(bundle, "embed_tokens.weight", (vocab, d), target.model.embedding),
                embed_norm=bundle.tensor("embed_norm.weight", (d,)),
                hidden_norm=bundle.tensor("hidden_norm.weight", (d,)),
                block_proj=np.ascontiguousarray(block_proj.transpose(0, 2, 1)),
                norm=bundle.tensor("norm.weight", (d,)),
                head=head,
                eps=cfg.rms_norm_eps,
                markov=markov,
            )
    except BundleError as err:
        raise refusing(err) from None
    return BlockDrafter(strategy, weights, target)


def _markov(bundle: Bundle, block: int, hidden: int, vocab: int) -> MarkovHead:
    shown = bundle.shown
    missing = [name for name in MARKOV_TENSORS if name not in bundle]
    if missing:
        raise EngineRefusal(
            f"{shown} has no Markov head ({missing[0]}); dspark needs a Markov head"
        )
    rank = bundle.entry("markov.embed.weight").shape[-1:]
    embed = bundle.tensor("markov.embed.weight", (vocab, *rank))
    proj = bundle.tensor("markov.proj.weight", (block, hidden, *rank))
    threshold = config_of(bundle.header).get("confidence_threshold", 0.0)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise EngineRefusal(f"{shown}: config.confidence_threshold must be a number in [0, 1)")
    if not (math.isfinite(threshold) and 0.0 <= threshold < 1.0):
        raise EngineRefusal(f"{shown}: config.confidence_threshold must be a number in [0, 1)")
    return MarkovHead(embed, np.ascontiguousarray(proj.transpose(0, 2, 1)), float(threshold))
