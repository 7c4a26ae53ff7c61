"""Claim checks: exact ones evaluated once, statistical ones over seeds with a 95% interval.

A :class:`Claim` states what the paper says, its own number, and a falsifiable numeric test
(``metric >= threshold`` or ``metric <= threshold``), and declares its kind:

- ``statistical``: :func:`evaluate` takes the metric measured on every seed. ``HOLDS`` when the
  mean clears the threshold and the whole 95% interval does too; ``FAILS`` when the mean misses
  it and the whole interval does too; ``INCONCLUSIVE`` when the interval straddles it. The
  interval is Student-t on the seed mean, or a percentile bootstrap when a claim asks for it.
- ``exact``: an identity, an agreement with a reference to a tolerance, a count that does not
  depend on the seed, or a worst case over seeds (:func:`worst`): one value, ``HOLDS`` or
  ``FAILS``, no interval. Copying one value across seeds to make an interval is refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

HOLDS, FAILS, INCONCLUSIVE = "HOLDS", "FAILS", "INCONCLUSIVE"
KINDS = ("statistical", "exact")
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
    kind: Literal["statistical", "exact"] = "statistical"

    def __post_init__(self) -> None:
        if self.direction not in (">=", "<="):
            raise ValueError(f"claim {self.id}: direction must be '>=' or '<=', not {self.direction!r}")
        if self.interval not in ("t", "bootstrap"):
            raise ValueError(f"claim {self.id}: interval must be 't' or 'bootstrap'")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")


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

    def to_dict(self) -> dict[str, Any]:
        """The JSON record written to ``results.json`` (an exact claim's interval is null)."""
        out = asdict(self)
        out["interval"] = None if self.interval is None else list(self.interval)
        out["per_seed"] = list(self.per_seed)
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
                   claim.direction, verdict, (), "exact")


def evaluate(claim: Claim, per_seed: float | Iterable[float]) -> Verdict:
    """Evaluate ``claim``: an exact claim on its one value, a statistical one on each seed's value."""
    if claim.kind == "exact":
        return _evaluate_exact(claim, per_seed)
    if np.ndim(per_seed) == 0:
        raise ValueError(f"claim {claim.id} is statistical: give one value per seed")
    values = tuple(float(v) for v in per_seed)
    if any(np.isnan(values)):
        return Verdict(claim.id, claim.statement, claim.paper_value, float("nan"),
                       (float("nan"), float("nan")), claim.threshold, claim.direction,
                       INCONCLUSIVE, values)
    mean, lo, hi = mean_interval(values, claim.interval)
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
                   claim.threshold, claim.direction, verdict, values)


def evaluate_all(claims: Sequence[Claim], per_seed: Mapping[str, float | Sequence[float]]) -> list[Verdict]:
    """Evaluate every claim on its entry of ``per_seed`` (claim id -> values per seed, or one value
    for an exact claim)."""
    missing = [c.id for c in claims if c.id not in per_seed]
    if missing:
        raise KeyError(f"no measured values for claims: {', '.join(missing)}")
    return [evaluate(c, per_seed[c.id]) for c in claims]


def fmt(x: float | None) -> str:
    """A number to three significant digits; a missing value (NaN, or JSON ``null``) as ``nan``."""
    return "nan" if x is None or np.isnan(x) else f"{x:.3g}"


def fmt_interval(interval: Sequence[float | None] | None) -> str:
    """``[lo, hi]`` to three significant digits; an exact claim (no interval) as ``exact``."""
    return "exact" if interval is None else f"[{fmt(interval[0])}, {fmt(interval[1])}]"


def table(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    """The verdict table shown on a page: claim, paper's number, ours with interval, test."""
    pd.set_option("display.max_colwidth", None)  # a claim's statement is shown whole, never cut
    rows = [
        {
            "claim": v.id,
            "statement": v.statement,
            "paper": v.paper_value,
            "ours": fmt(v.value),
            "95% interval": fmt_interval(v.interval),
            "test": f"{v.direction} {v.threshold:g}",
            "seeds": len(v.per_seed) if v.kind == "statistical" else "–",
            "verdict": v.verdict,
        }
        for v in verdicts
    ]
    return pd.DataFrame(rows).set_index("claim")


def format_table(claims: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text verdict table from ``results.json`` claim records, for the terminal."""
    if not claims:
        return "(no claims recorded)"
    header = ("claim", "ours", "95% interval", "test", "verdict")
    rows = [
        (
            c["id"],
            fmt(c["value"]),
            fmt_interval(c["interval"]),
            f"{c.get('direction', '>=')} {c['threshold']:g}",
            c["verdict"],
        )
        for c in claims
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in (header, *rows)]
    return "\n".join(lines)


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


def emit(verdicts: Sequence[Verdict], metrics: Mapping[str, Any] | None = None) -> None:
    """Print the verdict lines and, under the runner, hand claims and metrics to it as JSON."""
    print(verdict_lines(verdicts))
    target = os.environ.get(OUTPUT_ENV)
    if target:
        payload = {"claims": [v.to_dict() for v in verdicts], "metrics": metrics or {}}
        path = Path(target)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(_jsonable(payload), indent=1))
        os.replace(partial, path)  # the runner reads the whole hand-off or none of it
