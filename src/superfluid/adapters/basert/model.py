"""The reference backend's model: a dense decoder-only transformer in numpy (llama, qwen, qwen3).

Architecture: token embedding; per layer an RMSNorm, grouped-query attention with rotary
position embedding (HF "rotate half" layout, `rope_theta`), optional per-head RMSNorm of queries
and keys (Qwen3's q_norm/k_norm), an output projection added to the residual, then an RMSNorm
and a SwiGLU MLP (down(silu(gate(x)) * up(x))) added to the residual; a final RMSNorm and the
output head (`lm_head`, or the embedding when tied). Biases on q/k/v (Qwen2) are read when the
bundle has them.

Tensor names (the layout this project's bundles use; shapes are [out, in], as in HF checkpoints):

    embed_tokens.weight          [vocab, hidden]
    layers.{i}.attn_norm.weight  [hidden]
    layers.{i}.q_proj.weight     [heads * head_dim, hidden]     (.bias [heads * head_dim])
    layers.{i}.k_proj.weight     [kv_heads * head_dim, hidden]  (.bias optional)
    layers.{i}.v_proj.weight     [kv_heads * head_dim, hidden]  (.bias optional)
    layers.{i}.q_norm.weight     [head_dim]                     (optional, Qwen3)
    layers.{i}.k_norm.weight     [head_dim]                     (optional, Qwen3)
    layers.{i}.o_proj.weight     [hidden, heads * head_dim]
    layers.{i}.mlp_norm.weight   [hidden]
    layers.{i}.gate_proj.weight  [intermediate, hidden]
    layers.{i}.up_proj.weight    [intermediate, hidden]
    layers.{i}.down_proj.weight  [hidden, intermediate]
    norm.weight                  [hidden]
    lm_head.weight               [vocab, hidden]                (absent or ignored when tied)

`layers.{i}.<name>.weight` keeps the domain's rule working: a bundle's storage quantisation is
the dtype of its first 2-D tensor named `layers.*.weight` (here `layers.0.q_proj.weight`).

Batch invariance (the property speculative decoding's exactness rests on): a token's logits do
not depend on how many tokens, or which other sequences, share its forward pass. Every step that
mixes numbers is arranged so that its shape is the same whatever the batch:
- projections are one BLAS matrix-vector product per row (`np.matmul` over a stack of 1×in
  rows), never a matrix-matrix product, whose kernel and summation order change with the
  number of rows;
- RMSNorm's sum of squares is a per-row BLAS dot product (not a numpy reduction, whose loop
  order numpy may pick by array shape);
- attention runs token by token over that token's own sequence's cached keys and values, so its
  shapes depend only on the token's position;
- rotary angles come from one table computed at load, indexed by position.
Element-wise operations (add, multiply, exp) are per element. tests/integration/test_basert_
runtime.py checks the property bit for bit (np.array_equal).

Hidden-state taps (for drafters that read the target's hidden states): tap `i` is the residual
stream entering layer `i` — 0 is the embedding output, `num_layers` the last layer's output
before the final norm; the numbering of HF's `hidden_states` and of EAGLE-3's layer ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from superfluid.adapters.basert.bundle import Bundle
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


@dataclass(frozen=True, slots=True)
class ForwardOutput:
    """Per pass, in order: logits rows (one per token with `all_rows`, else the last token's),
    and the requested hidden-state taps, each (tokens fed, hidden_size)."""

    logits: list[F32]
    hidden: list[dict[int, F32]]


class DenseModel:
    """Weights in float32 and the forward pass; sequences live in KVCache objects."""

    def __init__(
        self,
        config: ModelConfig,
        embed: F32,
        layers: list[LayerWeights],
        norm: F32,
        head: F32,
        max_positions: int,
    ) -> None:
        self.config = config
        self.max_positions = max_positions
        self._embed = embed
        self._layers = layers
        self._norm = norm
        self._head = head  # [hidden, vocab], for x @ W
        self._cos, self._sin = rope_tables(config.head_dim, config.rope_theta, max_positions)

    @classmethod
    def from_bundle(
        cls, bundle: Bundle, *, max_positions: int, config: ModelConfig | None = None
    ) -> DenseModel:
        """Read and check every tensor the config calls for (BundleError names the first bad one)."""
        cfg = config or ModelConfig.from_header(bundle.header, bundle.shown)
        d = cfg.hidden_size
        embed = bundle.tensor("embed_tokens.weight", (cfg.vocab_size, d))
        layers = [read_layer(bundle, f"layers.{i}.", cfg) for i in range(cfg.num_layers)]
        norm = bundle.tensor("norm.weight", (d,))
        tied = cfg.tie_word_embeddings or "lm_head.weight" not in bundle
        head = embed if tied else bundle.tensor("lm_head.weight", (cfg.vocab_size, d))
        return cls(cfg, embed, layers, norm, np.ascontiguousarray(head.T), max_positions)

    # Read by drafters that share the target's embedding, final norm or output head.

    @property
    def embedding(self) -> F32:
        """[vocab, hidden]: row t is token t's input embedding."""
        return self._embed

    @property
    def final_norm(self) -> F32:
        """[hidden]: the weight of the RMSNorm before the output head."""
        return self._norm

    @property
    def output_head(self) -> F32:
        """[hidden, vocab], for `linear(x, head)` (the embedding, transposed, when tied)."""
        return self._head

    def new_cache(self, limit: int | None = None) -> KVCache:
        """An empty sequence of at most `limit` positions (default: the model's maximum)."""
        return KVCache(self.config, min(limit or self.max_positions, self.max_positions))

    def forward(self, passes: Sequence[Pass], *, taps: Sequence[int] = ()) -> ForwardOutput:
        """Append each pass's tokens to its cache and return its logits rows and taps."""
        cfg = self.config
        self._check(passes, taps)
        starts = [p.cache.length for p in passes]
        counts = [len(p.tokens) for p in passes]
        for p, start, n in zip(passes, starts, counts, strict=True):
            p.cache.reserve(start + n)
        tokens = np.fromiter((t for p in passes for t in p.tokens), dtype=np.int64)
        positions = np.concatenate(
            [np.arange(s, s + n) for s, n in zip(starts, counts, strict=True)]
        )
        cos, sin = self._cos[positions], self._sin[positions]
        x: F32 = self._embed[tokens]
        wanted = set(taps)
        tapped: dict[int, F32] = {}
        for index, layer in enumerate(self._layers):
            if index in wanted:
                tapped[index] = x.copy()
            x = decoder_layer(layer, cfg, index, x, cos, sin, passes, starts, counts)
        if cfg.num_layers in wanted:
            tapped[cfg.num_layers] = x.copy()
        # Only the rows someone asked for pay for the final norm and the head.
        picks: list[int] = []
        bounds = []
        row = 0
        for p, n in zip(passes, counts, strict=True):
            first = len(picks)
            picks.extend(range(row, row + n) if p.all_rows else [row + n - 1])
            bounds.append((first, len(picks)))
            row += n
        logits = linear(rms_norm(x[picks], self._norm, cfg.rms_norm_eps), self._head)
        for p, start, n in zip(passes, starts, counts, strict=True):
            p.cache.length = start + n
        offsets = np.cumsum([0, *counts])
        return ForwardOutput(
            logits=[logits[a:b] for a, b in bounds],
            hidden=[
                {tap: rows[offsets[i] : offsets[i + 1]] for tap, rows in tapped.items()}
                for i in range(len(passes))
            ],
        )

    def _check(self, passes: Sequence[Pass], taps: Sequence[int]) -> None:
        vocab = self.config.vocab_size
        if len({id(p.cache) for p in passes}) != len(passes):
            raise ValueError("a sequence appears twice in one forward")
        for p in passes:
            if not p.tokens:
                raise ValueError("a pass with no tokens")
            if p.cache.length + len(p.tokens) > min(p.cache.limit, self.max_positions):
                raise ValueError(
                    f"{p.cache.length} + {len(p.tokens)} positions pass the sequence's limit"
                )
            bad = next((t for t in p.tokens if not 0 <= t < vocab), None)
            if bad is not None:
                raise ValueError(f"token {bad} is outside the vocabulary (0..{vocab - 1})")
        for tap in taps:
            if not 0 <= tap <= self.config.num_layers:
                raise ValueError(f"tap {tap} is not in 0..{self.config.num_layers}")
