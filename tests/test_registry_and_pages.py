"""Every registered paper is complete and its page follows the anatomy; generated pages are right."""

from __future__ import annotations

import re
import shutil

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


def test_bibliography_has_each_key_once():
    """A repeated entry (two engineers citing one paper) fails the book build late; catch it here."""
    keys = re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text(), re.M)
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    assert not repeated, f"repeated BibTeX keys in book/references.bib: {', '.join(repeated)}"


def test_unknown_slugs_are_refused():
    for bad in ("../etc", "fdiv_losses", "", "FDIV-LOSSES"):
        with pytest.raises(registry.UnknownPaper, match="unknown paper"):
            registry.get(bad)


def _record(slug, seed, verdict, value, preset="quick", status="ok"):
    return {"paper": slug, "status": status, "error": None if status == "ok" else "cell [3] raised ValueError: x",
            "params": {"preset": preset, "seeds": 3, "seed": seed},
            "claims": [] if status != "ok" else [
                {"id": "c1", "statement": "s", "paper_value": "0.9", "value": value, "interval": [0.7, 0.9],
                 "threshold": 0.5, "direction": ">=", "verdict": verdict, "kind": "statistical"},
                {"id": "e1", "statement": "exact", "paper_value": "1e-6", "value": 3.14159e-9, "interval": None,
                 "threshold": 1e-6, "direction": "<=", "verdict": "HOLDS", "kind": "exact"}],
            "metrics": {}, "provenance": {"commit": "abcdef1234567", "dirty": False, "versions": {"torch": "2"},
                                          "device": "cpu", "started": "2026-01-01T00:00:00+00:00",
                                          "wall_seconds": 42.0, "cache_key": "k", "code_key": "c"}}


def test_scorecard_status_and_robustness_show_claims_agreement_failures_and_missing_runs(monkeypatch, tmp_path):
    from companion.evidence import Stored

    monkeypatch.setattr(registry, "PAPERS", {s: registry.PAPERS[s] for s in SLUGS[:2]})
    page = _record(SLUGS[0], 0, "HOLDS", 0.81234)
    page["provenance"].update(cpu_seconds=80.54, load_average=1.25)
    other = Stored(tmp_path / "quick-seed100.json", _record(SLUGS[0], 100, "INCONCLUSIVE", 0.6), None, True)
    full = Stored(tmp_path / "full-seed0.json", _record(SLUGS[0], 0, "HOLDS", 0.9, "full"), None, False)
    records = {SLUGS[0]: [Stored(tmp_path / "quick-seed0.json", page, None, True), other, full], SLUGS[1]: []}
    results = {SLUGS[0]: page, SLUGS[1]: _record(SLUGS[1], 0, "", 0, status="failed")}
    card = book.scorecard_markdown(results, records)
    assert "| `c1` | 0.9 | 0.812 | [0.7, 0.9] | >= 0.5 |" in card
    assert "differs (quick, seed 100: INCONCLUSIVE)" in card
    assert "| `e1` | 1e-6 | 3.14e-09 | exact | <= 1e-06 |" in card and "agrees (3 runs)" in card
    assert "The stored run failed" in card and "ValueError" in card
    assert "1 HOLDS" not in card and "**2** HOLDS" in card
    status = book.status_markdown(results, records)
    assert "| quick, seed 0 | ok | 42.0 | 80.5 | 1.2 | 3 | cpu | 2026-01-01 00:00 | `abcdef1234` | current |" in status
    assert "| full, seed 0 | ok | 42.0 | – | – | 3 | cpu | 2026-01-01 00:00 | `abcdef1234` | **stale** |" in status
    assert "| torch | 2 |" in status
    assert "not run" in book.status_markdown({SLUGS[0]: None}, {})
    robust = book.robustness_markdown(SLUGS[0], records[SLUGS[0]])
    assert "| claim | quick, seed 0 | quick, seed 100 | full, seed 0 (stale) |" in robust
    assert "| `c1` | 0.812" in robust and "verdict-inconclusive" in robust


def test_reproduce_box_offers_launch_links_only_with_a_repository():
    page = _record(SLUGS[0], 0, "HOLDS", 0.8)
    plain = book.reproduce_section(SLUGS[0], page, "", "main")
    assert f"companion run {SLUGS[0]} --preset full" in plain and "colab" not in plain.lower()
    linked = book.reproduce_section(SLUGS[0], page, "https://github.com/me/companion", "main")
    assert f"github/me/companion/blob/main/notebooks/{SLUGS[0]}.ipynb" in linked
    assert f"labpath=notebooks%2F{SLUGS[0]}.ipynb" in linked


def test_install_cell_leaves_the_code_key_and_records_unchanged(tmp_path):
    """`make launch` adds a cell to a stored notebook: the records that page cites must stay current."""
    from companion import keys

    slug = SLUGS[0]
    paper = registry.get(slug)
    path = tmp_path / "page.ipynb"
    shutil.copy(paper.notebook(ROOT), path)
    params = paper.module().Params.resolve("quick").to_dict()
    before = keys.code_key(paper.module_name, path, params)[0]
    url = "https://github.com/me/companion"
    nb = book.with_install_cell(nbformat.read(path, as_version=4), url)
    nbformat.write(nb, path)
    assert book.has_install_cell(nb, url) and not book.has_install_cell(nb, "https://github.com/other/fork")
    assert nb.cells[1].source == book.install_source(url) and nb.cells[0].cell_type == "markdown"
    assert keys.code_key(paper.module_name, path, params)[0] == before
    nb = book.with_install_cell(nb, url)
    assert sum(keys.INSTALL_TAG in c.metadata.get("tags", []) for c in nb.cells) == 1
    assert not book.has_install_cell(book.with_install_cell(nb, ""), url)


def test_launch_writes_the_install_cell_for_the_configured_repository_once(tmp_path):
    slug = SLUGS[0]
    target = registry.get(slug).notebook(tmp_path)
    target.parent.mkdir(parents=True)
    shutil.copy(registry.get(slug).notebook(ROOT), target)
    (tmp_path / "book").mkdir()
    config = tmp_path / "book" / "_config.yml"
    config.write_text("repository:\n  url: https://github.com/me/companion\n")
    assert book.launch(tmp_path) == [slug] and book.launch(tmp_path) == []
    assert book.has_install_cell(nbformat.read(target, as_version=4), "https://github.com/me/companion")
    config.write_text("repository:\n  url: ''\n")
    assert book.launch(tmp_path) == [slug]
    assert nbformat.read(target, as_version=4).cells == nbformat.read(registry.get(slug).notebook(ROOT), as_version=4).cells


def test_install_cell_installs_only_when_the_companion_is_missing(monkeypatch):
    import importlib.util
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: calls.append(cmd))
    source = book.install_source("https://github.com/me/companion")
    exec(source, {})
    assert calls == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    exec(source, {})
    assert calls and calls[0][-1] == "git+https://github.com/me/companion" and calls[0][1:4] == ["-m", "pip", "install"]


def test_glued_numpy_scalars_become_plain_numbers_for_the_book():
    import nbformat

    out = nbformat.v4.new_output("display_data", data={"application/papermill.record/text/plain": "np.float64(-3.86)"},
                                 metadata={"scrapbook": {"name": "x", "mime_prefix": "application/papermill.record/"}})
    other = nbformat.v4.new_output("display_data", data={"text/plain": "np.float64(1.0)"})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("glue('x', v)", outputs=[out, other])])
    outputs = book.plain_glue(nb).cells[0].outputs
    assert outputs[0]["data"]["application/papermill.record/text/plain"] == "-3.86"
    assert outputs[1]["data"]["text/plain"] == "np.float64(1.0)"  # not a glue output: left alone
