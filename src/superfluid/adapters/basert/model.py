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

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from superfluid.adapters.basert.bundle import Bundle, BundleError
from superfluid.adapters.basert.model_config import ModelConfig

F32 = npt.NDArray[np.float32]

#: KV caches grow by this many positions at a time (and never past their limit).
KV_CHUNK = 256


class KVCache:
    """One sequence's keys and values for every layer; `length` positions are valid.

    Cutting only lowers `length`: positions past it are never read, and the next feed writes
    over them, so a cut is exact and costs nothing.
    """

    __slots__ = ("keys", "length", "limit", "values")

    def __init__(self, config: ModelConfig, limit: int) -> None:
        shape = (config.num_layers, config.num_kv_heads, 0, config.head_dim)
        self.keys: F32 = np.zeros(shape, dtype=np.float32)
        self.values: F32 = np.zeros(shape, dtype=np.float32)
        self.length = 0
        self.limit = limit

    @property
    def capacity(self) -> int:
        return int(self.keys.shape[2])

    def cut(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot cut a KV cache of {self.length} positions to {length}")
        self.length = length

    def reserve(self, length: int) -> None:
        if length > self.limit:
            raise ValueError(f"{length} positions pass this KV cache's limit of {self.limit}")
        if length <= self.capacity:
            return
        grown = min(self.limit, -(-length // KV_CHUNK) * KV_CHUNK)
        for name in ("keys", "values"):
            old: F32 = getattr(self, name)
            new = np.zeros((*old.shape[:2], grown, old.shape[3]), dtype=np.float32)
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)


@dataclass(frozen=True, slots=True)
class Pass:
    """One sequence's share of a forward: `tokens` appended at `cache.length`."""

    cache: KVCache
    tokens: Sequence[int]
    all_rows: bool = False


@dataclass(frozen=True, slots=True)
class ForwardOutput:
    """Per pass, in order: logits rows (one per token with `all_rows`, else the last token's),
    and the requested hidden-state taps, each (tokens fed, hidden_size)."""

    logits: list[F32]
    hidden: list[dict[int, F32]]


@dataclass(frozen=True, slots=True)
class _Layer:
    attn_norm: F32
    qkv: F32  # [hidden, (heads + 2 * kv_heads) * head_dim]: q, k and v side by side, for x @ W
    qkv_bias: F32 | None
    # Qwen3's per-head RMSNorm of queries and keys: the heads it covers among the q heads
    # followed by the k heads, and one weight row per covered head.
    head_norm: tuple[slice, F32] | None
    o: F32  # [heads * head_dim, hidden]
    mlp_norm: F32
    gate_up: F32  # [hidden, 2 * intermediate]
    down: F32  # [intermediate, hidden]


def linear(x: F32, weight: F32) -> F32:
    """`x` [n, in] times `weight` [in, out], as one BLAS matrix-vector product per row.

    A matrix-matrix product would round differently for different n; a stack of 1×in products
    runs the same kernel on every row, whatever n is.
    """
    out: F32 = np.matmul(x[:, None, :], weight)[:, 0, :]
    return out


def sum_last(x: F32) -> F32:
    """Sums over the last axis (kept, as length 1), one BLAS dot product per row.

    numpy's own reductions may pick their loop order by array shape; a stack of dot products
    runs the same call on every row.
    """
    out: F32 = np.matmul(x[..., None, :], _ones(x.shape[-1]))[..., 0]
    return out


@functools.cache
def _ones(n: int) -> F32:
    ones = np.ones((n, 1), dtype=np.float32)
    ones.flags.writeable = False
    return ones


def rms_norm(x: F32, weight: F32, eps: float) -> F32:
    """RMSNorm over the last axis."""
    mean = sum_last(x * x) / np.float32(x.shape[-1])
    out: F32 = x * (np.float32(1.0) / np.sqrt(mean + np.float32(eps))) * weight
    return out


class DenseModel:
    """Weights in float32 and the forward pass; sequences live in KVCache objects."""

    def __init__(
        self,
        config: ModelConfig,
        embed: F32,
        layers: list[_Layer],
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
        half = config.head_dim // 2
        inv_freq = 1.0 / (
            config.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / config.head_dim)
        )
        angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)
        cos, sin = np.cos(angles), np.sin(angles)
        # Rotate-half as one multiply-add: x * [cos, cos] + swap_halves(x) * [-sin, sin].
        self._cos = np.concatenate([cos, cos], axis=1).astype(np.float32)
        self._sin = np.concatenate([-sin, sin], axis=1).astype(np.float32)
        self._scale = np.float32(1.0 / np.sqrt(config.head_dim))

    @classmethod
    def from_bundle(
        cls, bundle: Bundle, *, max_positions: int, config: ModelConfig | None = None
    ) -> DenseModel:
        """Read and check every tensor the config calls for (BundleError names the first bad one)."""
        cfg = config or ModelConfig.from_header(bundle.header, bundle.shown)
        d, hd, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
        q_out, kv_out = cfg.num_heads * hd, cfg.num_kv_heads * hd
        embed = bundle.tensor("embed_tokens.weight", (cfg.vocab_size, d))
        layers = []
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            q = bundle.tensor(p + "q_proj.weight", (q_out, d))
            k = bundle.tensor(p + "k_proj.weight", (kv_out, d))
            v = bundle.tensor(p + "v_proj.weight", (kv_out, d))
            biases = [p + f"{n}_proj.bias" for n in "qkv"]
            bias = None
            if any(name in bundle for name in biases):
                sizes = (q_out, kv_out, kv_out)
                bias = np.concatenate(
                    [
                        bundle.tensor(name, (n,)) if name in bundle else np.zeros(n, np.float32)
                        for name, n in zip(biases, sizes, strict=True)
                    ]
                )
            gate = bundle.tensor(p + "gate_proj.weight", (inter, d))
            up = bundle.tensor(p + "up_proj.weight", (inter, d))
            layers.append(
                _Layer(
                    attn_norm=bundle.tensor(p + "attn_norm.weight", (d,)),
                    qkv=np.ascontiguousarray(np.concatenate([q, k, v]).T),
                    qkv_bias=bias,
                    head_norm=_head_norm(bundle, p, cfg),
                    o=np.ascontiguousarray(bundle.tensor(p + "o_proj.weight", (d, q_out)).T),
                    mlp_norm=bundle.tensor(p + "mlp_norm.weight", (d,)),
                    gate_up=np.ascontiguousarray(np.concatenate([gate, up]).T),
                    down=np.ascontiguousarray(bundle.tensor(p + "down_proj.weight", (d, inter)).T),
                )
            )
        norm = bundle.tensor("norm.weight", (d,))
        tied = cfg.tie_word_embeddings or "lm_head.weight" not in bundle
        head = embed if tied else bundle.tensor("lm_head.weight", (cfg.vocab_size, d))
        return cls(cfg, embed, layers, norm, np.ascontiguousarray(head.T), max_positions)

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
            x = self._layer(index, layer, x, cos, sin, passes, starts, counts)
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

    def _layer(
        self,
        index: int,
        layer: _Layer,
        x: F32,
        cos: F32,
        sin: F32,
        passes: Sequence[Pass],
        starts: list[int],
        counts: list[int],
    ) -> F32:
        cfg = self.config
        n_tokens, hd = x.shape[0], cfg.head_dim
        heads, kv_heads = cfg.num_heads, cfg.num_kv_heads
        qkv = linear(rms_norm(x, layer.attn_norm, cfg.rms_norm_eps), layer.qkv)
        if layer.qkv_bias is not None:
            qkv = qkv + layer.qkv_bias
        # Queries and keys get the same per-head norm and rotation: do them as one array.
        qk = qkv[:, : (heads + kv_heads) * hd].reshape(n_tokens, heads + kv_heads, hd)
        if layer.head_norm is not None:
            covered, weight = layer.head_norm
            qk = qk.copy()
            qk[:, covered] = rms_norm(qk[:, covered], weight, cfg.rms_norm_eps)
        qk = _rope(qk, cos, sin)
        group = heads // kv_heads
        queries = (qk[:, :heads] * self._scale).reshape(n_tokens, kv_heads, group, hd)
        keys = qk[:, heads:].transpose(1, 0, 2)  # [kv_heads, tokens, head_dim]
        values = qkv[:, (heads + kv_heads) * hd :].reshape(n_tokens, kv_heads, hd)
        mixed = np.empty((n_tokens, kv_heads, group, hd), dtype=np.float32)
        row = 0
        for p, start, n in zip(passes, starts, counts, strict=True):
            cache_k, cache_v = p.cache.keys[index], p.cache.values[index]
            cache_k[:, start : start + n] = keys[:, row : row + n]
            cache_v[:, start : start + n] = values[row : row + n].transpose(1, 0, 2)
            for j in range(n):
                # Each token attends to its own sequence's positions 0..start+j only.
                seen = start + j + 1
                scores = np.matmul(queries[row + j], cache_k[:, :seen].transpose(0, 2, 1))
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                mixed[row + j] = np.matmul(scores, cache_v[:, :seen]) / scores.sum(
                    axis=-1, keepdims=True
                )
            row += n
        x = x + linear(mixed.reshape(n_tokens, heads * hd), layer.o)
        gate_up = linear(rms_norm(x, layer.mlp_norm, cfg.rms_norm_eps), layer.gate_up)
        gate, up = gate_up[:, : cfg.intermediate_size], gate_up[:, cfg.intermediate_size :]
        with np.errstate(over="ignore"):  # exp(-gate) overflows to inf for very negative gates
            activated = (gate / (np.float32(1.0) + np.exp(-gate)) * up).astype(np.float32)
        out: F32 = x + linear(activated, layer.down)
        return out


def _rope(x: F32, cos: F32, sin: F32) -> F32:
    """Rotate [tokens, heads, head_dim] by each token's angles (HF rotate-half layout)."""
    half = x.shape[-1] // 2
    swapped = np.concatenate([x[..., half:], x[..., :half]], axis=-1, dtype=np.float32)
    out: F32 = x * cos[:, None, :] + swapped * sin[:, None, :]
    return out


def _head_norm(bundle: Bundle, prefix: str, cfg: ModelConfig) -> tuple[slice, F32] | None:
    heads, kv_heads, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q_name, k_name = prefix + "q_norm.weight", prefix + "k_norm.weight"
    rows = []
    if q_name in bundle:
        rows += [bundle.tensor(q_name, (hd,))] * heads
    if k_name in bundle:
        rows += [bundle.tensor(k_name, (hd,))] * kv_heads
    if not rows:
        return None
    first = 0 if q_name in bundle else heads
    last = heads + kv_heads if k_name in bundle else heads
    return slice(first, last), np.stack(rows)


__all__ = ["BundleError", "DenseModel", "ForwardOutput", "KVCache", "ModelConfig", "Pass"]
