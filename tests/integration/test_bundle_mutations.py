"""Bad files: every damaged `.base` is refused in one line, on every surface, never a traceback.

From a valid fixture target (`make_fixtures`) and a valid drafter (`write_bundle`), each mutation
damages one thing: the prefix (cut short, magic, version, header length), the header's bytes
(UTF-8, JSON, not an object), the type of one key the domain reads, one tensor entry, what only the model loader reads
(tokenizer, model config, weights), or the file itself (a GGUF, a directory, a FIFO). Three surfaces must each refuse it with exit status 2 and a
single `superfluid: …` line naming the problem:

(a) `superfluid serve <mutated target> --port 0 --no-monitor --offline` (in process, through
    typer's CliRunner; the server's gate refuses to open, so that a mutation that loads anyway
    fails the test instead of serving);
(b) `superfluid drafters <mutated target> --offline`;
(c) `auto`: the mutated file as a drafter beside a valid target, `superfluid drafters <target>
    --offline --json` exits 0 and lists it under `skipped` with a reason naming the problem.

Damage only the model loader sees (an entry running past the blob, a length that does not match
the shape, an unknown dtype, NaN weights, a broken tokenizer, a config the reference backend
cannot run) is refused by (a) alone: (b) and (c) read headers, never weights, by design, and
must then simply not trip over it. (a) refuses header damage before its port opens; damage only
loading finds is refused after the port opened for the loading phase, so its one refusal line
follows the `listening on` line.
"""

from __future__ import annotations

import copy
import json
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from superfluid.adapters.fixtures.basert import make_fixtures
from superfluid.domain.bundle_header import MAGIC, PREFIX_SIZE, weights_offset
from superfluid.entrypoints.cli import app
from superfluid.entrypoints.http.lifecycle import ServerGate

pytestmark = pytest.mark.timeout(300)

runner = CliRunner()

DRAFTER_TENSOR = {"name": "fc.weight", "dtype": "f32", "shape": [2, 64], "offset": 0, "length": 512}


@dataclass(frozen=True)
class Parts:
    """A bundle taken apart: its header object and its weights blob."""

    header: dict[str, Any]
    weights: bytes

    @classmethod
    def of(cls, data: bytes) -> Parts:
        (length,) = struct.unpack_from("<Q", data, 8)
        header = json.loads(data[PREFIX_SIZE : PREFIX_SIZE + length])
        return cls(header, data[weights_offset(length) :])

    def encoded(self) -> bytes:
        return json.dumps(self.header, separators=(",", ":")).encode()

    def bytes(self) -> bytes:
        return assemble(self.encoded(), self.weights)


def assemble(
    header: bytes,
    weights: bytes,
    *,
    magic: bytes = MAGIC,
    version: int = 1,
    header_len: int | None = None,
) -> bytes:
    """Prefix, header bytes, zero padding to the 64 KiB boundary, weights (§10's layout)."""
    length = len(header) if header_len is None else header_len
    padding = weights_offset(len(header)) - PREFIX_SIZE - len(header)
    return struct.pack("<4sIQ", magic, version, length) + header + bytes(padding) + weights


#: What `make` returns instead of bytes for a path that is not a regular file.
DIRECTORY, FIFO = "directory", "fifo"


@dataclass(frozen=True)
class Mutation:
    """One kind of damage: `make` turns a valid bundle into damaged bytes, or DIRECTORY / FIFO.

    `why` is what each surface's one line must say (any of the alternatives, case-insensitive).
    `header_only` is False for damage that only loading the model sees.
    """

    name: str
    make: Callable[[Parts], bytes | str]
    why: tuple[str, ...]
    header_only: bool = True
    #: Surfaces on which this mutation is not a refusal at all, with the reason.
    exempt: dict[str, str] = field(default_factory=dict)


def edited(change: Callable[[dict[str, Any]], None]) -> Callable[[Parts], bytes]:
    def make(parts: Parts) -> bytes:
        header = copy.deepcopy(parts.header)
        change(header)
        return Parts(header, parts.weights).bytes()

    return make


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set `a.b.c` (or `tensors[0].offset`) in a header to `value`."""

    def change(header: dict[str, Any]) -> None:
        node: Any = header
        keys = path.replace("[0]", ".0").split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        last = keys[-1]
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[int(last) if last.isdigit() else last] = value

    return change


_DELETE = object()
#: What `serve` and `drafters` say of a file whose magic is neither BASE nor GGUF: the magic is
#: how they pick a runtime (§1), so "not a model" is the problem they can name.
NOT_A_MODEL = "not a model superfluid can serve"


def cut(size: int) -> Callable[[Parts], bytes]:
    return lambda parts: parts.bytes()[:size]


def raw_header(text: bytes) -> Callable[[Parts], bytes]:
    return lambda parts: assemble(text, parts.weights)


def prefix(**fields: Any) -> Callable[[Parts], bytes]:
    return lambda parts: assemble(parts.encoded(), parts.weights, **fields)


def past_the_end(parts: Parts) -> bytes:
    data = parts.bytes()
    return assemble(parts.encoded(), parts.weights, header_len=len(data))


def not_utf8(parts: Parts) -> bytes:
    encoded = bytearray(parts.encoded())
    encoded[1] = 0xFF  # inside the first key's quotes: only its bytes change, not the length
    return assemble(bytes(encoded), parts.weights)


def first_weights_nan(parts: Parts) -> bytes:
    weights = bytearray(parts.weights)
    offset = parts.header["tensors"][0]["offset"]
    weights[offset : offset + 4] = struct.pack("<f", float("nan"))
    return Parts(parts.header, bytes(weights)).bytes()


def loader_only(name: str, change: Callable[[dict[str, Any]], None], why: str) -> Mutation:
    return Mutation(name, edited(change), (why,), header_only=False)


def gguf(_: Parts) -> bytes:
    # A GGUF v3 prefix with no tensors and no metadata: enough to be told apart, not to load.
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 0)


def type_mutations() -> Iterator[Mutation]:
    """A value of the wrong type (or range) for every key the domain reads."""
    wrong: list[tuple[str, list[Any]]] = [
        ("arch", [7, ["qwen3"]]),
        ("config", ["hidden", [1]]),
        ("config.hidden_size", ["64", 64.5, -64, True]),
        ("config.vocab_size", ["512", 1.5, -1, False]),
        ("config.num_hidden_layers", ["4", 4.0, -4, True]),
        ("config.num_target_layers", ["4", -1]),
        ("config.block_size", ["4", -1]),
        ("config.target_layer_ids", ["1,2", 3, {"0": 1}, ["1"], [-1], [True]]),
        ("config.aux_layer_ids", ["1", [1.5]]),
        ("target_backend", [1, ["cuda"]]),
        ("quant_scheme", [4, {}]),
        ("created", [True, [2026], {"at": 1}]),
        ("speculator", ["mtp", []]),
        ("speculator.config", ["mtp"]),
        ("speculator.config.kind", [1]),
        ("baserT_version", [2, []]),
        ("source", ["Tiny"]),
        ("source.filename", [3]),
        ("tensors", [{}, "t", 5]),
        ("tensors[0]", ["x", 5, None]),
        ("tensors[0].name", [5, _DELETE]),
        ("tensors[0].dtype", [5]),
        ("tensors[0].shape", ["2x64", [-1, 64], [1.5]]),
        ("tensors[0].offset", [-64, "0", 1.5]),
        ("tensors[0].length", [-1, "512"]),
    ]
    for path, values in wrong:
        for value in values:
            shown = "missing" if value is _DELETE else json.dumps(value)
            why = (path,) if value is not _DELETE else ("tensors[0] has no name",)
            yield Mutation(f"{path}={shown}", edited(setting(path, value)), why)


def mutations() -> list[Mutation]:
    found = [
        Mutation(f"truncated to {n} bytes", cut(n), ("too short", NOT_A_MODEL))
        for n in range(PREFIX_SIZE)
    ]
    found += [
        Mutation("bad magic", prefix(magic=b"BASX"), ("magic", NOT_A_MODEL)),
        Mutation("version 0", prefix(version=0), ("version 0",)),
        Mutation("version 2", prefix(version=2), ("version 2",)),
        Mutation("version 2^32-1", prefix(version=2**32 - 1), (f"version {2**32 - 1}",)),
        Mutation("header length 0", prefix(header_len=0), ("length is 0",)),
        Mutation("header length 256 MiB + 1", prefix(header_len=256 * 2**20 + 1), ("256 MiB",)),
        Mutation("header length past the end", past_the_end, ("past the end",)),
        Mutation("header not UTF-8", not_utf8, ("not UTF-8",)),
        Mutation("header not JSON", raw_header(b"{not json"), ("not valid JSON",)),
        Mutation("header with NaN", raw_header(b'{"arch": NaN}'), ("not valid JSON",)),
        Mutation("header nested too deeply", raw_header(b"[" * 100_000), ("JSON",)),
        Mutation("header an array", raw_header(b"[]"), ("not an object",)),
        Mutation("header a string", raw_header(b'"qwen3"'), ("not an object",)),
        Mutation("header a number", raw_header(b"7"), ("not an object",)),
        Mutation("header null", raw_header(b"null"), ("not an object",)),
    ]
    found += type_mutations()
    found += [
        Mutation(
            "tensor past the weights",
            edited(lambda h: h["tensors"][0].update(offset=h["tensors"][0]["offset"] + 2**40)),
            ("runs past the end of the weights",),
            header_only=False,
        ),
        Mutation(
            "shape not matching the length",
            edited(lambda h: h["tensors"][0].update(shape=[2 * h["tensors"][0]["shape"][0], 1])),
            ("bytes, but its length is",),
            header_only=False,
        ),
        Mutation(
            "dtype not matching the length",
            edited(lambda h: h["tensors"][0].update(dtype="f16")),
            ("bytes, but its length is",),
            header_only=False,
        ),
        Mutation(
            "unknown dtype",
            edited(lambda h: h["tensors"][0].update(dtype="q7")),
            ("q7",),
            header_only=False,
        ),
        Mutation(
            "a tensor listed twice",
            edited(lambda h: h["tensors"].append(dict(h["tensors"][0]))),
            ("listed twice",),
            header_only=False,
        ),
        Mutation(
            "NaN weights",
            first_weights_nan,
            ("NaN or infinite",),
            header_only=False,
        ),
        Mutation(
            "a giant dimension beside a zero",
            edited(lambda h: h["tensors"][0].update(shape=[2**70, 0], length=0)),
            ("has shape",),
            header_only=False,
        ),
        loader_only("no tokenizer", setting("tokenizer", _DELETE), "no tokenizer"),
        loader_only(
            "tokenizer_json not JSON", setting("tokenizer.tokenizer_json", "{no"), "not JSON"
        ),
        loader_only(
            "tokenizer_json not a tokenizer",
            setting("tokenizer.tokenizer_json", "{}"),
            "tokenizer does not load",
        ),
        loader_only("tokenizer_type", setting("tokenizer.tokenizer_type", "spm"), "spm"),
        loader_only(
            "end token past the vocabulary",
            setting("config.eos_token_id", 10**6),
            "outside the model's vocabulary",
        ),
        loader_only("eos_token_id a string", setting("config.eos_token_id", "x"), "eos_token_id"),
        loader_only("a recurrent arch", setting("arch", "mamba"), "recurrent state"),
        loader_only("an unknown arch", setting("arch", "gpt2"), "arch gpt2"),
        loader_only(
            "rope scaling", setting("config.rope_scaling", {"rope_type": "yarn"}), "rope_scaling"
        ),
        loader_only("a sliding window", setting("config.use_sliding_window", True), "sliding"),
        loader_only(
            "heads a string", setting("config.num_attention_heads", "4"), "num_attention_heads"
        ),
        loader_only("heads not a multiple", setting("config.num_key_value_heads", 3), "multiple"),
        loader_only("an odd head_dim", setting("config.head_dim", 15), "even"),
        loader_only("hidden size 0", setting("config.hidden_size", 0), "hidden_size"),
        loader_only("hidden size off by one", setting("config.hidden_size", 65), "has shape"),
        loader_only("more layers than tensors", setting("config.num_hidden_layers", 5), "layers.4"),
        loader_only("rms_norm_eps a string", setting("config.rms_norm_eps", "x"), "rms_norm_eps"),
        loader_only("rope_theta negative", setting("config.rope_theta", -1), "rope_theta"),
        loader_only(
            "tie_word_embeddings a string",
            setting("config.tie_word_embeddings", "yes"),
            "tie_word_embeddings",
        ),
        Mutation(
            "a GGUF file",
            gguf,
            ("GGUF", "llama.cpp", "llamacpp"),
            exempt={
                "drafters": "the file decides the runtime (§1): a GGUF target is a llama.cpp "
                "model, and `drafters` reads no further than its magic",
                "port": "llama.cpp reads a GGUF past its magic only when it loads it, after "
                "`serve` opened its port for the loading phase",
            },
        ),
        Mutation(
            "a directory",
            lambda parts: DIRECTORY,
            ("directory",),
            exempt={"auto": "the search lists regular files named *.base only (§3)"},
        ),
        Mutation(
            "a FIFO",
            lambda parts: FIFO,
            ("not a regular file",),
            exempt={"auto": "the search lists regular files named *.base only (§3)"},
        ),
    ]
    return found


MUTATIONS = mutations()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_fixtures(tmp_path_factory.mktemp("fixtures"))


def place(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if data == DIRECTORY:
        path.mkdir()
    elif data == FIFO:
        os.mkfifo(path)  # opening it to read would block until a writer came
    else:
        assert isinstance(data, bytes)
        path.write_bytes(data)
    return path


def environment(tmp: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp),
        "SUPERFLUID_HOME": str(tmp / "sf"),
        "BASERT_MODELS_DIR": str(tmp / "no-cache"),
        "SUPERFLUID_SPECULATE": "",
    }


# -- the surfaces ---------------------------------------------------------------------------------


def drafter_parts(target: Path) -> Parts:
    """A valid drafter for the fixture target: a DFlash head header with one small tensor."""
    target_header = Parts.of(target.read_bytes()).header
    config = target_header["config"]
    header = {
        "schema": 1,
        "arch": "dflash",
        "quant_scheme": "f32",
        "created": "2026-05-01T00:00:00Z",
        "baserT_version": "0.2.5",
        "target_backend": "metal",
        "source": {"filename": "Tiny-Qwen3-64-DFlash"},
        "speculator": {"config": {"kind": "dflash"}},
        "config": {
            "hidden_size": config["hidden_size"],
            "vocab_size": config["vocab_size"],
            "num_hidden_layers": 1,
            "num_target_layers": config["num_hidden_layers"],
            "target_layer_ids": [1, 2],
            "aux_layer_ids": [0],
            "block_size": 4,
        },
        "tensors": [dict(DRAFTER_TENSOR)],
    }
    return Parts(header, bytes(DRAFTER_TENSOR["length"]))


def says(line: str, mutation: Mutation) -> bool:
    return any(why.lower() in line.lower() for why in mutation.why)


def refusal_problem(result: Any, mutation: Mutation) -> str | None:
    """What is wrong with how a command refused `mutation`, or None when it refused it right:
    exit 2 and one `superfluid: …` line naming the problem, no traceback."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"raised {result.exception!r}"
    lines = result.stderr.splitlines()
    found_loading = not mutation.header_only or "port" in mutation.exempt
    if lines and "superfluid: listening on " in lines[0] and found_loading:
        lines = lines[1:]  # loading found the damage, after the port opened to say "loading"
    if result.exit_code != 2:
        return f"exit {result.exit_code}: {result.stderr[-500:]!r}"
    if len(lines) != 1 or "Traceback" in result.stderr:
        return f"{len(lines)} lines on stderr: {result.stderr[:1000]!r}"
    if not lines[0].startswith("superfluid: "):
        return f"not a superfluid line: {lines[0]}"
    if not says(lines[0], mutation):
        return f"does not name the problem ({' | '.join(mutation.why)}): {lines[0]}"
    return None


def no_problems(problems: dict[str, str]) -> None:
    assert not problems, "\n".join(f"{name}: {why}" for name, why in problems.items())


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutated target that loads anyway must fail the test, not leave a server running: the
    gate never opens (the load then ends the server with an error and a traceback)."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("serve got as far as serving a damaged bundle")

    monkeypatch.setattr(ServerGate, "open", refuse)


def test_every_mutation_is_counted() -> None:
    header_only = sum(m.header_only for m in MUTATIONS)
    print(
        f"\n{len(MUTATIONS)} mutations: {header_only} of the prefix, header or file, "
        f"{len(MUTATIONS) - header_only} of what only loading the model reads"
    )
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS) >= 100


def test_serve_refuses_every_mutated_target_in_one_line(
    fixtures: dict[str, Path], tmp_path: Path, no_serving: None
) -> None:
    parts = Parts.of(fixtures["target"].read_bytes())
    env = environment(tmp_path)
    problems = {}
    for index, mutation in enumerate(MUTATIONS):
        target = place(tmp_path / f"m{index:03d}" / "Tiny.base", mutation.make(parts))
        arguments = ["serve", str(target), "--port", "0", "--no-monitor", "--offline"]
        problem = refusal_problem(runner.invoke(app, arguments, env=env), mutation)
        if problem is not None:
            problems[mutation.name] = problem
    print(f"\nserve: {len(MUTATIONS) - len(problems)} of {len(MUTATIONS)} refused in one line")
    no_problems(problems)


def test_drafters_refuses_every_mutated_target_in_one_line(
    fixtures: dict[str, Path], tmp_path: Path
) -> None:
    parts = Parts.of(fixtures["target"].read_bytes())
    env = environment(tmp_path)
    problems, refused = {}, 0
    for index, mutation in enumerate(MUTATIONS):
        target = place(tmp_path / f"m{index:03d}" / "Tiny.base", mutation.make(parts))
        result = runner.invoke(app, ["drafters", str(target), "--offline"], env=env)
        if mutation.header_only and "drafters" not in mutation.exempt:
            problem = refusal_problem(result, mutation)
            refused += problem is None
        elif result.exit_code != 0:
            # Damage it never reads: the header is fine, so the report is too.
            problem = f"exit {result.exit_code}: {result.stderr!r} {result.exception!r}"
        else:
            problem = None
        if problem is not None:
            problems[mutation.name] = problem
    print(f"\ndrafters: {refused} mutated targets refused in one line")
    no_problems(problems)


def test_auto_skips_every_mutated_drafter_naming_the_problem(
    fixtures: dict[str, Path], tmp_path: Path
) -> None:
    models = tmp_path / "models"
    target = place(models / fixtures["target"].name, fixtures["target"].read_bytes())
    parts = drafter_parts(target)
    valid = place(models / "drafters" / "valid-dflash.base", parts.bytes())
    placed = {
        str(place(models / "drafters" / f"m{index:03d}.base", mutation.make(parts))): mutation
        for index, mutation in enumerate(MUTATIONS)
    }
    result = runner.invoke(
        app, ["drafters", str(target), "--offline", "--json"], env=environment(tmp_path)
    )
    assert result.exit_code == 0, f"{result.stderr}{result.exception!r}"
    report = json.loads(result.stdout)
    skipped = {entry["path"]: entry["reason"] for entry in report["skipped"]}
    candidates = {entry["path"] for entry in report["candidates"]}
    assert str(valid) in candidates, skipped.get(str(valid))
    problems, checked = {}, 0
    for path, mutation in placed.items():
        if "auto" in mutation.exempt:
            if path in skipped or path in candidates:
                problems[mutation.name] = "listed, though the search never lists it"
        elif mutation.header_only:
            reason = skipped.get(path)
            if reason is None:
                problems[mutation.name] = "not skipped" + (" (a candidate)" * (path in candidates))
            elif "\n" in reason or not says(reason, mutation):
                problems[mutation.name] = f"the reason does not name the problem: {reason}"
            else:
                checked += 1
    print(f"\nauto: {checked} mutated drafters skipped, each with the problem named")
    no_problems(problems)
