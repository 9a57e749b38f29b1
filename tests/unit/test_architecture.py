"""The dependency rule and the purity of the domain, checked on every test run."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "src" / "superfluid" / "domain"
BIN = Path(sys.executable).parent

# Names whose use would give the domain I/O, a clock, the environment or threads.
FORBIDDEN_CALLS = {"open", "input", "print", "exec", "eval", "__import__"}
FORBIDDEN_ATTRIBUTES = {
    ("os", "environ"),
    ("os", "getenv"),
    ("time", "time"),
    ("time", "monotonic"),
}


def _domain_modules():
    return sorted(DOMAIN.rglob("*.py"))


def _imported_roots(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def test_import_linter_contracts_hold():
    result = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_adapters_are_kept_from_every_application_module_but_ports_and_events():
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [
        c for c in contracts["contracts"] if c["name"].startswith("Adapters reach the application")
    ]
    application = ROOT / "src" / "superfluid" / "application"
    modules = {
        f"superfluid.application.{p.stem}"
        for p in application.glob("*.py")
        if p.stem not in ("__init__", "ports", "events")
    }
    assert set(contract["forbidden_modules"]) == modules


@pytest.mark.parametrize("path", _domain_modules(), ids=lambda p: str(p.relative_to(DOMAIN)))
def test_the_domain_imports_only_the_stdlib_numpy_and_itself(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    allowed = set(sys.stdlib_module_names) | {"numpy", "superfluid"}
    # The stdlib modules that would let the domain touch the outside world.
    impure = {
        "os",
        "io",
        "time",
        "threading",
        "socket",
        "subprocess",
        "pathlib",
        "shutil",
        "random",
        "asyncio",
        "multiprocessing",
        "urllib",
        "http",
        "tempfile",
        "glob",
        "sqlite3",
    }
    for root, line in _imported_roots(tree):
        assert root in allowed, f"{path.name}:{line} imports {root}"
        assert root not in impure, f"{path.name}:{line} imports {root} (I/O, clock or threads)"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("superfluid")
        ):
            assert node.module.startswith("superfluid.domain"), f"{path.name} imports {node.module}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, (
                f"{path.name}:{node.lineno} calls {node.func.id}"
            )
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pair = (node.value.id, node.attr)
            assert pair not in FORBIDDEN_ATTRIBUTES, f"{path.name}:{node.lineno} uses {pair}"


def test_ruff_finds_nothing():
    result = subprocess.run(
        [str(BIN / "ruff"), "check", "src", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_all_of_src_type_checks_strictly():
    result = subprocess.run(
        [str(BIN / "mypy"), "--no-error-summary"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_http_talks_to_served_models_never_to_their_runtimes():
    http = ROOT / "src" / "superfluid" / "entrypoints" / "http"
    for path in sorted(http.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "runtime":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "host"), (
                    f"{path.name}:{node.lineno} reaches into host.runtime"
                )


def _cycle_in(graph, modules):
    """One import cycle among `modules` (a list of module names), or None."""
    done, on_path, path = set(), set(), []

    def visit(module):
        done.add(module)
        on_path.add(module)
        path.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported in on_path:
                return [*path[path.index(imported) :], imported]
            if imported not in done and imported in modules:
                found = visit(imported)
                if found:
                    return found
        on_path.discard(module)
        path.pop()
        return None

    for module in sorted(modules):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_no_module_in_src_imports_itself_back():
    grimp = pytest.importorskip("grimp")
    # Imports under `if TYPE_CHECKING:` count too: a cycle that only type checks is still one.
    graph = grimp.build_graph("superfluid", cache_dir=None)
    cycle = _cycle_in(graph, set(graph.modules))
    assert cycle is None, " -> ".join(cycle)


def _module_name(path):
    parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defined_at_top(tree):
    """The names a module defines itself: functions, classes and assigned names."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_import_names_the_home_module_of_what_it_imports():
    # One home per name: no module forwards another's names, so a name is imported from the
    # module that defines it (or a submodule from its package), never through a re-export.
    defined = {
        _module_name(path): _defined_at_top(ast.parse(path.read_text()))
        for path in (ROOT / "src").rglob("*.py")
    }
    forwarded = []
    for folder in ("src", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.module in defined):
                    continue
                for alias in node.names:
                    is_home = alias.name in defined[node.module]
                    if not is_home and f"{node.module}.{alias.name}" not in defined:
                        where = f"{path.relative_to(ROOT)}:{node.lineno}"
                        forwarded.append(f"{where} imports {alias.name} from {node.module}")
    assert forwarded == []


def test_imports_written_in_strings_and_docs_name_home_modules_too():
    # Code run in a subprocess (`python -c`), shell scripts and documented commands import by
    # text; the same one-home rule holds for them.
    defined = {
        _module_name(path): _defined_at_top(ast.parse(path.read_text()))
        for path in (ROOT / "src").rglob("*.py")
    }
    written = re.compile(r"from (superfluid[\w.]*) import ([\w ,]+)")
    forwarded = []
    folders = ("src", "tests", "bench", "scripts", "docs", "deploy")
    paths = [p for folder in folders for p in (ROOT / folder).rglob("*") if p.is_file()]
    for path in sorted([*paths, ROOT / "README.md"]):
        if path.suffix not in (".py", ".md", ".sh", ".cfg", ".toml"):
            continue
        for match in written.finditer(path.read_text()):
            module, names = match.group(1), match.group(2)
            if module not in defined:
                continue
            for name in (n.split(" as ")[0].strip() for n in names.split(",")):
                if name and name not in defined[module] and f"{module}.{name}" not in defined:
                    forwarded.append(f"{path.relative_to(ROOT)} imports {name} from {module}")
    assert forwarded == []


def test_no_module_in_src_declares_all():
    # `__all__` exists to shape re-exports; with none, a module's public names are its own.
    declaring = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "src").rglob("*.py"))
        if "__all__" in _defined_at_top(ast.parse(path.read_text()))
    ]
    assert declaring == []
