"""The install files agree: environment.yml lists pyproject.toml's dependencies with the same bounds."""

from __future__ import annotations

import re
import tomllib

from companion import registry

ROOT = registry.project_root()


def _split(spec: str) -> tuple[str, str]:
    """``name>=1,<2`` -> (normalised name, bounds without spaces)."""
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)", spec)
    assert m, spec
    return m.group(1).lower().replace("_", "-"), m.group(3).replace(" ", "")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["book"],
              *project["optional-dependencies"]["dev"]]
    pyproject = dict(_split(s) for s in wanted if not s.startswith("companion"))
    conda = {}
    text = (ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():
        item = line.split("#", 1)[0].strip()
        if not item.startswith("- ") or item.endswith(":"):
            continue
        spec = item[2:].strip()
        if spec in ("pip", "-e .") or spec.startswith("python="):
            continue
        name, bounds = _split(spec)
        conda[name] = bounds
    assert conda == pyproject
