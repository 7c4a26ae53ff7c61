"""One figure style for the whole book: modest PNGs, opaque backgrounds, colour-blind palette."""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg", force=False)

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

STYLE = {
    "figure.dpi": 90,
    "savefig.dpi": 90,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


def use_style() -> None:
    """Apply the companion's figure style (call once per notebook)."""
    sns.set_palette("colorblind")
    plt.rcParams.update(STYLE)


def figure(ncols: int = 1, nrows: int = 1, width: float = 4.0, height: float = 3.0) -> tuple[Figure, Sequence[Axes]]:
    """A figure of ``nrows x ncols`` panels of ``width x height`` inches each; axes as a flat list."""
    use_style()
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             layout="constrained")
    return fig, list(axes.flat)


def mean_sd_line(ax: Axes, x: Sequence[float], runs: Sequence[Sequence[float]], label: str) -> None:
    """Plot the mean over runs (rows) against ``x`` with a +-1 s.d. band."""
    import numpy as np

    arr = np.asarray(runs, dtype=float)
    mean, sd = arr.mean(axis=0), arr.std(axis=0)
    line, = ax.plot(x, mean, label=label)
    ax.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, linewidth=0)
