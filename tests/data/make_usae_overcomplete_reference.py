"""Write ``usae_overcomplete_reference.json``: overcomplete's R², energy and AuxK losses on fixed inputs.

The reference of ``test_agrees_with_overcomplete_reference`` in ``tests/test_usae.py``. Run it where
``overcomplete`` can be read, with a checkout of the official USAE code for the L1 AuxK loss::

    python tests/data/make_usae_overcomplete_reference.py \
        --pypi /path/to/site-packages/overcomplete --official /path/to/UniversalSAE/overcomplete \
        --official-commit <sha of that UniversalSAE checkout>

``--pypi`` is the ``overcomplete`` package folder of the PyPI release (0.3.0 here: ``r2_score``,
``energy_of_codes``, ``top_k_auxiliary_loss``); ``--official`` is the ``overcomplete`` folder bundled in
YorkUCVIL/UniversalSAE (it adds ``top_k_auxiliary_loss_L1``, the loss the USAE trains with). The project does
not install overcomplete: its package ``__init__`` imports timm/torchvision vision models. So this script
never runs that ``__init__``: it registers bare package modules for ``overcomplete`` and ``overcomplete.sae``
pointing at the folder and imports only ``metrics`` and ``sae/losses`` (which need torch and scipy). The
functions evaluated are overcomplete's own code, unmodified.

Inputs are drawn from a seeded generator, rounded to float32 and stored in the fixture beside the outputs, so
the test does not depend on torch's random streams. They include zeros, ties and a zero-variance target (where
only overcomplete's ``Epsilon`` keeps R² finite). AuxK inputs are built so that every row's boundary of the
auxiliary top half falls between distinct values or inside zeros: a tie across the boundary would make the
loss depend on which tied index ``torch.topk`` keeps.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
import sys
import types
from pathlib import Path

import torch

OUT = Path(__file__).with_name("usae_overcomplete_reference.json")


def load(folder: Path, name: str) -> tuple[types.ModuleType, types.ModuleType, str]:
    """overcomplete's ``metrics`` and ``sae.losses`` from ``folder``, as package ``name``, without its ``__init__``."""
    for pkg, path in ((name, folder), (f"{name}.sae", folder / "sae")):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(path)]
        sys.modules[pkg] = mod
    metrics = importlib.import_module(f"{name}.metrics")
    losses = importlib.import_module(f"{name}.sae.losses")
    init = (folder / "__init__.py").read_text()
    version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", init)
    digest = hashlib.sha256((folder / "metrics.py").read_bytes() + (folder / "sae" / "losses.py").read_bytes())
    return metrics, losses, (version.group(1) if version else "unversioned") + " sha256:" + digest.hexdigest()[:16]


def f32(t: torch.Tensor) -> list:
    """A float32 tensor as nested lists of Python floats (exact)."""
    return t.to(torch.float32).tolist()


def r2_cases(gen: torch.Generator) -> list[dict]:
    x = torch.randn(12, 5, generator=gen) * 2 + 3
    noisy = x + 0.7 * torch.randn(12, 5, generator=gen)
    zeros = torch.where(torch.rand(12, 5, generator=gen) < 0.4, torch.zeros_like(x), noisy)
    const = torch.full((12, 5), 1.5)
    near_const = const + 1e-3 * torch.randn(12, 5, generator=gen)
    return [
        {"name": "noisy", "x": x, "x_hat": noisy},
        {"name": "perfect", "x": x, "x_hat": x.clone()},
        {"name": "zeros-in-x_hat", "x": x, "x_hat": zeros},
        {"name": "mean-only", "x": x, "x_hat": torch.full_like(x, float(x.mean()))},
        {"name": "zero-variance-x", "x": const, "x_hat": near_const},
        {"name": "all-zero", "x": torch.zeros(12, 5), "x_hat": torch.zeros(12, 5)},
    ]


def energy_case(gen: torch.Generator) -> dict:
    n_models, n_samples, n_concepts = 3, 10, 6
    codes = torch.rand(n_models, n_samples, n_concepts, generator=gen)
    codes = torch.where(torch.rand(codes.shape, generator=gen) < 0.5, torch.zeros_like(codes), codes)
    codes[:, :, 2] = 0.0  # a dead concept in every model
    codes[1, :, 4] = 0.0  # dead in one model only
    codes[:, :, 5] = codes[:, :, 3]  # tied codes; atoms differ
    dicts = [torch.randn(n_concepts, d, generator=gen) for d in (4, 7, 5)]
    dicts[0][1] = 0.0  # a zero atom
    return {"codes": codes, "dictionaries": dicts}


def aux_case(gen: torch.Generator, penalty: float) -> dict:
    n, d, concepts, k = 8, 5, 12, 3
    while True:
        pre = (torch.randn(n, concepts, generator=gen) * 4).round() / 4  # quarter steps: plenty of ties
        pre[0, :9], pre[0, 9:] = 1.25, -0.5  # nine tied codes: TopK keeps 3, the aux half takes the other 6
        pre[1, :] = -1.0  # no positive pre-code: zero codes and zero aux codes
        pre[2, 6:] = 0.0  # exact zeros
        pre[3:6] += 8.0  # mostly positive rows: the aux half's boundary falls between positive codes
        relu = torch.relu(pre)
        top = relu.topk(k, dim=1)
        z = torch.zeros_like(relu).scatter(-1, top.indices, top.values)
        unsel = (relu - z).sort(dim=1, descending=True).values
        h = concepts // 2
        if ((unsel[:, h - 1] > unsel[:, h]) | (unsel[:, h - 1] == 0)).all():
            break
    weights = torch.randn(concepts, d, generator=gen)
    dictionary = weights / (weights.norm(dim=1, keepdim=True) + 1e-8)
    x = torch.randn(n, d, generator=gen)
    return {"x": x, "x_hat": z @ dictionary, "pre": pre, "z": z, "dictionary": dictionary, "penalty": penalty}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pypi", type=Path, required=True, help="the PyPI overcomplete package folder")
    ap.add_argument("--official", type=Path, required=True, help="UniversalSAE's bundled overcomplete folder")
    ap.add_argument("--official-commit", required=True, help="commit of that UniversalSAE checkout")
    args = ap.parse_args()
    pm, pl, pypi_version = load(args.pypi, "overcomplete")
    om, ol, official_version = load(args.official, "overcomplete_official")

    gen = torch.Generator().manual_seed(58)
    out: dict = {
        "sources": {
            "pypi": f"overcomplete {pypi_version} (PyPI wheel): metrics.r2_score, metrics.energy_of_codes, "
                    "sae.losses.top_k_auxiliary_loss",
            "official": f"YorkUCVIL/UniversalSAE@{args.official_commit} overcomplete/ ({official_version}): "
                        "metrics.r2_score, metrics.energy_of_codes, sae.losses.top_k_auxiliary_loss_L1",
            "epsilon": {"pypi": pm.Epsilon, "official": om.Epsilon},
            "torch": torch.__version__,
        },
        "r2": [], "energy": {}, "auxk": [],
    }
    for case in r2_cases(gen):
        x, x_hat = case["x"], case["x_hat"]
        out["r2"].append({"name": case["name"], "x": f32(x), "x_hat": f32(x_hat),
                          "pypi": float(pm.r2_score(x, x_hat)), "official": float(om.r2_score(x, x_hat))})
    e = energy_case(gen)
    per_model = [pm.energy_of_codes(e["codes"][m], e["dictionaries"][m]) for m in range(len(e["dictionaries"]))]
    per_model_off = [om.energy_of_codes(e["codes"][m], e["dictionaries"][m]) for m in range(len(e["dictionaries"]))]
    out["energy"] = {"codes": f32(e["codes"]), "dictionaries": [f32(d) for d in e["dictionaries"]],
                     "pypi_per_model": [f32(v) for v in per_model],
                     "pypi_sum": f32(sum(per_model)), "official_sum": f32(sum(per_model_off))}
    for penalty in (0.1, 0.5):
        c = aux_case(gen, penalty)
        args_ = (c["x"], c["x_hat"], c["pre"], c["z"], c["dictionary"])
        out["auxk"].append({
            "penalty": penalty, "x": f32(c["x"]), "x_hat": f32(c["x_hat"]), "pre": f32(c["pre"]), "z": f32(c["z"]),
            "dictionary": f32(c["dictionary"]),
            "official_l1": float(ol.top_k_auxiliary_loss_L1(*args_, penalty=penalty)),
            "pypi_l2": float(pl.top_k_auxiliary_loss(*args_, penalty=penalty)),
            "official_l2": float(ol.top_k_auxiliary_loss(*args_, penalty=penalty)),
        })
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
