"""Parameter schemas: presets, coercion from the command line, and refusals that name the problem."""

from dataclasses import dataclass

import pytest

from companion.params import BaseParams, ParamError, param


@dataclass(frozen=True)
class P(BaseParams):
    lr: float = param(3e-3, lo=1e-4, hi=1e-2)
    steps: int = param(300, lo=50, hi=20000)
    losses: tuple[str, ...] = param(("kl", "alpha1.5"), choices=("kl", "alpha1.5", "js"))
    verbose: bool = param(False)

    PRESETS = {"full": {"steps": 2000, "seeds": 5}}


def test_quick_preset_is_the_declared_defaults():
    p = P.resolve()
    assert (p.preset, p.steps, p.seeds, p.losses) == ("quick", 300, 3, ("kl", "alpha1.5"))


def test_preset_then_overrides_and_none_means_unset():
    p = P.resolve("full", steps=None, lr=1e-3)
    assert (p.steps, p.seeds, p.lr) == (2000, 5, 1e-3)


def test_seed_list_counts_from_the_base_seed():
    assert P.resolve(seed=10, seeds=3).seed_list() == [10, 11, 12]


def test_from_cell_reads_only_declared_names():
    p = P.from_cell({"preset": "full", "steps": 100, "unrelated": 1, "lr": None})
    assert (p.preset, p.steps, p.lr) == ("full", 100, 3e-3)


@pytest.mark.parametrize("name, text, value", [
    ("steps", "400", 400), ("lr", "1e-3", 1e-3), ("lr", "0.005", 0.005), ("verbose", "yes", True),
    ("verbose", "0", False), ("losses", "js, kl", ("js", "kl")), ("device", "cpu", "cpu"),
])
def test_parse_command_line_values(name, text, value):
    assert P.parse(name, text) == value


@pytest.mark.parametrize("name, text, words", [
    ("seeds", "-1", ["'seeds'", "-1", "[1, 64]"]),
    ("seeds", "abc", ["'seeds'", "'abc'", "not an int"]),
    ("lr", "1", ["'lr'", "out of range", "[0.0001, 0.01]"]),
    ("lr", "nan", ["'lr'", "not finite"]),
    ("losses", "kl,zz", ["'losses'", "'zz'", "kl, alpha1.5, js"]),
    ("verbose", "maybe", ["'verbose'", "not a bool"]),
    ("device", "tpu", ["'device'", "auto, cpu, cuda"]),
    ("no_such", "1", ["unknown parameter 'no_such'", "allowed: seed, seeds"]),
])
def test_bad_values_are_refused_with_name_value_and_allowed(name, text, words):
    with pytest.raises(ParamError) as err:
        P.parse(name, text)
    for word in words:
        assert word in str(err.value)


def test_resolve_refuses_unknown_preset_and_names_and_types():
    with pytest.raises(ParamError, match="unknown preset 'fast'"):
        P.resolve("fast")
    with pytest.raises(ParamError, match="unknown parameter 'stpes'"):
        P.resolve(stpes=3)
    with pytest.raises(ParamError, match="'steps': 3.5 is not an int"):
        P.resolve(steps=3.5)
    with pytest.raises(ParamError, match="'verbose': 1 is not a bool"):
        P.resolve(verbose=1)


def test_lists_from_notebook_become_tuples_and_to_dict_gives_lists():
    p = P.resolve(losses=["js"])
    assert p.losses == ("js",)
    assert p.to_dict()["losses"] == ["js"]


@dataclass(frozen=True)
class WithPaths(BaseParams):
    model_path: str = param("data/local/toy/model")
    features_dir: str = param("")


def test_a_relative_path_parameter_resolves_absolute_under_the_project_and_keys_as_spelled():
    from companion.registry import project_root

    root = project_root()
    p = WithPaths.resolve()
    assert p.model_path == str(root / "data" / "local" / "toy" / "model")  # opens from any folder
    assert p.key_dict()["model_path"] == "data/local/toy/model"  # the code key is the same on every machine
    assert WithPaths.resolve(model_path=p.model_path).key_dict() == p.key_dict()
    assert p.features_dir == "" and p.key_dict()["features_dir"] == ""


def test_a_path_outside_the_project_stays_absolute_in_the_key(tmp_path):
    p = WithPaths.resolve(model_path=str(tmp_path / "m"))
    assert p.model_path == p.key_dict()["model_path"] == str(tmp_path / "m")


def test_ipython_shows_path_parameters_as_spelled_and_the_rest_as_repr():
    from IPython.lib.pretty import pretty

    p = WithPaths.resolve(seed=4)
    shown = pretty(p)
    assert shown == repr(p).replace(repr(p.model_path), repr("data/local/toy/model"))
    assert "seed=4" in shown and "model_path='data/local/toy/model'" in shown
    assert pretty(P.resolve()) == repr(P.resolve())
