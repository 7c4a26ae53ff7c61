"""The paper contract: what a paper declares, and what the framework supplies from it.

A paper's package declares, in ``__init__.py`` and nothing more:

- ``Params`` (a :class:`companion.params.BaseParams` dataclass) and its ``PRESETS``;
- ``CLAIMS``: the :class:`companion.claims.Claim` rows, each with its role and, for a finding, its
  controls;
- the re-exports, made by :func:`exports`: ``run`` and ``claim_values`` from ``experiment.py`` (and,
  optionally, ``metrics``: a small JSON summary for the record), the figures from ``plots.py``.

``run(params) -> results`` does the work; ``claim_values(results)`` maps every claim id to its
per-seed values (one value for an exact claim) and every ``"<id>@<control>"`` to the control's. The
framework supplies ``check`` (every claim and control judged by the same test), ``metrics`` (the
paper's summary, or an empty one) and, through :mod:`companion.claims`, ``emit``, the tables and
provenance. The re-exports load on first use, so reading ``Params`` or ``CLAIMS`` (the CLI validating
parameters, ``companion rejudge``) imports neither the experiment nor torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from companion.claims import Verdict, evaluate_all

FRAMEWORK = ("check", "metrics")


def check(paper: ModuleType, results: Any) -> list[Verdict]:
    """Every claim of ``paper`` (and each finding's controls) judged on ``results``."""
    return evaluate_all(paper.CLAIMS, paper.claim_values(results))


def metrics(paper: ModuleType, results: Any) -> dict[str, Any]:
    """The paper's own summary for the record (``experiment.metrics``), or an empty one."""
    summarise = getattr(importlib.import_module(f"{paper.__name__}.experiment"), "metrics", None)
    return summarise(results) if summarise is not None else {}


def exports(package: str, modules: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each name of ``modules`` (submodule -> names) loads
    from its submodule on first use, and ``check`` / ``metrics`` come from the framework."""
    where = {name: sub for sub, names in modules.items() for name in names}
    clash = sorted(set(where) & set(FRAMEWORK))
    if clash:
        raise ValueError(f"{package}: {', '.join(clash)} are supplied by the framework, not re-exported")

    def __getattr__(name: str) -> Any:
        paper = importlib.import_module(package)
        if name in FRAMEWORK:
            supplied = globals()[name]
            return lambda results: supplied(paper, results)
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(paper, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(where) | set(FRAMEWORK))

    return __getattr__, __dir__
