"""Invented multi-hop questions in the HotpotQA layout, generated offline (``data="synthetic"``).

No synthetic fact can be recalled from a pretrained model: every name is an invented word, and each question needs
the two passages of its supporting facts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from erl_envs.qa.records import Passage, Question

__all__ = ["generate_synthetic"]


_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "st", "tr",
           "th", "sh", "ch", "h", "j", "w")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ae")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "st")
_OCCUPATIONS = ("painter", "composer", "engineer", "novelist", "physicist", "architect", "chemist", "poet",
                "sculptor", "mathematician", "botanist", "film director")
_INDUSTRIES = ("shipbuilding", "textile", "software", "publishing", "brewing", "railway", "optics", "record label",
               "toy", "aerospace")
_COMPANY_SUFFIXES = ("Industries", "Works", "Holdings", "Press", "Motors", "Records", "Instruments", "Foods")
_GENRES = ("drama", "comedy", "documentary", "thriller", "western", "musical", "science fiction")
_BAND_GENRES = ("folk", "jazz", "punk rock", "synth-pop", "bluegrass", "heavy metal", "indie pop")
_FILM_WORDS = ("Lantern", "Harbour", "Orchard", "Winter", "Compass", "Meadow", "Signal", "Ember", "Tide", "Summit",
               "Glass", "Garden", "Echo", "Falcon", "Thistle", "Cinder", "Ferry", "Marble")
_FILM_ADJECTIVES = ("Silent", "Last", "Crooked", "Golden", "Distant", "Quiet", "Broken", "Hidden", "Pale", "Restless")


def _a(word: str) -> str:
    """The word with its indefinite article: "an aerospace", "a toy"."""
    return f"{'an' if word[0].lower() in 'aeiou' else 'a'} {word}"


class _Names:
    """Unique invented words, so no synthetic fact can be recalled from a pretrained model."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_NUCLEI) for _ in range(n)]
            word = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if word not in self.used and len(word) >= 4:
                self.used.add(word)
                return word


@dataclass
class _Entity:
    kind: str
    title: str
    sentences: list[str]
    facts: dict[str, Any]

    def passage(self) -> Passage:
        return Passage(id=self.title, title=self.title, text=" ".join(self.sentences))


def _build_world(rng: random.Random, size: int) -> dict[str, list[_Entity]]:
    names = _Names(rng)
    countries = []
    for _ in range(max(6, size // 20)):
        stem = names.word((2, 2))
        countries.append({"name": stem + "ia", "demonym": stem + "ian"})
    cities = []
    for _ in range(max(12, size // 4)):
        country = rng.choice(countries)
        name, river = names.word(), names.word((2, 2)) + " River"
        founded = rng.randint(900, 1850)
        cities.append(_Entity("city", name, [
            f"{name} is a city in {country['name']}.",
            f"It lies on the {river}.",
            f"The city was founded in {founded} and is known for its {rng.choice(_INDUSTRIES)} industry.",
        ], {"country": country["name"], "river": river}))
    people = []
    for _ in range(max(24, size)):
        city = rng.choice(cities)
        country = next(c for c in countries if c["name"] == city.facts["country"])
        name = f"{names.word((2, 2))} {names.word()}"
        born = rng.randint(1820, 1990)
        occupation = rng.choice(_OCCUPATIONS)
        people.append(_Entity("person", name, [
            f"{name} (born {born}) is {_a(country['demonym'])} {occupation}.",
            f"{name.split()[1]} was born in {city.title}, {city.facts['country']}.",
            f"Over a long career {name.split()[1]} received {rng.randint(2, 9)} national awards.",
        ], {"born": born, "city": city.title, "country": city.facts["country"], "demonym": country["demonym"]}))
    companies = []
    for _ in range(max(8, size // 3)):
        founder, city = rng.choice(people), rng.choice(cities)
        name = f"{names.word()} {rng.choice(_COMPANY_SUFFIXES)}"
        founded = rng.randint(1850, 2015)
        companies.append(_Entity("company", name, [
            f"{name} is {_a(rng.choice(_INDUSTRIES))} company headquartered in {city.title}.",
            f"It was founded in {founded} by {founder.title}.",
            f"The company employs about {rng.randint(2, 90) * 100} people.",
        ], {"founder": founder.title, "founded": founded, "city": city.title}))
    films = []
    for _ in range(max(8, size // 3)):
        director = rng.choice(people)
        title = f"The {rng.choice(_FILM_ADJECTIVES)} {rng.choice(_FILM_WORDS)} of {names.word((2, 2))}"
        year = rng.randint(1930, 2020)
        films.append(_Entity("film", title, [
            f"{title} is a {year} {rng.choice(_GENRES)} film.",
            f"It was directed by {director.title}.",
            f"The film stars {rng.choice(people).title} and {rng.choice(people).title}.",
        ], {"director": director.title, "year": year}))
    bands = []
    for _ in range(max(8, size // 4)):
        city = rng.choice(cities)
        name = f"The {names.word()}s"
        formed = rng.randint(1955, 2015)
        bands.append(_Entity("band", name, [
            f"{name} are {_a(rng.choice(_BAND_GENRES))} band.",
            f"The band was formed in {city.title} in {formed}.",
            f"Their debut album sold {rng.randint(5, 500) * 1000} copies.",
        ], {"city": city.title, "formed": formed}))
    return {"city": cities, "person": people, "company": companies, "film": films, "band": bands}


def _make_question(rng: random.Random, world: dict[str, list[_Entity]], by_title: dict[str, _Entity]):
    """One (question, answer, type, gold entities with the supporting sentence of each)."""
    kind = rng.randrange(8)
    if kind == 0:
        company = rng.choice(world["company"])
        founder = by_title[company.facts["founder"]]
        return (f"In which city was the founder of {company.title} born?", founder.facts["city"], "bridge",
                [(company, 1), (founder, 1)])
    if kind == 1:
        film = rng.choice(world["film"])
        director = by_title[film.facts["director"]]
        return (f"What nationality is the director of {film.title}?", director.facts["demonym"], "bridge",
                [(film, 1), (director, 0)])
    if kind == 2:
        band = rng.choice(world["band"])
        city = by_title[band.facts["city"]]
        return (f"Which river flows through the city where {band.title} was formed?", city.facts["river"],
                "bridge", [(band, 1), (city, 1)])
    if kind == 3:
        company = rng.choice(world["company"])
        city = by_title[company.facts["city"]]
        return (f"In which country is {company.title} headquartered?", city.facts["country"], "bridge",
                [(company, 0), (city, 0)])
    if kind == 4:
        a, b = _distinct_pair(rng, world["company"], "founded")
        first = a if a.facts["founded"] < b.facts["founded"] else b
        return (f"Which company was founded first, {a.title} or {b.title}?", first.title, "comparison",
                [(a, 1), (b, 1)])
    if kind == 5:
        a, b = _distinct_pair(rng, world["person"], "born")
        first = a if a.facts["born"] < b.facts["born"] else b
        return (f"Who was born earlier, {a.title} or {b.title}?", first.title, "comparison", [(a, 0), (b, 0)])
    if kind == 6:
        a, b = _yes_no_pair(rng, world["person"], "country")
        same = "yes" if a.facts["country"] == b.facts["country"] else "no"
        return (f"Were {a.title} and {b.title} of the same nationality?", same, "comparison", [(a, 0), (b, 0)])
    a, b = _yes_no_pair(rng, world["city"], "country")
    same = "yes" if a.facts["country"] == b.facts["country"] else "no"
    return (f"Are {a.title} and {b.title} in the same country?", same, "comparison", [(a, 0), (b, 0)])


def _distinct_pair(rng: random.Random, entities: list[_Entity], key: str) -> tuple[_Entity, _Entity]:
    while True:
        a, b = rng.sample(entities, 2)
        if a.facts[key] != b.facts[key]:
            return a, b


def _yes_no_pair(rng: random.Random, entities: list[_Entity], key: str) -> tuple[_Entity, _Entity]:
    """A pair that agrees on ``key`` half the time, so that "yes" and "no" are equally likely answers."""
    want_same = rng.random() < 0.5
    for _ in range(1000):
        a, b = rng.sample(entities, 2)
        if (a.facts[key] == b.facts[key]) == want_same:
            return a, b
    return rng.sample(entities, 2)  # a world with a single country has no "no" pair


def generate_synthetic(num_questions: int = 200, seed: int = 0, num_paragraphs: int = 10) -> list[Question]:
    """Invented multi-hop questions in the HotpotQA layout, deterministic in ``seed``.

    A world of invented countries, cities, people, companies, films and bands is generated, each with a short
    article; questions are bridge ("the city where the founder of X was born") or comparison ("which was founded
    first", yes/no "same nationality") as in HotpotQA, with supporting facts and ``num_paragraphs`` context
    paragraphs (the gold two plus distractors of the same kinds).
    """
    if num_questions < 1:
        raise ValueError(f"num_questions must be >= 1, got {num_questions}")
    if num_paragraphs < 2:
        raise ValueError(f"num_paragraphs must be >= 2 (the two gold paragraphs), got {num_paragraphs}")
    rng = random.Random(seed)
    world = _build_world(rng, num_questions)
    by_title = {e.title: e for entities in world.values() for e in entities}
    pools: dict[tuple[str, ...], list[_Entity]] = {}
    questions = []
    for i in range(num_questions):
        text, answer, qtype, gold = _make_question(rng, world, by_title)
        gold_titles = {e.title for e, _ in gold}
        kinds = tuple(dict.fromkeys(e.kind for e, _ in gold))
        if kinds not in pools:
            pools[kinds] = [e for kind in kinds for e in world[kind]]
        pool, need = pools[kinds], num_paragraphs - len(gold)
        # Distractors of the gold kinds (they share vocabulary with the gold passages), others only to fill up.
        distractors = [e for e in rng.sample(pool, min(len(pool), need + len(gold))) if e.title not in gold_titles]
        distractors = distractors[:need]
        if len(distractors) < need:
            others = [e for kind, entities in world.items() if kind not in kinds for e in entities]
            distractors += rng.sample(others, min(len(others), need - len(distractors)))
        context = [e for e, _ in gold] + distractors
        rng.shuffle(context)
        questions.append(Question(
            id=f"syn{seed}-{i:05d}",
            question=text,
            answers=(answer,),
            type=qtype,
            level="synthetic",
            supporting_facts=tuple((e.title, s) for e, s in gold),
            paragraphs=tuple(e.passage() for e in context),
        ))
    return questions
