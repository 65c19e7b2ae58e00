"""HotpotQA questions and passage corpora: loading every supported source, and an offline synthetic generator.

Question sources (``load_questions``): ``"synthetic"``; a local ``.json`` (the official HotpotQA layout, a list of
objects with ``context`` as ``[title, sentences]`` pairs), ``.jsonl`` or ``.parquet`` file (the Hugging Face
``hotpot_qa`` layout, or question + answer only, like the paper's evaluation split); a ``datasets`` spec
``"hf:<path>[:<config>[:<split>]]"`` passed to ``datasets.load_dataset``; a ``datasets.Dataset``; or a list of dicts.
Corpus sources (``load_corpus``): a ``.jsonl``/``.json``/``.parquet`` file or a list of dicts with ``title`` and
``text`` (or a ``contents`` field whose first line is the title, as in common Wikipedia passage dumps). The records
themselves (``Passage``, ``Question``) live in ``erl_envs.qa.records``, the generator in ``erl_envs.qa.synthetic``;
both are re-exported here.

Every problem with the data raises ``DataError`` (a ValueError) or FileNotFoundError naming the file and the fix.
Files may start with a UTF-8 byte-order mark; a name that is not a regular file (a directory, a FIFO, a device) is
refused before it is read, a file larger than ``MAX_DATA_FILE_BYTES`` by its size, and a ``.jsonl`` line longer
than ``MAX_RECORD_BYTES`` without being read whole; text is scrubbed of lone surrogates (``"\ud800"`` escapes), so
questions and passages are UTF-8; supporting facts that do not match their question's own paragraphs are named in
one warning at load.
"""

from __future__ import annotations

import html
import json
import unicodedata
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from erl_envs.protocol import utf8_safe
from erl_envs.qa.records import Passage, Question
from erl_envs.qa.synthetic import generate_synthetic
from erl_envs.safe_parse import RefusedFileError, loads_json, open_regular, read_text_limited, too_large

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
    "MAX_RECORD_BYTES",
    "MAX_DATA_FILE_BYTES",
]

# The longest line a .jsonl file of questions or passages may hold: a HotpotQA record with its 10 paragraphs is
# tens of kilobytes, a long Wikipedia article a few hundred.
MAX_RECORD_BYTES = 16 << 20
# The largest data or corpus file read: several times HotpotQA's largest file (its training set, about 0.6 GB).
MAX_DATA_FILE_BYTES = 4 << 30

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


def _key_char(char: str) -> str:
    category = unicodedata.category(char)
    if category == "Pd":  # hyphens and dashes: "Spider-Man" and "Spider Man" are one question
        return " "
    if category in ("Cf", "Cc") and not char.isspace():  # invisible: zero-width space, soft hyphen, BOM, joiners
        return ""
    return char


def question_key(text: str) -> str:
    """A question's text as compared across data sets, so that the same question copied between files still
    matches: HTML entities decoded (``&amp;``), Unicode NFKC, invisible and format characters removed (zero-width
    spaces, soft hyphens, byte-order marks), hyphens and dashes read as spaces, then folded (case, accents),
    punctuation and articles dropped, spaces squashed."""
    from erl_envs.qa import normalize_answer
    from erl_envs.qa.search import fold_text

    if "&" in text:
        text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("-", " ") if text.isascii() else "".join(map(_key_char, text))
    return normalize_answer(fold_text(text), "unicode")


def shared_questions(train: Sequence["Question"], held_out: Sequence["Question"]) -> list["Question"]:
    """The held-out questions that are also training questions, by id or by ``question_key``."""
    ids = {q.id for q in train}
    texts = {question_key(q.question) for q in train}
    return [q for q in held_out if q.id in ids or question_key(q.question) in texts]


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
        title = utf8_safe(title)
        paragraphs.append(Passage(id=title, title=title, text=utf8_safe("".join(sentences).strip())))
    return tuple(paragraphs)


def _sentence_counts(context: Any) -> dict[str, int]:
    """How many sentences each paragraph of a record's context has, by title (for checking supporting facts)."""
    if isinstance(context, Mapping):
        pairs = zip(_as_list(context.get("title")), _as_list(context.get("sentences")))
    else:
        pairs = (tuple(_as_list(item)) for item in _as_list(context))
    return {utf8_safe(str(pair[0])): len(_as_list(pair[1])) for pair in pairs if len(pair) == 2}


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
        out.append((utf8_safe(str(title)), sent))
    return tuple(out)


def _fact_problems(record: Mapping[str, Any], question: "Question") -> list[str]:
    """Supporting facts of a record with context that name no paragraph of it, or a sentence it does not have."""
    if not question.paragraphs or not question.supporting_facts:
        return []
    counts = _sentence_counts(record.get("context"))
    problems = []
    for title, sent in question.supporting_facts:
        if title not in counts:
            problems.append(f"{title!r:.80} is not one of its paragraphs")
        elif sent >= counts[title]:
            problems.append(f"{title!r:.80} has no sentence {sent} (it has {counts[title]})")
    return problems


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
        id=utf8_safe(str(qid)) if qid is not None else f"{source}-{position}",
        question=utf8_safe(question.strip()),
        answers=tuple(utf8_safe(answer) for answer in answers),
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
    try:
        return _read_file_records(path)
    except RefusedFileError as exc:  # not a regular file, or too large
        raise DataError(str(exc)) from None


def _read_file_records(path: Path) -> list[Mapping[str, Any]]:
    if path.suffix == ".parquet":
        with open_regular(path, "data file", MAX_DATA_FILE_BYTES) as f:
            import pandas as pd

            try:
                frame = pd.read_parquet(f)
            except Exception as exc:  # pyarrow raises several unrelated types for a damaged file
                raise DataError(f"{path}: not a readable parquet file ({exc})") from exc
        return frame.to_dict("records")
    if path.suffix == ".json":
        try:
            # a byte-order mark, which some editors write, is skipped
            text = read_text_limited(path, MAX_DATA_FILE_BYTES, "data file", encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text ({exc})") from exc
        try:
            records = loads_json(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from exc
        if isinstance(records, Mapping) and isinstance(records.get("data"), list):
            records = records["data"]
        if not isinstance(records, list):
            raise DataError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
        return records
    return list(_jsonl_records(path))


def _jsonl_records(path: Path) -> Iterable[Any]:
    """The records of a .jsonl file, line by line: a line longer than ``MAX_RECORD_BYTES`` is refused after reading
    only that much of it (a 200 MB line would otherwise take gigabytes to parse), and the file after
    ``MAX_DATA_FILE_BYTES`` (it may grow while it is read)."""
    read = 0
    with open_regular(path, "data file", MAX_DATA_FILE_BYTES) as f:
        for number, raw in enumerate(iter(lambda: f.readline(MAX_RECORD_BYTES + 1), b""), start=1):
            read += len(raw)
            if read > MAX_DATA_FILE_BYTES:
                raise too_large(path, read, MAX_DATA_FILE_BYTES, "data file")
            if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
                raise DataError(f"{path}, line {number}: longer than {MAX_RECORD_BYTES:,} bytes, more than any "
                                f"record needs")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}, line {number}: not UTF-8 text ({exc})") from exc
            if not line.strip():
                continue
            try:
                yield loads_json(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: not valid JSON ({exc.msg})") from exc


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
    questions, fact_problems = [], []
    for position, record in enumerate(records):
        if limit is not None and position >= limit:
            break
        questions.append(question_from_record(record, position, source))
        fact_problems += [f"record {position}: {problem}" for problem in _fact_problems(record, questions[-1])]
    if fact_problems:
        # Real data has a few of these; they only affect retrieval_recall, so they are named, not refused.
        warnings.warn(f"{source}: {len(fact_problems)} supporting facts do not match their question's paragraphs "
                      f"({'; '.join(fact_problems[:3])}{'; ...' if len(fact_problems) > 3 else ''}); "
                      "retrieval_recall counts them as given", RuntimeWarning, stacklevel=2)
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
    title = "" if title is None else utf8_safe(str(title))
    pid = record.get("id")
    return Passage(id=utf8_safe(str(pid)) if pid is not None else str(position), title=title,
                   text=utf8_safe(text.strip()))


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
