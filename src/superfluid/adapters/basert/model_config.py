"""What the reference backend reads from a bundle header's `config`, and what it cannot run.

Keys (HF `config.json` names, as converters copy them):

| key | required | default |
|---|---|---|
| `hidden_size`, `vocab_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size` | yes | |
| `num_key_value_heads` | no | `num_attention_heads` |
| `head_dim` | no | `hidden_size / num_attention_heads` |
| `rms_norm_eps` | no | 1e-6 |
| `rope_theta` | no | 10000 |
| `tie_word_embeddings` | no | false (a bundle without `lm_head.weight` is tied anyway) |
| `bos_token_id`, `eos_token_id` (int or list) | no | none (read by the tokenizer) |

Refused, each with one sentence: an arch other than llama/qwen/qwen2/qwen3, `rope_scaling`, a
sliding window in use, and recurrent or hybrid state (which also cannot be cut back, see
`cut_refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from superfluid.adapters.basert.bundle import BundleError
from superfluid.domain.bundle_header import BundleHeader

#: Archs whose dense decoder the reference backend implements.
SUPPORTED_ARCHS = frozenset({"llama", "qwen", "qwen2", "qwen3"})

# Archs whose state is (partly) recurrent: a rejected draft cannot be cut off it.
_RECURRENT_ARCHS = frozenset(
    {
        "mamba",
        "mamba2",
        "rwkv",
        "rwkv6",
        "rwkv7",
        "jamba",
        "bamba",
        "zamba",
        "zamba2",
        "falcon_h1",
        "nemotron_h",
        "granitemoehybrid",
        "lfm2",
        "plamo2",
        "recurrentgemma",
        "qwen3_next",
    }
)
_ATTENTION_LAYER_TYPES = frozenset({"full_attention", "attention", "sliding_attention"})


def cut_refusal(header: BundleHeader) -> str | None:
    """Why this model's KV cannot be cut back to any length (phrased after "this model's …"),
    or None when it can."""
    config = header.raw.get("config")
    layer_types = config.get("layer_types") if isinstance(config, Mapping) else None
    hybrid = isinstance(layer_types, list) and any(
        isinstance(kind, str) and kind not in _ATTENTION_LAYER_TYPES for kind in layer_types
    )
    if header.arch.lower() in _RECURRENT_ARCHS or hybrid:
        return "recurrent state cuts only at its head"
    return None


@dataclass(frozen=True, slots=True)
class ModelConfig:
    arch: str
    hidden_size: int
    vocab_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool

    @classmethod
    def from_header(cls, header: BundleHeader, shown: str) -> ModelConfig:
        """The config of a bundle the reference backend can run, else one BundleError."""
        arch = header.arch.lower()
        if cut_refusal(header) is not None:
            raise BundleError(
                f"{shown}: arch {header.arch} keeps recurrent state, which the reference "
                "backend does not implement (it runs dense llama and qwen models)"
            )
        if arch not in SUPPORTED_ARCHS:
            raise BundleError(
                f"{shown}: arch {header.arch or '(none)'} is not one the reference backend runs "
                f"({', '.join(sorted(SUPPORTED_ARCHS))})"
            )
        raw = header.raw.get("config")
        config: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        scaling = config.get("rope_scaling")
        if scaling not in (None, {}):
            kind = (
                scaling.get("rope_type", scaling.get("type"))
                if isinstance(scaling, Mapping)
                else scaling
            )
            raise BundleError(
                f"{shown}: config.rope_scaling ({kind}) is not implemented by the reference backend"
            )
        if config.get("use_sliding_window") is True:
            raise BundleError(
                f"{shown}: config.use_sliding_window is on; the reference backend attends to the "
                "whole context and would compute another model"
            )
        read = ConfigReader(shown, config)
        hidden = read.count("hidden_size")
        heads = read.count("num_attention_heads")
        kv_heads = read.count("num_key_value_heads", heads)
        head_dim = read.count("head_dim", hidden // heads)
        if heads % kv_heads:
            raise BundleError(
                f"{shown}: config.num_attention_heads ({heads}) is not a multiple of "
                f"config.num_key_value_heads ({kv_heads})"
            )
        if head_dim % 2:
            raise BundleError(f"{shown}: config.head_dim ({head_dim}) must be even for RoPE")
        return cls(
            arch=arch,
            hidden_size=hidden,
            vocab_size=read.count("vocab_size"),
            num_layers=read.count("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=read.count("intermediate_size"),
            rms_norm_eps=read.number("rms_norm_eps", 1e-6),
            rope_theta=read.number("rope_theta", 10000.0),
            tie_word_embeddings=read.flag("tie_word_embeddings", False),
        )


class ConfigReader:
    """Reads a header's `config` keys; a missing or wrong value is one BundleError naming it."""

    def __init__(self, shown: str, config: Mapping[str, Any]) -> None:
        self._shown, self._config = shown, config

    def count(self, key: str, default: int | None = None) -> int:
        value = self._config.get(key, default)
        if value is None:
            raise BundleError(f"{self._shown}: the header's config has no {key}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BundleError(f"{self._shown}: config.{key} must be a positive integer")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BundleError(f"{self._shown}: config.{key} must be a number")
        if not math.isfinite(value) or value <= 0:
            raise BundleError(f"{self._shown}: config.{key} must be finite and positive")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self._config.get(key, default)
        if not isinstance(value, bool):
            raise BundleError(f"{self._shown}: config.{key} must be true or false")
        return value
