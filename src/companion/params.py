"""Typed parameter schemas with presets, validated before any compute.

Each paper declares ``class Params(BaseParams)`` as a frozen dataclass whose fields are made with
:func:`param` (default = the quick preset's value, plus the allowed range or choices) and a
``PRESETS`` mapping with the overrides of the ``full`` and ``paper`` presets. The CLI and the
notebooks both go through :meth:`BaseParams.resolve`, so a typo or an out-of-range value is
refused the same way everywhere, with a message naming the parameter, the value and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence, TypeVar

PRESET_NAMES = ("quick", "full", "paper")
# Parameters whose names end so are paths: absolute once resolved (a paper opens them from the
# kernel's folder, notebooks/), project-relative in key_dict.
PATH_SUFFIXES = ("_path", "_dir")

P = TypeVar("P", bound="BaseParams")
# The parameters the notebook's kernel resolved last (``from_cell``): the runner records these, not
# its own plan, so that a record always says what ran.
_IN_KERNEL: dict[str, Any] | None = None


def kernel_params() -> dict[str, Any] | None:
    """The parameters this kernel resolved from its parameters cell (None before it did)."""
    return _IN_KERNEL


class ParamError(ValueError):
    """A parameter, preset or value that the schema does not allow."""


@dataclass(frozen=True)
class Rule:
    """What a parameter accepts: a closed numeric range, a set of choices, and a help line."""

    lo: float | None = None
    hi: float | None = None
    choices: tuple[Any, ...] | None = None
    min_len: int = 1
    help: str = ""

    def describe(self, kind: str) -> str:
        """Say in words what values are allowed."""
        if self.choices is not None:
            one = "one or more of" if kind.startswith("list") else "one of"
            return f"{one} {', '.join(map(str, self.choices))}"
        if self.lo is not None and self.hi is not None:
            return f"{kind} in [{_fmt(self.lo)}, {_fmt(self.hi)}]"
        if self.lo is not None:
            return f"{kind} >= {_fmt(self.lo)}"
        if self.hi is not None:
            return f"{kind} <= {_fmt(self.hi)}"
        return kind


def _a(kind: str) -> str:
    """The type name with its article: 'an int', 'a float'."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def param(
    default: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: Sequence[Any] | None = None,
    min_len: int = 1,
    help: str = "",
) -> Any:
    """Declare a parameter field with its quick-preset default and what it accepts."""
    rule = Rule(lo, hi, tuple(choices) if choices is not None else None, min_len, help)
    return field(default=default, metadata={"rule": rule})


@dataclass(frozen=True)
class BaseParams:
    """The parameters every paper has: the base seed, the number of seeds and the device."""

    seed: int = param(0, lo=0, hi=2**31 - 1, help="base seed; claim seeds are seed, seed+1, ...")
    seeds: int = param(3, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    device: str = param("auto", choices=("auto", "cpu", "cuda"), help="where torch runs")
    preset: str = param("quick", choices=PRESET_NAMES, help="the preset these values came from")

    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The overridable parameter names, in declaration order (without ``preset``)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "preset")

    @classmethod
    def resolve(cls: type[P], preset: str = "quick", **overrides: Any) -> P:
        """Start from ``preset``, apply the non-``None`` overrides, and validate every value."""
        if preset not in PRESET_NAMES:
            raise ParamError(
                f"unknown preset {preset!r}; allowed: {', '.join(PRESET_NAMES)}"
            )
        unknown = sorted(set(overrides) - set(cls.names()))
        if unknown:
            raise ParamError(
                f"unknown parameter {unknown[0]!r}; allowed: {', '.join(cls.names())}"
            )
        values: dict[str, Any] = {"preset": preset}
        values.update(cls.PRESETS.get(preset, {}))
        values.update({k: v for k, v in overrides.items() if v is not None})
        checked = {name: cls.check(name, value) for name, value in values.items()}
        for f in dataclasses.fields(cls):
            if f.name.endswith(PATH_SUFFIXES) and f.default is not dataclasses.MISSING:
                checked[f.name] = _absolute(checked.get(f.name, f.default))
        return cls(**checked)

    @classmethod
    def from_cell(cls: type[P], namespace: Mapping[str, Any]) -> P:
        """Resolve from a notebook's parameters cell: ``preset`` and every declared name (the result
        is what :func:`kernel_params` reports to the runner)."""
        global _IN_KERNEL
        overrides = {name: namespace.get(name) for name in cls.names()}
        resolved = cls.resolve(namespace.get("preset", "quick"), **overrides)
        _IN_KERNEL = resolved.to_dict()
        return resolved

    @classmethod
    def rule(cls, name: str) -> Rule:
        """The rule of one parameter; unknown names raise :class:`ParamError`."""
        for f in dataclasses.fields(cls):
            if f.name == name:
                return f.metadata.get("rule", Rule())
        raise ParamError(f"unknown parameter {name!r}; allowed: {', '.join(cls.names())}")

    @classmethod
    def kind(cls, name: str) -> str:
        """A short name of the declared type: int, float, bool, str, list[int], ..."""
        hint = typing.get_type_hints(cls)[name]
        origin = typing.get_origin(hint)
        if origin in (tuple, list):
            return f"list[{typing.get_args(hint)[0].__name__}]"
        return hint.__name__

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """Coerce ``value`` to the declared type of ``name`` and check its range or choices."""
        rule = cls.rule(name)
        kind = cls.kind(name)
        allowed = rule.describe(kind)
        if kind.startswith("list["):
            items = value if isinstance(value, (list, tuple)) else [value]
            elem = kind[5:-1]
            out = tuple(_coerce(name, v, elem, allowed) for v in items)
            if len(out) < rule.min_len:
                raise ParamError(
                    f"parameter {name!r}: {len(out)} values given; allowed: at least "
                    f"{rule.min_len} of {allowed}"
                )
            for v in out:
                _check_range(name, v, rule, allowed)
            return out
        out = _coerce(name, value, kind, allowed)
        _check_range(name, out, rule, allowed)
        return out

    @classmethod
    def parse(cls, name: str, text: str) -> Any:
        """Parse a command-line string (``-p name=text``) to the declared type and validate it."""
        cls.rule(name)
        kind = cls.kind(name)
        if kind.startswith("list["):
            parts = [t.strip() for t in text.split(",") if t.strip()]
            return cls.check(name, [_from_text(name, t, kind[5:-1], cls) for t in parts])
        return cls.check(name, _from_text(name, text, kind, cls))

    def to_dict(self) -> dict[str, Any]:
        """Every resolved value as JSON-friendly Python (tuples become lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    def key_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with path parameters spelled relative to the project root when inside it,
        so that the code key of a run is the same on every machine and checkout."""
        from companion.registry import project_root

        out = self.to_dict()
        root = project_root()
        for name, value in out.items():
            if name.endswith(PATH_SUFFIXES) and isinstance(value, str) and Path(value).is_absolute():
                path = Path(value)
                out[name] = str(path.relative_to(root)) if path.is_relative_to(root) else value
        return out

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every paper's class the display below in its own namespace: IPython looks there
        for ``_repr_pretty_`` before it falls back to the ``__repr__`` that @dataclass writes."""
        super().__init_subclass__(**kwargs)
        cls._repr_pretty_ = BaseParams._repr_pretty_

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's display: the dataclass repr with path parameters as :meth:`key_dict` spells them,
        so that a stored page shows no machine's absolute path."""
        spelled = self.key_dict()
        shown = (f"{f.name}={spelled[f.name] if f.name.endswith(PATH_SUFFIXES) else getattr(self, f.name)!r}"
                 for f in dataclasses.fields(self) if f.repr)
        printer.text(f"{type(self).__qualname__}({', '.join(shown)})")

    def seed_list(self) -> list[int]:
        """The seeds the claims are evaluated over: ``seed, seed + 1, ..., seed + seeds - 1``."""
        return [self.seed + i for i in range(self.seeds)]


def _from_text(name: str, text: str, kind: str, cls: type[BaseParams]) -> Any:
    """Turn one command-line token into a Python value of ``kind`` (no range check yet)."""
    allowed = cls.rule(name).describe(cls.kind(name))
    try:
        if kind == "bool":
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        return text
    except ValueError:
        raise ParamError(f"parameter {name!r}: {text!r} is not {_a(kind)}; allowed: {allowed}") from None


def _coerce(name: str, value: Any, kind: str, allowed: str) -> Any:
    """Accept ``value`` when it already has type ``kind`` (ints are accepted for floats)."""
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "str": isinstance(value, str),
    }.get(kind, False)
    if not ok:
        raise ParamError(f"parameter {name!r}: {value!r} is not {_a(kind)}; allowed: {allowed}")
    if kind == "float":
        value = float(value)
        if not math.isfinite(value):
            raise ParamError(f"parameter {name!r}: {value!r} is not finite; allowed: {allowed}")
    return value


def _absolute(value: Any) -> Any:
    """A non-empty path parameter as an absolute path (see :func:`resolve_path`); others as given."""
    return str(resolve_path(value)) if isinstance(value, str) and value else value


def _check_range(name: str, value: Any, rule: Rule, allowed: str) -> None:
    """Raise when ``value`` is outside the rule's choices or numeric range."""
    bad = (
        (rule.choices is not None and value not in rule.choices)
        or (rule.lo is not None and value < rule.lo)
        or (rule.hi is not None and value > rule.hi)
    )
    if bad:
        raise ParamError(f"parameter {name!r}: {value!r} is out of range; allowed: {allowed}")


def local_default(slug: str, *parts: str) -> str:
    """The default place of what a user brings for ``slug``: ``data/local/<slug>/<parts>``."""
    return "/".join(("data", "local", slug, *parts))


def resolve_path(value: str) -> Path:
    """A path parameter as a path: absolute as given, relative to the project root otherwise."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    from companion.registry import project_root

    return project_root() / path


def require_path(name: str, value: str, what: str, kind: str = "any") -> Path:
    """Refuse (before compute) a path parameter that names nothing of ``kind`` (dir, file, any).

    ``what`` says in a few words what belongs there, e.g. "a Hugging Face GPT-2 folder
    (config.json + model.safetensors)"; the message points at ``companion fetch`` and data/README.md.
    """
    if not value:
        raise ParamError(f"parameter {name!r} is empty; allowed: a local path to {what} "
                         "(see data/README.md, or `companion fetch`)")
    path = resolve_path(value)
    ok = {"dir": path.is_dir(), "file": path.is_file(), "any": path.exists()}[kind]
    if not ok:
        noun = {"dir": "folder", "file": "file", "any": "path"}[kind]
        raise ParamError(f"parameter {name!r}: {value!r} is not an existing {noun}; allowed: a local "
                         f"path to {what} (see data/README.md, or `companion fetch`)")
    return path
