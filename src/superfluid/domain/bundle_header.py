"""A `.base` bundle's header, from its bytes to a typed value.

Layout (docs/contract.md §10): `BASE` magic, u32 LE version (only 1), u64 LE header length, that
many bytes of UTF-8 JSON, then the weights blob at the next 64 KiB boundary.

Rule: a header either reads completely or raises one `HeaderError` that says what is wrong. Keys
this project does not use are ignored (converters add keys freely); keys it does use must have
the type it expects, and a wrong type names the key. Missing optional keys take their documented
defaults, so a minimal header such as `{"arch": "qwen3"}` reads.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from superfluid.domain.errors import HeaderError, NotABundle

MAGIC = b"BASE"
SUPPORTED_VERSION = 1
PREFIX_SIZE = 16
# Headers at or under this size are accepted; anything larger is not a header but damage.
MAX_HEADER_LEN = 256 * 1024 * 1024
WEIGHTS_ALIGNMENT = 64 * 1024

DEFAULT_BACKEND = "metal"
# Backends that run the same kernels and so can share a drafter.
_BACKEND_CLASSES = {"cuda_sm121": "cuda"}

_PREFIX = struct.Struct("<4sIQ")


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One entry of the header's `tensors` list; offsets are relative to the weights blob."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class BundleHeader:
    """What this project reads from a `.base` header; `raw` keeps the whole JSON object."""

    arch: str
    hidden_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None
    num_target_layers: int | None
    target_layer_ids: tuple[int, ...]
    aux_layer_ids: tuple[int, ...]
    target_backend: str
    quantisation: str | None
    created: float
    speculator_kind: str | None
    baserT_version: str | None  # spelled as the header key it comes from
    source_filename: str | None
    block_size: int | None
    tensors: tuple[TensorEntry, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def backend_class(self) -> str:
        """Backends whose bundles are interchangeable (`cuda` and `cuda_sm121` are one class)."""
        return _BACKEND_CLASSES.get(self.target_backend, self.target_backend)

    @property
    def has_mtp_head(self) -> bool:
        """True when the bundle carries its own multi-token-prediction head (§3 item 1)."""
        if self.speculator_kind == "mtp":
            return True
        if self.speculator_kind is not None or self.arch != "glm_dsa":
            return False
        if self.num_hidden_layers is None:
            return False
        # GLM-DSA converters keep the NextN layer as one extra layer past the last hidden one.
        nextn = f"layers.{self.num_hidden_layers}.eh_proj.weight"
        return any(t.name == nextn for t in self.tensors)


def parse_prefix(prefix: bytes) -> int:
    """The header length that the 16-byte prefix announces, or a HeaderError saying why not."""
    if len(prefix) < PREFIX_SIZE:
        raise NotABundle(
            f"too short for a .base bundle: {len(prefix)} bytes, a .base prefix is {PREFIX_SIZE}"
        )
    magic, version, header_len = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise NotABundle(f"bad magic {magic!r}, a .base bundle starts with {MAGIC!r}")
    if version != SUPPORTED_VERSION:
        raise HeaderError(
            f".base version {version} is not supported (only version {SUPPORTED_VERSION})"
        )
    if header_len == 0:
        raise HeaderError("the .base header length is 0")
    if header_len > MAX_HEADER_LEN:
        raise HeaderError(
            f"the .base header length {header_len} is over {MAX_HEADER_LEN // (1024 * 1024)} MiB"
        )
    return int(header_len)


def weights_offset(header_len: int) -> int:
    """Where the weights blob starts: the first 64 KiB boundary at or after the header's end."""
    end = PREFIX_SIZE + header_len
    return -(-end // WEIGHTS_ALIGNMENT) * WEIGHTS_ALIGNMENT


def parse_header(data: bytes, *, file_size: int | None = None) -> BundleHeader:
    """Read a header from the prefix plus the JSON bytes; extra trailing bytes are ignored.

    `file_size`, when known, catches a header length that points past the end of the file before
    anyone tries to read that far.
    """
    header_len = parse_prefix(data)
    end = PREFIX_SIZE + header_len
    if file_size is not None and end > file_size:
        raise HeaderError(
            f"the .base header length {header_len} runs past the end of the file "
            f"({file_size} bytes)"
        )
    if len(data) < end:
        raise HeaderError(
            f"the .base header is cut short: {len(data) - PREFIX_SIZE} of {header_len} bytes"
        )
    try:
        text = data[PREFIX_SIZE:end].decode("utf-8")
    except UnicodeDecodeError as err:
        raise HeaderError(f"the .base header is not UTF-8 (byte {err.start})") from None
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise HeaderError(f"the .base header is not valid JSON ({_json_reason(err)})") from None
    if not isinstance(document, dict):
        raise HeaderError(f"the .base header is JSON {_json_type(document)}, not an object")
    return header_from_json(document)


def header_from_json(document: Mapping[str, Any]) -> BundleHeader:
    """The typed header of an already-decoded JSON object (strict on the keys it reads)."""
    config = _object(document, "config", "config")
    speculator = _object(document, "speculator", "speculator")
    speculator_config = _object(speculator, "config", "speculator.config")
    source = _object(document, "source", "source")
    tensors = _tensors(document)
    return BundleHeader(
        arch=_string(document, "arch", "arch") or "",
        hidden_size=_count(config, "hidden_size", "config.hidden_size"),
        vocab_size=_count(config, "vocab_size", "config.vocab_size"),
        num_hidden_layers=_count(config, "num_hidden_layers", "config.num_hidden_layers"),
        num_target_layers=_count(config, "num_target_layers", "config.num_target_layers"),
        target_layer_ids=_counts(config, "target_layer_ids", "config.target_layer_ids"),
        aux_layer_ids=_counts(config, "aux_layer_ids", "config.aux_layer_ids"),
        target_backend=_string(document, "target_backend", "target_backend") or DEFAULT_BACKEND,
        quantisation=_storage_quantisation(document, tensors),
        created=_created(document.get("created")),
        speculator_kind=_string(speculator_config, "kind", "speculator.config.kind"),
        baserT_version=_string(document, "baserT_version", "baserT_version"),
        source_filename=_string(source, "filename", "source.filename"),
        block_size=_count(config, "block_size", "config.block_size"),
        tensors=tensors,
        raw=document,
    )


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither does this reader.
    raise ValueError(f"{name} is not JSON")


def _json_reason(err: ValueError | RecursionError) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"{err.msg} at line {err.lineno} column {err.colno}"
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return str(err)


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _object(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HeaderError(f"the .base header's {where} is {_json_type(value)}, not an object")
    return value


def _string(parent: Mapping[str, Any], key: str, where: str) -> str | None:
    value = parent.get(key)
    if value is None or isinstance(value, str):
        return value
    raise HeaderError(f"the .base header's {where} must be a string")


def _is_count(value: object) -> bool:
    # JSON `true` is a Python bool, which is an int: it is not a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(parent: Mapping[str, Any], key: str, where: str) -> int | None:
    value = parent.get(key)
    if value is None:
        return None
    if not _is_count(value):
        raise HeaderError(f"the .base header's {where} must be a non-negative integer")
    return int(value)


def _counts(parent: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(_is_count(item) for item in value):
        raise HeaderError(f"the .base header's {where} must be a list of non-negative integers")
    return tuple(int(item) for item in value)


def _tensors(document: Mapping[str, Any]) -> tuple[TensorEntry, ...]:
    value = document.get("tensors")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise HeaderError("the .base header's tensors must be a list")
    entries = []
    for index, item in enumerate(value):
        where = f"tensors[{index}]"
        if not isinstance(item, dict):
            raise HeaderError(f"the .base header's {where} must be an object")
        name = _string(item, "name", f"{where}.name")
        if name is None:
            raise HeaderError(f"the .base header's {where} has no name")
        entries.append(
            TensorEntry(
                name=name,
                dtype=_string(item, "dtype", f"{where}.dtype") or "",
                shape=_counts(item, "shape", f"{where}.shape"),
                offset=_count(item, "offset", f"{where}.offset") or 0,
                length=_count(item, "length", f"{where}.length") or 0,
            )
        )
    return tuple(entries)


def _is_layer_matrix(tensor: TensorEntry) -> bool:
    return (
        tensor.name.startswith("layers.")
        and tensor.name.endswith(".weight")
        and len(tensor.shape) == 2
    )


def _storage_quantisation(
    document: Mapping[str, Any], tensors: tuple[TensorEntry, ...]
) -> str | None:
    """How the layer weights are stored: the first 2-D layer weight's dtype, else `quant_scheme`.

    The tensor wins because `quant_scheme` names a recipe (`default-q4` may keep some layers at
    q8), while the dtype is what a drafter's kernels will actually meet.
    """
    scheme = _string(document, "quant_scheme", "quant_scheme")
    layer = next((t for t in tensors if _is_layer_matrix(t)), None)
    raw = (layer.dtype if layer is not None else "") or scheme
    if not raw:
        return None
    return raw.lower().removeprefix("base_")


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?"
)


def _created(value: object) -> float:
    """`created` as epoch seconds: a number, a numeric string or RFC 3339; 0 when unreadable.

    An unreadable timestamp only costs a drafter its place among equals (newest first), so it
    falls back to 0 rather than refusing the whole header; a value of the wrong JSON type is
    still an error, as for every key read here.
    """
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise HeaderError("the .base header's created must be a number or an RFC 3339 string")
    if isinstance(value, str):
        return _created_from_text(value.strip())
    seconds = float(value)
    return seconds if math.isfinite(seconds) else 0.0


def _created_from_text(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        return _rfc3339_seconds(text)
    return seconds if math.isfinite(seconds) else 0.0


def _rfc3339_seconds(text: str) -> float:
    match = _RFC3339.fullmatch(text)
    if match is None:
        return 0.0
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float(match.group(7)) if match.group(7) else 0.0
    if match.group(9):
        sign = 1 if match.group(9) == "+" else -1
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        zone = timezone(sign * offset) if offset < timedelta(hours=24) else None
    else:
        # `Z`, or no offset at all: read as UTC rather than the local zone, which would make the
        # ranking depend on where the daemon runs.
        zone = UTC
    # RFC 3339 allows a leap second (:60); datetime does not, so count it as the next second.
    leap = 1 if second == 60 else 0
    try:
        if zone is None:
            return 0.0
        moment = datetime(year, month, day, hour, minute, second - leap, tzinfo=zone)
    except ValueError:
        return 0.0
    return moment.timestamp() + leap + fraction
