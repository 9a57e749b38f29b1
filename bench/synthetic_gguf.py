"""Tiny random-weight GGUFs of the architectures and weight types users bring, made here.

The exactness of speculative greedy decoding rests on kernels (ADR 0008), and which kernel a
matmul takes depends on the architecture's shapes and on the weight type. These models exist to
reach every such kernel without downloading anything: llama.cpp's own `gguf` package writes an
F32 model with random weights, and the installed llama.cpp (`llama_model_quantize`) converts it
to each type. Shapes are chosen so the paths that matter engage:

- rows 256 wide (K-quant and IQ4_XS blocks divide them) and 320/384 wide (they do not, so
  llama.cpp's quantizer falls back to a legacy type, as on Gemma 3 270M's 640-wide rows);
- head sizes 64 and 128, grouped-query attention (2-4 query heads per K/V head) and plain
  multi-head attention (phi3);
- eight experts of which two are used per token (qwen3moe), so a step's tokens split unevenly
  among experts.

The vocabulary is a byte-level SentencePiece one (the 256 byte tokens, letters and a few words),
so any text tokenizes and the server can be driven over HTTP. Models are cached under
`~/.cache/superfluid/synthetic-gguf/` (keyed by this generator's version and llama-cpp-python's),
so a second run loads them without writing.

    .venv/bin/python -m bench.synthetic_gguf [--arch NAME ...] [--type NAME ...] [--size bench]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

#: Bumped whenever the files this writes change, so that stale cached models are not reused.
GENERATOR_VERSION = 2
N_VOCAB = 512
N_CTX_TRAIN = 4096
SEED = 20261206

Tensors = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class Architecture:
    """One llama.cpp architecture at test size."""

    name: str
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_layer: int = 2
    n_expert: int = 0
    n_expert_used: int = 0
    #: Output rows of the vocabulary head; one that 8 does not divide keeps the head out of
    #: llama.cpp's repacked kernels.
    n_vocab: int = N_VOCAB

    @property
    def q_width(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def label(self) -> str:
        """What the matrix says about its shapes."""
        gqa = self.n_head // self.n_head_kv
        shape = f"{self.n_embd} wide, head {self.head_dim}, " + (
            f"{gqa} query heads per K/V head" if gqa > 1 else "multi-head"
        )
        if self.n_expert:
            shape += f", {self.n_expert} experts ({self.n_expert_used} per token)"
        if self.n_vocab % 8:
            shape += f", a {self.n_vocab}-row vocabulary head"
        return shape


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=768),
        Architecture("qwen2", n_embd=384, n_head=6, n_head_kv=2, head_dim=64, n_ff=1024),
        Architecture("qwen3", n_embd=256, n_head=4, n_head_kv=2, head_dim=128, n_ff=512),
        Architecture("gemma3", n_embd=320, n_head=2, n_head_kv=1, head_dim=128, n_ff=640),
        Architecture("phi3", n_embd=256, n_head=4, n_head_kv=4, head_dim=64, n_ff=512, n_vocab=500),
        Architecture(
            "qwen3moe",
            n_embd=256,
            n_head=4,
            n_head_kv=2,
            head_dim=64,
            n_ff=256,
            n_expert=8,
            n_expert_used=2,
        ),
    )
}


#: The same architectures where weights dominate a step (`bench/kernel_table.py`): 4 layers of
#: 1,024-wide rows, about 50M weights.
BENCH_ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture(
            "llama", n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_ff=2816, n_layer=4
        ),
        Architecture(
            "qwen3moe",
            n_embd=1024,
            n_head=16,
            n_head_kv=4,
            head_dim=64,
            n_ff=768,
            n_layer=4,
            n_expert=8,
            n_expert_used=2,
        ),
    )
}
SIZES = {"test": ARCHITECTURES, "bench": BENCH_ARCHITECTURES}


@dataclass(frozen=True, slots=True)
class WeightType:
    """A quantization: one llama.cpp file type, every tensor in it (`pure`) or its own recipe."""

    name: str
    ftype: str
    pure: bool = True


WEIGHT_TYPES: dict[str, WeightType] = {
    w.name: w
    for w in (
        WeightType("F32", "LLAMA_FTYPE_ALL_F32"),
        WeightType("F16", "LLAMA_FTYPE_MOSTLY_F16"),
        WeightType("BF16", "LLAMA_FTYPE_MOSTLY_BF16"),
        WeightType("Q8_0", "LLAMA_FTYPE_MOSTLY_Q8_0"),
        WeightType("Q4_0", "LLAMA_FTYPE_MOSTLY_Q4_0"),
        WeightType("Q4_1", "LLAMA_FTYPE_MOSTLY_Q4_1"),
        WeightType("Q5_0", "LLAMA_FTYPE_MOSTLY_Q5_0"),
        WeightType("Q5_1", "LLAMA_FTYPE_MOSTLY_Q5_1"),
        WeightType("Q2_K", "LLAMA_FTYPE_MOSTLY_Q2_K"),
        WeightType("Q3_K", "LLAMA_FTYPE_MOSTLY_Q3_K_S"),
        WeightType("Q4_K", "LLAMA_FTYPE_MOSTLY_Q4_K_S"),
        WeightType("Q5_K", "LLAMA_FTYPE_MOSTLY_Q5_K_S"),
        WeightType("Q6_K", "LLAMA_FTYPE_MOSTLY_Q6_K"),
        WeightType("IQ4_NL", "LLAMA_FTYPE_MOSTLY_IQ4_NL"),
        WeightType("IQ4_XS", "LLAMA_FTYPE_MOSTLY_IQ4_XS"),
        WeightType("Q4_K_M", "LLAMA_FTYPE_MOSTLY_Q4_K_M", pure=False),
        WeightType("Q5_K_M", "LLAMA_FTYPE_MOSTLY_Q5_K_M", pure=False),
    )
}


def _vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A byte-fallback SentencePiece vocabulary: control tokens, the 256 bytes, then pieces."""
    normal, unknown, control, byte = 1, 2, 3, 6
    # Phi-3's vocabulary rules look up "<|endoftext|>" by name.
    tokens = ["<unk>", "<s>", "</s>", "<|endoftext|>"]
    types = [unknown, control, control, control]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [byte] * 256
    words = str.split(
        "the of and to in is was for on that with as it by at from his an were are which this "
        "be or has had first one their its new after who they have her she two been other when "
        "there all during into school time may years more most only over city some world would "
        "where later up such used many can state about national out known university united "
        "then made river water bridge miller wheel spring summer children swim sea old mill"
    )
    pieces = [f"▁{w}" for w in words]
    pieces += [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,"]
    pieces += [f"▁{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + ["▁"]
    pieces = list(dict.fromkeys(pieces))[: n_vocab - len(tokens)]
    # Longer pieces score higher, so the tokenizer merges into them first.
    scores = [0.0] * len(tokens) + [float(len(p)) for p in pieces]
    filler = n_vocab - len(tokens) - len(pieces)
    tokens += pieces + [f"<unused{i}>" for i in range(filler)]
    types += [normal] * len(pieces) + [5] * filler
    scores += [0.0] * filler
    return tokens, scores, types


def _tensors(arch: Architecture, rng: np.random.Generator) -> Tensors:
    """Random weights in llama.cpp's tensor names; numpy shapes are ggml's, reversed."""

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    e = arch.n_embd
    out: Tensors = {
        "token_embd.weight": rng.standard_normal((arch.n_vocab, e)).astype(np.float32),
        "output_norm.weight": ones(e),
    }
    if arch.name != "gemma3":  # Gemma ties its output head to the embeddings
        out["output.weight"] = dense(arch.n_vocab, e)
    for i in range(arch.n_layer):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = ones(e)
        out[p + "ffn_norm.weight"] = ones(e)
        out[p + "attn_output.weight"] = dense(e, arch.q_width)
        if arch.name == "phi3":
            out[p + "attn_qkv.weight"] = dense(arch.q_width + 2 * arch.kv_width, e)
            out[p + "ffn_up.weight"] = dense(2 * arch.n_ff, e)
            out[p + "ffn_down.weight"] = dense(e, arch.n_ff)
            continue
        out[p + "attn_q.weight"] = dense(arch.q_width, e)
        out[p + "attn_k.weight"] = dense(arch.kv_width, e)
        out[p + "attn_v.weight"] = dense(arch.kv_width, e)
        if arch.name == "qwen2":
            for name, width in (("q", arch.q_width), ("k", arch.kv_width), ("v", arch.kv_width)):
                out[p + f"attn_{name}.bias"] = (0.1 * rng.standard_normal(width)).astype(np.float32)
        if arch.name in ("qwen3", "qwen3moe", "gemma3"):
            out[p + "attn_q_norm.weight"] = ones(arch.head_dim)
            out[p + "attn_k_norm.weight"] = ones(arch.head_dim)
        if arch.name == "gemma3":
            out[p + "post_attention_norm.weight"] = ones(e)
            out[p + "post_ffw_norm.weight"] = ones(e)
        if arch.n_expert:
            x, f = arch.n_expert, arch.n_ff
            out[p + "ffn_gate_inp.weight"] = dense(x, e)
            out[p + "ffn_gate_exps.weight"] = np.stack([dense(f, e) for _ in range(x)])
            out[p + "ffn_up_exps.weight"] = np.stack([dense(f, e) for _ in range(x)])
            out[p + "ffn_down_exps.weight"] = np.stack([dense(e, f) for _ in range(x)])
        else:
            out[p + "ffn_gate.weight"] = dense(arch.n_ff, e)
            out[p + "ffn_up.weight"] = dense(arch.n_ff, e)
            out[p + "ffn_down.weight"] = dense(e, arch.n_ff)
    return out


def write_f32(arch: Architecture, path: Path) -> None:
    """Write `arch` with random F32 weights to `path` (llama.cpp's `gguf` writer)."""
    import gguf  # a test and bench dependency, not the server's

    writer = gguf.GGUFWriter(str(path), arch.name)
    writer.add_name(f"synthetic-{arch.name}")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(arch.n_embd)
    writer.add_block_count(arch.n_layer)
    writer.add_feed_forward_length(arch.n_ff)
    writer.add_head_count(arch.n_head)
    writer.add_head_count_kv(arch.n_head_kv)
    writer.add_key_length(arch.head_dim)
    writer.add_value_length(arch.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(arch.head_dim)
    writer.add_file_type(0)
    if arch.name == "gemma3":
        writer.add_sliding_window(512)  # below the checks' 700-token context
    if arch.n_expert:
        writer.add_expert_count(arch.n_expert)
        writer.add_expert_used_count(arch.n_expert_used)
        writer.add_expert_feed_forward_length(arch.n_ff)
    tokens, scores, types = _vocabulary(arch.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    rng = np.random.default_rng([SEED, *arch.name.encode()])
    for name, tensor in _tensors(arch, rng).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantize(source: Path, target: Path, weights: WeightType) -> None:
    """Convert `source` to `weights` with the installed llama.cpp's own quantizer."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, weights.ftype)
    params.pure = weights.pure
    params.nthread = os.cpu_count() or 1
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    status = llama_cpp.llama_model_quantize(
        str(source).encode(), str(tmp).encode(), ctypes.byref(params)
    )
    if status != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize {source.name} to {weights.name}: status {status}")
    tmp.replace(target)


def cache_dir() -> Path:
    """Where made models are kept, keyed by what would make them differ."""
    key = f"{GENERATOR_VERSION}-{version('llama_cpp_python')}-{version('gguf')}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser()
    return root / "superfluid" / "synthetic-gguf" / digest


def model(arch: str, weights: str, cache: Path | None = None, size: str = "test") -> Path:
    """The GGUF of `arch` in `weights`, made on first use and cached; `size` "bench" makes the
    larger one of `BENCH_ARCHITECTURES`.

    A missing file is made in a subprocess: llama.cpp's quantizer reads the CPU backend's
    process-wide switches, which a process that then loads models must set first (kernels.py).
    """
    folder = cache or cache_dir()
    target = folder / f"{arch if size == 'test' else f'{arch}-{size}'}-{weights}.gguf"
    if not target.exists():
        command = [sys.executable, "-m", "bench.synthetic_gguf", "--arch", arch, "--type", weights]
        command += ["--size", size, "--cache", str(folder)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not target.exists():
            raise RuntimeError(f"making {target.name} failed:\n{done.stderr[-2000:]}")
    return target


def make(arch: str, weights: str, folder: Path, size: str = "test") -> Path:
    """Write and quantize `arch` in `weights` into `folder`, in this process."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = arch if size == "test" else f"{arch}-{size}"
    target = folder / f"{stem}-{weights}.gguf"
    if target.exists():
        return target
    source = folder / f"{stem}-source-F32.gguf"
    if not source.exists():
        tmp = source.with_suffix(f".{os.getpid()}.tmp")
        write_f32(SIZES[size][arch], tmp)
        tmp.replace(source)
    quantize(source, target, WEIGHT_TYPES[weights])
    return target


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each ggml type the file holds (what the quantizer chose)."""
    import gguf

    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        name = tensor.tensor_type.name
        counts[name] = counts.get(name, 0) + 1
    return counts


def each(archs: Iterable[str], types: Iterable[str]) -> Iterable[tuple[str, str]]:
    types = list(types)
    return ((a, t) for a in archs for t in types)


def main(argv: list[str] | None = None, made: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", choices=sorted(ARCHITECTURES))
    parser.add_argument("--type", action="append", choices=list(WEIGHT_TYPES))
    parser.add_argument("--size", choices=list(SIZES), default="test")
    parser.add_argument("--cache", type=Path, help="where to keep the files (default: the cache)")
    args = parser.parse_args(argv)
    for arch, weights in each(args.arch or SIZES[args.size], args.type or WEIGHT_TYPES):
        path = make(arch, weights, args.cache or cache_dir(), args.size)
        types = ", ".join(f"{n} {t}" for t, n in sorted(tensor_types(path).items()))
        made(f"{path}: {types}")


if __name__ == "__main__":
    main()
