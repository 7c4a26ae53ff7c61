"""The figures of the fr-geometry page."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.fr_geometry import faces
from companion.papers.fr_geometry.experiment import Results, energy_table, macro_table

ATTRS = list(faces.ATTRIBUTES)


def plot_gallery(results: Results) -> Figure:
    """One test identity across 5 values of every attribute (rows), and 6 identities at neutral attributes."""
    p = results.params
    ids = faces.sample_identities(6, np.random.default_rng([p.seed, 0]))
    fig, axes = plotting.figure(ncols=6, nrows=len(ATTRS) + 1, width=0.9, height=0.9)
    one = faces.take(ids, np.zeros(5, int))
    for r, (attr, (lo, hi)) in enumerate(faces.ATTRIBUTES.items()):
        a = faces.neutral_attributes(5)
        a[attr] = np.linspace(lo, hi, 5)
        img = faces.render(one, a, 48)
        axes[6 * r].text(1.0, 0.5, attr, ha="right", va="center", fontsize=8)
        for c in range(5):
            axes[6 * r + c + 1].imshow(img[c])
    img = faces.render(ids, faces.neutral_attributes(6), 48)
    last = 6 * len(ATTRS)
    for c in range(6):
        axes[last + c].imshow(img[c])
    for ax in axes:
        ax.set_axis_off()
    return fig


def plot_energies(results: Results) -> Figure:
    """Violins of per-identity energies per attribute and model (all seeds), E = 1 marked."""
    import seaborn as sns

    if not results.per_seed:
        from companion.papers.fr_geometry import paper_preset

        return paper_preset.plot_energies(results.real)
    mode = results.params.neighbors
    recs = [(m, ATTRS[a], float(e)) for r in results.per_seed for m, E in r.energies[mode].items()
            for a in range(len(ATTRS)) for e in E[:, a]]
    df = pd.DataFrame(recs, columns=["model", "attribute", "energy"])
    fig, (ax,) = plotting.figure(width=10.0, height=3.4)
    sns.violinplot(data=df, x="attribute", y="energy", hue="model", ax=ax, cut=0, density_norm="width",
                   linewidth=0.6, inner=None)
    ax.axhline(1.0, color="grey", ls="--", lw=0.8)
    ax.set_ylabel(f"energy ({mode})")
    ax.set_xlabel("")
    ax.legend(ncols=5, fontsize=7, loc="lower left")
    return fig


def plot_sensitivity(results: Results) -> Figure:
    """Mean sensitivity S per attribute and model (log scale): energy ignores magnitude, this shows it."""
    if not results.per_seed:
        return _empty("sensitivities: synthetic presets only")
    S = energy_table(results, what="sensitivity")
    fig, (ax,) = plotting.figure(width=7.0, height=2.8)
    x = np.arange(len(ATTRS))
    w = 0.8 / len(S)
    for i, (m, row) in enumerate(S.iterrows()):
        ax.bar(x + i * w - 0.4 + w / 2, row.values, w, label=m)
    ax.set_xticks(x, ATTRS)
    ax.set_yscale("log")
    ax.set_ylabel("sensitivity S (mean ||v|| / 2h)")
    ax.legend(ncols=5, fontsize=7)
    return fig


def plot_quiver(results: Results) -> Figure:
    """The contrast field of one test identity on the first two PCs of its point cloud: ft_none vs ft_aug."""
    if not results.per_seed:
        return _empty("vector fields: synthetic presets only")
    r = results.per_seed[0]
    aug = results.params.aug_attributes[0]
    a = ATTRS.index("contrast")
    fig, axes = plotting.figure(ncols=2, width=3.6, height=3.4)
    for ax, m in zip(axes, ("ft_none", f"ft_{aug}")):
        P, V = r.quiver[m]
        mu = P.mean(0)
        _, _, Vt = np.linalg.svd(P - mu, full_matrices=False)
        xy, uv = (P - mu) @ Vt[:2].T, V @ Vt[:2].T
        uv = uv / np.maximum(np.linalg.norm(uv, axis=1, keepdims=True), 1e-12)
        ax.quiver(xy[:, 0], xy[:, 1], uv[:, 0], uv[:, 1], angles="xy", width=0.006)
        ax.scatter(xy[:, 0], xy[:, 1], s=6, color="grey")
        e, s = r.energies["knn"][m][0, a], r.sens[m][0, a]
        ax.set_title(f"{m}: E = {e:.2f}, S = {s:.2f}", fontsize=9)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
    return fig


def plot_macro(results: Results) -> Figure:
    """ECDFs of within-group vs cross-group distances (skin: identity-level; expression: image-level),
    and KS per attribute for the base and the random model."""
    if not results.per_seed:
        from companion.papers.fr_geometry import paper_preset

        return paper_preset.plot_macro(results.real)
    r = results.per_seed[0]
    fig, axes = plotting.figure(ncols=3, width=3.3, height=3.0)
    for ax, attr in zip(axes, ("skin_hue (identity)", "expression (image)")):
        d = r.macro_dists[attr]
        for key, style in (("a", "-"), ("not_a", "-"), ("cross", "--")):
            x = np.sort(d[key])
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), style, label=key)
        ax.set_title(f"{attr}: KS = {r.macro['base'][attr]['ks_max']:.2f}", fontsize=9)
        ax.set_xlabel("cosine distance")
        ax.set_ylabel("ECDF")
        ax.legend(fontsize=7)
    mt = macro_table(results)["ks_max"].unstack(0)
    mt.plot.bar(ax=axes[2], rot=20)
    axes[2].set_ylabel("KS (max), mean over seeds")
    axes[2].set_xlabel("")
    return fig


def _empty(text: str) -> Figure:
    """A blank figure with a note (a panel this preset cannot draw)."""
    fig, (ax,) = plotting.figure(width=4.0, height=1.0)
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()
    return fig
