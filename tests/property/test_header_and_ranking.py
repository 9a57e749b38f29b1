import itertools
import json
import re
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from superfluid.domain.bundle_header import (
    MAX_HEADER_LEN,
    PREFIX_SIZE,
    WEIGHTS_ALIGNMENT,
    header_from_json,
    parse_header,
    parse_prefix,
    weights_offset,
)
from superfluid.domain.catalog import parse_catalog
from superfluid.domain.drafters import (
    Candidate,
    fit_problem,
    rank_candidates,
    rank_key,
)
from superfluid.domain.errors import HeaderError
from superfluid.domain.naming import is_artifact_tag, normalise_name
from superfluid.domain.strategies import Strategy

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
# Kept small: the reader's type checks are one level deep, and big trees only cost CI time.
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)

# Keys the reader looks at, so generated objects reach its type checks rather than missing them.
header_keys = st.sampled_from(
    [
        "arch",
        "config",
        "created",
        "speculator",
        "source",
        "tensors",
        "target_backend",
        "quant_scheme",
        "baserT_version",
    ]
)
config_keys = st.sampled_from(
    ["hidden_size", "vocab_size", "num_hidden_layers", "num_target_layers", "target_layer_ids"]
)
header_like = st.dictionaries(
    header_keys,
    json_scalars
    | st.lists(json_scalars, max_size=3)
    | st.dictionaries(config_keys | st.sampled_from(["config", "kind", "name"]), json_values),
    max_size=5,
)


def framed(body: bytes, *, version: int = 1) -> bytes:
    return b"BASE" + struct.pack("<IQ", version, len(body)) + body


header_bytes = (
    st.binary(max_size=64)
    | st.binary(max_size=200).map(framed)
    | st.text(max_size=120).map(lambda text: framed(text.encode()))
)


@given(header_bytes, st.none() | st.integers(0, 1 << 40))
def test_arbitrary_bytes_never_raise_anything_but_a_header_error(
    data: bytes, file_size: int | None
) -> None:
    try:
        parse_header(data, file_size=file_size)
    except HeaderError as err:
        assert err.message  # every refusal says what is wrong


@given(header_like | json_values)
def test_arbitrary_json_as_a_header_reads_or_raises_a_header_error(document: Any) -> None:
    try:
        header = parse_header(framed(json.dumps(document).encode()))
    except HeaderError as err:
        assert err.message
        return
    # What reads keeps its JSON, reads the same again, and never carries a NaN `created`
    # (which would break the ranking's total order).
    assert header.raw == document
    assert header_from_json(header.raw) == header
    assert header.target_backend
    assert header.created == header.created


@given(st.binary(min_size=4, max_size=4), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_a_prefix_is_accepted_exactly_when_magic_version_and_length_are_sound(
    magic: bytes, version: int, header_len: int
) -> None:
    prefix = magic + struct.pack("<IQ", version, header_len)
    sound = magic == b"BASE" and version == 1 and 0 < header_len <= MAX_HEADER_LEN
    try:
        assert parse_prefix(prefix) == header_len
        assert sound
    except HeaderError:
        assert not sound


@given(st.integers(1, MAX_HEADER_LEN))
def test_the_weights_start_on_the_first_boundary_past_the_header(header_len: int) -> None:
    offset = weights_offset(header_len)
    end = PREFIX_SIZE + header_len
    assert offset % WEIGHTS_ALIGNMENT == 0
    assert end <= offset < end + WEIGHTS_ALIGNMENT


# --- fit -----------------------------------------------------------------------------------

shapes = st.fixed_dictionaries(
    {
        "hidden_size": st.integers(1, 16384),
        "vocab_size": st.integers(1, 300_000),
        "num_hidden_layers": st.integers(1, 128),
    }
)
backends = st.sampled_from(["metal", "cuda", "cuda_sm121", "vulkan"]) | st.none()


@st.composite
def target_and_own_drafter(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A target header and a drafter header cut from the target's own shape."""
    shape = draw(shapes)
    layers = shape["num_hidden_layers"]
    backend = draw(backends)
    ids = st.lists(st.integers(0, layers - 1), max_size=6)
    drafter_config = {
        "hidden_size": shape["hidden_size"],
        "vocab_size": shape["vocab_size"],
        "num_hidden_layers": draw(st.integers(1, 8)),
        "num_target_layers": draw(st.sampled_from([None, layers])),
        "target_layer_ids": draw(ids),
        "aux_layer_ids": draw(ids),
    }
    arch = draw(st.sampled_from(["dspark", "dflash", "eagle3"]))
    return (
        {"arch": "qwen3", "config": shape, "target_backend": backend},
        {"arch": arch, "config": drafter_config, "target_backend": backend},
    )


@given(target_and_own_drafter())
def test_a_drafter_built_from_the_targets_own_shape_fits(
    documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    target, drafter = (header_from_json(d) for d in documents)
    assert fit_problem(target, drafter) is None
    assert fit_problem(target, target) is None


# --- order ---------------------------------------------------------------------------------

ANY_HEADER = header_from_json({"arch": "dflash"})

PATHS = ("/a", "/b", "/m/a", "/m/b", "/z/x.base", "/z/y.base")
AUTO_KINDS = (Strategy.DSPARK, Strategy.DFLASH, Strategy.EAGLE3)
CREATED = (0.0, 1.0, 1.7e9, 4e9)


def decode_candidate(code: int) -> Candidate:
    """Every ranking fact from one drawn integer: one draw per candidate keeps CI fast.

    Few distinct values per fact make ties common, which is where the later keys matter.
    """
    code, path = divmod(code, len(PATHS))
    code, kind = divmod(code, len(AUTO_KINDS))
    code, rank = divmod(code, 5)  # 4 means no rank
    code, created = divmod(code, len(CREATED))
    return Candidate(
        path=PATHS[path],
        header=ANY_HEADER,
        kind=AUTO_KINDS[kind],
        catalog_paired=bool(code & 1),
        speculator_rank=None if rank == 4 else rank,
        named_for_target=bool(code & 2),
        same_quantisation=bool(code & 4),
        created=CREATED[created],
    )


candidates = st.integers(0, len(PATHS) * len(AUTO_KINDS) * 5 * len(CREATED) * 8 - 1).map(
    decode_candidate
)


@given(st.lists(candidates, max_size=len(PATHS), unique_by=lambda c: c.path), st.randoms())
def test_the_ranking_is_a_total_order_whatever_order_candidates_were_found_in(
    found: list[Candidate], shuffler: Any
) -> None:
    ranked = rank_candidates(found)
    shuffled = list(found)
    shuffler.shuffle(shuffled)
    assert rank_candidates(shuffled) == ranked
    # Distinct paths never tie, so no two candidates are left in input order.
    keys = [rank_key(c) for c in ranked]
    assert all(a < b for a, b in itertools.pairwise(keys))
    # A catalog pairing outranks every other preference.
    paired = [c.catalog_paired for c in ranked]
    assert paired == sorted(paired, reverse=True)


# --- names ---------------------------------------------------------------------------------

# Built from the pieces names and tags are made of, so tag-cutting paths are actually reached.
name_pieces = st.sampled_from(
    [*"abQq4_8-.kmsxil0 tdbfe", "base", "gguf", "tiled", "iq4", "mtp", "model", "of", "bf16"]
)
name_text = st.lists(name_pieces, max_size=12).map("".join) | st.text(max_size=24)


@given(name_text)
def test_a_normalised_name_is_plain_stable_and_free_of_trailing_artifact_tags(name: str) -> None:
    once = normalise_name(name)
    if once is None:
        return
    assert normalise_name(once) == once
    assert re.fullmatch(r"[a-z0-9.]+(?:-[a-z0-9.]+)*", once)
    for separator in re.finditer(r"[-.]", once):
        assert not is_artifact_tag(once[separator.end() :])


# --- catalogs ------------------------------------------------------------------------------


catalog_rows = st.dictionaries(
    st.sampled_from(["id", "file", "quant", "size", "sha256", "speculator_rank"]), json_scalars
)


@given(
    json_values
    | st.lists(catalog_rows, max_size=4)
    | st.fixed_dictionaries({"models": st.lists(catalog_rows, max_size=4)})
)
def test_any_json_reads_as_a_catalog_without_raising(document: Any) -> None:
    for row in parse_catalog(document):
        assert row.id
        assert row.size is None or row.size >= 0
