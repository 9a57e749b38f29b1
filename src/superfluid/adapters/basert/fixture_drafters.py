"""Fixture heads for the tiny target, fitted in closed form against it (a second or so).

How the heads are made useful without training: run the target over the fixture corpus and over
its own greedy continuations of corpus snippets, keep its hidden states at every tap, and fit each
head's linear parts by ridge least squares (numpy, float64, deterministic; one normal-equations
matrix shared wherever the inputs are shared) to predict the target's final hidden state one or
more positions ahead — the quantity its output head turns into the next token. Everything else in a head is chosen so that the fitted map is what the head computes:

- MTP: eh_proj is fitted to the target's residual stream entering its last layer at the next
  position; the head's decoder block is a copy of that last layer, attending over the head's own
  cache of such estimates, and the target's final norm and head finish the job.
- EAGLE-3: fc fuses taps 1..3 into an estimate of the final hidden state; its layer's attention is
  built to look (almost) only at the current position — queries equal keys, per-head RMSNorm
  with a large weight, so a position's own score is the largest by far — and its values carry
  [embed_norm(e); hidden_norm(f)] unchanged, so o_proj applies the fitted map; its MLP is zero
  (down_proj = 0), and its lm_head is a copy of the target's.
- DFlash: the same fc, and one fitted block_proj per block position (a token j+1 ahead).
- DSpark: the DFlash backbone refitted jointly with a rank-r Markov code of the previous token
  (the target's normalised embedding through a seeded random projection to r dimensions).
- The poor DFlash drafter: the same shapes, seeded random weights — a drafter that fits the
  target and almost never agrees with it, for the yield floor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from superfluid.adapters.basert.bundle import Bundle
from superfluid.adapters.basert.model import DenseModel, Pass

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

MTP_NAME = "Tiny-Qwen3-64-MTP-F32.base"
EAGLE3_NAME = "Tiny-Qwen3-64-EAGLE3.base"
DFLASH_NAME = "Tiny-Qwen3-64-DFlash.base"
DSPARK_NAME = "Tiny-Qwen3-64-DSpark.base"
POOR_NAME = "Tiny-Qwen3-64-Poor-DFlash.base"

#: Taps the fixture drafters read: the residual streams entering layers 1, 2 and 3.
TAPS = (1, 2, 3)
DFLASH_BLOCK = 4
DSPARK_BLOCK = 6
MARKOV_RANK = 32
#: DSpark stops a block where its own top probability falls below this. Low, because a verify
#: row costs about a sixth of a step on the reference backend: stopping early pays only where the
#: drafter is nearly guessing (0.05 accepted 79% of drafts but ran slower than 0.02 at 63%).
CONFIDENCE = 0.02
#: EAGLE-3's layer: 4 heads of 32, so its values can carry [e; f] (2 × 64) through unchanged.
EAGLE_HEADS = 4
EAGLE_HEAD_DIM = 32
#: RMSNorm weight on queries and keys: a position's own score beats a near-twin's by thousands.
SELF_FOCUS = 12.0
#: Greedy tokens generated from each corpus snippet, and how snippets are cut from the corpus.
GENERATED = 32
SNIPPET_STRIDE = 12
#: Positions fitted: those with this many tokens after the next one (the deepest block).
SPAN = max(DFLASH_BLOCK, DSPARK_BLOCK)
RIDGE = 1e-2
EPS = 1e-6


@dataclass(frozen=True, slots=True)
class _Window:
    """Every position t of the collected sequences with SPAN tokens after its next one."""

    now: F64  # [m, layers + 1, hidden]: the taps at t
    tokens: npt.NDArray[np.int64]  # [m, SPAN + 1]: x_{t+1} .. x_{t+1+SPAN}
    final: F64  # [m, SPAN, hidden]: the final hidden state at t+1 .. t+SPAN
    entering_last: F64  # [m, hidden]: the stream entering the last layer at t+1


def _window(sequences: list[list[int]], taps: list[F64]) -> _Window:
    now, tokens, final, entering = [], [], [], []
    for ids, rows in zip(sequences, taps, strict=True):
        m = len(ids) - 1 - SPAN
        if m <= 0:
            continue
        now.append(rows[:m])
        tokens.append(np.stack([ids[1 + j : 1 + j + m] for j in range(SPAN + 1)], axis=1))
        final.append(np.stack([rows[1 + j : 1 + j + m, -1] for j in range(SPAN)], axis=1))
        entering.append(rows[1 : 1 + m, -2])
    return _Window(
        np.concatenate(now),
        np.concatenate(tokens),
        np.concatenate(final),
        np.concatenate(entering),
    )


def write_drafter_fixtures(
    directory: Path,
    *,
    target: Path,
    tensors: Mapping[str, F32],
    config: Mapping[str, Any],
    tokenizer: Tokenizer,
    corpus: str,
    seed: int,
    write: WriteBundle,
) -> dict[str, Path]:
    """Fit and write the fixture heads for the target bundle at `target` (whose tensors and
    config are given too); returns their paths by role."""
    with Bundle.open(target) as bundle:
        model = DenseModel.from_bundle(bundle, max_positions=512)
    data = _collect(model, tokenizer, corpus)
    now, nxt = data.now, data.tokens[:, 0]
    embed = model.embedding.astype(np.float64)
    hidden, layers = model.config.hidden_size, model.config.num_layers
    ones = np.ones(hidden, dtype=np.float32)
    tokenizer_json = tokenizer.to_str()
    paths = {
        role: directory / name
        for role, name in (
            ("mtp_target", MTP_NAME),
            ("eagle3", EAGLE3_NAME),
            ("dflash", DFLASH_NAME),
            ("dspark", DSPARK_NAME),
            ("poor_dflash", POOR_NAME),
        )
    }

    def save(role: str, arch: str, cfg: Mapping[str, Any], weights: Mapping[str, F32]) -> None:
        write(paths[role], arch=arch, config=cfg, tensors=weights, tokenizer_json=tokenizer_json)

    # MTP, inside a copy of the target: [e(x_{t+1}); h_t] -> the stream entering the last layer
    # at t+1, which the copied last layer then finishes.
    inputs = np.concatenate([_rms(embed[nxt]), _rms(now[:, -1])], axis=1)
    eh_proj = _ridge(inputs, data.entering_last)
    mtp = {f"mtp.{name}": value for name, value in _last_layer(tensors, layers).items()}
    mtp["mtp.embed_norm.weight"] = mtp["mtp.hidden_norm.weight"] = ones
    mtp["mtp.eh_proj.weight"] = _f32(eh_proj.T)
    mtp["mtp.norm.weight"] = tensors["norm.weight"]
    write(
        paths["mtp_target"],
        arch="qwen3",
        config=config,
        tensors={**tensors, **mtp},
        tokenizer_json=tokenizer_json,
        extra={"speculator": {"config": {"kind": "mtp", "num_layers": 1}}},
    )

    # What the other heads share: fc · [h1; h2; h3] ≈ the final hidden state at t.
    fc = _ridge(_side_by_side(now), _rms(now[:, -1]))
    common = {
        "fc.weight": _f32(fc.T),
        "embed_norm.weight": ones,
        "hidden_norm.weight": ones,
        "norm.weight": ones,
    }
    shape = {
        "hidden_size": hidden,
        "vocab_size": model.config.vocab_size,
        "num_hidden_layers": 1,
        "num_target_layers": layers,
        "target_layer_ids": list(TAPS),
        "rms_norm_eps": EPS,
    }

    # EAGLE-3: out = f + o_proj · [e; f], the values passed through a self-focused attention.
    fused = _mm(_side_by_side(now), fc)
    base = _inputs(embed, nxt, fused)
    gram = _gram(base, base)  # shared by EAGLE-3, DFlash and DSpark's backbone part
    goals = [_rms(data.final[:, j]) for j in range(SPAN)]
    mix = _solve_spd(gram, _gram(base, goals[0] - fused))
    eagle = {**common, **_eagle_layer(mix, hidden), "lm_head.weight": tensors["lm_head.weight"]}
    eagle_config = {
        **shape,
        "num_attention_heads": EAGLE_HEADS,
        "num_key_value_heads": EAGLE_HEADS,
        "head_dim": EAGLE_HEAD_DIM,
        "intermediate_size": 2 * hidden,
        "rope_theta": config["rope_theta"],
    }
    save("eagle3", "eagle3", eagle_config, eagle)

    # DFlash: one fitted projection per block position (all in one solve).
    stacked = _solve_spd(gram, _gram(base, np.concatenate(goals[:DFLASH_BLOCK], axis=1)))
    flash = [stacked[:, j * hidden : (j + 1) * hidden].T for j in range(DFLASH_BLOCK)]
    # DSpark: the backbone refitted jointly with the Markov code of the token before each
    # position (x_{t+1+j}: the pending token for j = 0, else a draft token).
    code = _markov_code(embed)
    spark, markov = [], []
    for j in range(DSPARK_BLOCK):
        before = code[data.tokens[:, j]]
        cross = _gram(base, before)
        joint_gram = np.block([[gram, cross], [cross.T, _gram(before, before)]])
        joint = _solve_spd(
            joint_gram, np.concatenate([_gram(base, goals[j]), _gram(before, goals[j])])
        ).T
        spark.append(joint[:, : 2 * hidden])
        markov.append(joint[:, 2 * hidden :])
    flash_config = {**shape, "block_size": DFLASH_BLOCK}
    save("dflash", "dflash", flash_config, {**common, "block_proj.weight": _f32(np.stack(flash))})
    spark_config = {
        **shape,
        "block_size": DSPARK_BLOCK,
        "markov_rank": MARKOV_RANK,
        "confidence_threshold": CONFIDENCE,
    }
    spark_tensors = {
        **common,
        "block_proj.weight": _f32(np.stack(spark)),
        "markov.embed.weight": _f32(code),
        "markov.proj.weight": _f32(np.stack(markov)),
    }
    save("dspark", "dspark", spark_config, spark_tensors)

    # The poor drafter: DFlash's shapes, seeded random weights.
    rng = np.random.default_rng(seed + 1)
    poor = {
        **common,
        "fc.weight": _f32(rng.standard_normal((hidden, len(TAPS) * hidden))),
        "block_proj.weight": _f32(rng.standard_normal((DFLASH_BLOCK, hidden, 2 * hidden))),
    }
    save("poor_dflash", "dflash", flash_config, poor)
    return paths


class WriteBundle(Protocol):
    """fixtures.write_model_bundle, passed in so that the two modules do not import each other."""

    def __call__(
        self,
        path: Path,
        *,
        arch: str,
        config: Mapping[str, Any],
        tensors: Mapping[str, F32],
        tokenizer_json: str,
        extra: Mapping[str, Any] | None = None,
    ) -> None: ...


def _collect(model: DenseModel, tokenizer: Tokenizer, corpus: str) -> _Window:
    """The corpus paragraphs and the target's greedy continuations of snippets of them, with
    the target's taps at every position (batched: one forward per generated token)."""
    paragraphs = [tokenizer.encode(part).ids for part in corpus.split("\n\n")]
    snippets = [
        ids[max(0, start - 8) : start + 4]
        for ids in paragraphs
        for start in range(0, len(ids) - 4, SNIPPET_STRIDE)
    ]
    layers = model.config.num_layers
    every = range(layers + 1)
    caches = [model.new_cache(512) for _ in snippets]
    sequences = [list(ids) for ids in snippets]
    rows: list[list[F32]] = [[] for _ in snippets]
    feeds: list[Sequence[int]] = list(snippets)
    # The taps of each fed token come with the forward that generates the next one.
    for _ in range(GENERATED):
        out = model.forward([Pass(c, f) for c, f in zip(caches, feeds, strict=True)], taps=every)
        for tokens, kept, logits, tapped in zip(
            sequences, rows, out.logits, out.hidden, strict=True
        ):
            tokens.append(int(np.argmax(logits[-1])))
            kept.append(np.stack([tapped[i] for i in every], axis=1))
        feeds = [tokens[-1:] for tokens in sequences]
    # The last generated token was never fed: its taps are not needed (nothing follows it).
    sequences = [tokens[:-1] for tokens in sequences] + paragraphs
    out = model.forward([Pass(model.new_cache(512), ids) for ids in paragraphs], taps=every)
    rows += [[np.stack([tapped[i] for i in every], axis=1)] for tapped in out.hidden]
    taps = [np.concatenate(kept).astype(np.float64) for kept in rows]
    return _window(sequences, taps)


def _rms(x: F64) -> F64:
    """RMSNorm with a unit weight, as the heads apply it."""
    out: F64 = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)
    return out


def _ridge(x: F64, y: F64) -> F64:
    """W [in, out] minimising |x W - y|² + RIDGE |W|², by the normal equations."""
    return _solve_spd(_gram(x, x), _gram(x, y))


def _gram(x: F64, y: F64) -> F64:
    """xᵀ y, with RIDGE added on the diagonal when y is x (the normal equations' matrix)."""
    out: F64 = np.einsum("ni,nj->ij", x, y)
    if y is x:
        out += RIDGE * np.eye(x.shape[1])
    return out


def _mm(a: F64, b: F64) -> F64:
    """a @ b without BLAS (see _solve_spd)."""
    out: F64 = np.einsum("ij,jk->ik", a, b)
    return out


def _solve_spd(a: F64, b: F64) -> F64:
    """a⁻¹ b for a symmetric positive definite `a`, by a Cholesky factorisation in numpy.

    Why not np.linalg.solve: a multithreaded BLAS can spend seconds on a 200 × 200 system when
    the machine's cores are busy (its threads wait on one another); these systems are small,
    so plain loops over vectors (and einsum, which does not call BLAS) stay fast everywhere.
    """
    n = a.shape[0]
    rest = a.copy()
    lower = np.zeros_like(a)
    for k in range(n):
        pivot = np.sqrt(rest[k, k])
        column = rest[k + 1 :, k] / pivot
        lower[k, k], lower[k + 1 :, k] = pivot, column
        rest[k + 1 :, k + 1 :] -= np.multiply.outer(column, column)
    z = np.zeros_like(b)
    for k in range(n):  # lower · z = b
        z[k] = (b[k] - np.einsum("i,ij->j", lower[k, :k], z[:k])) / lower[k, k]
    w = np.zeros_like(b)
    for k in reversed(range(n)):  # lowerᵀ · w = z
        w[k] = (z[k] - np.einsum("i,ij->j", lower[k + 1 :, k], w[k + 1 :])) / lower[k, k]
    return w


def _side_by_side(taps: F64) -> F64:
    """The drafters' taps at each position, side by side: [m, len(TAPS) * hidden]."""
    out: F64 = taps[:, list(TAPS)].reshape(taps.shape[0], -1)
    return out


def _inputs(embed: F64, tokens: npt.NDArray[np.int64], fused: F64) -> F64:
    """[embed_norm(e(x_{t+1})); hidden_norm(f)], as EAGLE-3's layer and the block drafters
    read it."""
    return np.concatenate([_rms(embed[tokens]), _rms(fused)], axis=1)


def _last_layer(tensors: Mapping[str, F32], layers: int) -> dict[str, F32]:
    """The target's last decoder layer, renamed `layers.0.*`."""
    prefix = f"layers.{layers - 1}."
    return {
        "layers.0." + name.removeprefix(prefix): value
        for name, value in tensors.items()
        if name.startswith(prefix)
    }


def _eagle_layer(mix: F64, hidden: int) -> dict[str, F32]:
    """EAGLE-3's layer, built so that it adds mix · [e; f] to its residual f (module docstring).

    Queries and keys are the same projection of the layer's input, RMS-normed per head with a
    large weight: a position's own score is then the largest there is (Cauchy-Schwarz; the
    rotary rotation of other positions only lowers theirs), by a margin that leaves the others
    no weight. Values are the input itself, so the attention hands o_proj [e; f] back.
    """
    width = 2 * hidden
    # Any full-rank projection will do: queries equal keys whatever it is.
    project = np.random.default_rng(0).standard_normal((width, width)) / np.sqrt(width)
    heads, head_dim = EAGLE_HEADS, EAGLE_HEAD_DIM
    assert heads * head_dim == width, "the values must carry [e; f] whole"
    return {
        "layers.0.q_proj.weight": _f32(project),
        "layers.0.k_proj.weight": _f32(project),
        "layers.0.v_proj.weight": np.eye(width, dtype=np.float32),
        "layers.0.q_norm.weight": np.full(head_dim, SELF_FOCUS, dtype=np.float32),
        "layers.0.k_norm.weight": np.full(head_dim, SELF_FOCUS, dtype=np.float32),
        "layers.0.o_proj.weight": _f32(mix.T),
        "layers.0.mlp_norm.weight": np.ones(hidden, dtype=np.float32),
        "layers.0.gate_proj.weight": np.zeros((width, hidden), dtype=np.float32),
        "layers.0.up_proj.weight": np.zeros((width, hidden), dtype=np.float32),
        "layers.0.down_proj.weight": np.zeros((hidden, width), dtype=np.float32),
    }


def _markov_code(embed: F64) -> F64:
    """Each token's Markov code: its normalised embedding through a seeded random projection
    to MARKOV_RANK dimensions ([vocab, rank])."""
    projection = np.random.default_rng(1).standard_normal((embed.shape[1], MARKOV_RANK))
    return _mm(_rms(embed), projection / np.sqrt(MARKOV_RANK))


def _f32(x: npt.ArrayLike) -> F32:
    return np.ascontiguousarray(x, dtype=np.float32)
