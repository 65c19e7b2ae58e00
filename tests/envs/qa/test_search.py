"""BM25Index: exact agreement with rank-bm25, deterministic ranking, batching, bad input, and the disk cache."""

import gc
import json
import random
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from erl_envs.qa import search
from erl_envs.qa.search import ENGLISH_STOPWORDS, BM25Index, Tokenizer, default_cache_dir, fold_text

TOKENIZE = Tokenizer()


def random_corpus(n=300, seed=0):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    docs = []
    for _ in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(5, 60))
        if rng.random() < 0.8:  # "common" is in ~80% of passages: its raw idf is negative and gets the floor
            words.append("common")
        docs.append(" ".join(words))
    return docs


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ERL_GYM_CACHE", str(tmp_path / "cache"))


def assert_matches_reference(texts, queries, tokenizer=TOKENIZE, **params):
    index = BM25Index(texts, tokenizer=tokenizer, **params)
    reference = BM25Okapi([tokenizer(t) for t in texts], **{k: v for k, v in params.items() if k != "idf"})
    for q in queries:
        np.testing.assert_allclose(index.scores(q), reference.get_scores(tokenizer(q)), rtol=0, atol=1e-6)


def test_scores_equal_rank_bm25_including_idf_floor():
    texts = random_corpus()
    queries = ["w1 w2 w3", "common w50", "common", "w7 w7 w7 w300", "nothing here", "W1, w2!"]
    assert_matches_reference(texts, queries)
    assert_matches_reference(texts, queries, k1=1.2, b=0.5, epsilon=0.1)
    index = BM25Index(texts)
    assert index.idf[index.vocab["common"]] == pytest.approx(0.25 * index.average_idf)


def test_scores_equal_rank_bm25_on_real_passages(hotpotqa_sample):
    texts = []
    for line in (hotpotqa_sample / "dev_distractor_sample_dev.jsonl").read_text().splitlines()[:80]:
        record = json.loads(line)
        texts += [f"{t}\n{''.join(s)}" for t, s in zip(record["context"]["title"], record["context"]["sentences"])]
        question = record["question"]
    assert_matches_reference(texts, [question, "the band", "which city is the capital"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=12), min_size=1, max_size=25),
       st.lists(st.sampled_from("abcdefgxyz"), max_size=8))
def test_scores_equal_rank_bm25_on_random_corpora(docs, query):
    texts = [" ".join(d) for d in docs]
    assert_matches_reference(texts, [" ".join(query)])


def test_search_ranks_best_first_and_breaks_ties_by_position():
    texts = ["apple banana", "cherry", "apple banana", "apple", "banana cherry apple apple", "apple banana"]
    index = BM25Index(texts, ids=list("abcdef"))
    hits = index.search("apple banana", k=6)
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    tied = [pid for pid, s in hits if s == pytest.approx(hits[0][1])]
    assert tied == sorted(tied)  # identical passages a, c, f come out in corpus order
    assert "b" not in [pid for pid, _ in hits]  # no shared term: never returned
    assert index.search("apple banana", k=2) == hits[:2]


def test_search_top_k_matches_reference_order():
    texts = random_corpus(500, seed=3)
    index = BM25Index(texts)
    reference = BM25Okapi([TOKENIZE(t) for t in texts])
    for q in ["w3 w9 w44", "w100 common", "w5"]:
        ref = reference.get_scores(TOKENIZE(q))
        expected = sorted(np.flatnonzero(ref > 0), key=lambda i: (-ref[i], i))[:10]
        assert [pid for pid, _ in index.search(q, 10)] == expected


def test_passage_dicts_objects_and_ids():
    from erl_envs.qa.data import Passage

    passages = [{"id": "p1", "title": "Zürich", "text": "A city on a lake."},
                {"id": "p2", "title": "Bern", "text": "The capital city."},
                {"id": "p3", "title": "Lake", "text": "Water."}]
    index = BM25Index(passages)
    assert index.search("zürich") == [("p1", pytest.approx(index.scores("zürich")[0]))]  # titles are searchable
    assert {pid for pid, _ in index.search("city", 5)} == {"p1", "p2"}
    objects = BM25Index([Passage("a", "Title one", "text"), Passage("b", "Two", "more text"), Passage("c", "", "x")])
    assert objects.search("one")[0][0] == "a"
    assert BM25Index(["x y", "y", "z"]).search("x")[0][0] == 0  # strings: ids are positions


def test_queries_with_no_match_empty_unicode_and_huge():
    index = BM25Index(["東京 is a city", "Zürich lies on a lake", "plain english text"])
    assert index.search("") == []
    assert index.search("!!! ???") == []
    assert index.search("unknownword") == []
    assert index.search("東京")[0][0] == 0
    assert index.search("ZÜRICH")[0][0] == 1
    huge = "lake " * 200_000 + "english"
    hits = index.search(huge, k=3)
    assert {pid for pid, _ in hits} == {1, 2}


def test_tokenizer_lowercases_strips_punctuation_and_optional_stopwords():
    assert Tokenizer()("The U.S.-born  snake_case, Zoë's!") == ["the", "u", "s", "born", "snake", "case", "zoë", "s"]
    assert Tokenizer(stopwords=ENGLISH_STOPWORDS)("The cat and the hat") == ["cat", "hat"]
    assert Tokenizer(lowercase=False)("The Cat") == ["The", "Cat"]
    assert Tokenizer().cache_key != Tokenizer(stopwords=ENGLISH_STOPWORDS).cache_key


def test_custom_tokenizer_is_used_for_passages_and_queries():
    index = BM25Index(["ab-cd", "ef", "gh"], tokenizer=lambda s: s.split("-"))
    assert index.search("cd")[0][0] == 0
    assert "ab" in index.vocab and "cd" in index.vocab


def test_batch_equals_single_queries():
    index = BM25Index(random_corpus(200, seed=5))
    queries = ["w1 w2", "common", "zzz", "w9 w9 w13"]
    assert index.search_batch(queries, 4) == [index.search(q, 4) for q in queries]
    dense = index.scores_batch(queries)
    assert dense.shape == (4, 200)
    for row, q in zip(dense, queries):
        np.testing.assert_array_equal(row, index.scores(q))


def test_bad_input_is_rejected_with_clear_errors():
    with pytest.raises(ValueError, match="at least one passage"):
        BM25Index([])
    with pytest.raises(ValueError, match="2 passages but 1 ids"):
        BM25Index(["a", "b"], ids=["x"])
    with pytest.raises(TypeError, match="str 'text'"):
        BM25Index([{"title": "no text"}])
    with pytest.raises(ValueError, match="k1"):
        BM25Index(["a"], b=2.0)
    index = BM25Index(["a b", "c"])
    with pytest.raises(ValueError, match="positive int"):
        index.search("a", k=0)
    with pytest.raises(TypeError, match="query must be a str"):
        index.search(None)
    with pytest.raises(TypeError, match="list of queries"):
        index.search_batch("a b")


def test_term_in_exactly_half_the_passages_weighs_nothing():
    # rank-bm25's idf log(N - df + 0.5) - log(df + 0.5) is 0 at df = N/2: such a term cannot rank anything.
    index = BM25Index(["one", "two"])
    assert index.search("one") == []
    assert BM25Okapi([["one"], ["two"]]).get_scores(["one"]).tolist() == [0.0, 0.0]


def test_corpus_of_empty_passages_scores_zero():
    index = BM25Index(["", "...", ""])
    assert index.search("anything") == []
    assert not index.scores("anything").any()


def test_save_load_roundtrip(tmp_path):
    texts = random_corpus(100, seed=1) + ["Ünïcödé wörds 東京"]
    index = BM25Index(texts)
    index.save(tmp_path / "i.npz")
    loaded = BM25Index.load(tmp_path / "i.npz", texts)
    assert (loaded.k1, loaded.b, loaded.epsilon, loaded.idf_kind) == (1.5, 0.75, 0.25, "okapi")  # the defaults
    for q in ["w1 common", "東京 wörds"]:
        np.testing.assert_array_equal(loaded.scores(q), index.scores(q))
    with pytest.raises(ValueError, match="does not match"):
        BM25Index.load(tmp_path / "i.npz", texts[:-1])


def test_cache_shares_in_memory_and_reloads_from_disk(tmp_path, monkeypatch):
    texts = random_corpus(120, seed=9)
    first = BM25Index.cached(texts, cache_dir=tmp_path)
    assert BM25Index.cached(texts, cache_dir=tmp_path) is first
    files = list(tmp_path.glob("*.npz"))
    assert [f.stem for f in files] == [first.cache_key]
    expected = first.scores("w1 w2")
    alive = weakref.ref(first)
    del first
    gc.collect()
    assert alive() is None

    def no_build(*args, **kwargs):
        raise AssertionError("the index was rebuilt instead of loaded from the cache")

    monkeypatch.setattr(BM25Index, "__init__", no_build)
    again = BM25Index.cached(texts, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.scores("w1 w2"), expected)


def test_cache_key_depends_on_content_tokenizer_and_params(tmp_path):
    texts = ["one two", "three"]
    keys = {
        BM25Index.cached(texts, cache_dir=tmp_path).cache_key,
        BM25Index.cached(["one two", "four"], cache_dir=tmp_path).cache_key,
        BM25Index.cached(texts, k1=1.2, cache_dir=tmp_path).cache_key,
        BM25Index.cached(texts, tokenizer=Tokenizer(stopwords=ENGLISH_STOPWORDS), cache_dir=tmp_path).cache_key,
        BM25Index.cached(texts, ids=["a", "b"], cache_dir=tmp_path).cache_key,
    }
    assert len(keys) == 5
    assert len(list(tmp_path.glob("*.npz"))) == 5


def test_corrupt_cache_file_is_rebuilt_not_trusted(tmp_path):
    texts = random_corpus(50, seed=2)
    key = BM25Index.content_key(texts, list(range(50)), Tokenizer().cache_key, 1.5, 0.75, 0.25)
    path = tmp_path / f"{key}.npz"
    path.write_bytes(b"this is not an npz file")
    with pytest.warns(UserWarning, match="rebuilding"):
        index = BM25Index.cached(texts, cache_dir=tmp_path)
    np.testing.assert_allclose(index.scores("w1"), BM25Index(texts).scores("w1"))
    search._LIVE_INDEXES.clear()
    BM25Index.load(path, texts)  # the bad file was replaced by a good one


def test_uncacheable_tokenizer_and_disabled_disk_cache_write_nothing(tmp_path):
    BM25Index.cached(["a b"], tokenizer=str.split, cache_dir=tmp_path)
    BM25Index.cached(["c d"], cache_dir=False)
    assert not list(tmp_path.glob("*"))


def test_default_cache_dir_follows_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("ERL_GYM_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "bm25"
    monkeypatch.delenv("ERL_GYM_CACHE")
    assert default_cache_dir().parts[-3:] == (".cache", "erl_gym", "bm25")


def test_search_never_returns_a_passage_ranked_below_one_it_leaves_out():
    # "a" is in 4 of 5 passages: its idf floor is negative here, so those 4 score below the zero-score "d".
    index = BM25Index(["a b c"] * 4 + ["d"])
    assert index.scores("a")[0] < 0 == index.scores("a")[4]
    assert index.search("a") == []
    rng = np.random.default_rng(0)
    for _ in range(200):  # tiny random corpora, where negative floors are common
        texts = [" ".join(rng.choice(list("abcde"), rng.integers(1, 4))) for _ in range(rng.integers(1, 6))]
        index = BM25Index(texts)
        query = " ".join(rng.choice(list("abcdef"), 2))
        scores = index.scores(query)
        hits = index.search(query, k=len(texts))
        returned = {pid for pid, _ in hits}
        left_out = [scores[i] for i in range(len(texts)) if i not in returned]
        assert all(score > max(left_out, default=-np.inf) for _, score in hits)


def test_folding_tokenizer_normalises_unicode_and_is_off_by_default():
    assert Tokenizer()("İstanbul") == ["i", "stanbul"]  # lower() gives i + a combining dot, which splits the word
    assert Tokenizer(fold=True)("İstanbul Zoë ＦＩＦＡ Straße") == ["istanbul", "zoe", "fifa", "strasse"]
    assert fold_text("Ångström café") == "angstrom cafe"
    assert Tokenizer(fold=True).cache_key != Tokenizer().cache_key
    texts = ["Zoë Saldaña acted", "Other text here", "More words", "Still more"]
    assert BM25Index(texts, tokenizer=Tokenizer(fold=True)).search("zoe saldana")[0][0] == 0
    assert BM25Index(texts).search("zoe saldana") == []


# --- idf="lucene": always positive ---------------------------------------------------------------------------------


def lucene_reference(texts, query, k1=1.5, b=0.75, tokenizer=TOKENIZE):
    """Scores computed term by term from Lucene's idf and BM25's term-frequency part, independently of the index."""
    docs = [tokenizer(t) for t in texts]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    scores = np.zeros(n)
    for term in tokenizer(query):
        df = sum(term in d for d in docs)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl)) if tf else 0.0
    return scores


def test_lucene_scores_follow_the_formula_and_every_idf_is_positive(hotpotqa_sample):
    texts = random_corpus(200, seed=4)
    index = BM25Index(texts, idf="lucene")
    assert (index.idf > 0).all() and index.idf_kind == "lucene"
    for query in ["w1 w2 w3", "common", "common w50 w50", "w7 nothing"]:
        np.testing.assert_allclose(index.scores(query), lucene_reference(texts, query), rtol=0, atol=1e-9)
    real = []
    for line in (hotpotqa_sample / "dev_distractor_sample_dev.jsonl").read_text().splitlines()[:20]:
        record = json.loads(line)
        real += [f"{t}\n{''.join(s)}" for t, s in zip(record["context"]["title"], record["context"]["sentences"])]
    index = BM25Index(real, idf="lucene", k1=1.2, b=0.5)
    np.testing.assert_allclose(index.scores(record["question"]), lucene_reference(real, record["question"], 1.2, 0.5),
                               rtol=0, atol=1e-9)


def test_okapi_stays_rank_bm25s_and_lucene_finds_what_okapi_cannot():
    texts = random_corpus()
    assert_matches_reference(texts, ["w1 w2", "common"], idf="okapi")
    # A term in exactly half the passages: okapi's idf is 0, so a 2-passage corpus cannot be searched at all.
    assert BM25Index(["one", "two"], idf="okapi").search("one") == []
    assert [pid for pid, _ in BM25Index(["one", "two"], idf="lucene").search("one")] == [0]
    with pytest.raises(ValueError, match="idf must be one of"):
        BM25Index(texts, idf="tfidf")


def test_the_cache_keeps_okapi_and_lucene_indexes_apart(tmp_path):
    texts = ["one two", "three"]
    okapi = BM25Index.cached(texts, cache_dir=tmp_path)
    lucene = BM25Index.cached(texts, cache_dir=tmp_path, idf="lucene")
    assert okapi is not lucene and okapi.cache_key != lucene.cache_key
    assert okapi.cache_key == BM25Index.content_key(texts, [0, 1], Tokenizer().cache_key, 1.5, 0.75, 0.25)
    assert BM25Index.load(tmp_path / f"{lucene.cache_key}.npz", texts, idf="lucene").idf.tolist() == \
        lucene.idf.tolist()


@pytest.mark.parametrize("idf", ["okapi", "lucene"])
def test_an_index_from_the_cache_is_the_index_those_settings_build(tmp_path, idf):
    """Built, saved and loaded again with non-default k1, b, epsilon, ids, stopwords and idf: the reloaded index
    scores, ranks and names passages exactly as a fresh one with the same settings, and not as the defaults."""
    texts = random_corpus(60, seed=4)
    ids = [f"p{i}" for i in range(len(texts))]
    settings = dict(k1=0.9, b=0.4, epsilon=0.5, tokenizer=Tokenizer(stopwords=ENGLISH_STOPWORDS), idf=idf)
    fresh = BM25Index(texts, ids, **settings)
    first = BM25Index.cached(texts, ids, cache_dir=tmp_path, **settings)
    key = first.cache_key
    del first
    gc.collect()
    again = BM25Index.cached(texts, ids, cache_dir=tmp_path, **settings)  # from the file
    assert again.cache_key == key and list(tmp_path.glob("*.npz"))
    for query in ("w1 w2", "w3 w5 w8", "w2"):
        np.testing.assert_allclose(again.scores(query), fresh.scores(query), rtol=1e-6)
        assert again.search(query, 5) == fresh.search(query, 5)
    default = BM25Index(texts, ids)
    assert not np.allclose(default.scores("w1 w2"), fresh.scores("w1 w2"))


def test_lucene_idf_is_the_plus_one_formula():
    """idf="lucene": log(1 + (N - df + 0.5) / (df + 0.5)), checked on a corpus small enough to count by hand."""
    import math

    texts = ["apple banana", "apple cherry", "apple banana cherry", "date"]
    index = BM25Index(texts, k1=1.2, b=0.0, idf="lucene")  # b = 0: no length normalisation
    n = 4
    for term, df in (("banana", 2), ("date", 1), ("apple", 3)):
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        # A one-word query on a passage holding the term once: idf * (k1 + 1) / (1 + k1).
        hit = texts.index(next(t for t in texts if term in t.split()))
        assert index.scores(term)[hit] == pytest.approx(idf, rel=1e-6)


# ------------------------------------------------------------------------------------------------ every build path


class RawTokenizer:
    """Whitespace words as they are (lone surrogates included), cacheable."""

    cache_key = "raw-split-v1"

    def __call__(self, text):
        return text.split()


def test_cached_builds_the_index_those_settings_build_on_every_path(tmp_path, monkeypatch):
    """``cached`` has five ways to an index: a tokenizer without a cache key, the disk turned off, a first build
    saved to a folder, a load from that folder, and the default folder. Each must be what ``BM25Index(...)`` with
    the same ids, k1, b, epsilon, idf and tokenizer builds."""
    from types import SimpleNamespace

    texts = random_corpus(40, seed=5)
    passages = [{"id": f"d{i}", "title": f"w{i} title", "text": t} if i % 2 else SimpleNamespace(title=f"w{i}", text=t)
                for i, t in enumerate(texts)]
    settings = dict(k1=0.7, b=0.3, epsilon=0.6, idf="lucene")
    default_ids = [f"d{i}" if i % 2 else i for i in range(len(texts))]  # a dict's id, else the position
    given_ids = [f"g{i}" for i in range(len(texts))]

    def uncacheable(text):
        return text.lower().split()

    raw = RawTokenizer()
    built = {tokenizer: BM25Index(passages, tokenizer=tokenizer, **settings) for tokenizer in (uncacheable, raw)}

    def check(index, tokenizer, ids=default_ids):
        fresh = built[tokenizer]
        assert fresh.ids == default_ids
        assert index.ids == ids and index.tokenizer is tokenizer
        assert (index.k1, index.b, index.epsilon, index.idf_kind) == (0.7, 0.3, 0.6, "lucene")
        assert index.average_idf == fresh.average_idf == pytest.approx(float(np.mean(fresh.idf)))
        assert index.avgdl == fresh.avgdl == pytest.approx(float(np.mean(fresh.doc_len)))
        for query in ("w1 w2", "w3 common", "w7 title"):
            np.testing.assert_allclose(index.scores(query), fresh.scores(query), rtol=1e-12)
            named = dict(zip(fresh.ids, ids))
            assert index.search(query, 4) == [(named[i], score) for i, score in fresh.search(query, 4)]
        assert index.title_matches("w3 title") == [3] and index.title_matches("w4") == [4]

    check(BM25Index.cached(passages, tokenizer=uncacheable, cache_dir=tmp_path, **settings), uncacheable)
    check(BM25Index.cached(passages, given_ids, tokenizer=uncacheable, **settings), uncacheable, given_ids)
    check(BM25Index.cached(passages, tokenizer=raw, cache_dir=False, **settings), raw)
    search._LIVE_INDEXES.clear()
    check(BM25Index.cached(passages, tokenizer=raw, cache_dir=tmp_path / "a" / "b", **settings), raw)  # built, saved
    search._LIVE_INDEXES.clear()
    check(BM25Index.cached(passages, given_ids, tokenizer=raw, cache_dir=False, **settings), raw, given_ids)
    search._LIVE_INDEXES.clear()
    monkeypatch.setattr(BM25Index, "__init__", lambda *args, **kwargs: pytest.fail("rebuilt instead of loaded"))
    check(BM25Index.cached(passages, tokenizer=raw, cache_dir=tmp_path / "a" / "b", **settings), raw)
    monkeypatch.undo()
    monkeypatch.setenv("ERL_GYM_CACHE", str(tmp_path / "home"))
    search._LIVE_INDEXES.clear()
    check(BM25Index.cached(passages, tokenizer=raw, cache_dir=True, **settings), raw)
    assert len(list((tmp_path / "home" / "bm25").glob("*.npz"))) == 1


def test_lone_surrogates_survive_the_cache_key_and_a_save_and_load(tmp_path):
    """Text read with surrogateescape (or broken JSON) can hold lone surrogates: the cache key and the saved
    vocabulary carry them through instead of failing."""
    texts = ["caf\udce9 au lait", "plain text", "more plain words"]
    raw = RawTokenizer()
    first = BM25Index.cached(texts, tokenizer=raw, cache_dir=tmp_path)
    assert first.scores("caf\udce9")[0] > 0
    path = tmp_path / f"{first.cache_key}.npz"
    loaded = BM25Index.load(path, texts, tokenizer=raw)
    np.testing.assert_array_equal(loaded.scores("caf\udce9 plain"), first.scores("caf\udce9 plain"))


def test_the_cache_file_name_is_a_stable_hash_of_what_the_index_depends_on():
    """The key is the sha256 of a header (format, tokenizer key, k1, b, epsilon, passage count, and the idf unless it
    is okapi: okapi files keep the names they had before the choice) and of each id and text behind its length as 8
    little-endian bytes. Written out here so that a change to it, which orphans every cache file, is deliberate."""
    import hashlib

    def expected(texts, ids, kind):
        h = hashlib.sha256(f"bm25:1:tok:1.5:0.75:0.25:{len(texts)}{kind}".encode())
        for pid, text in zip(ids, texts):
            data = f"{pid!r}\x1f{text}".encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "little") + data)
        return h.hexdigest()

    texts, ids = ["one two", "thr\udce9e"], [0, "b"]
    assert BM25Index.content_key(texts, ids, "tok", 1.5, 0.75, 0.25) == expected(texts, ids, "")
    assert BM25Index.content_key(texts, ids, "tok", 1.5, 0.75, 0.25, "okapi") == expected(texts, ids, "")
    assert BM25Index.content_key(texts, ids, "tok", 1.5, 0.75, 0.25, "lucene") == expected(texts, ids, ":idf=lucene")


def _rewrite(path, **changes):
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    arrays.update(changes)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


@pytest.mark.parametrize("change, message", [
    (lambda a: {"idf": a["idf"][:-1]}, "does not match the corpus"),
    (lambda a: {"doc_len": a["doc_len"][:-1]}, "does not match the corpus"),
    (lambda a: {"indices": a["indices"] + 1000}, r"indices must be < \d+"),
    (lambda a: {"format": np.array([7])}, "has cache format 7, expected 1"),
])
def test_a_cache_file_that_does_not_fit_is_refused_and_rebuilt(tmp_path, change, message):
    """A cache file is data a user may receive: every array must fit the corpus and each other (vocabulary, idf,
    passage lengths, the sparse matrix's indices) before it is used; the cache then rebuilds it."""
    texts = random_corpus(30, seed=3)
    search._LIVE_INDEXES.clear()
    first = BM25Index.cached(texts, cache_dir=tmp_path)
    expected = first.scores("w1 w2")
    path = tmp_path / f"{first.cache_key}.npz"
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    _rewrite(path, **change(arrays))
    with pytest.raises(ValueError, match=message):
        BM25Index.load(path, texts)
    search._LIVE_INDEXES.clear()
    del first
    with pytest.warns(UserWarning, match="rebuilding the BM25 index"):
        again = BM25Index.cached(texts, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.scores("w1 w2"), expected)


def test_the_bm25_parameter_bounds_are_inclusive_and_untitled_passages_index_their_text():
    from types import SimpleNamespace

    for k1, b in ((0.0, 0.5), (1.2, 0.0), (1.2, 1.0)):
        index = BM25Index(["a b", "c", "d e f"], k1=k1, b=b, idf="lucene")
        assert (index.k1, index.b) == (k1, b) and [i for i, _ in index.search("a")] == [0]
    assert BM25Index(["a b"]).cache_key is None  # only cached() names its index
    # A passage without a title is its text alone: no "None" line, no title entry.
    index = BM25Index([{"text": "alpha"}, SimpleNamespace(text="beta"), {"title": "", "text": "none"}])
    assert index.scores("none").tolist()[:2] == [0.0, 0.0] and index.ids == [0, 1, 2]
    assert index.title_matches("none") == [] and index.title_matches("alpha") == []
    # A title without words is never matched by a query without words.
    assert BM25Index([{"title": "...", "text": "dots"}]).title_matches("") == []
    with pytest.raises(TypeError, match="a passage must be a str or have a str 'text', got object"):
        BM25Index([object()])


def test_an_index_of_passages_without_words_has_zero_average_idf():
    for idf in ("okapi", "lucene"):
        index = BM25Index(["...", "!!"], idf=idf)
        assert index.average_idf == 0.0 and index.scores("anything").tolist() == [0.0, 0.0]


def test_search_defaults_to_five_hits_and_names_bad_queries_and_unsaved_caches(tmp_path):
    index = BM25Index([f"common word{i}" for i in range(8)])
    assert len(index.search("common")) == 5 and [len(hits) for hits in index.search_batch(["common"])] == [5]
    with pytest.raises(TypeError, match="^a query must be a str, got int$"):
        index.search(3)
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    search._LIVE_INDEXES.clear()
    with pytest.warns(UserWarning, match="could not save the BM25 index to .*; it will be rebuilt next time"):
        BM25Index.cached(["a b", "c d"], cache_dir=blocker)
