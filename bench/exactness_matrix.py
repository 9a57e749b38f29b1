"""Is every architecture x weight type exact on the served kernels? The matrix behind ADR 0008.

For each tiny model `bench/synthetic_gguf.py` makes (six architectures, seventeen weight types):

- **rows**: `bench/llamacpp_bitexact.py`'s check (1..65 rows against one at a time, the last row
  of a whole-prompt prefill, 1, 4, 9 and 65 rows packed with 1, 3 or 7 other lanes, a
  neighbour's cut), after a short context and after one past 512 cells, on the served kernels
  and on llama.cpp's own defaults, which must differ somewhere for the check to mean anything;
- **server** (`--server`): greedy replies of `superfluid serve --speculate prompt-lookup` (the
  drafts `auto` makes, with no gate to switch them off) equal to `--speculate off`, four
  requests at once per model, then four more whose prompts extend the first four's (a reused
  prefix), every model in one server of each kind.

Each kernel configuration runs in its own subprocess: llama.cpp reads its switches once per
process. `--write PATH` writes the generated Markdown table.

    .venv/bin/python -m bench.exactness_matrix [--arch NAME ...] [--type NAME ...] [--server]
        [--write docs/exactness-matrix.md]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import llamacpp_bitexact as bitexact
from bench import synthetic_gguf
from bench.http_servers import SUPERFLUID, ServerSpec, running

Cell = tuple[str, str]  # (architecture, weight type)

PROMPTS = (
    "The river runs past the old mill, under the stone bridge",
    "In the summer the children swim near the bridge while the miller",
    "one two three one two three one two",
    "the city of the river and the sea, the city of the",
)
MAX_TOKENS = 48
#: Appended to every prompt for a second wave, whose prompts then share a prefix with a finished
#: request's (the server's prefix reuse, ADR 0009).
REUSED_SUFFIX = " and then the river"


def _failures(result: dict[str, Any]) -> list[str]:
    """What differed in one context's check, in words; empty when the rows are exact."""
    found = []
    if result["rows differing at N"]:
        found.append(f"rows at N={bitexact.runs_text(result['rows differing at N'])}")
    if not result["prefill identical"]:
        found.append("prefill")
    if result["lanes differing"]:
        found.append(f"lanes {', '.join(result['lanes differing'][:3])}")
    if not result["after a neighbour's cut"]:
        found.append("after a cut")
    return found


def check_rows(cells: Iterable[Cell], candidate: str) -> dict[Cell, list[str]]:
    """Run the row check of every cell on one kernel configuration, in this process."""
    kernels = bitexact.candidates()[candidate]
    out: dict[Cell, list[str]] = {}
    for cell in cells:
        found = bitexact.check_model(synthetic_gguf.model(*cell), kernels)
        out[cell] = [f"{context}: {f}" for context, r in found.items() for f in _failures(r)]
    return out


def rows_in_subprocess(cells: Sequence[Cell], candidate: str) -> dict[Cell, list[str]]:
    """`check_rows` in a fresh process (llama.cpp's switches are read once per process)."""
    command = [sys.executable, "-m", "bench.exactness_matrix", "--rows-of", candidate]
    for arch, weights in cells:
        command += ["--cell", f"{arch}:{weights}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the row check on {candidate} failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.splitlines()[-1])
    return {tuple(k.split(":")): v for k, v in found.items()}  # type: ignore[misc]


def _served_names(cells: Sequence[Cell]) -> list[str]:
    return [f"{arch}-{weights}" for arch, weights in cells]


def server_spec(cells: Sequence[Cell], speculate: str) -> ServerSpec:
    """One `superfluid serve` holding every cell's model, under its own name."""
    paths = [synthetic_gguf.model(a, w) for a, w in cells]
    names = _served_names(cells)
    argv = [str(SUPERFLUID), "serve", str(paths[0]), "--port", "{port}", "--no-monitor"]
    argv += ["--speculate", speculate, "--ctx-size", "512", "--max-lanes", "4", "--offline"]
    for path in paths[1:]:
        argv += ["--model", str(path)]
    for name in names:
        argv += ["--served-model-name", name]
    return ServerSpec(system=f"superfluid {speculate}", argv=tuple(argv), model_name=names[0])


#: Draft tokens the speculating server accepted, per model (a reply's `superfluid.spec`).
Accepted = dict[str, int]


def greedy_replies(base: str, names: Sequence[str], accepted: Accepted) -> dict[str, list[str]]:
    """Every prompt's greedy completion from every model, four requests at once per model;
    adds each model's accepted draft tokens to `accepted`."""

    def complete(client: httpx.Client, name: str, prompt: str) -> str:
        body = {"model": name, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
        reply = client.post(f"{base}/v1/completions", json=body, timeout=120)
        reply.raise_for_status()
        found = reply.json()
        spec = found.get("superfluid", {}).get("spec", {})
        accepted[name] = accepted.get(name, 0) + int(spec.get("accepted", 0))
        return str(found["choices"][0]["text"])

    out: dict[str, list[str]] = {}
    with (
        httpx.Client() as client,
        concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool,
    ):
        for name in names:
            out[name] = list(pool.map(lambda p, n=name: complete(client, n, p), PROMPTS))
            # A second wave extends each prompt: the server reuses the first wave's KV.
            extended = [prompt + REUSED_SUFFIX for prompt in PROMPTS]
            out[name] += list(pool.map(lambda p, n=name: complete(client, n, p), extended))
    return out


def check_server(cells: Sequence[Cell], logs: Path) -> dict[Cell, str]:
    """Per cell: "same (N drafted tokens accepted)" when speculative greedy replies equal plain
    ones, else what differed."""
    names = _served_names(cells)
    replies, accepted = {}, {"off": {}, "prompt-lookup": {}}
    for speculate in ("off", "prompt-lookup"):
        with running(server_spec(cells, speculate), logs / f"server-{speculate}.log") as base:
            replies[speculate] = greedy_replies(base, names, accepted[speculate])
    out = {}
    for cell, name in zip(cells, names, strict=True):
        plain, speculative = replies["off"][name], replies["prompt-lookup"][name]
        differing = sum(a != b for a, b in zip(plain, speculative, strict=True))
        drafted = f"{accepted['prompt-lookup'].get(name, 0)} drafted tokens accepted"
        out[cell] = f"same ({drafted})" if not differing else f"{differing}/{len(plain)} differ"
    return out


@dataclass
class Row:
    cell: Cell
    served: list[str]
    stock: list[str]
    server: str | None
    types: dict[str, int]

    @property
    def exact(self) -> bool:
        return not self.served and (self.server is None or self.server.startswith("same"))


def table(rows: Sequence[Row]) -> str:
    """The generated Markdown: one row per cell, then the architectures' shapes."""
    lines = [
        "| architecture | weights | tensors | served kernels | greedy speculative = plain "
        "| llama.cpp's defaults |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        arch, weights = row.cell
        types = ", ".join(f"{n} {t}" for t, n in sorted(row.types.items()) if t != "F32")
        served = "exact" if not row.served else "**differs**: " + "; ".join(row.served)
        stock = "exact" if not row.stock else "differs: " + "; ".join(row.stock[:2])
        server = row.server or "not run"
        lines.append(f"| {arch} | {weights} | {types or 'F32'} | {served} | {server} | {stock} |")
    archs = sorted({r.cell[0] for r in rows})
    lines += ["", "| architecture | shapes |", "|---|---|"]
    lines += [f"| {a} | {synthetic_gguf.ARCHITECTURES[a].label} |" for a in archs]
    return "\n".join(lines) + "\n"


def matrix(cells: Sequence[Cell], *, server: bool, stock: bool = True) -> list[Row]:
    served = rows_in_subprocess(cells, "served (batch-invariant)")
    stock_rows = rows_in_subprocess(cells, "llama.cpp defaults") if stock else {}
    replies: dict[Cell, str] = {}
    if server:
        with tempfile.TemporaryDirectory() as logs:
            replies = check_server(cells, Path(logs))
    return [
        Row(
            cell,
            served[cell],
            stock_rows.get(cell, []),
            replies.get(cell),
            synthetic_gguf.tensor_types(synthetic_gguf.model(*cell)),
        )
        for cell in cells
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", choices=sorted(synthetic_gguf.ARCHITECTURES))
    parser.add_argument("--type", action="append", choices=list(synthetic_gguf.WEIGHT_TYPES))
    parser.add_argument("--server", action="store_true", help="also compare greedy replies")
    parser.add_argument("--write", type=Path, help="write the Markdown table here")
    parser.add_argument("--rows-of", help=argparse.SUPPRESS)
    parser.add_argument("--cell", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows_of:
        cells = [tuple(c.split(":")) for c in args.cell]
        found = check_rows(cells, args.rows_of)  # type: ignore[arg-type]
        print(json.dumps({f"{a}:{w}": v for (a, w), v in found.items()}))
        return
    cells = list(
        synthetic_gguf.each(
            args.arch or synthetic_gguf.ARCHITECTURES, args.type or synthetic_gguf.WEIGHT_TYPES
        )
    )
    rows = matrix(cells, server=args.server)
    text = table(rows)
    if args.write:
        args.write.write_text(HEADER + text)
    print(text)
    inexact = [f"{a} {w}" for (a, w), r in ((r.cell, r) for r in rows) if not r.exact]
    if inexact:
        sys.exit(f"inexact on the served kernels: {', '.join(inexact)}")


HEADER = """# Exactness matrix: every architecture x weight type on the served kernels

Generated by `.venv/bin/python -m bench.exactness_matrix --server --write docs/exactness-matrix.md`
on the machine of `docs/benchmarks/` (x86-64, AVX-512 VNNI build). Each model is a tiny random-weight
GGUF made by `bench/synthetic_gguf.py` and quantized by the installed llama.cpp. "served kernels":
`bench/llamacpp_bitexact.py`'s row check (1..65 rows, 2/4/8 lanes, whole-prompt prefill, a
neighbour's cut; after a two-sentence prompt and after 700 tokens) on what superfluid serves with (ADR 0008). "greedy
speculative = plain": four concurrent greedy completions of 48 tokens, then four whose prompts
extend theirs (a reused prefix), from `superfluid serve --speculate prompt-lookup` against
`--speculate off`. "llama.cpp's defaults": the same row check on
llama.cpp's own kernels, which shows the check can fail. "tensors": the types the quantizer chose
besides F32 norms (rows that a type's blocks do not divide fall back to a legacy type, as
llama.cpp's quantizer does).

"""


if __name__ == "__main__":
    main()
