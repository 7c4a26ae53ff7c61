"""``companion sweep``: run one paper over a grid of one parameter and plot each claim's metric."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import pandas as pd

from companion import registry
from companion.params import ParamError
from companion.runner import execute, resolve, write_atomic


def grid(slug: str, preset: str, pairs: Mapping[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """Split the ``-p`` pairs into the swept parameter, its values, and the fixed ones (validated)."""
    swept = [name for name, text in pairs.items() if "," in text]
    if len(swept) != 1:
        raise ParamError("sweep needs exactly one parameter with comma-separated values, "
                         f"e.g. -p seed=0,1,2; got {len(swept)}")
    name = swept[0]
    fixed = {k: v for k, v in pairs.items() if k != name}
    paper, _, _ = resolve(slug, preset, fixed)
    cls = paper.module().Params
    if cls.kind(name).startswith("list["):
        raise ParamError(f"parameter {name!r} takes a list and cannot be swept; sweep a scalar parameter")
    values = [v.strip() for v in pairs[name].split(",") if v.strip()]
    for value in values:
        resolve(slug, preset, {**fixed, name: value})
    return name, values, fixed


def plot(table: pd.DataFrame, name: str, path: Path) -> None:
    """One panel per claim: its metric (mean and 95% interval) against the swept value."""
    from companion.plotting import figure

    claims = list(dict.fromkeys(table["claim"]))
    fig, axes = figure(ncols=min(3, len(claims)) or 1, nrows=max(1, -(-len(claims) // 3)), width=3.4, height=2.6)
    for ax, claim in zip(axes, claims):
        rows = table[table["claim"] == claim]
        x = [str(v) for v in rows[name]]
        ax.errorbar(x, rows["value"], yerr=[rows["value"] - rows["lo"], rows["hi"] - rows["value"]],
                    marker="o", capsize=3)
        ax.axhline(rows["threshold"].iloc[0], color="grey", linestyle="--", linewidth=1)
        ax.set_title(claim)
        ax.set_xlabel(name)
    for ax in axes[len(claims):]:
        ax.set_visible(False)
    fig.savefig(path)


def sweep(slug: str, preset: str, pairs: Mapping[str, str], out: Path | None, force: bool) -> int:
    """Run the grid; write ``sweep.csv`` and ``sweep.png``; exit 1 if any point failed."""
    name, values, fixed = grid(slug, preset, pairs)
    root = registry.project_root()
    out = out or root / "runs" / slug / f"sweep-{name}"
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], []
    for value in values:
        outcome = execute(slug, preset, {**fixed, name: value}, force=force, root=root)
        print(f"{name}={value}: {outcome.results['status']} ({outcome.folder})")
        if not outcome.ok:
            failed.append(f"{name}={value}: {outcome.results['error']}")
        for c in outcome.results["claims"]:
            lo, hi = c["interval"] or (c["value"], c["value"])  # an exact claim has no interval
            rows.append({name: value, "claim": c["id"], "value": c["value"], "lo": lo,
                         "hi": hi, "threshold": c["threshold"], "verdict": c["verdict"],
                         "run": str(outcome.folder)})
    table = pd.DataFrame(rows)
    write_atomic(out / "sweep.csv", table.to_csv(index=False))
    if not table.empty:
        partial = out / ".sweep.partial.png"
        plot(table, name, partial)
        partial.replace(out / "sweep.png")
        print(table.pivot(index=name, columns="claim", values="verdict").to_string())
    print(f"wrote {out / 'sweep.csv'} and {out / 'sweep.png'}")
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if failed else 0
