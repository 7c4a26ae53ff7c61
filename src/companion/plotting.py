"""One figure style for the whole book: modest PNGs, opaque backgrounds, colour-blind palette.

Figures are made without pyplot, so that importing this module leaves the backend alone (a Jupyter
user's, or the kernel's ``%matplotlib inline``) and no figure outlives its last reference: pyplot
would keep every figure until it is closed, and draw each one a second time at the end of a cell
under ``%matplotlib inline``. A notebook shows the returned figure as the cell's value.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

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
    matplotlib.rcParams.update(STYLE)


def figure(ncols: int = 1, nrows: int = 1, width: float = 4.0, height: float = 3.0) -> tuple[Figure, Sequence[Axes]]:
    """A figure of ``nrows x ncols`` panels of ``width x height`` inches each; axes as a flat list."""
    use_style()
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, list(axes.flat)


def mean_sd_line(ax: Axes, x: Sequence[float], runs: Sequence[Sequence[float]], label: str) -> None:
    """Plot the mean over runs (rows) against ``x`` with a +-1 s.d. band."""
    import numpy as np

    arr = np.asarray(runs, dtype=float)
    mean, sd = arr.mean(axis=0), arr.std(axis=0)
    line, = ax.plot(x, mean, label=label)
    ax.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, linewidth=0)
