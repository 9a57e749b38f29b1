"""Tiny `.base` bundles for tests and demos of the basert runtime, written in a second or two.

`make_fixtures(directory)` writes:
- `Tiny-Qwen3-64-F32.base`: a qwen3 target (hidden 64, 4 layers, 4 heads, 2 KV heads,
  head_dim 16, q_norm/k_norm, untied head), f32;
- `Tiny-Qwen3-64-Draft.base`: its plain draft model — the target's embedding, first layer,
  final norm and head, nothing else — sharing the tokenizer;
- `tokenizer.json`: a byte-level BPE tokenizer (about 512 tokens, ChatML turn markers) trained
  with `tokenizers` on the small corpus below;
- the head drafters of `fixture_drafters.py`, fitted in closed form against the target:
  `Tiny-Qwen3-64-MTP-F32.base` (the target with an MTP head), `Tiny-Qwen3-64-EAGLE3.base`,
  `Tiny-Qwen3-64-DFlash.base`, `Tiny-Qwen3-64-DSpark.base`, and the deliberately poor
  `Tiny-Qwen3-64-Poor-DFlash.base` (random weights).

The weights are not trained, but not noise either: the embedding and head are a rank-64
factorisation of the corpus's bigram log-probabilities, so the target babbles corpus-like
text; the layers are seeded random weights at a scale where they change some of its choices.
A draft model cut from the same weights then agrees with the target most of the time, which is
what a useful draft model does, measured in tests/integration/test_basert_runtime.py.

Everything is deterministic: the same files, byte for byte, on every run on one machine
(`created` is fixed; the SVD may round differently on other BLAS builds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from superfluid.adapters.basert.bundle import f32_to_bf16
from superfluid.adapters.basert.fixture_drafters import write_drafter_fixtures
from superfluid.adapters.bundle_files import write_bundle

TARGET_NAME = "Tiny-Qwen3-64-F32.base"
DRAFT_NAME = "Tiny-Qwen3-64-Draft.base"
TOKENIZER_NAME = "tokenizer.json"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CREATED = "2026-01-01T00:00:00Z"
VERSION = "0.0.0-reference-fixture"
SEED = 20260101

HIDDEN = 64
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
INTERMEDIATE = 128
#: Size of the layers' contribution next to the embedding: big enough that the target's
#: choices depend on its context, small enough that a one-layer cut of it still agrees often.
LAYER_SCALE = 0.7
#: Sharpens the head's logits, so that sampling mostly follows the corpus too.
HEAD_SCALE = 3.0

_DTYPES: dict[str, npt.DTypeLike] = {"f32": "<f4", "f16": "<f2"}


def make_fixtures(directory: Path) -> dict[str, Path]:
    """Write the fixture tokenizer, target, draft model and head drafters into `directory`;
    returns their paths by role: `tokenizer`, `target`, `draft`, `mtp_target`, `eagle3`,
    `dflash`, `dspark`, `poor_dflash`."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    tokenizer_json = tokenizer.to_str()
    tokenizer_path = directory / TOKENIZER_NAME
    tokenizer_path.write_text(tokenizer_json, encoding="utf-8")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = {name: tokenizer.token_to_id(name) for name in SPECIAL_TOKENS}
    tensors = target_weights(tokenizer, vocab)
    config = {
        "hidden_size": HIDDEN,
        "vocab_size": vocab,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INTERMEDIATE,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "bos_token_id": None,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "tie_word_embeddings": False,
    }
    target = directory / TARGET_NAME
    write_model_bundle(
        target, arch="qwen3", config=config, tensors=tensors, tokenizer_json=tokenizer_json
    )
    draft = directory / DRAFT_NAME
    keep = {
        n: t for n, t in tensors.items() if not n.startswith("layers.") or n.startswith("layers.0.")
    }
    write_model_bundle(
        draft,
        arch="qwen3",
        config={**config, "num_hidden_layers": 1},
        tensors=keep,
        tokenizer_json=tokenizer_json,
    )
    heads = write_drafter_fixtures(
        directory,
        target=target,
        tensors=tensors,
        config=config,
        tokenizer=tokenizer,
        corpus=CORPUS,
        seed=SEED,
        write=write_model_bundle,
    )
    return {"tokenizer": tokenizer_path, "target": target, "draft": draft, **heads}


def train_tokenizer(vocab_size: int = 512, corpus: str | None = None) -> Tokenizer:
    """A byte-level BPE tokenizer trained on `corpus` (default CORPUS) with the ChatML turn
    markers as special tokens; deterministic (the trainer breaks ties in a fixed order)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((corpus or CORPUS).split("\n\n"), trainer)
    return tokenizer


def target_weights(tokenizer: Tokenizer, vocab: int) -> dict[str, npt.NDArray[np.float32]]:
    """The target's tensors, by the names model.py documents."""
    rng = np.random.default_rng(SEED)
    embed, head = _bigram_factors(tokenizer, vocab, rng)
    tensors: dict[str, npt.NDArray[np.float32]] = {"embed_tokens.weight": embed}
    # Residual contributions are scaled against the embedding's typical row size.
    size = float(np.sqrt(np.mean(embed**2)))

    def matrix(rows: int, cols: int, scale: float = 1.0) -> npt.NDArray[np.float32]:
        values = rng.standard_normal((rows, cols)) * (scale / math.sqrt(cols))
        return values.astype(np.float32)

    def norm(n: int) -> npt.NDArray[np.float32]:
        values = 1.0 + 0.1 * rng.standard_normal(n)
        return values.astype(np.float32)

    for i in range(LAYERS):
        p = f"layers.{i}."
        tensors[p + "attn_norm.weight"] = norm(HIDDEN)
        tensors[p + "q_proj.weight"] = matrix(HEADS * HEAD_DIM, HIDDEN, 2.0)
        tensors[p + "k_proj.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN, 2.0)
        tensors[p + "v_proj.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "q_norm.weight"] = norm(HEAD_DIM)
        tensors[p + "k_norm.weight"] = norm(HEAD_DIM)
        tensors[p + "o_proj.weight"] = matrix(HIDDEN, HEADS * HEAD_DIM, LAYER_SCALE * size)
        tensors[p + "mlp_norm.weight"] = norm(HIDDEN)
        tensors[p + "gate_proj.weight"] = matrix(INTERMEDIATE, HIDDEN, 2.0)
        tensors[p + "up_proj.weight"] = matrix(INTERMEDIATE, HIDDEN)
        tensors[p + "down_proj.weight"] = matrix(HIDDEN, INTERMEDIATE, LAYER_SCALE * size)
    tensors["norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = head
    return tensors


def _bigram_factors(
    tokenizer: Tokenizer, vocab: int, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Embedding and head whose logits favour, after each token, what followed it in CORPUS.

    The head's rows are `vocab` orthonormal-column directions in HIDDEN dimensions, and a
    token's embedding is the sum of its successors' directions, weighted by how often they
    followed it plus a bonus for the most frequent one. Logits are then that weighting seen
    through a random projection: the favourite always on top (its bonus outweighs the
    cross-talk), the other successors above the rest. A model whose layers added nothing would
    decode the corpus's greedy bigram chain; the final RMSNorm only scales a row.
    """
    counts = np.zeros((vocab, vocab), dtype=np.float64)
    for part in CORPUS.split("\n\n"):
        ids = tokenizer.encode(part).ids
        np.add.at(counts, (ids[:-1], ids[1:]), 1.0)
    special = [tokenizer.token_to_id(name) for name in SPECIAL_TOKENS]
    special_ids = [token for token in special if token is not None]
    ordinary = np.setdiff1d(np.arange(vocab), special_ids)
    # Tokens never seen as a context (BPE intermediates) get a random favourite, never a
    # special token: turn markers and EOS are for prompts, not for babble.
    favourite = np.where(
        counts.sum(axis=1) > 0, counts.argmax(axis=1), rng.choice(ordinary, size=vocab)
    )
    weights = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    weights[np.arange(vocab), favourite] += 1.0
    directions, _ = np.linalg.qr(rng.standard_normal((vocab, HIDDEN)))
    embed = weights @ directions
    return embed.astype(np.float32), (HEAD_SCALE * directions).astype(np.float32)


def write_model_bundle(
    path: Path,
    *,
    arch: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, npt.NDArray[np.float32]],
    tokenizer_json: str,
    dtype: str = "f32",
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write a bundle the reference backend runs: every tensor stored as `dtype` (f32, f16,
    bf16), each at a 64-byte aligned offset, with the header fields this project reads."""
    entries = []
    blob = bytearray()
    for name, values in tensors.items():
        blob.extend(bytes(-len(blob) % 64))
        if dtype == "bf16":
            data = f32_to_bf16(values).astype("<u2").tobytes()
        else:
            data = np.asarray(values).astype(_DTYPES[dtype]).tobytes()
        entries.append(
            {
                "name": name,
                "dtype": dtype,
                "shape": list(values.shape),
                "offset": len(blob),
                "length": len(data),
            }
        )
        blob.extend(data)
    header = {
        "schema": 1,
        "arch": arch,
        "quant_scheme": dtype,
        "created": CREATED,
        "baserT_version": VERSION,
        "source": {"filename": path.name.removesuffix(".base")},
        "tokenizer": {"tokenizer_type": "hf", "tokenizer_json": tokenizer_json},
        "config": dict(config),
        "tensors": entries,
        **(extra or {}),
    }
    write_bundle(path, header, weights=bytes(blob))


#: The training text: plain English and a little Python, repetitive on purpose (what a tiny
#: model can learn, and what prompt-lookup finds to copy). Paragraphs are separated by blank lines.
CORPUS = """\
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun, and the quick
brown fox runs into the woods. The fox is quick and the dog is lazy.

Once upon a time there was a little town by the sea. Every morning the people of the town
went down to the sea to fish. Every evening they came back to the town with their boats full
of fish, and they sold the fish in the market of the town.

The weather today is sunny with a light wind from the west. Tomorrow the weather will be
cloudy, and there may be rain in the evening. The weather this week is warm for the season.

A model reads a prompt and writes a reply. The reply is made of tokens, and each token is
chosen after the tokens before it. A draft model guesses the next tokens, and the target model
checks the guesses. When the guesses are right, the reply comes faster.

Please write a short summary of the text. The text is about a town by the sea, the people who
fish there, and the market where they sell the fish. The summary should be short and clear.

Thank you for your question. The answer is simple: read the file, count the lines, and print
the number of lines. If the file is empty, print zero. If the file does not exist, print an
error and stop.

def read_lines(path):
    with open(path) as handle:
        return handle.read().splitlines()

def count_lines(path):
    lines = read_lines(path)
    return len(lines)

def main():
    for path in ["a.txt", "b.txt", "c.txt"]:
        print(path, count_lines(path))

class Counter:
    def __init__(self):
        self.count = 0

    def add(self, value):
        self.count += value
        return self.count

    def reset(self):
        self.count = 0

for i in range(10):
    if i % 2 == 0:
        print("even", i)
    else:
        print("odd", i)

The cat sat on the mat. The cat is black and the mat is red. The dog sat on the mat too, and
the cat ran away from the dog. The cat and the dog are friends now.

Here is a list of colors: red, green, blue, yellow, black, white. Here is a list of numbers:
one, two, three, four, five, six, seven, eight, nine, ten. Here is a list of days: Monday,
Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday.

The server starts, loads the model, and waits for requests. Each request has a prompt and a
limit on the number of tokens. The server reads the prompt, runs the model, and sends the reply
back to the client. When the client goes away, the server stops the request.

def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

def is_prime(n):
    if n < 2:
        return False
    for d in range(2, int(n ** 0.5) + 1):
        if n % d == 0:
            return False
    return True

print([fibonacci(n) for n in range(10)])
print([n for n in range(30) if is_prime(n)])

The train leaves the station at nine in the morning and arrives in the city at noon. The next
train leaves at ten and arrives at one. The last train of the day leaves the city at nine in
the evening.

I would like a cup of tea, please. Would you like milk in your tea? Yes, a little milk and no
sugar, thank you. Here is your cup of tea. Thank you very much.
"""
