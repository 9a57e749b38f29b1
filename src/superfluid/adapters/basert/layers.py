"""The reference backend's building blocks: KV caches, batch-invariant primitives, decoder layers.

`model.py` stacks these into the target's dense transformer; the drafters (`heads.py`) run the
same decoder layer over their own one-layer caches, so a converted MTP or EAGLE-3 layer is
computed exactly as a target layer is. Why every primitive has the shape it has (one BLAS
matrix-vector product per row, attention token by token) is explained in model.py: it is what
makes a row's numbers independent of the batch.

A decoder layer (tensor names under a prefix such as `layers.{i}.` or `mtp.layers.0.`):

    attn_norm.weight  [in]                         (absent for EAGLE-3, whose input is pre-normed)
    q_proj.weight     [heads * head_dim, in]       (.bias optional, as k and v)
    k_proj.weight     [kv_heads * head_dim, in]
    v_proj.weight     [kv_heads * head_dim, in]
    q_norm.weight, k_norm.weight  [head_dim]       (optional, Qwen3)
    o_proj.weight     [hidden, heads * head_dim]
    mlp_norm.weight   [hidden]
    gate_proj.weight, up_proj.weight  [intermediate, hidden]
    down_proj.weight  [hidden, intermediate]

`in` is the hidden size, except for EAGLE-3's layer, whose attention reads the token embedding
and the hidden state side by side (2 × hidden) while its residual stream is the hidden state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from superfluid.adapters.basert.bundle import Bundle
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
class LayerWeights:
    attn_norm: F32 | None  # None: the caller hands the layer an already-normed attention input
    qkv: F32  # [in, (heads + 2 * kv_heads) * head_dim]: q, k and v side by side, for x @ W
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


def rope_tables(head_dim: int, theta: float, positions: int) -> tuple[F32, F32]:
    """Per position, the cos and signed sin rows `rope` multiplies by (computed once, at load)."""
    half = head_dim // 2
    inv_freq = 1.0 / (theta ** (np.arange(half, dtype=np.float64) * 2 / head_dim))
    angles = np.outer(np.arange(positions, dtype=np.float64), inv_freq)
    cos, sin = np.cos(angles), np.sin(angles)
    # Rotate-half as one multiply-add: x * [cos, cos] + swap_halves(x) * [-sin, sin].
    return (
        np.concatenate([cos, cos], axis=1).astype(np.float32),
        np.concatenate([-sin, sin], axis=1).astype(np.float32),
    )


def rope(x: F32, cos: F32, sin: F32) -> F32:
    """Rotate [tokens, heads, head_dim] by each token's angles (HF rotate-half layout)."""
    half = x.shape[-1] // 2
    swapped = np.concatenate([x[..., half:], x[..., :half]], axis=-1, dtype=np.float32)
    out: F32 = x * cos[:, None, :] + swapped * sin[:, None, :]
    return out


def read_layer(
    bundle: Bundle, prefix: str, cfg: ModelConfig, *, input_size: int | None = None
) -> LayerWeights:
    """The decoder layer under `prefix`; BundleError names the first missing or mis-shaped
    tensor. `input_size` other than the hidden size means an EAGLE-3 layer: no attn_norm."""
    d, hd, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    width = d if input_size is None else input_size
    q_out, kv_out = cfg.num_heads * hd, cfg.num_kv_heads * hd
    q = bundle.tensor(prefix + "q_proj.weight", (q_out, width))
    k = bundle.tensor(prefix + "k_proj.weight", (kv_out, width))
    v = bundle.tensor(prefix + "v_proj.weight", (kv_out, width))
    biases = [prefix + f"{n}_proj.bias" for n in "qkv"]
    bias = None
    if any(name in bundle for name in biases):
        sizes = (q_out, kv_out, kv_out)
        bias = np.concatenate(
            [
                bundle.tensor(name, (n,)) if name in bundle else np.zeros(n, np.float32)
                for name, n in zip(biases, sizes, strict=True)
            ]
        )
    gate = bundle.tensor(prefix + "gate_proj.weight", (inter, d))
    up = bundle.tensor(prefix + "up_proj.weight", (inter, d))
    return LayerWeights(
        attn_norm=bundle.tensor(prefix + "attn_norm.weight", (d,)) if width == d else None,
        qkv=np.ascontiguousarray(np.concatenate([q, k, v]).T),
        qkv_bias=bias,
        head_norm=_head_norm(bundle, prefix, cfg),
        o=np.ascontiguousarray(bundle.tensor(prefix + "o_proj.weight", (d, q_out)).T),
        mlp_norm=bundle.tensor(prefix + "mlp_norm.weight", (d,)),
        gate_up=np.ascontiguousarray(np.concatenate([gate, up]).T),
        down=np.ascontiguousarray(bundle.tensor(prefix + "down_proj.weight", (d, inter)).T),
    )


def decoder_layer(
    layer: LayerWeights,
    cfg: ModelConfig,
    index: int,
    x: F32,
    cos: F32,
    sin: F32,
    passes: Sequence[Pass],
    starts: Sequence[int],
    counts: Sequence[int],
    *,
    attn_in: F32 | None = None,
) -> F32:
    """One pre-norm decoder layer over the packed rows `x` (the residual stream), writing each
    pass's keys and values at layer `index` of its cache. The attention reads `attn_in` when
    given (EAGLE-3: embedding and hidden state side by side), else `attn_norm(x)`."""
    n_tokens, hd = x.shape[0], cfg.head_dim
    heads, kv_heads = cfg.num_heads, cfg.num_kv_heads
    if attn_in is None:
        assert layer.attn_norm is not None, "a layer without attn_norm needs its attention input"
        attn_in = rms_norm(x, layer.attn_norm, cfg.rms_norm_eps)
    qkv = linear(attn_in, layer.qkv)
    if layer.qkv_bias is not None:
        qkv = qkv + layer.qkv_bias
    # Queries and keys get the same per-head norm and rotation: do them as one array.
    qk = qkv[:, : (heads + kv_heads) * hd].reshape(n_tokens, heads + kv_heads, hd)
    if layer.head_norm is not None:
        covered, weight = layer.head_norm
        qk = qk.copy()
        qk[:, covered] = rms_norm(qk[:, covered], weight, cfg.rms_norm_eps)
    qk = rope(qk, cos, sin)
    group = heads // kv_heads
    scale = np.float32(1.0 / np.sqrt(hd))
    queries = (qk[:, :heads] * scale).reshape(n_tokens, kv_heads, group, hd)
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
