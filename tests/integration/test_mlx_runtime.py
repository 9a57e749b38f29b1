"""The MLX runtime on tiny random models: exact speculation, refusals, cuts, text.

Outside CI a machine without the mlx extra skips this module; in CI it fails (nothing may hide).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

if not os.environ.get("CI"):
    pytest.importorskip("mlx_lm", reason="needs the mlx extra (pip install -e '.[mlx]')")

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, ConcatenateKVCache, KVCache, RotatingKVCache

from superfluid.adapters.mlx import ModelLoadError
from superfluid.adapters.mlx.kv import CutFailed, cut_exactly, cut_refusal
from superfluid.adapters.mlx.runtime import MlxRuntime
from superfluid.application.events import Committed
from superfluid.application.executor import Executor
from superfluid.application.ports import Capabilities, Feed, Logits, RuntimeFault
from superfluid.application.registration import register_prompt_lookup_runtime
from superfluid.application.requests import GenerationRequest
from superfluid.domain.directive import parse_directive
from superfluid.domain.errors import DirectiveError
from superfluid.domain.gates.policy import SpecPolicy
from superfluid.domain.prompt_lookup import PromptLookupDrafter
from superfluid.domain.sampling import SamplingParams
from superfluid.domain.spec_settings import SpecSettings
from superfluid.domain.tool_calls.families import ToolFamily
from tests.integration.mlx_models import write_tiny_llama

GREEDY = SamplingParams(temperature=0.0)
# Sampling among a few tokens repeats itself often enough for prompt-lookup to draft.
SAMPLED = [SamplingParams(temperature=0.8, top_k=3, seed=seed) for seed in (1, 2)]
# A random model copies and loops; a prompt that repeats gives prompt-lookup drafts at once.
REPEATS = "the quick brown fox jumps over the lazy dog. " * 6
OPEN = "A lighthouse keeper writes in a diary"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("mlx") / "tiny-llama")


@pytest.fixture(scope="module")
def sliding_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("mlx") / "tiny-swa", sliding_window=8)


@pytest.fixture(scope="module")
def runtime(tiny_dir: Path) -> MlxRuntime:
    with MlxRuntime.load(tiny_dir, ctx_size=256, max_sequences=2) as loaded:
        yield loaded


class RecordingRuntime:
    """The real runtime, with every step's feeds written down."""

    def __init__(self, inner: MlxRuntime) -> None:
        self._inner = inner
        self.steps: list[list[Feed]] = []
        self.cuts: list[tuple[int, int]] = []

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        self.steps.append(list(feeds))
        return self._inner.step(feeds)

    def cut(self, seq: int, length: int) -> None:
        self.cuts.append((seq, length))
        self._inner.cut(seq, length)


def always_drafting(depth: int = 4) -> SpecPolicy:
    settings = SpecSettings(throughput_gate=False, min_yield=0.0, adaptive=False)
    return SpecPolicy(settings, default_depth=depth, depth_cap=depth)


def generate(
    runtime, prompts, *, speculate, max_tokens=24, params=GREEDY, lanes=1
) -> tuple[list[list[int]], list[Committed]]:
    executor = Executor(
        runtime,
        max_lanes=lanes,
        clock=time.perf_counter,
        drafter=PromptLookupDrafter() if speculate else None,
        policy=always_drafting() if speculate else None,
    )
    requests = [
        GenerationRequest(runtime.tokenize(p, add_special=True), params, n)
        for p, n in zip(prompts, _as_list(max_tokens, len(prompts)), strict=True)
    ]
    for request in requests:
        executor.submit(request)
    out: dict[int, list[int]] = {r.id: [] for r in requests}
    last: dict[int, Committed] = {}
    while not executor.idle:
        for event in executor.tick():
            out[event.request_id].extend(event.tokens)
            if event.finish is not None:
                last[event.request_id] = event
    return [out[r.id] for r in requests], [last[r.id] for r in requests]


def _as_list(value: int | list[int], n: int) -> list[int]:
    return value if isinstance(value, list) else [value] * n


# -- exactness through the executor ---------------------------------------------------------


def test_greedy_speculation_equals_plain_greedy_token_for_token(runtime):
    recorder = RecordingRuntime(runtime)
    (plain,), _ = generate(runtime, [REPEATS], speculate=False, max_tokens=32)
    (spec,), (last,) = generate(recorder, [REPEATS], speculate=True, max_tokens=32)
    assert spec == plain
    assert last.spec.proposed > 0
    assert last.spec.accepted > 0, "a cycling model should accept some drafts"
    assert recorder.cuts, "no draft was rejected, so no cut was exercised"


def test_seeded_sampling_with_speculation_equals_plain_sampling(runtime):
    proposed = accepted = 0
    for params in SAMPLED:
        (plain,), _ = generate(runtime, [REPEATS], speculate=False, max_tokens=24, params=params)
        (spec,), (last,) = generate(
            runtime, [REPEATS], speculate=True, max_tokens=24, params=params
        )
        assert spec == plain, f"seed {params.seed}"
        proposed += last.spec.proposed
        accepted += last.spec.accepted
    assert proposed > 0
    assert accepted > 0


def test_two_decoding_lanes_decode_plainly_and_one_left_alone_drafts(runtime):
    recorder = RecordingRuntime(runtime)
    outs, _ = generate(recorder, [REPEATS, REPEATS], speculate=True, max_tokens=[6, 24], lanes=2)
    plain, _ = generate(runtime, [REPEATS, REPEATS], speculate=False, max_tokens=[6, 24], lanes=2)
    assert outs == plain
    # Prompts fit one prefill chunk, which starts at 0: any other feed is a decoding lane's.
    decoding_together = [s for s in recorder.steps if len(s) == 2 and all(f.start for f in s)]
    assert decoding_together, "the two lanes never decoded in one step"
    assert not any(f.all_rows for s in decoding_together for f in s)
    alone = [s for s in recorder.steps if len(s) == 1]
    assert any(s[0].all_rows for s in alone), "the lane left alone never drafted"


# -- a sliding window that fills refuses; one longer than the context cuts -------------------


def test_a_sliding_window_model_refuses_prompt_lookup(sliding_dir):
    with MlxRuntime.load(sliding_dir, ctx_size=256, max_sequences=2) as rt:
        caps = rt.capabilities
    assert caps.cut_refusal == (
        "sliding-window cache (RotatingKVCache) cuts only at its head once its 8-token window fills"
    )
    assert caps.strategies == ()
    assert not caps.truncate_partial
    explicit = parse_directive("prompt-lookup", home=None, is_file=lambda _: False)
    with pytest.raises(DirectiveError) as refused:
        register_prompt_lookup_runtime(explicit, caps, "tiny-swa")
    assert refused.value.message == (
        "--speculate prompt-lookup: prompt-lookup cuts a rejected draft off, and this model's"
        " sliding-window cache (RotatingKVCache) cuts only at its head once its 8-token window fills"
    )
    auto = register_prompt_lookup_runtime(
        parse_directive("auto", home=None, is_file=lambda _: False), caps, "tiny-swa"
    )
    assert auto.drafter is None
    assert auto.log == (
        "speculation: auto: tiny-swa on the mlx runtime verifies no drafts (sliding-window cache"
        " (RotatingKVCache) cuts only at its head once its 8-token window fills) — decoding plainly",
    )


def test_a_sliding_window_model_decodes_plainly_and_refuses_cuts(sliding_dir):
    with MlxRuntime.load(sliding_dir, ctx_size=256, max_sequences=1) as rt:
        recorder = RecordingRuntime(rt)
        # The executor drops a drafter for a model that cannot cut: no step verifies.
        (out,), _ = generate(recorder, [REPEATS], speculate=True, max_tokens=8)
        assert len(out) == 8
        assert not any(f.all_rows for s in recorder.steps for f in s)
        seq = rt.new_sequence()
        rt.step([Feed(seq, rt.tokenize(REPEATS, add_special=True), 0)])
        with pytest.raises(RuntimeFault, match="RotatingKVCache"):
            rt.cut(seq, 3)


def test_a_sliding_window_longer_than_the_context_cuts_exactly(tmp_path):
    window_dir = write_tiny_llama(tmp_path / "tiny-wide-swa", sliding_window=256)
    with MlxRuntime.load(window_dir, ctx_size=200, max_sequences=1) as rt:
        assert rt.capabilities.cut_refusal is None
        assert rt.capabilities.strategies == ("prompt-lookup",)
        recorder = RecordingRuntime(rt)
        (plain,), _ = generate(rt, [REPEATS], speculate=False, max_tokens=20)
        (spec,), (last,) = generate(recorder, [REPEATS], speculate=True, max_tokens=20)
    assert spec == plain
    assert last.spec.proposed > 0
    assert recorder.cuts, "no rejected draft was cut off the rotating cache"


# -- cutting --------------------------------------------------------------------------------


def test_a_cut_leaves_the_cache_as_if_the_draft_was_never_fed(runtime):
    prompt = runtime.tokenize(OPEN, add_special=True)
    drafted, fresh = runtime.new_sequence(), runtime.new_sequence()
    try:
        runtime.step([Feed(drafted, prompt, 0)])
        runtime.step([Feed(fresh, prompt, 0)])
        rows = runtime.step([Feed(drafted, [11, 12, 13, 14], len(prompt), all_rows=True)])[0]
        assert rows.shape == (4, runtime.pieces.size)
        runtime.cut(drafted, len(prompt) + 1)
        assert runtime.length(drafted) == len(prompt) + 1
        after_cut = runtime.step([Feed(drafted, [40], len(prompt) + 1)])[0]
        clean = runtime.step([Feed(fresh, [11, 40], len(prompt))])[0]
        np.testing.assert_array_equal(after_cut, clean)
    finally:
        runtime.free_sequence(drafted)
        runtime.free_sequence(fresh)


def test_a_cut_out_of_range_is_refused(runtime):
    seq = runtime.new_sequence()
    try:
        runtime.step([Feed(seq, [1, 2, 3], 0)])
        with pytest.raises(RuntimeFault, match="holds 3 positions"):
            runtime.cut(seq, 4)
    finally:
        runtime.free_sequence(seq)


def kv(cache, positions: int) -> None:
    keys = mx.zeros((1, 1, positions, 4))
    cache.update_and_fetch(keys, keys)


def test_cutting_checks_trimmability_first_and_offsets_after():
    filled = RotatingKVCache(max_size=4)
    for _ in range(6):
        kv(filled, 1)
    # mlx-lm's trim would quietly trim nothing here.
    with pytest.raises(CutFailed, match="RotatingKVCache cannot be trimmed now"):
        cut_exactly([KVCache(), filled], held=6, length=5)
    young = RotatingKVCache(max_size=16)
    kv(young, 5)
    cut_exactly([young], held=5, length=3)  # a window that has not filled trims exactly
    assert young.offset == 3
    plain = KVCache()
    kv(plain, 5)
    with pytest.raises(CutFailed, match="hold \\[5\\] positions, not 6"):
        cut_exactly([plain], held=6, length=2)


def test_caches_that_do_not_cut_exactly_are_refused_in_words():
    assert cut_refusal([KVCache(), KVCache()], context_size=4096) is None
    assert cut_refusal([RotatingKVCache(max_size=8192)], context_size=4096) is None
    assert cut_refusal([KVCache(), ArraysCache(2)], context_size=64) == (
        "recurrent state (ArraysCache) cuts only at its head"
    )
    assert cut_refusal([ConcatenateKVCache()], context_size=64) == (
        "cache (ConcatenateKVCache) is not one the mlx runtime knows to cut back exactly"
    )


# -- the rest of the port -------------------------------------------------------------------


def test_the_capability_record_describes_a_one_lane_verifier(runtime):
    caps = runtime.capabilities
    assert (caps.runtime, caps.verify_rows, caps.verify_batches) == ("mlx", True, False)
    assert caps.cut_refusal is None and caps.strategies == ("prompt-lookup",)
    assert (caps.max_verify_rows, caps.context_size, caps.max_sequences) == (16, 256, 2)
    # config.json lists two ends: end of text and end of turn.
    assert caps.eos_tokens == frozenset(runtime.tokenize("<|eos|><|end|>", add_special=False))


def test_detokenizing_is_a_concatenation_of_pieces_and_round_trips_bytes(runtime):
    text = "Café 東京 🙂 def area(width, height):"
    tokens = runtime.tokenize(text, add_special=False)
    assert runtime.detokenize(tokens) == text.encode("utf-8")
    assert b"".join(runtime.detokenize([t]) for t in tokens) == text.encode("utf-8")
    split = len(tokens) // 2
    assert runtime.detokenize(tokens) == runtime.detokenize(tokens[:split]) + runtime.detokenize(
        tokens[split:]
    )
    # Special tokens are structure, not text.
    assert runtime.detokenize(runtime.tokenize("<|end|>", add_special=True)) == b""


def test_sentencepiece_pieces_spell_spaces_and_raw_bytes():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from superfluid.adapters.mlx.pieces import Pieces

    vocab = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    vocab += [(f"<0x{b:02X}>", -10.0) for b in range(256)]
    vocab += [("\u2581hello", -1.0), ("\u2581world", -1.0), ("\u2581", -2.0)]
    vocab += [(c, -3.0) for c in "naive"]
    spm = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    spm.pre_tokenizer = pre_tokenizers.Metaspace()
    spm.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=spm, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    pieces = Pieces(tokenizer, vocab_size=0)
    tokens = tokenizer.encode("hello naïve 東京 world", add_special_tokens=False)
    assert pieces.kind == "sentencepiece"
    # The word-start marker is a space, the first one too: pieces concatenate, never strip.
    assert pieces(tokens) == " hello naïve 東京 world".encode()
    assert pieces(tokenizer.encode("</s>", add_special_tokens=False)) == b""


def test_the_chat_prompt_uses_the_template_without_doubling_bos(runtime):
    text = runtime.chat_prompt([{"role": "user", "content": "hi"}])
    assert text == "<|user|>hi<|end|><|assistant|>"
    tokens = runtime.tokenize(text, add_special=True)
    assert tokens.count(runtime.tokenize("<|bos|>", add_special=False)[0]) == 1


def test_a_chat_template_file_replaces_the_template_and_can_take_tools(runtime, tmp_path):
    source = (
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>"
        "Call with <tool_call>.{% endif %}{% for m in messages %}<|{{ m.role }}|>"
        "{{ m.content }}<|end|>{% endfor %}<|assistant|>"
    )
    (tmp_path / "tools.jinja").write_text(source)
    own = runtime.chat_template
    assert runtime.tool_family is None  # the tiny model's own template shows no tools
    try:
        runtime.use_chat_template_file(str(tmp_path / "tools.jinja"))
        assert runtime.tool_family is ToolFamily.HERMES
        tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
        text = runtime.chat_prompt([{"role": "user", "content": "hi"}], [tool])
        assert text == "<tools>lookup</tools>Call with <tool_call>.<|user|>hi<|end|><|assistant|>"
    finally:
        runtime.chat_template = own


def test_a_path_that_is_not_a_local_directory_is_refused_without_the_hub(tmp_path):
    with pytest.raises(ModelLoadError, match="no such MLX model directory"):
        MlxRuntime.load("mlx-community/some-model-4bit")
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(ModelLoadError, match="mlx-lm cannot load this directory"):
        MlxRuntime.load(tmp_path)
