"""The code key follows meaning, not bytes; claim declarations move only the verdict key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from companion import keys, registry

ROOT = registry.project_root()
SLUGS = ("fdiv-losses", "jsae", "ood-dcc")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of the package that the keys read instead of the real one."""
    copy = tmp_path / "companion"
    shutil.copytree(ROOT / "src" / "companion", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(keys, "PACKAGE_ROOT", copy)
    return copy


def both(slug: str) -> tuple[str, str]:
    """(code key, verdict key) of ``slug``'s quick run under the package that the keys read."""
    paper = registry.get(slug)
    params = paper.module().Params.resolve("quick")
    k = keys.keys_of(paper.module_name, paper.notebook(ROOT), keys.params_for_key(params))
    return k.code, k.verdict


def all_keys() -> dict[str, tuple[str, str]]:
    return {slug: both(slug) for slug in SLUGS}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_docstrings_comments_and_formatting_change_no_key(tree):
    before = all_keys()
    for module in (tree / "claims.py", tree / "models" / "tiny_lm.py", tree / "papers" / "fdiv_losses" / "__init__.py"):
        text = module.read_text()
        head, _, rest = text.partition('"""')
        module.write_text(head + '"""A reworded docstring."""' + rest.partition('"""')[2])
        module.write_text("# a comment at the top\n" + module.read_text().replace("\n\n\n", "\n\n\n\n") + "\n# end\n")
    edit(tree / "papers" / "fdiv_losses" / "experiment.py", "def claim_values(res: Results) -> dict[str, float | list[float]]:\n",
         "def claim_values(res: Results) -> dict[str, float | list[float]]:\n    # why: a comment inside a function\n")
    assert all_keys() == before


def test_a_changed_constant_stales_exactly_the_papers_that_run_it(tree):
    before = all_keys()
    edit(tree / "papers" / "ood_dcc" / "__init__.py", "import", "EDITED = 1\nimport")
    after = all_keys()
    assert after["ood-dcc"][0] != before["ood-dcc"][0]
    assert after["jsae"] == before["jsae"] and after["fdiv-losses"] == before["fdiv-losses"]
    text = (tree / "models" / "tiny_lm.py").read_text()
    (tree / "models" / "tiny_lm.py").write_text(text + "\nSHARED_CONSTANT = 2\n")
    shared = all_keys()
    assert shared["jsae"][0] != before["jsae"][0] and shared["fdiv-losses"][0] != before["fdiv-losses"][0]
    assert shared["ood-dcc"] == after["ood-dcc"]


def test_a_threshold_moves_the_verdict_key_only(tree):
    before = both("fdiv-losses")
    edit(tree / "papers" / "fdiv_losses" / "__init__.py", '"bisection, ~-0.30 per step", -0.2, "<="',
         '"bisection, ~-0.30 per step", -0.25, "<="')
    code, verdict = both("fdiv-losses")
    assert code == before[0] and verdict != before[1]


def test_verdict_logic_moves_the_verdict_key_only(tree):
    before = all_keys()
    edit(tree / "claims.py", "if len(values) < 2:", "if len(values) < 3:")
    after = all_keys()
    for slug in SLUGS:
        assert after[slug][0] == before[slug][0] and after[slug][1] != before[slug][1]


def test_the_book_the_registry_and_the_figure_style_change_no_key(tree):
    before = all_keys()
    for name in ("book.py", "registry.py", "plotting.py"):
        (tree / name).write_text((tree / name).read_text() + "\nEDITED = True\n")
    assert all_keys() == before


def test_a_key_is_computed_without_importing_the_paper(tree):
    import subprocess
    import sys

    script = ("import sys\nfrom pathlib import Path\nfrom companion import keys\n"
              "keys.keys_of('companion.papers.fdiv_losses', Path(sys.argv[1]), {'seed': 0})\n"
              "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers') "
              "or m.startswith('companion.papers')]\nprint(heavy)\n")
    done = subprocess.run([sys.executable, "-c", script, str(registry.get("fdiv-losses").notebook(ROOT))],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_magics_are_transformed_not_dropped():
    plain, _ = keys.normalise(keys.python_of_cell("%matplotlib inline\nx = 1"))
    other, _ = keys.normalise(keys.python_of_cell("%matplotlib agg\nx = 1"))
    assert plain != other


def test_imports_inside_functions_are_followed(tree):
    (tree / "papers" / "fdiv_losses" / "late.py").write_text(
        "def f():\n    from companion.models import causal_lm\n    return causal_lm\n")
    modules, _ = keys.closure(["companion.papers.fdiv_losses"], "companion.papers.fdiv_losses")
    assert "companion.models.causal_lm" in modules


def test_a_page_reading_its_records_through_evidence_keeps_the_key_evidence_recomputes():
    """A kernel that imports ``companion.evidence`` also loads the numerics profile and the runner; none of
    them may widen the stored key, or ``evidence`` (which cannot see the kernel's imports) calls the record
    stale the moment it is stored (fdiv-losses' records were, before numerics joined NOT_RESULTS)."""
    import subprocess
    import sys

    code = ("import sys, json; import companion.evidence; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('companion'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    paper = registry.get("fdiv-losses")
    params = paper.module().Params.resolve("quick").key_dict()
    covered = keys.keys_of(paper.module_name, paper.notebook(registry.project_root()), params).modules
    assert "companion.numerics" in loaded
    assert keys.uncovered(loaded, covered) == []


def test_a_module_only_the_kernel_imported_widens_the_stored_key_and_the_check_of_it(tree):
    """A kernel can import a module its source never names (``importlib``, a plugin): the runner widens
    the key with it and the record lists it, so ``evidence`` recomputes the same key, and an edit to that
    module makes the record stale."""
    from companion import evidence, runner

    extra = "companion.models.causal_lm"
    plan = runner.plan("ood-dcc", root=ROOT)
    assert extra not in plan.modules
    _, ran, missed = runner.what_ran(plan, {"modules": [extra, "companion.cli"]}, ROOT)
    assert missed == [extra] and ran.code != plan.code_key
    record = {"params": plan.params.key_dict(), "provenance": {"code_key": ran.code, "extra_modules": missed}}
    assert evidence.keys_now(record, "ood-dcc", ROOT).code == ran.code
    unwidened = {**record, "provenance": {"code_key": ran.code}}
    assert evidence.keys_now(unwidened, "ood-dcc", ROOT).code == plan.code_key
    with (tree / "models" / "causal_lm.py").open("a") as f:
        f.write("\nEDITED = 1\n")
    assert evidence.keys_now(record, "ood-dcc", ROOT).code != ran.code
