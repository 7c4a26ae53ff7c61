"""The install files agree: environment.yml and the locks follow pyproject.toml, the running
environment is the lock, and the provenance hash and the Jupyter kernel come out as installed."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from companion import environment, kernelspec, registry

ROOT = registry.project_root()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BOOK_LOCK = ROOT / "requirements" / "lock-book-cpu.txt"
ENTRY = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)")




def _wanted(*extras: str) -> list[Requirement]:
    """The runtime dependencies and those of ``extras``, less the companion's own extras."""
    specs = [*PROJECT["dependencies"], *(s for e in extras for s in PROJECT["optional-dependencies"][e])]
    return [Requirement(s) for s in specs if canonicalize_name(Requirement(s).name) != "companion"]


def _lock(path: Path) -> dict[str, tuple[Version, frozenset[str]]]:
    """A lock's entries, name -> (version, hashes); every entry must be an exact pin with hashes."""
    entries = {}
    text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines()).replace("\\\n", " ")
    for line in filter(str.strip, text.splitlines()):
        m = ENTRY.fullmatch(line.strip())
        assert m, f"{path.name}: not an exact pin with sha256 hashes: {line.strip()[:120]}"
        entries[canonicalize_name(m[1])] = (Version(m[2]), frozenset(re.findall(r"[0-9a-f]{64}", m[3])))
    return entries


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    pyproject = {canonicalize_name(r.name): r.specifier for r in _wanted("book", "test")}
    conda = {}
    text = (ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():
        item = line.split("#", 1)[0].strip()
        if not item.startswith("- ") or item.endswith(":"):
            continue
        spec = item[2:].strip()
        if spec in ("pip", "-e .") or spec.startswith("python="):
            continue
        req = Requirement(spec)
        conda[canonicalize_name(req.name)] = req.specifier
    assert conda == pyproject


def test_environment_yml_python_satisfies_requires_python():
    python = re.search(r"^\s*- python=(\S+)", (ROOT / "environment.yml").read_text(), re.M)[1]
    assert Version(python) in SpecifierSet(PROJECT["requires-python"])
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in SpecifierSet(PROJECT["requires-python"])


@pytest.mark.parametrize(("lock", "extras"), [(ROOT / environment.LOCK_FILE, ("book", "test")),
                                              (BOOK_LOCK, ("book",))], ids=["lock", "book-lock"])
def test_lock_pins_every_dependency_inside_its_pyproject_range(lock: Path, extras: tuple[str, ...]):
    entries = _lock(lock)
    for req in _wanted(*extras):
        if req.marker is None or req.marker.evaluate():
            name = canonicalize_name(req.name)
            assert name in entries, f"{lock.name} lacks {req}"
            assert req.specifier.contains(entries[name][0], prereleases=True), \
                f"{lock.name} pins {name}=={entries[name][0]}, outside pyproject.toml's {req}"
    assert "companion" not in entries
    assert str(entries["torch"][0]) == "2.13.0+cpu"


def test_book_lock_is_the_lock_without_the_test_extra():
    lock, book = _lock(ROOT / environment.LOCK_FILE), _lock(BOOK_LOCK)
    assert {name: book[name] for name in book if lock.get(name) != book[name]} == {}
    assert "ggml-python" in lock and "ggml-python" not in book


def test_running_environment_is_the_lock():
    lock = _lock(ROOT / environment.LOCK_FILE)
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in importlib.metadata.distributions()}
    if installed.get("torch") != lock["torch"][0]:
        pytest.skip(f"torch {installed.get('torch')} is not the lock's {lock['torch'][0]}: "
                    "installed with TORCH_SPEC, which leaves the lock")
    differ = {name: (str(version), str(installed.get(name))) for name, (version, _) in lock.items()
              if installed.get(name) != version}
    assert differ == {}, "installed packages that differ from the lock (lock, installed); run make install"


def test_lock_hash_is_the_lock_file_sha256(tmp_path: Path):
    assert environment.lock_hash(tmp_path) is None
    lock = tmp_path / environment.LOCK_FILE
    lock.parent.mkdir(parents=True)
    lock.write_text("numpy==2.4.6 --hash=sha256:" + "0" * 64 + "\n")
    assert environment.lock_hash(tmp_path) == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert environment.lock_hash(ROOT) == hashlib.sha256((ROOT / environment.LOCK_FILE).read_bytes()).hexdigest()


def test_kernelspec_runs_this_python_with_the_numerics_profile(tmp_path: Path):
    from companion import numerics

    assert kernelspec.main(["--prefix", str(tmp_path)]) == 0
    spec = json.loads((tmp_path / "share/jupyter/kernels/companion/kernel.json").read_text())
    argv = spec["argv"]
    assert argv[0] == sys.executable and Path(argv[0]).parent == Path(sys.prefix) / "bin"
    assert argv[argv.index("-m") + 1] == "ipykernel_launcher" and "{connection_file}" in argv
    assert spec["env"] == numerics.profile_for(os.environ)
    assert not numerics.applies() or set(spec["env"]) == set(numerics.PROFILE)
    assert spec["display_name"] == "Python (companion)"
