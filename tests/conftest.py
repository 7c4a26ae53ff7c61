"""Shared fixtures: a throwaway project with a toy paper, so runner and CLI tests stay fast."""
# ruff: noqa: E402  (the numerics profile is set before the numerical libraries are imported)

from __future__ import annotations

from companion import numerics

# Before torch and numpy load here: every test process and every process it spawns computes under the
# one profile (the CLI sets it too, and a profile set halfway through would split a test's processes).
numerics.apply()

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook
from threadpoolctl import threadpool_limits

from companion import registry
from companion.params import BaseParams, param

TOY_SLUG = "toy-paper"


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models and fits, as in every paper's ``run``: spare threads only spin on 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(before)


@dataclass(frozen=True)
class ToyParams(BaseParams):
    """A paper with one knob that makes its notebook raise."""

    fail: bool = param(False)
    level: float = param(0.7, lo=0.0, hi=1.0)
    sleep: float = param(0.0, lo=0.0, hi=600.0)


def toy_notebook() -> nbformat.NotebookNode:
    """Parameters, an optional failure, one claim emitted through the real claims module."""
    params = new_code_cell('preset = "quick"\nseed = None\nseeds = None\ndevice = None\nfail = None\nlevel = None\n'
                           'sleep = None')
    params.metadata["tags"] = ["parameters"]
    body = new_code_cell(
        "from companion import claims\n"
        "import time\nimport tqdm.auto  # warns in a kernel without ipywidgets unless the runner silences it\n"
        "time.sleep(sleep or 0)\n"
        "if fail:\n    raise ValueError('boom from the toy paper')\n"
        "level = 0.7 if level is None else level\n"
        "verdicts = claims.evaluate_all([claims.Claim('toy', 's', '1', 0.5)], {'toy': [level] * (seeds or 3)})"
    )
    last = new_code_cell("# NBVAL_CHECK_OUTPUT\nclaims.emit(verdicts, {'level': level})")
    return new_notebook(cells=[params, body, last],
                        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


@pytest.fixture
def toy_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project root holding only the toy paper, registered in place of the real ones."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    nbformat.write(toy_notebook(), tmp_path / "notebooks" / f"{TOY_SLUG}.ipynb")
    module = types.ModuleType("companion.papers.toy_paper")
    module.Params = ToyParams
    monkeypatch.setitem(sys.modules, "companion.papers.toy_paper", module)
    monkeypatch.setattr(registry, "PAPERS", {TOY_SLUG: registry.Paper(TOY_SLUG, "Toy", "A. B.", "https://x", "toy")})
    monkeypatch.setattr(registry, "project_root", lambda: tmp_path)
    # Dask worker processes would not see these monkeypatches: sweeps and stores run inline here
    # (tests/test_executor.py puts the toy paper on real workers through a preload).
    monkeypatch.setenv("COMPANION_SCHEDULER", "inline")
    return tmp_path
