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
