"""HotpotQA questions and passage corpora: loading every supported source, and an offline synthetic generator.

Question sources (``load_questions``): ``"synthetic"``; a local ``.json`` (the official HotpotQA layout, a list of
objects with ``context`` as ``[title, sentences]`` pairs), ``.jsonl`` or ``.parquet`` file (the Hugging Face
``hotpot_qa`` layout, or question + answer only, like the paper's evaluation split); a ``datasets`` spec
``"hf:<path>[:<config>[:<split>]]"`` passed to ``datasets.load_dataset``; a ``datasets.Dataset``; or a list of dicts.
Corpus sources (``load_corpus``): a ``.jsonl``/``.json``/``.parquet`` file or a list of dicts with ``title`` and
``text`` (or a ``contents`` field whose first line is the title, as in common Wikipedia passage dumps).

Every problem with the data raises ``DataError`` (a ValueError) or FileNotFoundError naming the file and the fix.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from erl_envs.safe_parse import loads_json

__all__ = [
    "Passage",
    "Question",
    "DataError",
    "EvalOverlapError",
    "DATA_HELP",
    "question_key",
    "shared_questions",
    "load_questions",
    "load_corpus",
    "corpus_from_questions",
    "question_from_record",
    "generate_synthetic",
]

DATA_HELP = (
    "data= can be: 'synthetic' (generated offline; num_questions=, seed=), a HotpotQA .json/.jsonl/.parquet file, "
    "'hf:hotpotqa/hotpot_qa:distractor:validation' (any 'hf:<path>[:<config>[:<split>]]' goes to "
    "datasets.load_dataset), a datasets.Dataset, or a list of dicts with 'question' and 'answer'. "
    "For open-domain search over your own passages add corpus= (a .jsonl file of {id, title, text} or a list of dicts)."
)

_FILE_KINDS = (".json", ".jsonl", ".parquet")


class DataError(ValueError):
    """The questions or the corpus cannot be used; the message says which file/record and why."""


class EvalOverlapError(DataError):
    """Held-out evaluation would ask questions the policy is trained on."""


def question_key(text: str) -> str:
    """A question's text as compared across data sets: Unicode-folded, punctuation and articles dropped, spaces
    squashed, so that the same question copied between files with other quotes or spacing still matches."""
    from erl_envs.qa import normalize_answer
    from erl_envs.qa.search import fold_text

    return normalize_answer(fold_text(text), "unicode")


def shared_questions(train: Sequence["Question"], held_out: Sequence["Question"]) -> list["Question"]:
    """The held-out questions that are also training questions, by id or by ``question_key``."""
    ids = {q.id for q in train}
    texts = {question_key(q.question) for q in train}
    return [q for q in held_out if q.id in ids or question_key(q.question) in texts]


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """One question. ``paragraphs`` are its own context passages (empty when the source has none);
    ``supporting_facts`` are ``(title, sentence index)`` pairs (empty when unknown)."""

    id: str
    question: str
    answers: tuple[str, ...]
    type: str | None = None
    level: str | None = None
    supporting_facts: tuple[tuple[str, int], ...] = ()
    paragraphs: tuple[Passage, ...] = field(default=(), repr=False)

    @property
    def answer(self) -> str:
        return self.answers[0]

    @property
    def supporting_titles(self) -> tuple[str, ...]:
        """Titles of the gold passages, in order, each once."""
        return tuple(dict.fromkeys(title for title, _ in self.supporting_facts))


# --------------------------------------------------------------------------------------------- records


def _as_list(value: Any) -> list:
    """Lists come back from parquet/datasets as numpy arrays or tuples; treat them all as lists."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)):
        return [value]
    if hasattr(value, "tolist"):  # numpy arrays, and numpy scalars (whose tolist() is a plain int/float/str)
        value = value.tolist()
    if isinstance(value, (list, tuple, set)) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))):
        return list(value)
    return [value]  # a scalar, e.g. a numeric answer: 1999


def _answer_text(value: Any) -> str:
    """A gold answer as text: numbers load as strings ("1999"; an integral float from a float column too)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalar -> Python scalar
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _paragraphs(context: Any, where: str) -> tuple[Passage, ...]:
    if context is None:
        return ()
    if isinstance(context, Mapping):  # Hugging Face layout: {"title": [...], "sentences": [[...], ...]}
        titles, sentence_lists = _as_list(context.get("title")), _as_list(context.get("sentences"))
        if len(titles) != len(sentence_lists):
            raise DataError(f"{where}, field 'context': {len(titles)} titles but {len(sentence_lists)} sentence "
                            "lists; each paragraph needs both")
        pairs = list(zip(titles, sentence_lists))
    else:  # official layout: [[title, [sentences]], ...]
        pairs = []
        for item in _as_list(context):
            item = _as_list(item)
            if len(item) != 2:
                raise DataError(f"{where}, field 'context': an entry must be [title, sentences], got {item!r:.120}")
            pairs.append((item[0], item[1]))
    paragraphs = []
    for title, sentences in pairs:
        sentences = _as_list(sentences)
        if not isinstance(title, str) or not all(isinstance(s, str) for s in sentences):
            raise DataError(f"{where}, field 'context': titles and sentences must be strings, got {title!r:.80}")
        # HotpotQA sentences carry their own leading spaces, so joining with "" restores the paragraph.
        paragraphs.append(Passage(id=title, title=title, text="".join(sentences).strip()))
    return tuple(paragraphs)


def _supporting_facts(facts: Any, where: str) -> tuple[tuple[str, int], ...]:
    if facts is None:
        return ()
    if isinstance(facts, Mapping):
        pairs = zip(_as_list(facts.get("title")), _as_list(facts.get("sent_id")))
    else:
        pairs = [tuple(_as_list(f)) for f in _as_list(facts)]
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise DataError(f"{where}, field 'supporting_facts': an entry must be [title, sentence index], "
                            f"got {pair!r:.80}")
        title, sent = pair
        if hasattr(sent, "item") and not isinstance(sent, (str, bytes)):
            sent = sent.item()  # numpy integer from parquet
        if isinstance(sent, bool) or not isinstance(sent, int) or sent < 0:
            raise DataError(f"{where}, field 'supporting_facts': the sentence index of {str(title)!r:.80} must be a "
                            f"whole number >= 0, got {sent!r:.40}")
        out.append((str(title), sent))
    return tuple(out)


def question_from_record(record: Mapping[str, Any], position: int = 0, source: str = "data") -> Question:
    """Build a Question from one record in any supported layout."""
    where = f"{source}, record {position}"
    if not isinstance(record, Mapping):
        raise DataError(f"{where}: expected an object with 'question' and 'answer', got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: no 'question' text (fields present: {sorted(record)})")
    answers: list[str] = []
    for key in ("answer", "answers", "ground_truth", "golden_answers"):
        if record.get(key) is not None:
            answers = [_answer_text(a) for a in _as_list(record[key]) if _answer_text(a).strip()]
            break
    if not answers:
        raise DataError(f"{where}: no gold answer; expected one of 'answer', 'answers', 'ground_truth', "
                        f"'golden_answers' (fields present: {sorted(record)})")
    qid = record.get("id", record.get("_id"))
    return Question(
        id=str(qid) if qid is not None else f"{source}-{position}",
        question=question.strip(),
        answers=tuple(answers),
        type=record.get("type"),
        level=record.get("level"),
        supporting_facts=_supporting_facts(record.get("supporting_facts"), where),
        paragraphs=_paragraphs(record.get("context"), where),
    )


# --------------------------------------------------------------------------------------------- files


def _read_records(path: Path) -> list[Mapping[str, Any]]:
    """The records of a .json/.jsonl/.parquet file, with errors that name the file (and line)."""
    if not path.exists():
        raise FileNotFoundError(f"no such data file: {path}")
    if path.suffix not in _FILE_KINDS:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use one of {', '.join(_FILE_KINDS)}")
    if path.suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several unrelated types for a damaged file
            raise DataError(f"{path}: not a readable parquet file ({exc})") from exc
        return frame.to_dict("records")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc})") from exc
    if path.suffix == ".json":
        try:
            records = loads_json(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from exc
        if isinstance(records, Mapping) and isinstance(records.get("data"), list):
            records = records["data"]
        if not isinstance(records, list):
            raise DataError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
        return records
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(loads_json(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}, line {number}: not valid JSON ({exc.msg})") from exc
    return records


def _is_datasets_object(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "datasets"


def _pick_split(dataset_dict: Any, split: str | None, where: str) -> Any:
    names = list(dataset_dict.keys())
    if split is None and len(names) == 1:
        split = names[0]
    if split not in names:
        raise DataError(f"{where} has splits {names}; choose one with split= or in the spec")
    return dataset_dict[split]


def _load_hf(spec: str, split: str | None) -> tuple[Iterable[Mapping[str, Any]], str]:
    parts = spec[len("hf:"):].split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(f"bad datasets spec {spec!r}: expected 'hf:<path>[:<config>[:<split>]]'")
    path = parts[0]
    config = parts[1] if len(parts) > 1 and parts[1] else None
    split = parts[2] if len(parts) > 2 and parts[2] else split
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise DataError(f"{spec}: the 'datasets' package is needed for hf: specs (pip install datasets)") from exc
    try:
        loaded = datasets.load_dataset(path, config, split=split)
    except Exception as exc:  # offline, unknown name, bad config: all end here with the library's reason
        raise DataError(f"datasets.load_dataset({path!r}, {config!r}, split={split!r}) failed: {exc}. "
                        f"Without network access use a local file instead. {DATA_HELP}") from exc
    if not hasattr(loaded, "column_names") or isinstance(loaded.column_names, dict):
        loaded = _pick_split(loaded, split, spec)
    return loaded, path


def load_questions(data: Any, *, split: str | None = None, num_questions: int = 200, seed: int = 0,
                   limit: int | None = None) -> list[Question]:
    """Questions from any supported source (see the module docstring); ``limit`` keeps the first ``limit``."""
    if data is None:
        raise DataError(f"no HotpotQA data given. {DATA_HELP}")
    if isinstance(data, str) and data == "synthetic":
        questions = generate_synthetic(num_questions=num_questions, seed=seed)
        return questions[:limit] if limit is not None else questions
    if isinstance(data, str) and data.startswith("hf:"):
        records, source = _load_hf(data, split)
    elif isinstance(data, (str, Path)):
        path = Path(data).expanduser()
        if not path.exists() and isinstance(data, str) and path.suffix not in _FILE_KINDS:
            raise DataError(f"data={data!r} is neither 'synthetic', an 'hf:' spec nor an existing file. {DATA_HELP}")
        records, source = _read_records(path), path.name
    elif _is_datasets_object(data):
        if not hasattr(data, "column_names") or isinstance(data.column_names, dict):
            data = _pick_split(data, split, "the DatasetDict")
        records, source = data, "dataset"
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        records, source = data, "data"
    else:
        raise DataError(f"unsupported data={type(data).__name__}. {DATA_HELP}")
    questions = []
    for position, record in enumerate(records):
        if limit is not None and position >= limit:
            break
        questions.append(question_from_record(record, position, source))
    if not questions:
        raise DataError(f"{source}: holds no questions")
    _check_unique_ids(questions, source, "records", "question ids are the task ids")
    return questions


def _check_unique_ids(items: Sequence[Question] | Sequence[Passage], where: str, what: str, why: str) -> None:
    """Two items with one id would make one of them unreachable by id and mix up their results: refuse them."""
    first_at: dict[str, int] = {}
    for position, item in enumerate(items):
        if item.id in first_at:
            raise DataError(f"{where}: {what} {first_at[item.id]} and {position} have the same id {item.id!r}; ids "
                            f"must be unique ({why})")
        first_at[item.id] = position


def _passage_from_record(record: Any, position: int, where: str) -> Passage:
    if isinstance(record, Passage):
        return record
    if not isinstance(record, Mapping):
        raise DataError(f"{where}, passage {position}: expected an object with 'title' and 'text', "
                        f"got {type(record).__name__}")
    title, text = record.get("title"), record.get("text")
    if text is None and isinstance(record.get("contents"), str):
        # Dumps made for dense retrievers store '"Title"\ntext' in one field.
        head, _, rest = record["contents"].partition("\n")
        title, text = (title or head.strip().strip('"')), rest
    if not isinstance(text, str):
        raise DataError(f"{where}, passage {position}: no 'text' (or 'contents') string (fields: {sorted(record)})")
    title = "" if title is None else str(title)
    pid = record.get("id")
    return Passage(id=str(pid) if pid is not None else str(position), title=title, text=text.strip())


def load_corpus(corpus: Any) -> list[Passage]:
    """Passages from a .jsonl/.json/.parquet file or a list of dicts/Passages."""
    if isinstance(corpus, (str, Path)):
        path = Path(corpus).expanduser()
        records, where = _read_records(path), str(path)
    elif isinstance(corpus, Sequence) and not isinstance(corpus, (str, bytes)):
        records, where = corpus, "corpus"
    elif _is_datasets_object(corpus):
        records, where = corpus, "corpus dataset"
    else:
        raise DataError(f"unsupported corpus={type(corpus).__name__}: give a .jsonl file of {{id, title, text}} "
                        "or a list of dicts")
    passages = [_passage_from_record(r, i, where) for i, r in enumerate(records)]
    if not passages:
        raise DataError(f"{where}: the corpus holds no passages")
    _check_unique_ids(passages, where, "passages", "search results name passages by id")
    return passages


def corpus_from_questions(questions: Sequence[Question]) -> list[Passage]:
    """The union of the questions' own paragraphs, one passage per title (the first seen wins)."""
    by_title: dict[str, Passage] = {}
    for q in questions:
        for p in q.paragraphs:
            by_title.setdefault(p.title, p)
    return list(by_title.values())


# --------------------------------------------------------------------------------------------- synthetic data

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
