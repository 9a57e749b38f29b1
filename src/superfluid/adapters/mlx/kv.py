"""Which mlx-lm caches cut back exactly, and cutting one with proof that it held.

A speculative round feeds k draft tokens and keeps only the accepted ones, so a lane's cache
must drop its last positions exactly. mlx-lm's `trim_prompt_cache` is not proof of that:

- a `RotatingKVCache` (sliding window) reports itself trimmable only while its window has not
  filled; past that `trim_prompt_cache` trims nothing and says nothing;
- a `ConcatenateKVCache` lowers its offset on trim but keeps the keys, so the next step
  concatenates onto positions that should be gone;
- recurrent state (`ArraysCache`: Mamba, gated delta nets) has no positions to drop at all.

So a model's caches are judged by kind at load (an allow-list: what is not known to cut
exactly is refused in words the user can act on), and every cut checks trimmability first and
each layer's offset after.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    can_trim_prompt_cache,
    trim_prompt_cache,
)

# Caches whose trim drops positions for good: the next write lands at the new offset and
# attention reads keys only up to it.
_EXACT = (KVCache, QuantizedKVCache)


class CutFailed(Exception):
    """A cache that did not (or would not) cut back to the length asked."""


def layers(cache: Sequence[Any]) -> Iterator[Any]:
    """Every per-layer cache, looking inside `CacheList` groups."""
    for entry in cache:
        if isinstance(entry, CacheList):
            yield from layers(entry.caches)
        else:
            yield entry


def cut_refusal(cache: Sequence[Any], *, context_size: int) -> str | None:
    """None if every layer cuts back exactly within `context_size` positions, else why not.

    The reason is phrased to follow "this model's …" (Capabilities.cut_refusal).
    """
    for entry in layers(cache):
        name = type(entry).__name__
        if isinstance(entry, RotatingKVCache):
            # A window longer than the context never fills, never rotates, and trims exactly.
            if entry.max_size > context_size:
                continue
            return (
                f"sliding-window cache ({name}) cuts only at its head once its"
                f" {entry.max_size}-token window fills"
            )
        if isinstance(entry, ArraysCache):
            return f"recurrent state ({name}) cuts only at its head"
        if isinstance(entry, ChunkedKVCache):
            return f"chunked-attention cache ({name}) cuts only at its head"
        if not isinstance(entry, _EXACT):
            return f"cache ({name}) is not one the mlx runtime knows to cut back exactly"
    return None


def offsets(cache: Sequence[Any]) -> list[int]:
    """Each layer's position count; a layer that keeps none cannot be checked, so it fails."""
    found: list[int] = []
    for entry in layers(cache):
        offset = getattr(entry, "offset", None)
        if not isinstance(offset, int):
            raise CutFailed(f"its {type(entry).__name__} keeps no position count to check")
        found.append(offset)
    return found


def cut_exactly(cache: Sequence[Any], *, held: int, length: int) -> None:
    """Drop positions `length..held` from every layer, or raise CutFailed saying why not.

    Checked before: every layer is trimmable now (a sliding window that has filled is not) and
    holds `held` positions. Checked after: every layer holds `length`.
    """
    if not can_trim_prompt_cache(list(cache)):
        stuck = sorted({type(e).__name__ for e in layers(cache) if not e.is_trimmable()})
        raise CutFailed(f"its {', '.join(stuck) or 'cache'} cannot be trimmed now")
    before = offsets(cache)
    if any(offset != held for offset in before):
        raise CutFailed(f"its layers hold {sorted(set(before))} positions, not {held}")
    trim_prompt_cache(list(cache), held - length)
    after = offsets(cache)
    if any(offset != length for offset in after):
        raise CutFailed(f"after trimming, its layers hold {sorted(set(after))} positions")
