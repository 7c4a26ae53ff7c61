"""Claim verdicts: HOLDS/FAILS/INCONCLUSIVE from the mean and the 95% interval over seeds."""

import json

import numpy as np
import pytest
from scipy import stats

from companion import claims
from companion.claims import Claim, evaluate


@pytest.mark.parametrize("values, verdict", [
    ([0.70, 0.72, 0.71], "HOLDS"), ([0.30, 0.32, 0.31], "FAILS"), ([0.2, 0.9, 0.6], "INCONCLUSIVE"),
    ([0.5, 0.5, 0.5], "HOLDS"), ([0.6], "HOLDS"),
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
    assert list(claims.table(vs).index) == ["a"]
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
    assert claims.format_table([v.to_dict()]).splitlines()[1].split()[2] == "exact"


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
