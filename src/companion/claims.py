"""Claim checks: exact ones evaluated once, statistical ones over seeds with a 95% interval.

A :class:`Claim` states what the paper says, its own number, and a falsifiable numeric test
(``metric >= threshold`` or ``metric <= threshold``), and declares its kind:

- ``statistical``: :func:`evaluate` takes the metric measured on every seed. ``HOLDS`` when the
  mean clears the threshold and the whole 95% interval does too; ``FAILS`` when the mean misses
  it and the whole interval does too; ``INCONCLUSIVE`` when the interval straddles it. The
  interval is Student-t on the seed mean, or a percentile bootstrap when a claim asks for it.
- ``exact``: an identity, an agreement with a reference to a tolerance, or a count that does not
  depend on the seed: one value, ``HOLDS`` or ``FAILS``, no interval. Copying one value across seeds
  to make an interval is refused.
- ``every``: "in every seed": :func:`evaluate` takes the metric measured on every seed and judges
  the seed closest to failing (:func:`worst`), ``HOLDS`` or ``FAILS``, no interval. The per-seed
  values are stored, for the claim and for each control, so a page shows them and ``rejudge`` works.

A claim also declares its **role**: a ``finding`` is a statement of the paper that could fail at
this scale; a ``check`` is a consistency check, precondition, identity or agreement with a
reference, shown apart and never counted as reproduction. A finding names its **controls**: the same
measurement with the paper's effect removed (an untrained model, a shuffled pairing, the strongest
plain baseline, the method without its key ingredient), measured in the same run on the same seeds
and judged here by the same test. A finding *discriminates* when it HOLDS and every control FAILS;
one without a measured control does not. Control values are handed in under ``"<id>@<control>"``.

A claim's bar is set for the toy the quick and full presets run. Where the ``paper`` preset measures
the same quantity at the paper's own scale (a real model, real data), the bar there comes from the
paper's numbers: ``paper_threshold``. A run's values name their preset (:class:`AtPreset`), and each
claim is judged against its bar at that preset (:meth:`Claim.at`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

HOLDS, FAILS, INCONCLUSIVE = "HOLDS", "FAILS", "INCONCLUSIVE"
PAPER_PRESET = "paper"
KINDS = ("statistical", "exact", "every")
ROLES = ("finding", "check")
CONTROL_SEP = "@"
OUTPUT_ENV = "COMPANION_OUTPUT"


@dataclass(frozen=True)
class Claim:
    """A falsifiable statement: ``metric <direction> threshold`` on the mean over seeds."""

    id: str
    statement: str
    paper_value: str
    threshold: float
    direction: Literal[">=", "<="] = ">="
    interval: Literal["t", "bootstrap"] = "t"
    kind: Literal["statistical", "exact", "every"] = "statistical"
    role: Literal["finding", "check"] = "finding"
    controls: tuple[str, ...] = ()
    paper_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.direction not in (">=", "<="):
            raise ValueError(f"claim {self.id}: direction must be '>=' or '<=', not {self.direction!r}")
        if self.interval not in ("t", "bootstrap"):
            raise ValueError(f"claim {self.id}: interval must be 't' or 'bootstrap'")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.role not in ROLES:
            raise ValueError(f"claim {self.id}: role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if self.role == "check" and self.controls:
            raise ValueError(f"claim {self.id}: a check has no controls (only a finding is tested against one)")
        if isinstance(self.controls, str) or len(set(self.controls)) != len(self.controls):
            raise ValueError(f"claim {self.id}: controls must be a tuple of distinct names")

    def at(self, preset: str | None) -> Claim:
        """This claim as judged at ``preset``: at the paper preset its bar is ``paper_threshold`` where set."""
        if preset == PAPER_PRESET and self.paper_threshold is not None:
            return replace(self, threshold=self.paper_threshold)
        return self

    def control_key(self, control: str) -> str:
        """The key under which the measured values of ``control`` are handed to :func:`evaluate_all`."""
        return f"{self.id}{CONTROL_SEP}{control}"


@dataclass(frozen=True)
class ControlVerdict:
    """A finding's control: the same test on the measurement with the paper's effect removed."""

    name: str
    value: float
    interval: tuple[float, float] | None
    per_seed: tuple[float, ...]
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        """The control's JSON record."""
        return {"name": self.name, "value": self.value,
                "interval": None if self.interval is None else list(self.interval),
                "per_seed": list(self.per_seed), "verdict": self.verdict}


@dataclass(frozen=True)
class Verdict:
    """A claim evaluated on measured values: the contract's claim record plus the raw seeds."""

    id: str
    statement: str
    paper_value: str
    value: float
    interval: tuple[float, float] | None
    threshold: float
    direction: str
    verdict: str
    per_seed: tuple[float, ...] = field(default=())
    kind: str = "statistical"
    role: str = "finding"
    controls: tuple[ControlVerdict, ...] = ()

    @property
    def discriminates(self) -> bool | None:
        """A finding: HOLDS while every control FAILS the same test (None for a check)."""
        if self.role != "finding":
            return None
        return self.verdict == HOLDS and bool(self.controls) and all(c.verdict == FAILS for c in self.controls)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record written to ``results.json`` (an exact claim's interval is null)."""
        out = asdict(self)
        out["interval"] = None if self.interval is None else list(self.interval)
        out["per_seed"] = list(self.per_seed)
        if self.role == "finding":
            out["controls"] = [c.to_dict() for c in self.controls]
            out["discriminates"] = self.discriminates
        else:
            out.pop("controls")
        return out


def mean_interval(
    values: Sequence[float], kind: str = "t", level: float = 0.95, n_boot: int = 2000
) -> tuple[float, float, float]:
    """Mean and two-sided ``level`` interval of the mean of ``values``."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values to evaluate")
    mean = float(x.mean())
    if x.size == 1 or np.ptp(x) == 0:
        return mean, mean, mean
    if kind == "bootstrap":
        rng = np.random.default_rng(0)
        boots = rng.choice(x, size=(n_boot, x.size), replace=True).mean(axis=1)
        lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
        return mean, float(lo), float(hi)
    from scipy import stats  # loaded on first use: declaring claims must stay cheap to import

    half = stats.t.ppf((1 + level) / 2, df=x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return mean, mean - float(half), mean + float(half)


def worst(values: Iterable[float], direction: str) -> float:
    """The seed that comes closest to failing ``direction``: the value of an "in every seed" row."""
    x = [float(v) for v in values]
    if not x:
        raise ValueError("no values to take the worst of")
    if any(np.isnan(x)):
        return float("nan")
    return min(x) if direction == ">=" else max(x)


def _evaluate_exact(claim: Claim, measured: float | Iterable[float]) -> Verdict:
    """One value, no interval: HOLDS when it clears the threshold, else FAILS (NaN: INCONCLUSIVE)."""
    values = (float(measured),) if np.ndim(measured) == 0 else tuple(float(v) for v in measured)
    if len(values) != 1:
        raise ValueError(f"claim {claim.id} is exact: give one value, not {len(values)} "
                         "(a value copied across seeds is not an interval)")
    value = values[0]
    if np.isnan(value):
        verdict = INCONCLUSIVE
    else:
        ok = value >= claim.threshold if claim.direction == ">=" else value <= claim.threshold
        verdict = HOLDS if ok else FAILS
    return Verdict(claim.id, claim.statement, claim.paper_value, value, None, claim.threshold,
                   claim.direction, verdict, (), "exact", claim.role)


def _evaluate_every(claim: Claim, per_seed: float | Iterable[float]) -> Verdict:
    """The worst seed judged as an exact value; every seed's value is kept."""
    if np.ndim(per_seed) == 0:
        raise ValueError(f"claim {claim.id} is judged in every seed: give one value per seed")
    values = tuple(float(v) for v in per_seed)
    judged = _evaluate_exact(claim, worst(values, claim.direction))
    return replace(judged, per_seed=values, kind="every")


def evaluate(claim: Claim, per_seed: float | Iterable[float]) -> Verdict:
    """Evaluate ``claim``: an exact claim on its one value, an ``every`` or statistical one on each
    seed's value."""
    if claim.kind == "exact":
        return _evaluate_exact(claim, per_seed)
    if claim.kind == "every":
        return _evaluate_every(claim, per_seed)
    if np.ndim(per_seed) == 0:
        raise ValueError(f"claim {claim.id} is statistical: give one value per seed")
    values = tuple(float(v) for v in per_seed)
    if any(np.isnan(values)):
        return Verdict(claim.id, claim.statement, claim.paper_value, float("nan"),
                       (float("nan"), float("nan")), claim.threshold, claim.direction,
                       INCONCLUSIVE, values, role=claim.role)
    mean, lo, hi = mean_interval(values, claim.interval)
    if len(values) < 2:  # one seed has no interval: it can neither hold nor fail a statistical test
        return Verdict(claim.id, claim.statement, claim.paper_value, mean, (lo, hi), claim.threshold,
                       claim.direction, INCONCLUSIVE, values, role=claim.role)
    sign = 1.0 if claim.direction == ">=" else -1.0
    margin_mean, margin_lo, margin_hi = (sign * (v - claim.threshold) for v in (mean, lo, hi))
    worst, best = min(margin_lo, margin_hi), max(margin_lo, margin_hi)
    if margin_mean >= 0 and worst >= 0:
        verdict = HOLDS
    elif margin_mean < 0 and best < 0:
        verdict = FAILS
    else:
        verdict = INCONCLUSIVE
    return Verdict(claim.id, claim.statement, claim.paper_value, mean, (lo, hi),
                   claim.threshold, claim.direction, verdict, values, role=claim.role)


def _control(claim: Claim, name: str, measured: float | Iterable[float]) -> ControlVerdict:
    """``claim``'s test applied to one control's values."""
    v = evaluate(claim, measured)
    return ControlVerdict(name, v.value, v.interval, v.per_seed, v.verdict)


def evaluate_with_controls(claim: Claim, per_seed: Mapping[str, float | Sequence[float]]) -> Verdict:
    """Evaluate ``claim`` and each of its controls, found in ``per_seed`` under :meth:`Claim.control_key`."""
    verdict = evaluate(claim, per_seed[claim.id])
    controls = tuple(_control(claim, name, per_seed[claim.control_key(name)]) for name in claim.controls)
    return replace(verdict, controls=controls)


class AtPreset(dict):
    """A run's claim values (claim id or ``"<id>@<control>"`` -> values) with the preset that measured
    them, so that :func:`evaluate_all` judges each claim against its bar at that preset."""

    def __init__(self, preset: str, values: Mapping[str, float | Sequence[float]]) -> None:
        super().__init__(values)
        self.preset = preset


def evaluate_all(claims: Sequence[Claim], per_seed: Mapping[str, float | Sequence[float]],
                 preset: str | None = None) -> list[Verdict]:
    """Evaluate every claim (and its controls) on its entries of ``per_seed``: claim id -> values per
    seed (one value for an exact claim), ``"<id>@<control>"`` -> the control's values. Each claim is
    judged at ``preset``, else at the preset ``per_seed`` names (:class:`AtPreset`), else at its own bar."""
    preset = preset or getattr(per_seed, "preset", None)
    claims = [c.at(preset) for c in claims]
    needed = [key for c in claims for key in (c.id, *map(c.control_key, c.controls))]
    missing = [key for key in needed if key not in per_seed]
    if missing:
        raise KeyError(f"no measured values for claims: {', '.join(missing)}")
    return [evaluate_with_controls(c, per_seed) for c in claims]


class NotRejudgeable(ValueError):
    """A stored record lacks values that today's claim declarations need: it must be re-run."""


def _stored_values(record: Mapping[str, Any], kind: str) -> float | list[float]:
    """The measured values a stored claim (or control) record was judged on (null is NaN)."""
    if kind == "exact":
        return float("nan") if record.get("value") is None else float(record["value"])
    return [float("nan") if v is None else float(v) for v in record["per_seed"]]


def rejudge(stored: Sequence[Mapping[str, Any]], claims: Sequence[Claim],
            preset: str | None = None) -> list[dict[str, Any]]:
    """Today's verdicts on a record's stored per-seed values (claim records in declaration order), each
    claim judged at the record's ``preset``; raises :class:`NotRejudgeable` when a declared claim or control was not measured, or changed kind."""
    by_id = {c["id"]: c for c in stored}
    values: dict[str, float | list[float]] = {}
    for claim in claims:
        old = by_id.get(claim.id)
        if old is None or old.get("kind", "statistical") != claim.kind:
            raise NotRejudgeable(f"claim {claim.id} is not in the record as a {claim.kind} claim")
        values[claim.id] = _stored_values(old, claim.kind)
        controls = {c["name"]: c for c in old.get("controls", [])}
        for name in claim.controls:
            if name not in controls:
                raise NotRejudgeable(f"claim {claim.id}: control {name!r} was not measured")
            values[claim.control_key(name)] = _stored_values(controls[name], claim.kind)
    return [_jsonable(v.to_dict()) for v in evaluate_all(claims, values, preset)]


def fmt(x: float | None) -> str:
    """A number to three significant digits; a missing value (NaN, or JSON ``null``) as ``nan``."""
    return "nan" if x is None or np.isnan(x) else f"{x:.3g}"


def fmt_interval(interval: Sequence[float | None] | None, kind: str = "exact") -> str:
    """``[lo, hi]`` to three significant digits; a claim without an interval as ``exact``, or as
    ``worst seed`` when it is judged in every seed."""
    if interval is None:
        return "worst seed" if kind == "every" else "exact"
    return f"[{fmt(interval[0])}, {fmt(interval[1])}]"


def _controls_text(controls: Iterable[Mapping[str, Any]]) -> str:
    """A finding's controls in one cell: ``name value verdict; ...`` (``none`` when unmeasured)."""
    parts = [f"{c['name']} {fmt(c['value'])} {c['verdict']}" for c in controls]
    return "; ".join(parts) or "none measured"


def _discriminates_text(record: Mapping[str, Any]) -> str:
    """``yes`` / ``no`` for a finding (``no`` names why), ``–`` for a check."""
    if record.get("role", "finding") != "finding":
        return "–"
    if record.get("discriminates"):
        return "yes"
    if record["verdict"] != HOLDS:
        return "no (does not hold)"
    return "no (a control holds or is inconclusive)" if record.get("controls") else "no (no control)"


def _row(v: Mapping[str, Any]) -> dict[str, Any]:
    row = {
        "claim": v["id"],
        "statement": v["statement"],
        "paper": v["paper_value"],
        "ours": fmt(v["value"]),
        "95% interval": fmt_interval(v["interval"], v.get("kind", "statistical")),
        "test": f"{v['direction']} {v['threshold']:g}",
        "seeds": len(v["per_seed"]) if v.get("kind", "statistical") != "exact" else "–",
        "verdict": v["verdict"],
    }
    if v.get("role", "finding") == "finding":
        row["controls (same test)"] = _controls_text(v.get("controls", []))
        row["discriminates"] = _discriminates_text(v)
    return row


@dataclass(frozen=True)
class ClaimTables:
    """A page's claims: the findings with their controls, then the checks, as two tables."""

    findings: Any  # pandas.DataFrame
    checks: Any

    def _repr_html_(self) -> str:
        parts = [f"<p><b>Findings</b> (evidence for or against the paper; a finding discriminates when it "
                 f"holds and every control fails the same test)</p>{self.findings.to_html()}"]
        if len(self.checks):
            parts.append(f"<p><b>Checks</b> (identities, preconditions, agreement with a reference; not "
                         f"counted as reproduction)</p>{self.checks.to_html()}")
        return "\n".join(parts)

    def __repr__(self) -> str:
        out = f"Findings\n{self.findings.to_string()}"
        return out + (f"\n\nChecks\n{self.checks.to_string()}" if len(self.checks) else "")


def table(verdicts: Sequence[Verdict | Mapping[str, Any]]) -> ClaimTables:
    """The claims shown on a page: findings (with controls and whether they discriminate), then checks."""
    import pandas as pd

    pd.set_option("display.max_colwidth", None)  # a claim's statement is shown whole, never cut
    records = [v.to_dict() if isinstance(v, Verdict) else v for v in verdicts]
    frames = {}
    for role in ROLES:
        rows = [_row(r) for r in records if r.get("role", "finding") == role]
        frames[role] = pd.DataFrame(rows).set_index("claim") if rows else pd.DataFrame()
    return ClaimTables(frames["finding"], frames["check"])


def seed_table(verdicts: Sequence[Verdict | Mapping[str, Any]], seeds: Sequence[int]) -> Any:
    """Per-seed values of every finding judged on seeds (statistical or ``every``) and of each of its
    controls, one row each, one column per seed (a pandas DataFrame)."""
    import pandas as pd

    rows: dict[tuple[str, str], list[float]] = {}
    for v in (x.to_dict() if isinstance(x, Verdict) else x for x in verdicts):
        if v.get("role", "finding") != "finding" or v.get("kind", "statistical") == "exact":
            continue
        rows[(v["id"], "finding")] = v["per_seed"]
        rows.update({(v["id"], f"control {c['name']}"): c["per_seed"] for c in v.get("controls", [])})
    if not rows:
        return pd.DataFrame()
    wrong = [f"{'@'.join(k)} has {len(x)}" for k, x in rows.items() if len(x) != len(seeds)]
    if wrong:
        raise ValueError(f"{len(seeds)} seeds given, but {', '.join(wrong)} values")
    frame = pd.DataFrame({k: [np.nan if x is None else x for x in vals] for k, vals in rows.items()},
                         index=[f"seed {s}" for s in seeds]).T
    frame.index.names = ["claim", "values"]
    return frame


def format_table(claims: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text verdict table from ``results.json`` claim records, for the terminal."""
    if not claims:
        return "(no claims recorded)"
    header = ("claim", "role", "ours", "95% interval", "test", "verdict", "controls (same test)", "discriminates")
    rows = [
        (
            c["id"],
            c.get("role", "finding"),
            fmt(c["value"]),
            fmt_interval(c["interval"], c.get("kind", "statistical")),
            f"{c.get('direction', '>=')} {c['threshold']:g}",
            c["verdict"],
            _controls_text(c.get("controls", [])) if c.get("role", "finding") == "finding" else "–",
            _discriminates_text(c),
        )
        for c in claims
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in (header, *rows)]
    return "\n".join(lines)


def counts(claims: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A record's scorecard: findings that discriminate, hold without discriminating, fail, are
    inconclusive; and the checks apart."""
    findings = [c for c in claims if c.get("role", "finding") == "finding"]
    return {
        "discriminating": sum(bool(c.get("discriminates")) for c in findings),
        "holds, not discriminating": sum(c["verdict"] == HOLDS and not c.get("discriminates") for c in findings),
        "fails": sum(c["verdict"] == FAILS for c in findings),
        "inconclusive": sum(c["verdict"] == INCONCLUSIVE for c in findings),
        "checks": len(claims) - len(findings),
    }


def verdict_lines(verdicts: Sequence[Verdict]) -> str:
    """One ``claim-id: VERDICT`` line per claim: the only output nbval compares."""
    return "\n".join(f"{v.id}: {v.verdict}" for v in verdicts)


def _jsonable(obj: Any) -> Any:
    """Numpy scalars and arrays, tuples and NaN made JSON-safe (NaN becomes null)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def _kernel_facts() -> dict[str, Any]:
    """What this kernel actually ran: the parameters it resolved and the companion modules it imported."""
    import sys

    from companion.params import kernel_params

    return {"params": kernel_params(), "modules": sorted(m for m in sys.modules if m.split(".")[0] == "companion")}


def emit(verdicts: Sequence[Verdict], metrics: Mapping[str, Any] | None = None) -> None:
    """Print the verdict lines and, under the runner, hand claims and metrics to it as JSON."""
    print(verdict_lines(verdicts))
    target = os.environ.get(OUTPUT_ENV)
    if target:
        payload = {"claims": [v.to_dict() for v in verdicts], "metrics": metrics or {}, "kernel": _kernel_facts()}
        path = Path(target)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(_jsonable(payload), indent=1))
        os.replace(partial, path)  # the runner reads the whole hand-off or none of it
