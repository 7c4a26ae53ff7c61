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
    assert nb.metadata["kernelspec"]["name"] == "companion"  # the kernel that computes under the numerics profile
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
    page["provenance"].update(cpu_seconds=80.54, load_average=1.25, cpu="AMD EPYC 7B13")
    other = Stored(tmp_path / "quick-seed100.json", _record(SLUGS[0], 100, "INCONCLUSIVE", 0.6), None, True, True)
    full = Stored(tmp_path / "full-seed0.json", _record(SLUGS[0], 0, "HOLDS", 0.9, "full"), None, False, True)
    records = {SLUGS[0]: [Stored(tmp_path / "quick-seed0.json", page, None, True, True, False), other, full],
               SLUGS[1]: []}
    results = {SLUGS[0]: page, SLUGS[1]: _record(SLUGS[1], 0, "", 0, status="failed")}
    card = book.scorecard_markdown(results, records)
    assert "| `c1` | finding | 0.9 | 0.812 | [0.7, 0.9] | >= 0.5 |" in card  # a record without roles: findings
    assert "differs (quick, seed 100: INCONCLUSIVE)" in card
    assert "| `e1` | finding | 1e-6 | 3.14e-09 | exact | <= 1e-06 |" in card and "agrees (3 runs)" in card
    assert "no (no control)" in card and "none measured" in card
    assert "The stored run failed" in card and "ValueError" in card
    assert "**0** reproduce and discriminate against their controls, 2 hold but do not discriminate" in card
    status = book.status_markdown(results, records)
    assert ("| quick, seed 0 | ok | 42.0 | 80.5 | 1.2 | 3 | cpu | AMD EPYC 7B13 | 2026-01-01 00:00 "
            "| `abcdef1234` | current |") in status
    assert "| full, seed 0 | ok | 42.0 | – | – | 3 | cpu | – | 2026-01-01 00:00 | `abcdef1234` | **stale** |" in status
    assert "| torch | 2 |" in status
    unrun = book.status_markdown({SLUGS[0]: None}, {})
    assert "not run" in unrun and "| not run | – | – | – | – | – | – | – | – | – |\n" in unrun
    robust = book.robustness_markdown(SLUGS[0], records[SLUGS[0]])
    assert "| claim | quick, seed 0 | quick, seed 100 | full, seed 0 (stale) |" in robust
    assert "| `c1` | 0.812" in robust and "verdict-inconclusive" in robust
    assert "| *wall time* | 42 s (AMD EPYC 7B13) | 42 s | 42 s |" in robust  # the budgets, from each record


def _judged_record(slug, values):
    """A page record whose claims are judged by real declarations: a finding whose control holds too,
    a finding whose control fails, and a check."""
    from companion.claims import Claim, evaluate_all

    declared = [Claim("shared", "s", "0.9", 0.5, controls=("shuffled",)),
                Claim("sharp", "s", "0.9", 0.5, controls=("untrained",)),
                Claim("identity", "i", "0", 1e-6, direction="<=", kind="exact", role="check")]
    verdicts = evaluate_all(declared, values)
    record = _record(slug, 0, "HOLDS", 0.8)
    record["claims"] = [v.to_dict() for v in verdicts]
    return record


SEPARATED = {"shared": [0.8, 0.82, 0.81], "shared@shuffled": [0.7, 0.72, 0.71],
             "sharp": [0.8, 0.82, 0.81], "sharp@untrained": [0.1, 0.12, 0.11], "identity": 0.0}


def test_a_finding_whose_control_also_holds_is_not_counted_as_discriminating(monkeypatch, tmp_path):
    from companion.evidence import Stored

    monkeypatch.setattr(registry, "PAPERS", {SLUGS[0]: registry.PAPERS[SLUGS[0]]})
    page = _judged_record(SLUGS[0], SEPARATED)
    results = {SLUGS[0]: page}
    totals = book.totals_markdown(results)
    assert totals == ("1 papers, 2 findings: **1** reproduce and discriminate against their controls, 1 hold but "
                      "do not discriminate, 0 fail, 0 inconclusive; 1 checks (consistency checks, not counted).\n")
    card = book.scorecard_markdown(results, {SLUGS[0]: [Stored(tmp_path / "quick-seed0.json", page, None, True, True)]})
    shared = next(line for line in card.splitlines() if line.startswith("| `shared` |"))
    sharp = next(line for line in card.splitlines() if line.startswith("| `sharp` |"))
    assert "shuffled 0.71 " in shared and "no (a control holds or is inconclusive)" in shared
    assert "untrained 0.11 " in sharp and "**yes** ✓" in sharp
    assert card.index("| `sharp` |") < card.index("| `identity` | check |")
    table = book.overview_table(results)
    assert table.count("cat-discriminating") == 1 and table.count("cat-holds-only") == 1
    assert table.count("cat-check") == 1 and "<td>1</td><td>1</td><td>0</td><td>0</td><td>1</td>" in table


def test_checks_never_count_as_findings_and_unrun_papers_count_their_declared_findings(monkeypatch):
    monkeypatch.setattr(registry, "PAPERS", {s: registry.PAPERS[s] for s in SLUGS[:2]})
    failing = dict(SEPARATED, identity=1.0, sharp=[0.1, 0.11, 0.12])
    counts = book.finding_counts({SLUGS[0]: _judged_record(SLUGS[0], failing), SLUGS[1]: None})
    assert counts[SLUGS[0]] == {"discriminating": 0, "holds, not discriminating": 1, "fails": 1,
                                "inconclusive": 0, "checks": 1}
    unrun = sum(c.role == "finding" for c in registry.get(SLUGS[1]).module().CLAIMS)
    assert counts[SLUGS[1]] == {book.NOT_RUN: unrun}
    totals = book.totals_markdown({SLUGS[0]: _judged_record(SLUGS[0], failing), SLUGS[1]: None})
    assert totals.startswith(f"2 papers, {2 + unrun} findings: **0** reproduce and discriminate")
    assert f"1 fail, 0 inconclusive, {unrun} not run; 1 checks (consistency checks, not counted)" in totals


def test_status_marks_a_record_made_without_the_numerics_profile_as_env_drift(monkeypatch, tmp_path):
    import os
    import platform

    from companion import evidence, numerics
    from companion.environment import lock_hash
    from companion.evidence import Stored

    monkeypatch.setattr(registry, "PAPERS", {SLUGS[0]: registry.PAPERS[SLUGS[0]]})
    here = _record(SLUGS[0], 0, "HOLDS", 0.8)
    here["provenance"].update(lock=lock_hash(ROOT), versions={"python": platform.python_version()},
                              numerics=numerics.profile_for(os.environ))
    before = _record(SLUGS[0], 100, "HOLDS", 0.8)
    before["provenance"].update(lock=lock_hash(ROOT), versions={"python": platform.python_version()})
    stored = [Stored(tmp_path / f"quick-seed{r['params']['seed']}.json", r, None, True, True,
                     evidence.env_drift(r["provenance"], ROOT)) for r in (here, before)]
    status = book.status_markdown({SLUGS[0]: here}, {SLUGS[0]: stored})
    assert "| `abcdef1234` | current |" in status and "| `abcdef1234` | current, env-drift |" in status
    assert "numerics profile" in status
    robust = book.robustness_markdown(SLUGS[0], stored)
    assert "| claim | quick, seed 0 | quick, seed 100 (current, env-drift) |" in robust


def test_the_scorecard_takes_the_judged_page_record_at_the_default_seed():
    from companion import evidence
    from companion.evidence import Stored

    a, b, c = SLUGS[:3]
    page = _record(a, 0, "HOLDS", 0.8)
    other = Stored(evidence.record_path(ROOT, a, "quick", 100), _record(a, 100, "FAILS", 0.1))
    records = {a: [other, Stored(evidence.page_record_path(ROOT, a), page)],
               b: [Stored(evidence.page_record_path(ROOT, b), None, "not JSON")], c: [other]}
    assert book.page_results(ROOT, records) == {a: page, b: book.UNREADABLE, c: None}


def test_robustness_marks_a_discriminating_finding_and_lists_checks_last(tmp_path):
    from companion.evidence import Stored

    page = Stored(tmp_path / "quick-seed0.json", _judged_record(SLUGS[0], SEPARATED), None, True, True)
    robust = book.robustness_markdown(SLUGS[0], [page])
    assert "| `sharp` | 0.81 <span class=\"verdict verdict-holds\">HOLDS</span> ✓ |" in robust
    assert "| `shared` | 0.81 <span class=\"verdict verdict-holds\">HOLDS</span> |" in robust
    assert robust.index("`sharp`") < robust.index("`identity` (check)")


def test_seed_tables_put_each_control_beside_its_finding_seed_by_seed(tmp_path):
    from companion.evidence import Stored

    values = {**SEPARATED, "steps": [0.5] * 20, "steps@shuffled": [0.4] * 20}
    record = _judged_record(SLUGS[0], SEPARATED)
    record["claims"] += [dict(c, id="steps", per_seed=values["steps"],
                              controls=[dict(c["controls"][0], per_seed=values["steps@shuffled"])])
                         for c in record["claims"] if c["id"] == "shared"]
    quick = Stored(tmp_path / "quick-seed0.json", record, None, True, True)
    full = Stored(tmp_path / "full-seed0.json", dict(record, params={**record["params"], "seed": 5}), None, True, True)
    md = book.seeds_markdown([quick, full], (full.path,))
    assert "### quick, seed 0" not in md and "### full, seed 0\n" in md  # only the runs asked for
    assert "| claim | values | seed 5 | seed 6 | seed 7 |" in md  # the run's own seeds
    assert "| `sharp` | finding | 0.8 | 0.82 | 0.81 |" in md and "| `sharp` | control untrained | 0.1 | 0.12 | 0.11 |" in md
    assert "`identity`" not in md  # a check (and an exact row) has no seeds
    assert "rows with 20 values each (not one per seed)" in md and "`steps`: too many to show" in md
    assert book.seeds_markdown([quick], (full.path,)) == ""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("claims.seed_table(verdicts, seeds)")])
    assert book.shows_seed_table(nb) and not book.shows_seed_table(nbformat.v4.new_notebook())


def test_performance_shows_an_anchor_without_provenance_and_a_stale_one(monkeypatch):
    anchor = {"name": "ours", "reference": "ref", "ratio": 0.5, "ratio_min": 0.4, "ratio_max": 0.6,
              "seconds": 1.0, "reference_seconds": 2.0, "rounds": 5, "clock": "cpu", "threads": 1}
    old = {"anchor": anchor, "machine": {"cores": 2}, "date": "2026-01-01T00:00:00+00:00"}
    new = dict(old, commit="0123456789abcdef", code_key="k-then")
    assert book.anchor_provenance(SLUGS[0], old, ROOT) == "(no provenance)"
    monkeypatch.setattr(book.bench, "current_code_key", lambda slug, root: "k-now", raising=False)
    assert book.anchor_provenance(SLUGS[0], new, ROOT) == "`0123456789` **stale**"
    monkeypatch.setattr(book.bench, "current_code_key", lambda slug, root: "k-then", raising=False)
    assert book.anchor_provenance(SLUGS[0], new, ROOT) == "`0123456789`"
    page = book.performance_markdown({SLUGS[0]: old}, {SLUGS[0]: "(no provenance)"})
    assert page.rstrip().splitlines()[-3].endswith("| 2026-01-01 | (no provenance) |")


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
