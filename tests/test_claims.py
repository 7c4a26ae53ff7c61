"""Claim verdicts: HOLDS/FAILS/INCONCLUSIVE from the mean and the 95% interval over seeds."""

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from companion import claims
from companion.claims import Claim, evaluate


@pytest.mark.parametrize("values, verdict", [
    ([0.70, 0.72, 0.71], "HOLDS"), ([0.30, 0.32, 0.31], "FAILS"), ([0.2, 0.9, 0.6], "INCONCLUSIVE"),
    ([0.5, 0.5, 0.5], "HOLDS"), ([0.6], "INCONCLUSIVE"),
])
def test_verdicts_for_at_least(values, verdict):
    assert evaluate(Claim("c", "s", "p", 0.5, ">="), values).verdict == verdict


def test_direction_at_most_mirrors():
    assert evaluate(Claim("c", "s", "p", 0.5, "<="), [0.3, 0.31, 0.29]).verdict == "HOLDS"
    assert evaluate(Claim("c", "s", "p", 0.5, "<="), [0.7, 0.71, 0.69]).verdict == "FAILS"


def test_t_interval_matches_scipy():
    x = [1.0, 2.0, 4.0, 3.5]
    mean, lo, hi = claims.mean_interval(x)
    ref = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert (lo, hi) == pytest.approx(ref)
    assert mean == pytest.approx(2.625)


def test_bootstrap_interval_is_inside_the_range_and_deterministic():
    x = [0.1, -0.4, 0.3, 0.2, -0.1]
    a, b = claims.mean_interval(x, "bootstrap"), claims.mean_interval(x, "bootstrap")
    assert a == b and min(x) <= a[1] <= a[0] <= a[2] <= max(x)


def test_nan_is_inconclusive_and_json_safe(tmp_path, monkeypatch, capsys):
    v = evaluate(Claim("c", "s", "p", 0.5), [float("nan"), 0.7])
    assert v.verdict == "INCONCLUSIVE"
    out = tmp_path / "o.json"
    monkeypatch.setenv(claims.OUTPUT_ENV, str(out))
    claims.emit([v], {"x": np.float32(1.5), "arr": np.arange(2)})
    assert capsys.readouterr().out.strip() == "c: INCONCLUSIVE"
    payload = json.loads(out.read_text())
    assert payload["claims"][0]["value"] is None and payload["metrics"] == {"x": 1.5, "arr": [0, 1]}


def test_evaluate_all_requires_every_claim():
    with pytest.raises(KeyError, match="b"):
        claims.evaluate_all([Claim("a", "", "", 0), Claim("b", "", "", 0)], {"a": [1.0]})


def test_table_and_text_table_show_every_claim():
    vs = [evaluate(Claim("a", "s", "p", 0.5), [0.7, 0.8, 0.75])]
    assert list(claims.table(vs).findings.index) == ["a"]
    text = claims.format_table([v.to_dict() for v in vs])
    assert "a" in text and "HOLDS" in text and ">= 0.5" in text


def test_text_table_shows_an_unmeasured_claim_read_back_from_json():
    v = evaluate(Claim("a", "s", "p", 0.5), [float("nan")] * 3)
    record = json.loads(json.dumps(claims._jsonable(v.to_dict())))
    assert record["value"] is None
    text = claims.format_table([record])
    assert "[nan, nan]" in text and "INCONCLUSIVE" in text


def test_bad_claim_direction_is_refused():
    with pytest.raises(ValueError):
        Claim("a", "", "", 0.0, "==")


def test_exact_claim_takes_one_value_and_has_no_interval():
    c = Claim("e", "s", "p", 1e-6, "<=", kind="exact")
    v = evaluate(c, 3e-9)
    assert v.verdict == "HOLDS" and v.interval is None and v.kind == "exact"
    assert v.to_dict()["interval"] is None
    assert evaluate(c, [2e-6]).verdict == "FAILS"
    assert claims.format_table([v.to_dict()]).splitlines()[1].split()[3] == "exact"


def test_exact_claim_refuses_a_value_copied_across_seeds():
    with pytest.raises(ValueError, match="one value"):
        evaluate(Claim("e", "s", "p", 0.5, kind="exact"), [0.7, 0.7, 0.7])


def test_statistical_claim_refuses_a_single_scalar():
    with pytest.raises(ValueError, match="per seed"):
        evaluate(Claim("s", "s", "p", 0.5), 0.7)


def test_worst_picks_the_seed_closest_to_failing():
    assert claims.worst([0.3, 0.1, 0.2], ">=") == 0.1
    assert claims.worst([0.3, 0.1, 0.2], "<=") == 0.3
    every = Claim("every", "s", "p", 0.15, ">=", kind="exact")
    assert evaluate(every, claims.worst([0.3, 0.1, 0.2], ">=")).verdict == "FAILS"


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        Claim("a", "", "", 0.0, kind="approximate")


def test_one_seed_gives_no_verdict_for_a_statistical_claim():
    v = evaluate(Claim("c", "s", "p", 0.5, ">="), [0.9])
    assert v.verdict == "INCONCLUSIVE" and v.per_seed == (0.9,)


def _finding(controls=("shuffled",)) -> Claim:
    return Claim("gap", "top minus rest", "0.3", 0.1, ">=", controls=controls)


def test_a_finding_discriminates_only_when_every_control_fails_the_same_test():
    held = claims.evaluate_all([_finding()], {"gap": [0.5, 0.52, 0.48], "gap@shuffled": [0.0, 0.01, -0.01]})[0]
    assert held.verdict == "HOLDS" and held.controls[0].verdict == "FAILS" and held.discriminates
    both = claims.evaluate_all([_finding()], {"gap": [0.5, 0.52, 0.48], "gap@shuffled": [0.4, 0.41, 0.39]})[0]
    assert both.verdict == "HOLDS" and both.controls[0].verdict == "HOLDS" and both.discriminates is False
    unsure = claims.evaluate_all([_finding()], {"gap": [0.5, 0.52, 0.48], "gap@shuffled": [-0.5, 0.9, 0.1]})[0]
    assert unsure.controls[0].verdict == "INCONCLUSIVE" and unsure.discriminates is False
    alone = claims.evaluate_all([_finding(())], {"gap": [0.5, 0.52, 0.48]})[0]
    assert alone.verdict == "HOLDS" and alone.discriminates is False


def test_a_check_has_no_controls_and_no_discrimination():
    check = Claim("identity", "s", "p", 1e-9, "<=", kind="exact", role="check")
    v = claims.evaluate_all([check], {"identity": 0.0})[0]
    assert v.verdict == "HOLDS" and v.discriminates is None and "controls" not in v.to_dict()
    with pytest.raises(ValueError, match="check has no controls"):
        Claim("c", "s", "p", 0.0, role="check", controls=("x",))
    with pytest.raises(ValueError, match="role"):
        Claim("c", "s", "p", 0.0, role="evidence")


def test_a_missing_control_value_is_an_error():
    with pytest.raises(KeyError, match="gap@shuffled"):
        claims.evaluate_all([_finding()], {"gap": [0.5, 0.52, 0.48]})


def test_rejudge_reapplies_todays_thresholds_to_stored_values():
    stored = [v.to_dict() for v in claims.evaluate_all(
        [_finding()], {"gap": [0.5, 0.52, 0.48], "gap@shuffled": [0.2, 0.21, 0.19]})]
    assert stored[0]["verdict"] == "HOLDS" and stored[0]["discriminates"] is False
    stricter = Claim("gap", "top minus rest", "0.3", 0.3, ">=", controls=("shuffled",))
    again = claims.rejudge(json.loads(json.dumps(stored)), [stricter])[0]
    assert again["verdict"] == "HOLDS" and again["controls"][0]["verdict"] == "FAILS" and again["discriminates"]
    assert again["per_seed"] == stored[0]["per_seed"] and again["threshold"] == 0.3
    with pytest.raises(claims.NotRejudgeable, match="control 'untrained'"):
        claims.rejudge(stored, [Claim("gap", "s", "p", 0.1, controls=("shuffled", "untrained"))])
    with pytest.raises(claims.NotRejudgeable, match="exact"):
        claims.rejudge(stored, [Claim("gap", "s", "p", 0.1, kind="exact")])


def test_counts_and_tables_separate_findings_from_checks():
    found = claims.evaluate_all(
        [_finding(), Claim("identity", "s", "p", 1e-9, "<=", kind="exact", role="check")],
        {"gap": [0.5, 0.52, 0.48], "gap@shuffled": [0.4, 0.41, 0.39], "identity": 0.0})
    records = [v.to_dict() for v in found]
    assert claims.counts(records) == {"discriminating": 0, "holds, not discriminating": 1, "fails": 0,
                                      "inconclusive": 0, "checks": 1}
    tables = claims.table(found)
    assert list(tables.findings.index) == ["gap"] and list(tables.checks.index) == ["identity"]
    assert "shuffled 0.4 HOLDS" in tables.findings.loc["gap", "controls (same test)"]
    text = claims.format_table(records)
    assert "no (a control holds or is inconclusive)" in text and "check" in text


def test_every_seed_claim_judges_the_worst_seed_and_keeps_every_value():
    c = Claim("every", "s", "p", 0.15, ">=", kind="every", controls=("untrained",))
    v = claims.evaluate_with_controls(c, {"every": [0.3, 0.1, 0.2], "every@untrained": [0.2, 0.16, 0.4]})
    assert v.verdict == "FAILS" and v.value == 0.1 and v.per_seed == (0.3, 0.1, 0.2) and v.interval is None
    assert v.controls[0].verdict == "HOLDS" and v.controls[0].per_seed == (0.2, 0.16, 0.4)
    assert evaluate(Claim("m", "s", "p", 0.15, "<=", kind="every"), [0.1, 0.12]).value == 0.12
    assert evaluate(c, [0.3, float("nan")]).verdict == "INCONCLUSIVE"
    assert claims.format_table([v.to_dict()]).splitlines()[1].split()[3:5] == ["worst", "seed"]
    with pytest.raises(ValueError, match="every seed"):
        evaluate(c, 0.3)


def test_every_seed_claim_is_rejudged_from_its_stored_seeds():
    c = Claim("every", "s", "p", 0.15, ">=", kind="every", controls=("untrained",))
    stored = [claims._jsonable(claims.evaluate_with_controls(
        c, {"every": [0.3, 0.1, 0.2], "every@untrained": [0.2, 0.16, 0.4]}).to_dict())]
    again = claims.rejudge(stored, [replace(c, threshold=0.05)])[0]
    assert again["verdict"] == "HOLDS" and again["controls"][0]["verdict"] == "HOLDS"
    assert claims.rejudge(stored, [replace(c, threshold=0.18)])[0]["controls"][0]["verdict"] == "FAILS"


def test_paper_preset_judges_against_the_papers_bar_and_other_presets_against_the_toys():
    c = Claim("gain", "s", "p", 0.5, controls=("random",), paper_threshold=0.15)
    values = {"gain": [0.3, 0.31, 0.29], "gain@random": [0.0, 0.01, -0.01]}
    toy = claims.evaluate_all([c], claims.AtPreset("full", values))[0]
    paper = claims.evaluate_all([c], claims.AtPreset("paper", values))[0]
    assert (toy.verdict, toy.threshold) == ("FAILS", 0.5)
    assert (paper.verdict, paper.threshold) == ("HOLDS", 0.15)
    assert paper.controls[0].verdict == "FAILS"  # the control is judged against the same (paper) bar
    assert claims.evaluate_all([c], values)[0].threshold == 0.5  # values without a preset: the toy's bar
    assert Claim("plain", "s", "p", 0.5).at("paper").threshold == 0.5  # no paper bar: one bar everywhere
    stored = [claims._jsonable(toy.to_dict())]
    assert claims.rejudge(stored, [c], "paper")[0]["verdict"] == "HOLDS"
    assert claims.rejudge(stored, [c], "quick")[0]["verdict"] == "FAILS"


def test_seed_table_lists_each_finding_and_its_controls_per_seed():
    stat = Claim("gap", "s", "p", 0.1, controls=("shuffled",))
    every = Claim("every", "s", "p", 0.15, kind="every")
    exact = Claim("identity", "s", "p", 1e-9, "<=", kind="exact", role="check")
    vs = claims.evaluate_all([stat, every, exact], {"gap": [0.3, 0.4], "gap@shuffled": [0.0, float("nan")],
                                                    "every": [0.2, 0.3], "identity": 0.0})
    frame = claims.seed_table(vs, [0, 1])
    assert list(frame.columns) == ["seed 0", "seed 1"]
    assert frame.loc[("gap", "control shuffled")].isna().tolist() == [False, True]
    assert frame.loc[("every", "finding")].tolist() == [0.2, 0.3] and "identity" not in frame.index.get_level_values(0)
    assert frame.equals(claims.seed_table([claims._jsonable(v.to_dict()) for v in vs], [0, 1]))
    with pytest.raises(ValueError, match="3 seeds given"):
        claims.seed_table(vs, [0, 1, 2])
