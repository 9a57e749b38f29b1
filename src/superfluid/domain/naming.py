"""Model names reduced to what they are *of*, so a drafter can be recognised as made for a target.

Rule (docs/contract.md §3 item 5): lowercase; strip `.base` / `.gguf` / `.safetensors`; repeatedly
cut a trailing `-`/`_`/`.` part that is an artifact tag (a storage format such as `f16` or `nvfp4`,
`tiled`, or a quantisation label `[mtp][i]q<digits>` with `_`-parts from `0 1 k s m l xs xxs xl`);
keep letters, digits, `.` and `-` separators. What remains names the model; a name under three
characters, or a generic file name (`model`, `weights`, shard names, ...) names nothing.

Invariant: `normalise_name` is idempotent on what it returns, so comparing two normalised names by
containment is stable however many times a caller normalises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_EXTENSIONS = (".base", ".gguf", ".safetensors")

_ARTIFACT_WORDS = frozenset(
    {"tiled", "f16", "bf16", "f32", "fp16", "fp8", "int4", "int8", "mxfp4", "nvfp4", "4bit", "8bit"}
)
_QUANT_SUFFIX_PARTS = frozenset({"0", "1", "k", "s", "m", "l", "xs", "xxs", "xl"})
_QUANT_LABEL = re.compile(r"(?:mtp)?i?q(\d+)((?:_[a-z0-9]+)*)")

_TAG_SEPARATORS = "-_."

# Compared after every separator is removed, so `pytorch_model` and `pytorch-model` both match.
_GENERIC_NAMES = frozenset(
    {
        "model",
        "models",
        "weight",
        "weights",
        "checkpoint",
        "checkpoints",
        "ckpt",
        "pytorchmodel",
        "consolidated",
        "adapter",
        "adaptermodel",
    }
)

_MIN_NAME_LENGTH = 3

# The file name a pulled bundle has inside `<org>/<repo>/<variant>/`; its directories name it.
PULLED_BUNDLE_FILE = "model.base"


def is_artifact_tag(part: str) -> bool:
    """True when `part` (already lowercase) describes how a file was stored, not what it is."""
    if part in _ARTIFACT_WORDS:
        return True
    label = _QUANT_LABEL.fullmatch(part)
    if label is None:
        return False
    suffix_parts = label.group(2).split("_")[1:]
    return all(p in _QUANT_SUFFIX_PARTS for p in suffix_parts)


def _strip_extensions(name: str) -> str:
    for extension in _EXTENSIONS:
        if name.endswith(extension) and len(name) > len(extension):
            return name[: -len(extension)]
    return name


def _cut_one_tag(name: str) -> str:
    """Cut the shortest trailing separator-led part that is an artifact tag, if there is one.

    Scanning separators right to left finds `iq4_xs` whole (its `_xs` alone is no tag) while still
    cutting `-tiled` before the `-q4` in front of it on the next pass.
    """
    for index in range(len(name) - 1, 0, -1):
        if name[index] in _TAG_SEPARATORS and is_artifact_tag(name[index + 1 :]):
            return name[:index]
    return name


def _strip_artifacts(name: str) -> str:
    while True:
        # Trailing separators are trimmed first so that `foo.base_` still loses its extension.
        shorter = _cut_one_tag(_strip_extensions(name.rstrip(_TAG_SEPARATORS)))
        if shorter == name:
            return name
        name = shorter


def _is_generic(name: str) -> bool:
    """A generic file name once shard numbering (`-00001-of-00002`, `1of2`, `3`) is removed."""
    letters = re.sub(r"[^a-z0-9]", "", name)
    letters = letters.rstrip("0123456789")
    letters = letters.removesuffix("of").rstrip("0123456789")
    return letters in _GENERIC_NAMES


def normalise_name(name: str) -> str | None:
    """The comparable name of a model file or directory, or None when it names nothing."""
    # Foreign characters become `-` before tags are cut, so `Qwen3 4B Q4` loses its `Q4` too.
    lowered = re.sub(r"[^a-z0-9._-]+", "-", name.lower())
    stripped = _strip_artifacts(lowered)
    # `_` only mattered inside quantisation labels such as `iq4_xs`; past this point it is a
    # separator like any other, and runs of separators read as one.
    kept = re.sub(r"[-_]+", "-", stripped).strip("-")
    if (
        # Separators carry no name: `a-b` is two characters of name, too few to mean anything.
        len(kept.replace("-", "")) < _MIN_NAME_LENGTH
        # `Q4_K_M.gguf` says how a file was stored, not which model it is.
        or is_artifact_tag(stripped.lstrip(_TAG_SEPARATORS))
        or is_artifact_tag(kept)
        or _is_generic(kept)
    ):
        return None
    return kept


def model_name_for_path(parts: Sequence[str]) -> str:
    """The raw name a path gives its model: `<repo>` for `…/<org>/<repo>/<variant>/model.base`.

    `parts` are the path's components, last one the file name. Other files are named by their
    file name.
    """
    if not parts:
        return ""
    file_name = parts[-1]
    if file_name == PULLED_BUNDLE_FILE and len(parts) >= 3:
        return parts[-3]
    return file_name


def bundle_names(parts: Sequence[str], source_filename: str | None = None) -> tuple[str, ...]:
    """Every normalised name a bundle answers to: its path's name and its header's source file."""
    raw = [model_name_for_path(parts)]
    if source_filename:
        raw.append(source_filename)
    names: list[str] = []
    for candidate in raw:
        normalised = normalise_name(candidate)
        if normalised is not None and normalised not in names:
            names.append(normalised)
    return tuple(names)
