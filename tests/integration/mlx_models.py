"""Tiny MLX model directories for tests, made with mlx-lm's own classes and savers.

Nothing is downloaded: the weights are random (seeded) and the tokenizer is a byte-level BPE
trained here on a few paragraphs, so every byte string round-trips. A random model says
nothing sensible, but greedy decoding of one falls into short cycles quickly, which is what
prompt-lookup drafts and a verifier accepts; drafts taken from the prompt are mostly rejected. Two shapes: a llama with full attention (its KV
cuts anywhere) and the same with a sliding-window layer (mlx-lm gives that layer a
RotatingKVCache, which cannot cut once its window fills).
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun.",
    "def area(width, height):\n    return width * height\n\n",
    "def perimeter(width, height):\n    return 2 * (width + height)\n",
    "Speculative decoding drafts tokens and verifies them in one forward pass.",
    "A lighthouse keeper writes in a diary every evening, counting ships and storms.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20.",
    "Café, naïve, 東京, emoji 🙂 — bytes that are not ASCII still round-trip.",
]

BOS, EOS, END = "<|bos|>", "<|eos|>", "<|end|>"
ROLES = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL = [BOS, EOS, END, *ROLES]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB_SIZE = 384


def write_tokenizer(directory: Path, *, vocab_size: int = VOCAB_SIZE) -> int:
    """Train a byte-level BPE on CORPUS and save it as mlx-lm (transformers) reads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "additional_special_tokens": [END, *ROLES],
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tokenizer.get_vocab_size()


def write_tiny_llama(directory: Path, *, seed: int = 0, sliding_window: int | None = None) -> Path:
    """A 2-layer, 64-wide llama with random weights; with `sliding_window`, layer 0 slides."""
    import mlx.core as mx
    from mlx_lm.models import llama
    from mlx_lm.utils import save_config, save_model

    vocab = write_tokenizer(directory)
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(directory / "tokenizer.json"))
    config: dict[str, object] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        # Untied: a tied random model mostly echoes its last token; an untied one wanders into
        # cycles of several tokens, so drafts are both accepted and rejected (cut off).
        "tie_word_embeddings": False,
        "bos_token_id": ids.token_to_id(BOS),
        # Two ends, as chat models have: end of text and end of turn.
        "eos_token_id": [ids.token_to_id(EOS), ids.token_to_id(END)],
        "torch_dtype": "float32",
    }
    if sliding_window is not None:
        config["layer_types"] = ["sliding_attention", "full_attention"]
        config["sliding_window"] = sliding_window
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    save_model(directory, model)
    save_config(config, directory / "config.json")
    return directory
