"""Stored evidence is current with the code, comes from committed code, and its pages are clean."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from companion import evidence, registry

ROOT = registry.project_root()
SLUGS = list(registry.PAPERS)
ABSOLUTE_PATH = re.compile(r"(/(home|root|work|tmp|Users|usr|opt)/[\w.-]+/|[A-Z]:\\\\)")


@pytest.mark.parametrize("slug", SLUGS)
def test_stored_records_are_current_and_from_committed_code(slug):
    stored = evidence.load(ROOT, slug)
    assert stored, f"{slug} has no stored record in data/results/{slug}/ (companion store {slug})"
    for s in stored:
        assert s.record is not None, s.error
        assert s.current, (f"{s.path.relative_to(ROOT)} is stale: its code key does not match the code; "
                           f"verify it (companion verify {slug} --preset {s.record['params']['preset']})")
        assert s.judged, (f"{s.path.relative_to(ROOT)} shows yesterday's verdicts: a claim declaration or the "
                          f"verdict logic changed; re-judge it (companion rejudge {slug})")
        assert s.record["provenance"]["dirty"] is False, f"{s.path.name} was stored from uncommitted code"
        assert s.path.stat().st_size < 100_000


@pytest.mark.parametrize("slug", SLUGS)
def test_the_page_shows_its_own_record(slug):
    record = evidence.page_record(ROOT, slug)
    nb = nbformat.read(registry.get(slug).notebook(ROOT), as_version=4)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
    assert printed.strip().splitlines() == [f"{c['id']}: {c['verdict']}" for c in record["claims"]]


@pytest.mark.parametrize("slug", SLUGS)
def test_stored_outputs_have_no_warnings_tracebacks_or_absolute_paths(slug):
    nb = nbformat.read(registry.get(slug).notebook(ROOT), as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"stderr in a stored cell: {out.get('text', '')[:200]}"
            assert out.get("output_type") != "error"
            text = out.get("text", "") + json.dumps(out.get("data", {}).get("text/plain", ""))
            text += json.dumps(out.get("data", {}).get("text/html", ""))
            assert not ABSOLUTE_PATH.search(text), f"absolute path in a stored output: {ABSOLUTE_PATH.search(text)[0]}"
            assert "Empty DataFrame" not in text, "an empty table is printed"


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f]")


@pytest.mark.parametrize("slug", SLUGS)
def test_page_prose_has_no_control_characters(slug):
    """A TeX command written in a non-raw Python string loses its backslash (``\\bar`` becomes a
    backspace and ``ar``, ``\\theta`` a tab and ``heta``): MathJax then typesets the wrong formula
    and no later check notices. Tabs are allowed outside math."""
    nb = nbformat.read(registry.get(slug).notebook(ROOT), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            hit = CONTROL.search(cell.source) or re.search(r"\$[^$]*\t[^$]*\$", cell.source)
            assert not hit, f"cell {i}: control character in {cell.source[max(0, hit.start() - 20):hit.end() + 10]!r}"


def test_a_deliberately_edited_paper_module_makes_its_records_stale(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "companion", src / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(src)!r})\n"
        "from companion import evidence, registry\n"
        f"root = __import__('pathlib').Path({str(ROOT)!r})\n"
        "print(all(s.current for s in evidence.load(root, 'ood-dcc')))\n"
    )

    def current() -> str:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    assert current() == "True"
    with (src / "companion" / "papers" / "ood_dcc" / "__init__.py").open("a") as f:
        f.write("\nEDITED = True\n")
    assert current() == "False"


def test_a_rerun_that_moved_only_its_timings_measured_the_same():
    record = {"claims": [{"id": "a", "value": 0.5, "per_seed": [0.5], "controls": []}],
              "metrics": {"auroc": 0.9, "seconds": {"fit": 1.0}, "timing": {"loop_s": 2.0, "ratio": 3.0},
                          "sae": {"train_s": 4.0, "fvu": 0.1}, "wall_ratio_a_over_b": 2.0, "jac_speedup": 9.0,
                          "seconds/train M": 0.3, "cpu_seconds": 5.0}}
    timed = json.loads(json.dumps(record).replace("1.0", "1.5").replace("2.0", "2.5").replace("9.0", "8.0")
                       .replace("4.0", "4.5").replace("0.3", "0.4").replace("5.0", "6.0"))
    assert evidence.measured(timed) == evidence.measured(record)
    assert evidence.untimed(record["metrics"]) == {"auroc": 0.9, "sae": {"fvu": 0.1}}
    for moved in ({"auroc": 0.91}, {"sae": {"train_s": 4.0, "fvu": 0.2}}):
        assert evidence.measured({**record, "metrics": {**record["metrics"], **moved}}) != evidence.measured(record)


@pytest.mark.slow
def test_verify_restamps_an_identical_rerun_and_a_failed_store_keeps_the_record(toy_project, capsys):
    import nbformat as nbf

    from companion.claims import Claim

    registry.get("toy-paper").module().CLAIMS = [Claim("toy", "s", "1", 0.5)]
    assert evidence.store("toy-paper", root=toy_project)
    path = evidence.record_path(toy_project, "toy-paper", "quick", 0)
    first = json.loads(path.read_text())
    assert evidence.store("toy-paper", root=toy_project, force=True, verify=True)
    again = json.loads(path.read_text())
    assert again["provenance"]["started"] == first["provenance"]["started"]
    assert len(again["provenance"]["verified"]) == 1 and again["claims"] == first["claims"]
    assert evidence.verify_report("toy", first, again).endswith("reproduced exactly; re-stamped")
    notebook = registry.get("toy-paper").notebook(toy_project)
    nb = nbf.read(notebook, as_version=4)
    nb.cells[1].source = "raise ValueError('a broken edit')"
    nbf.write(nb, notebook)
    assert not evidence.store("toy-paper", root=toy_project, force=True)
    assert json.loads(path.read_text()) == again
    assert "left as it was" in capsys.readouterr().out
