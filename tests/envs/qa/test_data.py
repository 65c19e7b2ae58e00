"""Loading questions and corpora from every supported source, the synthetic generator, and clear data errors."""

import json
import re
import warnings
from collections import Counter

import pandas as pd
import pytest

from erl_envs.qa.data import (
    DataError,
    Passage,
    Question,
    corpus_from_questions,
    generate_synthetic,
    load_corpus,
    load_questions,
    question_from_record,
)
from erl_envs.qa.scoring import normalize_answer

HF_RECORD = {
    "id": "q1",
    "question": "Which city hosts the Osk Works?",
    "answer": "Dulind",
    "type": "bridge",
    "level": "easy",
    "supporting_facts": {"title": ["Osk Works", "Dulind"], "sent_id": [0, 1]},
    "context": {"title": ["Osk Works", "Dulind"],
                "sentences": [["Osk Works is a company.", " It is in Dulind."], ["Dulind is a city.", " On a river."]]},
}
OFFICIAL_RECORD = {
    "_id": "q2",
    "question": "Is Dulind a city?",
    "answer": "yes",
    "supporting_facts": [["Dulind", 0]],
    "context": [["Dulind", ["Dulind is a city.", " On a river."]], ["Osk Works", ["A company."]]],
}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ records


def test_hf_and_official_layouts_give_the_same_fields():
    hf = question_from_record(HF_RECORD)
    assert hf.id == "q1" and hf.answers == ("Dulind",) and hf.type == "bridge"
    assert hf.supporting_facts == (("Osk Works", 0), ("Dulind", 1))
    assert hf.supporting_titles == ("Osk Works", "Dulind")
    assert hf.paragraphs[0] == Passage("Osk Works", "Osk Works", "Osk Works is a company. It is in Dulind.")
    official = question_from_record(OFFICIAL_RECORD)
    assert official.id == "q2" and official.supporting_facts == (("Dulind", 0),)
    assert [p.title for p in official.paragraphs] == ["Dulind", "Osk Works"]


def test_question_only_records_and_answer_aliases():
    paper = question_from_record({"question": "Q?", "ground_truth": "A", "data_source": "hotpotqa"}, 7, "val")
    assert paper.id == "val-7" and paper.answers == ("A",) and paper.paragraphs == () and paper.supporting_facts == ()
    assert question_from_record({"question": "Q?", "golden_answers": ["x", "y"]}).answers == ("x", "y")


@pytest.mark.parametrize(
    "record, message",
    [
        ({"answer": "x"}, "no 'question' text"),
        ({"question": "  ", "answer": "x"}, "no 'question' text"),
        ({"question": "Q?"}, "no gold answer"),
        ({"question": "Q?", "answer": ""}, "no gold answer"),
        ({"question": "Q?", "answer": "x", "context": [["only a title"]]}, "must be [title, sentences]"),
        ({"question": "Q?", "answer": "x", "supporting_facts": [["t", 0, 9]]}, "field 'supporting_facts'"),
        ({"question": "Q?", "answer": "x", "supporting_facts": [["t", "zero"]]}, "whole number >= 0, got 'zero'"),
        ({"question": "Q?", "answer": "x", "supporting_facts": {"title": ["t"], "sent_id": [-1]}}, "whole number"),
        ({"question": "Q?", "answer": "x", "supporting_facts": [["t", 1.5]]}, "field 'supporting_facts'"),
        ({"question": "Q?", "answer": "x", "context": {"title": ["a", "b", "c"], "sentences": [["s"], ["t"]]}},
         "3 titles but 2 sentence lists"),
        ("not a dict", "expected an object"),
    ],
)
def test_bad_records_name_the_record_and_problem(record, message):
    with pytest.raises(DataError, match="record 3") as err:
        question_from_record(record, 3, "mine.jsonl")
    assert message in str(err.value) and "mine.jsonl" in str(err.value)


def test_numeric_answers_load_as_strings(tmp_path):
    import numpy as np
    import pandas as pd

    assert question_from_record({"question": "Q?", "answer": 1999}).answers == ("1999",)
    assert question_from_record({"question": "Q?", "answers": [3, 4.0, "x"]}).answers == ("3", "4", "x")
    path = tmp_path / "numbers.parquet"
    pd.DataFrame({"question": ["When?", "How many?"], "answer": np.array([1999, 7], dtype=np.int64)}).to_parquet(path)
    assert [q.answers for q in load_questions(str(path))] == [("1999",), ("7",)]
    facts = {"title": np.array(["t"]), "sent_id": np.array([2], dtype=np.int64)}
    assert question_from_record({"question": "Q?", "answer": "a", "supporting_facts": facts}).supporting_facts == (
        ("t", 2),)


# ------------------------------------------------------------------------------------------------ sources


def test_every_file_kind_loads(tmp_path):
    as_jsonl = load_questions(write_jsonl(tmp_path / "d.jsonl", [HF_RECORD, OFFICIAL_RECORD]))
    (tmp_path / "d.json").write_text(json.dumps([HF_RECORD, OFFICIAL_RECORD]))
    as_json = load_questions(tmp_path / "d.json")
    pd.DataFrame([HF_RECORD]).to_parquet(tmp_path / "d.parquet")
    as_parquet = load_questions(str(tmp_path / "d.parquet"))
    assert as_jsonl == as_json
    assert as_parquet[0] == as_jsonl[0]  # nested lists survive the numpy arrays parquet hands back
    assert load_questions(tmp_path / "d.jsonl", limit=1) == as_jsonl[:1]


def test_list_of_dicts_and_datasets_objects():
    import datasets

    assert load_questions([HF_RECORD])[0].id == "q1"
    ds = datasets.Dataset.from_list([HF_RECORD, HF_RECORD | {"id": "q3"}])
    assert [q.id for q in load_questions(ds)] == ["q1", "q3"]
    dd = datasets.DatasetDict({"train": ds, "validation": ds.select([1])})
    assert [q.id for q in load_questions(dd, split="validation")] == ["q3"]
    with pytest.raises(DataError, match="has splits"):
        load_questions(dd)


def test_hf_spec_loads_a_local_dataset_folder(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    folder = tmp_path / "hotpot_local"
    folder.mkdir()
    write_jsonl(folder / "validation.jsonl", [HF_RECORD, HF_RECORD | {"id": "q9"}])
    questions = load_questions(f"hf:{folder}::validation")
    assert [q.id for q in questions] == ["q1", "q9"]
    assert questions[0].paragraphs[1].title == "Dulind"
    with pytest.raises(DataError, match="load_dataset"):
        load_questions(f"hf:{tmp_path / 'missing_folder'}::validation")
    with pytest.raises(DataError, match="bad datasets spec"):
        load_questions("hf:")


def test_no_data_or_unknown_data_names_the_options(tmp_path):
    for data in (None, "synthtic", 42):
        with pytest.raises(DataError, match="synthetic") as err:
            load_questions(data)
        assert "hf:hotpotqa/hotpot_qa" in str(err.value) and "corpus=" in str(err.value)


def test_missing_and_corrupt_files_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load_questions(tmp_path / "absent.jsonl")
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text(json.dumps(HF_RECORD) + "\n{broken json\n")
    with pytest.raises(DataError, match="bad.jsonl, line 2: not valid JSON"):
        load_questions(bad_line)
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(DataError, match="not valid JSON"):
        load_questions(tmp_path / "bad.json")
    (tmp_path / "obj.json").write_text('{"question": "Q?"}')
    with pytest.raises(DataError, match="expected a JSON list"):
        load_questions(tmp_path / "obj.json")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataError, match="not a readable parquet file"):
        load_questions(tmp_path / "bad.parquet")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        load_questions(tmp_path / "latin1.jsonl")
    (tmp_path / "d.csv").write_text("question,answer\n")
    with pytest.raises(DataError, match="unsupported file type '.csv'"):
        load_questions(tmp_path / "d.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="holds no questions"):
        load_questions(tmp_path / "empty.jsonl")


def test_shared_real_sample_loads(hotpotqa_sample):
    questions = load_questions(hotpotqa_sample / "dev_distractor_sample_dev.jsonl")
    assert len(questions) == 300
    assert all(len(q.paragraphs) >= 2 and q.supporting_facts for q in questions)
    assert sum(len(q.paragraphs) == 10 for q in questions) > 290  # a few real questions have fewer paragraphs
    assert all(set(q.supporting_titles) <= {p.title for p in q.paragraphs} for q in questions)
    assert Counter(q.type for q in questions).keys() == {"bridge", "comparison"}
    both = questions + load_questions(hotpotqa_sample / "dev_distractor_sample_train.jsonl")
    assert len(corpus_from_questions(both)) == 5912  # the README's count of unique passages


def test_paper_eval_split_has_questions_without_passages(paper_tasks):
    questions = load_questions(paper_tasks / "hotpotqa_val_first1024.parquet")
    assert len(questions) == 1024
    assert questions[0].answer == "yes" and questions[0].paragraphs == ()


# ------------------------------------------------------------------------------------------------ corpora


def test_corpus_files_and_forms(tmp_path):
    path = write_jsonl(tmp_path / "wiki.jsonl", [
        {"id": "1", "title": "Dulind", "text": "A city."},
        {"id": 7, "contents": '"Osk Works"\nA company in Dulind.'},
        {"title": "No id", "text": "Gets its position."},
    ])
    passages = load_corpus(path)
    assert passages == [Passage("1", "Dulind", "A city."), Passage("7", "Osk Works", "A company in Dulind."),
                        Passage("2", "No id", "Gets its position.")]
    assert load_corpus([{"title": "T", "text": "x"}]) == [Passage("0", "T", "x")]
    assert load_corpus([Passage("a", "b", "c")]) == [Passage("a", "b", "c")]


def test_bad_corpora_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "absent.jsonl")
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "title": "T"}])
    with pytest.raises(DataError, match="passage 0: no 'text'"):
        load_corpus(path)
    with pytest.raises(DataError, match="holds no passages"):
        load_corpus([])
    with pytest.raises(DataError, match="unsupported corpus"):
        load_corpus(3.5)
    with pytest.raises(DataError, match="expected an object"):
        load_corpus(["just a string"])


def test_corpus_from_questions_deduplicates_by_title():
    questions = load_questions([HF_RECORD, OFFICIAL_RECORD])
    titles = [p.title for p in corpus_from_questions(questions)]
    assert titles == ["Osk Works", "Dulind"]


# ------------------------------------------------------------------------------------------------ synthetic


def test_synthetic_is_deterministic_and_seeded():
    assert generate_synthetic(30, seed=4) == generate_synthetic(30, seed=4)
    assert generate_synthetic(30, seed=4) != generate_synthetic(30, seed=5)
    assert load_questions("synthetic", num_questions=12, seed=4) == generate_synthetic(12, seed=4)


def test_synthetic_questions_are_answerable_from_their_supporting_facts():
    questions = generate_synthetic(300, seed=0)
    assert len({q.id for q in questions}) == 300
    assert Counter(q.type for q in questions).keys() == {"bridge", "comparison"}
    yes_no = Counter(q.answer for q in questions if q.answer in ("yes", "no"))
    assert yes_no["yes"] > 10 and yes_no["no"] > 10
    for q in questions:
        assert len(q.paragraphs) == 10 and len({p.title for p in q.paragraphs}) == 10
        by_title = {p.title: p for p in q.paragraphs}
        assert set(q.supporting_titles) <= by_title.keys() and len(q.supporting_titles) == 2
        for title, sent in q.supporting_facts:
            assert 0 <= sent < 3
        if q.answer not in ("yes", "no"):
            # the answer is written in one of the gold passages (a bridge's second hop, or a compared title)
            gold_text = " ".join(f"{t} {by_title[t].text}" for t in q.supporting_titles)
            assert normalize_answer(q.answer) in normalize_answer(gold_text), q


def test_synthetic_bridge_needs_two_hops():
    for q in generate_synthetic(100, seed=1):
        if q.question.startswith("In which city was the founder of"):
            company, person = (next(p for p in q.paragraphs if p.title == t) for t in q.supporting_titles)
            assert person.title in company.text and q.answer in person.text and q.answer not in company.text
            break
    else:
        pytest.fail("no founder-birthplace bridge question generated")


def test_synthetic_argument_checks():
    with pytest.raises(ValueError, match="num_questions"):
        generate_synthetic(0)
    with pytest.raises(ValueError, match="num_paragraphs"):
        generate_synthetic(5, num_paragraphs=1)
    assert all(len(q.paragraphs) == 4 for q in generate_synthetic(5, num_paragraphs=4))
    assert isinstance(generate_synthetic(1)[0], Question)


# --- the overlap check's question key, BOM, oversized lines, bad supporting facts, lone surrogates -------------------

import html  # noqa: E402

from erl_envs.qa.data import question_key  # noqa: E402


def _fullwidth(word: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in word)


def _variants(question: str) -> dict[str, str]:
    """The same question as another file may hold it: each one a single edit a copy, a web page or an editor makes."""
    words = question.split(" ")
    third = min(2, len(words) - 1)
    long_word = max(range(len(words)), key=lambda i: len(words[i]))
    w = words[long_word]
    return {
        "zero-width space": " ".join(words[:third] + [words[third] + "\u200b"] + words[third + 1:]),
        "soft hyphen": " ".join(words[:long_word] + [w[:len(w) // 2] + "\u00ad" + w[len(w) // 2:]]
                                + words[long_word + 1:]),
        "word joiner and BOM": "\ufeff" + question.replace(" ", " \u2060", 1),
        "hyphen for a space": question.replace(" ", "-", 1) if "-" not in question else question.replace("-", " "),
        "en dash for a hyphen": question.replace(" ", "\u2013", 1),
        "HTML entities": html.escape(question),
        "fullwidth letters": " ".join(words[:third] + [_fullwidth(words[third])] + words[third + 1:]),
        "no-break space": question.replace(" ", "\u00a0", 2),
        "spaces around": f"  {question} ",
    }


def test_the_question_key_sees_through_invisible_and_typographic_variants(hotpotqa_sample):
    """Each variant of each of 300 real questions gets the original's key, so a copy of a held-out question made
    that way is caught by the overlap check."""
    questions = [q.question for q in load_questions(hotpotqa_sample / "dev_distractor_sample_train.jsonl")]
    missed, tried = Counter(), Counter()
    for question in questions:
        for name, variant in _variants(question).items():
            if variant != question:  # (a question with nothing to escape has no HTML variant)
                tried[name] += 1
                missed[name] += question_key(variant) != question_key(question)
    assert min(tried.values()) >= 50 and len(tried) == len(_variants("a b c")), tried
    assert sum(missed.values()) == 0, dict(missed)
    copied = [Question(id=f"copy-{i}", question=_variants(q)["zero-width space"], answers=("x",))
              for i, q in enumerate(questions)]
    assert len(shared := __import__("erl_envs.qa.data", fromlist=["shared_questions"]).shared_questions(
        load_questions(hotpotqa_sample / "dev_distractor_sample_train.jsonl"), copied)) == len(questions), len(shared)


def test_the_question_key_tells_1000_distinct_questions_apart(hotpotqa_sample, paper_tasks):
    texts = {q.question.strip() for name in ("train", "dev")
             for q in load_questions(hotpotqa_sample / f"dev_distractor_sample_{name}.jsonl")}
    texts |= {q.strip() for q in pd.read_parquet(paper_tasks / "hotpotqa_val_first1024.parquet")["question"]}
    assert len(texts) >= 1000
    keys = Counter(question_key(text) for text in texts)
    assert [key for key, count in keys.items() if count > 1] == []


def test_a_utf8_bom_is_read(tmp_path):
    for name, text in (("q.jsonl", json.dumps(HF_RECORD) + "\n"), ("q.json", json.dumps([HF_RECORD]))):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        assert load_questions(path)[0].id == "q1"
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "p", "title": "T", "text": "x"}).encode() + b"\n")
    assert load_corpus(corpus)[0].id == "p"


def test_a_line_larger_than_a_record_may_be_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    from erl_envs.qa import data

    monkeypatch.setattr(data, "MAX_RECORD_BYTES", 10_000)
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(HF_RECORD) + "\n" + json.dumps({**HF_RECORD, "id": "big", "answer": "x" * 50_000})
                    + "\n")
    with pytest.raises(DataError, match="q.jsonl, line 2: longer than 10,000 bytes"):
        load_questions(path)


def test_supporting_facts_that_miss_their_paragraphs_are_named_at_load():
    bad = {**HF_RECORD, "id": "q-bad",
           "supporting_facts": {"title": ["Osk Works", "Nowhere", "Dulind"], "sent_id": [0, 0, 7]}}
    with pytest.warns(RuntimeWarning, match=r"data: 2 supporting facts do not match their question's paragraphs "
                                            r"\(record 1: 'Nowhere' is not one of its paragraphs"):
        questions = load_questions([HF_RECORD, bad])
    assert questions[1].supporting_facts == (("Osk Works", 0), ("Nowhere", 0), ("Dulind", 7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_questions([HF_RECORD, OFFICIAL_RECORD])  # facts that fit: no warning


def test_lone_surrogates_in_the_data_never_reach_a_question_or_passage(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({**HF_RECORD, "question": "Which city \ud800 hosts it?"}) + "\n")  # the \\ud800 escape
    question = load_questions(path)[0]
    question.question.encode("utf-8")
    for passage in question.paragraphs:
        passage.text.encode("utf-8")


def test_hf_spec_takes_its_split_from_the_spec_or_the_argument(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    folder = tmp_path / "two_splits"
    folder.mkdir()
    write_jsonl(folder / "validation.jsonl", [HF_RECORD])
    write_jsonl(folder / "train.jsonl", [HF_RECORD | {"id": "t1"}, HF_RECORD | {"id": "t2"}])
    assert [q.id for q in load_questions(f"hf:{folder}", split="train")] == ["t1", "t2"]
    assert [q.id for q in load_questions(f"hf:{folder}::validation", split="train")] == ["q1"]  # the spec wins
    assert [q.id for q in load_questions(f"hf:{folder}:", split="validation")] == ["q1"]  # an empty config part
    # Two splits and no choice: the error names them, never a silent pick.
    with pytest.raises(DataError, match=r"has splits \['(train|validation)', '(train|validation)'\]; choose one"):
        load_questions(f"hf:{folder}")
    with pytest.raises(DataError, match="bad datasets spec 'hf:a:b:c:d'"):
        load_questions("hf:a:b:c:d")


# ------------------------------------------------------------------------------------------------ edges


def test_duplicate_ids_are_refused_naming_the_source_both_positions_and_why(tmp_path):
    records = [HF_RECORD, OFFICIAL_RECORD, HF_RECORD]
    with pytest.raises(DataError, match=r"^data: records 0 and 2 have the same id 'q1'; ids must be unique \(question "
                                        r"ids are the task ids\)$"):
        load_questions(records)
    with pytest.raises(DataError, match=r"^d\.jsonl: records 0 and 2 have the same id"):
        load_questions(write_jsonl(tmp_path / "d.jsonl", records))
    passages = [{"id": "p", "title": "A", "text": "a"}, {"id": "p", "title": "B", "text": "b"}]
    with pytest.raises(DataError, match=r"^corpus: passages 0 and 1 have the same id 'p'; ids must be unique \(search "
                                        r"results name passages by id\)$"):
        load_corpus(passages)
    path = write_jsonl(tmp_path / "c.jsonl", passages)
    with pytest.raises(DataError, match="^" + re.escape(f"{path}: passages 0 and 1")):
        load_corpus(path)


def test_a_synthetic_limit_keeps_the_first_questions():
    every = load_questions("synthetic", num_questions=10, seed=3)
    assert len(every) == 10 and load_questions("synthetic", num_questions=10, seed=3, limit=4) == every[:4]


def test_datasets_objects_name_themselves_in_errors_and_ids():
    import datasets

    unnamed = datasets.Dataset.from_list([{"question": "Q?", "answer": "A"}, {"question": "R?", "answer": "B"}])
    assert [q.id for q in load_questions(unnamed)] == ["dataset-0", "dataset-1"]
    assert [q.id for q in load_questions(datasets.DatasetDict({"only": unnamed}))] == ["dataset-0", "dataset-1"]
    two = datasets.DatasetDict({"train": unnamed, "test": unnamed})
    with pytest.raises(DataError, match=r"^the DatasetDict has splits \['train', 'test'\]; choose one"):
        load_questions(two)
    bad = datasets.Dataset.from_list([{"question": "Q?", "answer": None}])
    with pytest.raises(DataError, match="^dataset, record 0: no gold answer"):
        load_questions(bad)
    corpus = datasets.Dataset.from_list([{"id": "d1", "title": "T", "text": "words"}, {"id": "d2", "title": None,
                                                                                      "text": None}])
    with pytest.raises(DataError, match="^corpus dataset, passage 1: no 'text'"):
        load_corpus(corpus)
    assert load_corpus(corpus.select([0])) == [Passage("d1", "T", "words")]


def test_an_hf_spec_is_path_config_and_split(monkeypatch):
    """``hf:<path>[:<config>[:<split>]]`` reaches ``datasets.load_dataset`` part by part; a split in the spec wins
    over the argument; a DatasetDict that comes back is split as the spec or argument says, or named in the error."""
    import datasets

    calls = []
    one = datasets.Dataset.from_list([{"question": "Q?", "answer": "A"}])

    def load_dataset(path, config=None, split=None):
        calls.append((path, config, split))
        return one if split else datasets.DatasetDict({"validation": one, "train": one.select([])})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    assert [q.id for q in load_questions("hf:org/name:cfg:validation", split="train")] == ["org/name-0"]
    load_questions("hf:org/name:cfg", split="validation")
    with pytest.raises(DataError, match=r"^hf:org/name has splits \['validation', 'train'\]; choose one"):
        load_questions("hf:org/name")
    assert calls == [("org/name", "cfg", "validation"), ("org/name", "cfg", "validation"), ("org/name", None, None)]


def test_record_fields_in_their_other_forms(tmp_path):
    import numpy as np

    assert question_from_record(HF_RECORD).level == "easy"
    # Answers as any iterable, numpy scalars as their values.
    assert question_from_record({"question": "Q?", "answers": frozenset({"Dulind"})}).answers == ("Dulind",)
    assert question_from_record({"question": "Q?", "answer": np.int64(1999)}).answers == ("1999",)
    assert question_from_record({"question": "Q?", "answer": np.float64(4.0)}).answers == ("4",)
    official = OFFICIAL_RECORD | {"supporting_facts": [["Dulind", np.int64(1)]]}
    assert question_from_record(official).supporting_facts == (("Dulind", 1),)
    with pytest.raises(DataError, match="titles and sentences must be strings, got 7"):
        question_from_record(OFFICIAL_RECORD | {"context": [[7, ["A sentence."]]]})
    # A dense-retriever dump's contents: the first line is the quoted title, the rest (newlines kept) the text.
    assert load_corpus([{"id": 1, "contents": '"Osk Works"\nline one\nline two'}]) == [
        Passage("1", "Osk Works", "line one\nline two")]
    assert load_corpus([{"text": "untitled"}]) == [Passage("0", "", "untitled")]
    # A JSON file may wrap its records in {"data": [...]}.
    (tmp_path / "wrapped.json").write_text(json.dumps({"version": 1, "data": [HF_RECORD]}))
    assert [q.id for q in load_questions(tmp_path / "wrapped.json")] == ["q1"]


def test_fact_checks_count_every_problem_and_the_last_sentence_bound():
    bad = HF_RECORD | {"id": "b1", "supporting_facts": {"title": ["Dulind"], "sent_id": [2]}}  # it has 2: 0 and 1
    worse = HF_RECORD | {"id": "b2", "supporting_facts": {"title": ["Nowhere"], "sent_id": [0]}}
    with pytest.warns(RuntimeWarning, match=r"data: 2 supporting facts do not match .*\(record 0: 'Dulind' has no "
                                            r"sentence 2 \(it has 2\); record 1: 'Nowhere' is not one of"):
        load_questions([bad, worse])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # No paragraphs to check against (the paper's test sets): nothing to warn about.
        load_questions([{"question": "Q?", "answer": "A", "supporting_facts": [["Anywhere", 3]]}])


def test_blank_lines_are_skipped_and_the_record_size_bound_is_exact(tmp_path, monkeypatch):
    from erl_envs.qa import data

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(HF_RECORD) + "\n\n   \n" + json.dumps(OFFICIAL_RECORD) + "\n")
    assert [q.id for q in load_questions(path)] == ["q1", "q2"]
    line = json.dumps({"question": "Q?", "answer": "A"})
    monkeypatch.setattr(data, "MAX_RECORD_BYTES", len(line))
    path.write_text(line)  # exactly the bound, no newline at the end
    assert len(load_questions(path)) == 1
    path.write_text(line + "\n")  # the bound and its newline
    assert len(load_questions(path)) == 1
    padded = json.dumps({"question": "Q?", "answer": "AB"})  # one byte over
    path.write_text(padded + "\n")
    with pytest.raises(DataError, match="line 1: longer than"):
        load_questions(path)


def test_data_errors_name_the_type_and_the_problem_word_for_word(tmp_path):
    import numpy as np

    assert question_from_record({"question": "Q?", "answer": np.float32(4.0)}).answers == ("4",)
    assert question_from_record({"question": "Q?", "answer": "A"}).id == "data-0"  # the default source and position
    cases = [
        (lambda: question_from_record(3), "data, record 0: expected an object with 'question' and 'answer', got int"),
        (lambda: load_questions(3), "unsupported data=int."),
        (lambda: load_corpus(3), "unsupported corpus=int: give a .jsonl file of {id, title, text} or a list of dicts"),
        (lambda: load_corpus([3]), "corpus, passage 0: expected an object with 'title' and 'text', got int"),
        (lambda: question_from_record({"question": "Q?", "answer": "A", "supporting_facts": [["Dulind", -1]]}),
         "data, record 0, field 'supporting_facts': the sentence index of 'Dulind' must be a whole number >= 0, "
         "got -1"),
    ]
    for call, message in cases:
        with pytest.raises(DataError, match="^" + re.escape(message)):
            call()
    (tmp_path / "d.json").write_text(json.dumps({"questions": []}))
    with pytest.raises(DataError, match=re.escape("d.json: expected a JSON list of records, got dict")):
        load_questions(tmp_path / "d.json")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DataError, match=re.escape("unsupported file type '.txt'; use one of .json, .jsonl, .parquet")):
        load_questions(tmp_path / "d.txt")
    (tmp_path / "latin.json").write_bytes("[\"caf\xe9\"]".encode("latin-1"))
    with pytest.raises(DataError, match="latin.json: not UTF-8 text"):
        load_questions(tmp_path / "latin.json")


def test_the_fact_warning_quotes_three_problems():
    def bad(i):
        return HF_RECORD | {"id": f"b{i}", "supporting_facts": {"title": ["Nowhere"], "sent_id": [0]}}

    with pytest.warns(RuntimeWarning) as caught:
        load_questions([bad(i) for i in range(3)])
    message = str(caught[0].message)
    assert "record 2: 'Nowhere'" in message and "; ...)" not in message
    with pytest.warns(RuntimeWarning) as caught:
        load_questions([bad(i) for i in range(4)])
    message = str(caught[0].message)
    assert "4 supporting facts" in message and "record 2: 'Nowhere'" in message and "record 3" not in message
    assert "is not one of its paragraphs; ...); retrieval_recall counts them as given" in message
