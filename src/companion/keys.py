"""What a paper's run depends on, as two hashes: the code key and the cache key.

The **code key** covers what decides a result and lives in the repository: the notebook's code
cells, the resolved parameters, the source of the paper's package and of every other
``companion`` module it imports (found by reading the imports, transitively). A stored evidence
record whose code key differs from the current one is stale. Package versions, paths and machine
facts are recorded beside it, not compared.

The **cache key** adds what decides a result but lives outside the repository: the device and
thread count the run uses, fingerprints of the external paths it reads (``model_path``,
``data_path``, ``features_dir``, ...), the Python version and the versions of the third-party
packages that the code imports. Another paper's code, ``book.py`` or the CLI change neither key.
"""

from __future__ import annotations

import ast
import hashlib
import json
import platform
import sys
from functools import lru_cache
from importlib import metadata, util
from pathlib import Path
from typing import Any, Iterable, Mapping

import nbformat

PATH_SUFFIXES = ("_path", "_dir")
# Framework modules that decide no result: the paper list, the commands, the book, the keys
# themselves. A paper's code may reach them (params asks the registry for the project root), but
# registering another paper or editing the book must not make this paper's records stale.
NOT_RESULTS = frozenset(f"companion.{m}" for m in ("registry", "cli", "runner", "sweep", "book", "keys",
                                                   "bench", "evidence", "executor", "fetch"))
FULL_HASH_LIMIT = 64 * 2**20
EDGE_BYTES = 2**20


# A cell with this tag only installs the companion on a hosted kernel (Colab, Binder); it decides
# no result, so adding it or changing its repository URL leaves every record current.
INSTALL_TAG = "install-companion"


def result_cells(nb: nbformat.NotebookNode) -> list[str]:
    """The sources of the code cells that decide a result (all but the install cell), in order."""
    return [cell.source for cell in nb.cells
            if cell.cell_type == "code" and INSTALL_TAG not in cell.metadata.get("tags", [])]


def code_cells(notebook: Path) -> list[str]:
    """The sources of the notebook's result-deciding code cells, in order."""
    return result_cells(nbformat.read(notebook, as_version=4))


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names of the modules that ``source`` (of ``module``) imports."""
    out: set[str] = set()
    base = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                root = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{root}.{node.module}" if node.module else root
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


def _source_of(name: str) -> tuple[Path | None, bool]:
    """The source file of module ``name`` and whether it is a package (None when not found)."""
    try:
        spec = util.find_spec(name)
    except (ImportError, ValueError):
        return None, False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None, False
    return Path(spec.origin), spec.submodule_search_locations is not None


@lru_cache(maxsize=None)
def _module_imports(name: str) -> tuple[Path | None, frozenset[str]]:
    """The file of ``name`` and the modules it imports (cached per module)."""
    path, is_package = _source_of(name)
    if path is None:
        return None, frozenset()
    return path, frozenset(_imports(path.read_text(), name, is_package))


def closure(start: Iterable[str], package: str | None = None) -> tuple[dict[str, Path], set[str]]:
    """``companion`` modules reachable from ``start`` (name -> file) and third-party top-level names.

    Every module of ``package`` (the paper's own package) is included whether imported or not.
    """
    todo = list(start)
    if package is not None:
        pkg_path, _ = _source_of(package)
        if pkg_path is not None:
            todo += [f"{package}.{p.stem}" for p in pkg_path.parent.glob("*.py") if p.stem != "__init__"]
            todo.append(package)
    found: dict[str, Path] = {}
    third: set[str] = set()
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_RESULTS:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top != "companion":
            if top and top not in sys.stdlib_module_names:
                third.add(top)
            continue
        path, imported = _module_imports(name)
        if path is None:
            continue
        found[name] = path
        todo.extend(imported)
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)
    return found, third


def notebook_imports(cells: Iterable[str]) -> set[str]:
    """Modules imported by notebook code (magics and shell lines skipped)."""
    out: set[str] = set()
    for cell in cells:
        lines = [line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            out |= _imports("\n".join(lines), "__main__", False)
        except SyntaxError:
            continue
    return out


def fingerprint(path: Path) -> str:
    """A content hash of a file or folder; files over 64 MiB hash their size and first/last MiB."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        size = f.stat().st_size
        h.update(str(f.relative_to(path) if f != path else f.name).encode())
        h.update(str(size).encode())
        with f.open("rb") as fh:
            if size <= FULL_HASH_LIMIT:
                for block in iter(lambda: fh.read(2**20), b""):
                    h.update(block)
            else:
                h.update(fh.read(EDGE_BYTES))
                fh.seek(size - EDGE_BYTES)
                h.update(fh.read(EDGE_BYTES))
    return h.hexdigest()


def external_paths(params: Mapping[str, Any]) -> dict[str, str]:
    """Fingerprints of the existing paths named by ``*_path`` / ``*_dir`` parameters."""
    from companion.params import resolve_path

    out = {}
    for name, value in sorted(params.items()):
        if name.endswith(PATH_SUFFIXES) and isinstance(value, str) and value:
            path = resolve_path(value)
            if path.exists():
                out[name] = fingerprint(path)
    return out


def package_versions(top_names: Iterable[str]) -> dict[str, str]:
    """Installed versions of the distributions that provide the given top-level modules."""
    dists = metadata.packages_distributions()
    out = {"python": platform.python_version()}
    for top in sorted(top_names):
        for dist in dists.get(top, []):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    return out


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def code_key(package: str, notebook: Path, params: Mapping[str, Any]) -> tuple[str, dict[str, Path], set[str]]:
    """The code key of a run, the ``companion`` modules it covers, and the third-party imports."""
    cells = code_cells(notebook)
    modules, third = closure(notebook_imports(cells), package)
    parts = [c.encode() for c in cells]
    parts.append(json.dumps(dict(params), sort_keys=True, default=list).encode())
    root = Path(__file__).resolve().parent
    for name in sorted(modules):
        path = modules[name]
        parts.append(str(path.relative_to(root.parent) if path.is_relative_to(root.parent) else name).encode())
        parts.append(path.read_bytes())
    return _digest(parts), modules, third


def cache_key(code: str, device: str, threads: int, paths: Mapping[str, str],
              versions: Mapping[str, str]) -> str:
    """The cache key: the code key plus device, threads, external paths and package versions."""
    facts = {"code": code, "device": device, "threads": threads, "paths": dict(paths),
             "versions": dict(versions)}
    return _digest([json.dumps(facts, sort_keys=True).encode()])
