"""A fictional world of two-hop facts: each name lives in a city (``dax``), each city has an animal (``zong``).

The data of the extractive-structures reproduction: fact sequences ``[BOS, name, DAX, city]`` and
implication sequences ``[BOS, name, ZONG, animal(city)]`` over disjoint pretraining, training and test
names, plus a counterfactual city per name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

BOS, DAX, ZONG = 0, 1, 2


@dataclass(frozen=True)
class World:
    """Names, their cities (real and counterfactual) and the city -> animal bijection."""

    n_names: int
    n_cities: int
    city: np.ndarray  # (n_names,) city of each name
    city2: np.ndarray  # (n_names,) counterfactual city, never equal to ``city``
    animal: np.ndarray  # (n_cities,) animal of each city, a permutation
    pre: np.ndarray  # name ids of the pretraining slice
    train: np.ndarray  # name ids of the training slice
    test: np.ndarray  # name ids of the test slice
    fresh: np.ndarray  # name ids of the refresh slice (facts only, never an implication; may be empty)

    @property
    def vocab(self) -> int:
        """BOS, DAX, ZONG, names, cities, animals."""
        return 3 + self.n_names + 2 * self.n_cities

    def name_tok(self, names: np.ndarray) -> np.ndarray:
        return 3 + names

    def city_tok(self, cities: np.ndarray) -> np.ndarray:
        return 3 + self.n_names + cities

    def animal_tok(self, animals: np.ndarray) -> np.ndarray:
        return 3 + self.n_names + self.n_cities + animals


def make_world(n_pre: int, n_train: int, n_test: int, n_cities: int, rng: np.random.Generator,
               n_fresh: int = 0) -> World:
    """Random facts; the test names cycle through a permutation so every city is used. The ``n_fresh``
    refresh names come last, with random cities (drawn after everything else)."""
    n = n_pre + n_train + n_test
    city = rng.integers(0, n_cities, size=n)
    city[n_pre + n_train:] = rng.permutation(n_cities)[np.arange(n_test) % n_cities]
    city2 = (city + rng.integers(1, n_cities, size=n)) % n_cities
    animal = rng.permutation(n_cities)
    fresh_city = rng.integers(0, n_cities, size=n_fresh)
    city = np.concatenate([city, fresh_city])
    city2 = np.concatenate([city2, (fresh_city + rng.integers(1, n_cities, size=n_fresh)) % n_cities])
    ids = np.arange(n + n_fresh)
    return World(n + n_fresh, n_cities, city, city2, animal, ids[:n_pre],
                 ids[n_pre:n_pre + n_train], ids[n_pre + n_train:n], ids[n:])


def dax(world: World, names: np.ndarray, counterfactual: bool = False) -> Tensor:
    """Fact sequences ``[BOS, name, DAX, city]``; (n, 4) int64."""
    cities = (world.city2 if counterfactual else world.city)[names]
    return torch.as_tensor(np.stack([np.full(len(names), BOS), world.name_tok(names), np.full(len(names), DAX),
                                     world.city_tok(cities)], axis=1), dtype=torch.long)


def zong(world: World, names: np.ndarray, counterfactual: bool = False) -> Tensor:
    """Implication sequences ``[BOS, name, ZONG, animal(city)]``; (n, 4) int64."""
    cities = (world.city2 if counterfactual else world.city)[names]
    return torch.as_tensor(np.stack([np.full(len(names), BOS), world.name_tok(names), np.full(len(names), ZONG),
                                     world.animal_tok(world.animal[cities])], axis=1), dtype=torch.long)


def candidates(world: World, seqs: Tensor) -> Tensor:
    """The answer options of a batch (cities for dax, animals for zong); (n_cities,)."""
    every = np.arange(world.n_cities)
    options = world.city_tok(every) if int(seqs[0, 2]) == DAX else world.animal_tok(every)
    return torch.as_tensor(options, dtype=torch.long)
