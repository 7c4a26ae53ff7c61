"""What a paper's run depends on, as three hashes: the code key, the verdict key and the cache key.

The **code key** (the measurement key) covers what decides the measured values and lives in the
repository, by meaning: the notebook's result cells (IPython magics transformed into Python), the
resolved parameters, and every ``companion`` module the run can execute (the paper's package whole,
plus what it imports, transitively, and their parent packages). Each source is parsed, never imported,
and reduced to its abstract syntax tree without docstrings, comments, formatting or line numbers, so
a reworded docstring, a comment or a reformat leaves every record current, while a changed constant,
expression or call makes exactly the records that execute it stale. Left out on purpose: the figure
style of :mod:`companion.plotting` (it computes no value; figures are re-drawn at the next store),
and, because they decide verdicts, not values, the claim declarations (every ``Claim(...)`` call:
id, statement, paper value, threshold, direction, kind, role, controls) and the verdict logic of
:mod:`companion.claims`. They make up the **verdict key**: when only it changes, ``companion
rejudge`` re-evaluates the stored per-seed values instead of re-running anything. (``claims.worst``
is the one value-computing helper there: a min or max over seeds, whose meaning must not change.)

The **cache key** adds what decides a result but lives outside the repository: the device, the
thread count, the numerics profile, fingerprints of the external paths a run reads (``model_path``,
``data_path``, ``features_dir``, ...), the Python version and the versions of the third-party
packages the code imports. Another paper's code, ``book.py`` or the CLI change no key.
"""

from __future__ import annotations

import ast
import hashlib
import json
import platform
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

import nbformat

PATH_SUFFIXES = ("_path", "_dir")
PACKAGE_ROOT = Path(__file__).resolve().parent
# Framework modules that decide no result: the paper list, the commands, the book, the keys
# themselves. A paper's code may reach them (params asks the registry for the project root), but
# registering another paper or editing the book must not make this paper's records stale. The numerics
# profile acts through environment variables, which the cache key and the provenance carry; its source
# is not a result (a page that reads its full record through ``evidence`` imports it at run time, and
# the key that ``evidence`` recomputes must be the key the run stored).
NOT_RESULTS = frozenset(f"companion.{m}" for m in ("registry", "cli", "runner", "sweep", "book", "keys",
                                                   "bench", "evidence", "executor", "fetch", "kernelspec",
                                                   "environment", "numerics", "fingerprint"))
# Figure style and panel helpers: they draw the page's figures and compute no claim value or metric,
# so a restyle re-draws the figures at the next store instead of staling every record.
FIGURE_MODULES = frozenset({"companion.plotting"})
# Verdict logic: it turns stored per-seed values into verdicts, so it belongs to the verdict key.
VERDICT_MODULES = frozenset({"companion.claims"})
CLAIM_CALL = "Claim"
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


def python_of_cell(source: str) -> str:
    """A notebook cell as plain Python: IPython's own transformer rewrites magics and ``!`` lines."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` without a leading string statement (a docstring); an emptied body becomes ``pass``."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body or [ast.Pass()]


def _canonical(node: Any) -> Any:
    """A syntax tree as nested lists: node type, then its non-empty fields by name.

    ``ast.dump`` is not used because its text changes between Python versions (3.13 leaves empty
    fields out); empty fields are left out here on every version, so a key survives an upgrade
    that adds a field which the code does not use.
    """
    if isinstance(node, ast.AST):
        fields = []
        for name, value in ast.iter_fields(node):
            if name in ("type_comment", "kind") or value is None or value == []:
                continue
            fields.append([name, _canonical(value)])
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    if isinstance(node, (bytes, complex, type(...))):
        return repr(node)
    return node


class _Normaliser(ast.NodeTransformer):
    """Drops docstrings and lifts ``Claim(...)`` declarations out of the tree into ``claims``."""

    def __init__(self) -> None:
        self.claims: list[Any] = []

    def _strip(self, node: ast.AST) -> ast.AST:
        node.body = _without_docstring(node.body)  # type: ignore[attr-defined]
        return self.generic_visit(node)

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _strip

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name == CLAIM_CALL:
            self.claims.append(_canonical(node))
            return ast.Constant(value=CLAIM_CALL)
        return self.generic_visit(node)


def normalise(source: str) -> tuple[bytes, bytes]:
    """The meaning of Python ``source``: its tree without docstrings or claim declarations, and
    the declarations apart (both as canonical JSON bytes). Unparsable source hashes as written."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source.encode(), b"[]"
    lifter = _Normaliser()
    tree = lifter.visit(tree)
    return (json.dumps(_canonical(tree), separators=(",", ":")).encode(),
            json.dumps(lifter.claims, separators=(",", ":")).encode())


def module_file(name: str) -> Path | None:
    """The source file of ``companion`` module ``name``, found on disk (never by importing it)."""
    parts = name.split(".")
    if parts[0] != "companion":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names of the modules that ``source`` (of ``module``) imports, anywhere in it."""
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


def _cache_dir() -> Path:
    """Where parsed sources and the module-to-distribution map are kept between commands."""
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "companion"


@lru_cache(maxsize=1)
def _disk_cache() -> dict[str, Any]:
    """The parse cache of earlier commands (content hash -> imports, meaning and claims digests)."""
    try:
        return json.loads((_cache_dir() / "parsed.json").read_text())
    except (OSError, ValueError):
        return {}


def _save_disk_cache() -> None:
    """Keep the parse cache for the next command (best effort: a read-only home just parses again)."""
    try:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".parsed.{id(_disk_cache)}.tmp"
        tmp.write_text(json.dumps(_disk_cache()))
        tmp.replace(folder / "parsed.json")
    except OSError:
        pass


def _parse(source: str, name: str, is_package: bool) -> dict[str, Any]:
    """Imports, and digests of the meaning and of the claim declarations, of one source."""
    meaning, claims = normalise(source)
    try:
        imported = sorted(_imports(source, name, is_package))
    except SyntaxError:
        imported = []
    return {"imports": imported, "meaning": hashlib.sha256(meaning).hexdigest(),
            "claims": hashlib.sha256(claims).hexdigest()}


def parsed(name: str) -> tuple[Path, frozenset[str], bytes, bytes] | None:
    """The file of ``companion`` module ``name`` with its imports and the digests of its meaning and
    claim declarations, cached by the file's content (so a Dask worker sees an edited file anew)."""
    path = module_file(name)
    if path is None:
        return None
    source = path.read_text()
    cache = _disk_cache()
    key = hashlib.sha256(f"{name}\0{source}".encode()).hexdigest()
    if key not in cache:
        cache[key] = _parse(source, name, path.name == "__init__.py")
        _save_disk_cache()
    hit = cache[key]
    return path, frozenset(hit["imports"]), hit["meaning"].encode(), hit["claims"].encode()


def closure(start: Iterable[str], package: str | None = None) -> tuple[dict[str, Path], set[str]]:
    """``companion`` modules reachable from ``start`` (name -> file) and third-party top-level names.

    Every module of ``package`` (the paper's own package) is included whether imported or not.
    """
    todo = list(start)
    if package is not None:
        pkg_path = module_file(package)
        if pkg_path is not None:
            todo += [f"{package}.{p.stem}" for p in pkg_path.parent.glob("*.py") if p.stem != "__init__"]
            todo.append(package)
    found: dict[str, Path] = {}
    third: set[str] = set()
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_RESULTS or name in FIGURE_MODULES:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top != "companion":
            if top and top not in sys.stdlib_module_names:
                third.add(top)
            continue
        hit = parsed(name)
        if hit is None:
            continue
        found[name] = hit[0]
        todo.extend(hit[1])
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)
    return found, third


def uncovered(imported: Iterable[str], covered: Mapping[str, Path]) -> list[str]:
    """The ``companion`` modules a kernel imported that a key over ``covered`` would miss."""
    skip = NOT_RESULTS | FIGURE_MODULES | VERDICT_MODULES
    return sorted(m for m in imported if m.split(".")[0] == "companion" and m not in covered and m not in skip
                  and module_file(m) is not None)


def notebook_imports(cells: Iterable[str]) -> set[str]:
    """Modules imported by notebook code (magics transformed first)."""
    out: set[str] = set()
    for cell in cells:
        try:
            out |= _imports(python_of_cell(cell), "__main__", False)
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


@lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    """Top-level module -> distributions, cached on disk per installed set (reading every
    distribution's files takes about a second)."""
    import sys as _sys

    dirs = sorted({str(Path(p)) for p in _sys.path if p and Path(p).is_dir()})
    stamp = hashlib.sha256(json.dumps([(d, Path(d).stat().st_mtime_ns) for d in dirs]).encode()).hexdigest()
    path = _cache_dir() / f"distributions-{stamp[:16]}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        mapping = {k: list(v) for k, v in metadata.packages_distributions().items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(mapping))
    except OSError:
        pass
    return mapping


def package_versions(top_names: Iterable[str]) -> dict[str, str]:
    """Installed versions of the distributions that provide the given top-level modules."""
    dists = _distributions()
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


def _label(name: str, path: Path) -> bytes:
    """A covered module as the key names it: its path inside ``src/``, the same on every machine."""
    return str(path.relative_to(PACKAGE_ROOT.parent) if path.is_relative_to(PACKAGE_ROOT.parent) else name).encode()


@dataclass(frozen=True)
class Keys:
    """A run's code (measurement) key and verdict key, the modules they cover, its third-party imports."""

    code: str
    verdict: str
    modules: dict[str, Path]
    third: set[str]


def keys_of(package: str, notebook: Path, params: Mapping[str, Any], extra: Iterable[str] = ()) -> Keys:
    """Both repository keys of a run of ``package``'s ``notebook`` at ``params`` (``extra``: modules a
    kernel reported importing that the source does not name, e.g. through ``importlib``)."""
    cells = code_cells(notebook)
    modules, third = closure(notebook_imports(cells) | set(extra), package)
    code_parts: list[bytes] = []
    verdict_parts: list[bytes] = []
    for cell in cells:
        meaning, claims = normalise(python_of_cell(cell))
        code_parts.append(meaning)
        verdict_parts.append(claims)
    code_parts.append(json.dumps(dict(params), sort_keys=True, default=list).encode())
    for name in sorted(set(modules) | VERDICT_MODULES):
        hit = parsed(name)
        if hit is None:
            continue
        path, _, meaning, claims = hit
        if name in VERDICT_MODULES:
            verdict_parts += [_label(name, path), meaning]
        else:
            code_parts += [_label(name, path), meaning]
            verdict_parts += [_label(name, path), claims]
    return Keys(_digest(code_parts), _digest(verdict_parts), modules, third)


def script_key(script: Path) -> str:
    """The code key of a script outside the package (a benchmark): its meaning and that of every
    ``companion`` module it imports, transitively."""
    source = script.read_text()
    modules, _ = closure(_imports(source, "__main__", False))
    parts = [normalise(source)[0]]
    for name in sorted(modules):
        hit = parsed(name)
        if hit is not None:
            parts += [_label(name, hit[0]), hit[2]]
    return _digest(parts)


def params_for_key(params: Any) -> dict[str, Any]:
    """Resolved parameters as the key sees them: path parameters as spelled relative to the project."""
    return params.key_dict()


def code_key(package: str, notebook: Path, params: Mapping[str, Any]) -> tuple[str, dict[str, Path], set[str]]:
    """The code key of a run, the ``companion`` modules it covers, and the third-party imports."""
    k = keys_of(package, notebook, params)
    return k.code, k.modules, k.third


def cache_key(code: str, device: str, threads: int, paths: Mapping[str, str],
              versions: Mapping[str, str], profile: Mapping[str, str]) -> str:
    """The cache key: the code key plus device, threads, external paths, package versions and
    the numerics profile."""
    facts = {"code": code, "device": device, "threads": threads, "paths": dict(paths),
             "versions": dict(versions), "profile": dict(profile)}
    return _digest([json.dumps(facts, sort_keys=True).encode()])
