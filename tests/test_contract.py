"""The paper contract: declarations in ``__init__``, re-exports on first use, check and metrics from
the framework; a finding whose control also holds is reported as not discriminating everywhere."""

from __future__ import annotations

import sys
import textwrap

import nbformat
import pytest

from companion import book, cli, contract, evidence, registry, runner
from companion.claims import Claim


def _package(root, name: str, experiment: str) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(f'''
        from companion.claims import Claim
        from companion.contract import exports
        CLAIMS = [Claim("gap", "s", "p", 0.1, controls=("shuffled",))]
        __getattr__, __dir__ = exports(__name__, {{"experiment": ("run", "claim_values")}})
    '''))
    (folder / "experiment.py").write_text(textwrap.dedent(experiment))


def test_re_exports_load_on_first_use_and_check_comes_from_the_framework(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _package(tmp_path, "toycontract", '''
        def run(params):
            return params
        def claim_values(results):
            return {"gap": results, "gap@shuffled": [0.0, 0.01, -0.01]}
        def metrics(results):
            return {"n": len(results)}
    ''')
    import toycontract

    assert "toycontract.experiment" not in sys.modules
    verdicts = toycontract.check(toycontract.run([0.5, 0.52, 0.48]))
    assert "toycontract.experiment" in sys.modules
    assert verdicts[0].verdict == "HOLDS" and verdicts[0].discriminates
    assert toycontract.metrics([1, 2]) == {"n": 2}
    assert {"run", "claim_values", "check", "metrics"} <= set(dir(toycontract))
    with pytest.raises(AttributeError, match="no attribute 'plot_x'"):
        toycontract.plot_x


def test_a_paper_may_not_re_export_what_the_framework_supplies():
    with pytest.raises(ValueError, match="supplied by the framework"):
        contract.exports("somepaper", {"experiment": ("run", "check")})


@pytest.mark.slow
def test_a_finding_whose_control_also_holds_is_not_discriminating_in_record_table_and_page(toy_project, capsys):
    claim = Claim("toy", "s", "1", 0.5, controls=("null",))
    registry.get("toy-paper").module().CLAIMS = [claim]
    path = registry.get("toy-paper").notebook(toy_project)
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = nb.cells[1].source.replace(
        "claims.evaluate_all([claims.Claim('toy', 's', '1', 0.5)], {'toy': [level] * (seeds or 3)})",
        "claims.evaluate_all([claims.Claim('toy', 's', '1', 0.5, controls=('null',))], "
        "{'toy': [level, level + 0.01, level - 0.01], 'toy@null': [0.69, 0.7, 0.71]})")
    nbformat.write(nb, path)
    assert cli.main(["run", "toy-paper", "--out", str(toy_project / "run")]) == 0
    printed = capsys.readouterr().out
    record = runner.read_record(toy_project / "run" / "results.json")
    (row,) = record["claims"]
    assert row["verdict"] == "HOLDS" and row["controls"][0]["verdict"] == "HOLDS"
    assert row["discriminates"] is False and row["role"] == "finding"
    assert "no (a control holds or is inconclusive)" in printed and "null 0.7 HOLDS" in printed
    evidence.save(toy_project, "toy-paper", record)
    records = {"toy-paper": evidence.judged(toy_project, "toy-paper")}
    page = book.scorecard_markdown(book.page_results(toy_project, records), records)
    assert "no (a control holds or is inconclusive)" in page and "null 0.7" in page
    assert "**0** reproduce and discriminate" in book.totals_markdown(book.page_results(toy_project, records))
