"""The demo model served from its widened copy (Q5_0 as Q8_0) computes the original's logits.

Bit for bit, in a prefill, in one-row decoding and in a verify step of several lanes: the
widened file changes how llama.cpp stores 81 of the model's tensors, never a value
(ADR 0018). The loader is the one `superfluid serve` gets from the composition root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from superfluid.adapters.llamacpp.gguf_layout import Q5_0, Q8_0, read_layout
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime
from superfluid.application.ports import Feed
from superfluid.entrypoints.container import runtime_loaders_for

pytestmark = pytest.mark.slow

TEXT = (
    "The harbour committee met on Tuesday. Members asked how the new quay would change the"
    " tides, who would pay for dredging, and whether the fleet could keep its moorings. "
)


def trace(rt: LlamaCppRuntime) -> Iterator[np.ndarray]:
    """Every logits row of: two prefills, eight greedy one-row steps, a two-lane verify step."""
    prompts = [
        rt.tokenize(TEXT * 6, add_special=True),
        rt.tokenize(TEXT[40:] * 5, add_special=True),
    ]
    lanes = [rt.new_sequence() for _ in prompts]
    for lane, prompt in zip(lanes, prompts, strict=True):
        (row,) = rt.step([Feed(lane, prompt, 0)])
        yield row
    held = [len(p) for p in prompts]
    token = int(np.argmax(row))
    for _ in range(8):
        (row,) = rt.step([Feed(lanes[1], [token], held[1])])
        held[1] += 1
        token = int(np.argmax(row))
        yield row
    draft = prompts[0][5:17]
    for rows in rt.step(
        [Feed(s, draft, n, all_rows=True) for s, n in zip(lanes, held, strict=True)]
    ):
        yield from rows


def test_the_widened_copy_computes_the_original_logits_bit_for_bit(demo_gguf, tmp_path):
    cache = tmp_path / "weights"
    widened_loader = runtime_loaders_for(cache)["llamacpp"]
    plain_loader = runtime_loaders_for(None)["llamacpp"]

    with widened_loader(demo_gguf, ctx_size=512, max_lanes=2) as widened:
        assert isinstance(widened, LlamaCppRuntime)
        assert widened.path == demo_gguf and widened.weights_path.parent == cache
        widened_rows = [np.array(r, copy=True) for r in trace(widened)]
    with plain_loader(demo_gguf, ctx_size=512, max_lanes=2) as plain:
        assert isinstance(plain, LlamaCppRuntime) and plain.weights_path == demo_gguf
        plain_rows = [np.array(r, copy=True) for r in trace(plain)]

    assert len(widened_rows) == len(plain_rows) == 2 + 8 + 24
    for i, (a, b) in enumerate(zip(widened_rows, plain_rows, strict=True)):
        assert a.tobytes() == b.tobytes(), f"logits row {i} differs"
    with Path(widened.weights_path).open("rb") as f:
        types = {t.type for t in read_layout(f).tensors}
    assert Q8_0 in types and Q5_0 not in types


def test_a_damaged_copy_in_the_cache_serves_the_file_with_a_warning(demo_gguf, tmp_path, caplog):
    cache = tmp_path / "weights"
    loader = runtime_loaders_for(cache)["llamacpp"]
    with loader(demo_gguf, ctx_size=64, max_lanes=1) as first:
        copy = Path(first.weights_path)
    assert copy.parent == cache
    copy.write_bytes(copy.read_bytes()[: 1 << 20])  # cut short, same name

    with loader(demo_gguf, ctx_size=64, max_lanes=1) as rt:
        assert isinstance(rt, LlamaCppRuntime) and rt.weights_path == demo_gguf
    assert "does not load; serving the file" in caplog.text
