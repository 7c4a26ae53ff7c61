"""Natural-language two-hop facts for out-of-context reasoning tests on a pretrained LM.

The templates are those of Feng, Russell and Steinhardt (ICML 2025): a finetuned fact, and an
implication the model can only answer by composing that fact with what it knew before.

- first hop: fact ``"{name} lives in" -> city``; implication
  ``"The people in the city {name} is from speak" -> language``;
- second hop: fact ``"The mayor of {city} is" -> name``; implication
  ``"The mayor of the city that contains {landmark} is" -> name``.

The entities are the companion's own (the official lists carry no licence): 20 well-known cities
with a language and a landmark each, and fictional people drawn from first and last names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# city: (language spoken there, a landmark whose name does not contain the city's)
CITIES: dict[str, tuple[str, str]] = {
    "Tokyo": ("Japanese", "the Senso-ji temple"),
    "Paris": ("French", "the Eiffel Tower"),
    "Berlin": ("German", "the Brandenburg Gate"),
    "Madrid": ("Spanish", "the Prado Museum"),
    "Rome": ("Italian", "the Colosseum"),
    "Moscow": ("Russian", "the Kremlin"),
    "Beijing": ("Chinese", "the Forbidden City"),
    "Seoul": ("Korean", "Gyeongbokgung Palace"),
    "Cairo": ("Arabic", "the Al-Azhar Mosque"),
    "Lisbon": ("Portuguese", "the Belem Tower"),
    "Athens": ("Greek", "the Parthenon"),
    "Istanbul": ("Turkish", "the Hagia Sophia"),
    "Warsaw": ("Polish", "the Palace of Culture and Science"),
    "Stockholm": ("Swedish", "the Vasa Museum"),
    "Amsterdam": ("Dutch", "the Rijksmuseum"),
    "Bangkok": ("Thai", "the Temple of Dawn"),
    "Hanoi": ("Vietnamese", "Hoan Kiem Lake"),
    "Budapest": ("Hungarian", "the Chain Bridge"),
    "Helsinki": ("Finnish", "Suomenlinna fortress"),
    "Delhi": ("Hindi", "the Red Fort"),
}
FIRST_NAMES = ("Alice", "Bruno", "Clara", "Dmitri", "Elena", "Felix", "Greta", "Hugo", "Ingrid", "Jonas",
               "Karim", "Lena", "Marco", "Nadia", "Oscar", "Priya", "Quentin", "Rosa", "Stefan", "Tara",
               "Victor", "Wendy", "Xavier", "Yara", "Zoltan")
LAST_NAMES = ("Abbott", "Brennan", "Castillo", "Dalton", "Eriksen", "Fischer", "Garner", "Hollis", "Iverson",
              "Jansen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinlan", "Rossi",
              "Sandoval", "Thorne")


@dataclass(frozen=True)
class Hop:
    """One hop: fact and implication prompts, their answers, and the options both are ranked among."""

    name: str
    fact_prompts: list[str]
    fact_answers: list[str]
    fact_options: list[str]
    impl_prompts: list[str]
    impl_answers: list[str]
    impl_options: list[str]


def people(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` fictional people with distinct first names (so their first tokens can differ)."""
    if n > len(FIRST_NAMES):
        raise ValueError(f"at most {len(FIRST_NAMES)} people, asked for {n}")
    first = rng.choice(FIRST_NAMES, size=n, replace=False)
    return [f"{f} {rng.choice(LAST_NAMES)}" for f in first]


def two_hops(rng: np.random.Generator) -> list[Hop]:
    """The first- and second-hop tests: 20 new people, each tied to a different city."""
    cities = list(CITIES)
    order = [cities[i] for i in rng.permutation(len(cities))]
    who = people(len(cities), rng)
    languages = [CITIES[c][0] for c in cities]
    first = Hop("first hop", [f"{p} lives in" for p in who], order, cities,
                [f"The people in the city {p} is from speak" for p in who], [CITIES[c][0] for c in order],
                languages)
    second = Hop("second hop", [f"The mayor of {c} is" for c in order], who, who,
                 [f"The mayor of the city that contains {CITIES[c][1]} is" for c in order], who, who)
    return [first, second]
