"""Every registered paper is complete and its page follows the anatomy; generated pages are right."""

from __future__ import annotations

import re

import nbformat
import pytest

from companion import book, registry
from companion.params import ParamError
from companion.runner import notebook_parameters

ROOT = registry.project_root()
SLUGS = list(registry.PAPERS)


@pytest.mark.parametrize("slug", SLUGS)
def test_paper_module_has_the_contract(slug):
    module = registry.get(slug).module()
    for name in ("Params", "run", "check", "metrics", "CLAIMS"):
        assert hasattr(module, name), f"{slug} lacks {name}"
    ids = [c.id for c in module.CLAIMS]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z0-9][a-z0-9.-]*", i) for i in ids)
    for preset in ("quick", "full"):
        module.Params.resolve(preset)
    try:
        module.Params.resolve("paper")
    except ParamError as err:  # the real setting needs weights or data that are not here
        assert re.search(r"parameter '\w+_(path|dir)'", str(err)), str(err)
    assert module.Params.resolve("quick").seeds >= 3


@pytest.mark.parametrize("slug", SLUGS)
def test_notebook_follows_the_page_anatomy(slug):
    paper = registry.get(slug)
    path = paper.notebook(ROOT)
    nb = nbformat.read(path, as_version=4)
    assert path.stat().st_size < 1_000_000, "stored notebook must stay under 1 MB"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert f"{{cite" in nb.cells[0].source and paper.bib_key in nb.cells[0].source
    assert notebook_parameters(path) == {"preset", *paper.module().Params.names()}
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[-1].source.startswith("# NBVAL_CHECK_OUTPUT") and "claims.emit(" in code[-1].source
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))
    printed = "".join(o.get("text", "") for o in code[-1].get("outputs", []))
    ids = [c.id for c in paper.module().CLAIMS]
    assert printed.split() and all(re.fullmatch(r"[a-z0-9.-]+: (HOLDS|FAILS|INCONCLUSIVE)", line)
                                   for line in printed.strip().splitlines())
    assert [line.split(":")[0] for line in printed.strip().splitlines()] == ids


@pytest.mark.parametrize("slug", SLUGS)
def test_bib_key_is_in_references(slug):
    assert "{" + registry.get(slug).bib_key + "," in (ROOT / "book" / "references.bib").read_text()


def test_unknown_slugs_are_refused():
    for bad in ("../etc", "fdiv_losses", "", "FDIV-LOSSES"):
        with pytest.raises(registry.UnknownPaper, match="unknown paper"):
            registry.get(bad)


def test_scorecard_and_status_show_claims_failures_and_missing_runs(monkeypatch):
    monkeypatch.setattr(registry, "PAPERS", {s: registry.PAPERS[s] for s in SLUGS[:2]})
    ok = {"paper": SLUGS[0], "status": "ok", "error": None, "params": {"preset": "quick", "seeds": 3},
          "claims": [{"id": "c1", "statement": "s", "paper_value": "0.9", "value": 0.8, "interval": [0.7, 0.9],
                      "threshold": 0.5, "direction": ">=", "verdict": "HOLDS"}],
          "metrics": {}, "provenance": {"commit": "abcdef1234567", "dirty": False, "versions": {"torch": "2"},
                                        "device": "cpu", "started": "2026-01-01T00:00:00+00:00",
                                        "wall_seconds": 42.0, "cache_key": "k"}}
    failed = {**ok, "status": "failed", "error": "cell [3] raised ValueError: x", "claims": []}
    results = {SLUGS[0]: ok, SLUGS[1]: failed}
    card = book.scorecard_markdown(results)
    assert "| `c1` | 0.9 | 0.8 | [0.7, 0.9] | >= 0.5 | **HOLDS** |" in card
    assert "The stored run failed" in card and "ValueError" in card
    status = book.status_markdown(results)
    assert "| 42.0 | quick | 3 | cpu | 2026-01-01 00:00:00 | `abcdef1234`" in status
    assert "| torch | 2 |" in status
    assert "not run" in book.status_markdown({SLUGS[0]: None})
