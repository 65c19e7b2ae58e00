"""Okapi BM25 retrieval over a passage corpus, scored with sparse matrices, with an on-disk cache.

Two idf formulas. ``idf="okapi"`` (the default here): the scores are exactly those of rank-bm25's ``BM25Okapi``
(same k1, b and epsilon, same idf ``log(N - df + 0.5) - log(df + 0.5)`` with its floor ``epsilon * mean idf`` for
terms in more than half the passages) so that results can be checked against that reference. ``idf="lucene"``:
Lucene's ``log(1 + (N - df + 0.5) / (df + 0.5))``, positive for every term, so a term found in half or more of the
passages still counts; small corpora need it (a question's 10 paragraphs in HotpotQA's distractor mode, where the
question's entities appear in many of them, and okapi's idf is 0 or floored for exactly the words searched for).
The term-frequency part is the same in both. rank-bm25 scores a query with a Python loop over every
passage; here the per-(term, passage) weights are computed once into a term-major sparse matrix and a query is one
sparse product, which is what makes a 100,000-passage corpus usable inside an environment step.

Only passages with a positive score are returned. A passage scoring exactly 0 would have an arbitrary rank: that
is every passage sharing no term with the query, and under okapi's idf also those sharing only terms found in
exactly half the passages, whose idf is 0 (in a 2-passage corpus, every term found in one of them; under lucene's
idf every passage that shares a term with the query scores above 0). A negative
score (possible in tiny corpora, where the idf floor ``epsilon * mean idf`` is itself negative) ranks *below* those
zero-score passages, so returning it while leaving them out would misorder the results. Ties are broken by corpus
position, so results are deterministic.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import warnings
import weakref
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["ENGLISH_STOPWORDS", "IDFS", "Tokenizer", "fold_text", "BM25Index", "default_cache_dir", "passage_text"]

IDFS = ("okapi", "lucene")

# Passages tokenised at a time while building.
_BUILD_CHUNK = 1024

# Bump when the saved layout or the scoring changes, so old cache files stop matching.
_CACHE_FORMAT = 1

# Common English function words. Off by default (rank-bm25 has no stop-words; the epsilon floor already makes very
# common terms nearly weightless), on with ``Tokenizer(stopwords=ENGLISH_STOPWORDS)``.
ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()
)

# Runs of letters and digits in any script; punctuation and underscores separate tokens.
_WORD = re.compile(r"[^\W_]+")


class _DropCombiningMarks(dict):
    """A ``str.translate`` table that deletes combining marks; it learns each code point once, on first sight."""

    def __missing__(self, code: int):
        value = None if unicodedata.combining(chr(code)) else code
        self[code] = value
        return value


_DROP_MARKS = _DropCombiningMarks()


def fold_text(text: str) -> str:
    """NFKC, casefold, then accents removed: "İstanbul" -> "istanbul", "Ｆｉｆａ" -> "fifa", "Zoë" -> "zoe"."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).translate(_DROP_MARKS))


@dataclass(frozen=True)
class Tokenizer:
    """The default tokeniser: Unicode word runs, lowercased, minus optional stop-words.

    ``fold=True`` first normalises the text (``fold_text``: NFKC, casefold, accents removed), so that a query typed
    without accents or in another Unicode form finds the passage; off by default, where the scores equal
    rank-bm25's over lowercased word runs. Any callable ``str -> list[str]`` can replace it; give it a ``cache_key``
    string attribute (which must change whenever its output would) to let indexes built with it be cached on disk.
    """

    lowercase: bool = True
    stopwords: frozenset[str] = field(default_factory=frozenset)
    fold: bool = False

    def __call__(self, text: str) -> list[str]:
        if self.fold:
            text = fold_text(text)
        elif self.lowercase:
            text = text.lower()
        tokens = _WORD.findall(text)
        if self.stopwords:
            stop = self.stopwords
            tokens = [t for t in tokens if t not in stop]
        return tokens

    @property
    def cache_key(self) -> str:
        stop = hashlib.sha256("\n".join(sorted(self.stopwords)).encode()).hexdigest()[:16]
        return f"words-v1:lower={self.lowercase}:stop={stop}" + (":fold=nfkc-casefold-noaccents" if self.fold else "")


def passage_text(passage: Any) -> str:
    """The text a passage is indexed under: a str as is; a dict or object with ``text`` (and ``title``) as
    ``title + newline + text``, so that searching for an entity's name finds its article."""
    if isinstance(passage, str):
        return passage
    if isinstance(passage, Mapping):
        title, text = passage.get("title"), passage.get("text")
    else:
        title, text = getattr(passage, "title", None), getattr(passage, "text", None)
    if not isinstance(text, str):
        raise TypeError(f"a passage must be a str or have a str 'text', got {type(passage).__name__}: {passage!r:.80}")
    return f"{title}\n{text}" if title else text


def _passage_id(passage: Any, position: int) -> Hashable:
    if isinstance(passage, Mapping):
        return passage.get("id", position)
    return getattr(passage, "id", position)


def default_cache_dir() -> Path:
    """``$ERL_GYM_CACHE/bm25`` when that variable is set, else ``~/.cache/erl_gym/bm25``."""
    root = os.environ.get("ERL_GYM_CACHE")
    return Path(root) / "bm25" if root else Path.home() / ".cache" / "erl_gym" / "bm25"


# Indexes alive in this process, by content key: envs over the same corpus share one (a vector env of 32 builds one).
_LIVE_INDEXES: "weakref.WeakValueDictionary[str, BM25Index]" = weakref.WeakValueDictionary()


class BM25Index:
    """Okapi BM25 over a fixed list of passages.

    ``passages`` are strings, or dicts/objects with ``text`` and optional ``title`` and ``id``. ``ids`` (default:
    the passages' ``id`` or their position) are what ``search`` returns. ``k1``, ``b`` and ``epsilon`` are
    rank-bm25's ``BM25Okapi`` parameters with its defaults; ``idf`` is ``"okapi"`` (rank-bm25's, with ``epsilon``) or
    ``"lucene"`` (always positive; ``epsilon`` unused), see the module docstring.
    """

    def __init__(
        self,
        passages: Sequence[Any],
        ids: Sequence[Hashable] | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        tokenizer: Callable[[str], list[str]] | None = None,
        idf: str = "okapi",
    ):
        texts = [passage_text(p) for p in passages]
        self._setup(passages, texts, ids, k1, b, epsilon, tokenizer, idf)
        vocab: dict[str, int] = {}
        doc_len = np.zeros(len(texts), dtype=np.int64)
        blocks = []
        # Chunk by chunk, so that the token strings (the bulkiest intermediate) of only one chunk are alive at a time.
        for start in range(0, len(texts), _BUILD_CHUNK):
            token_lists = [self.tokenizer(t) for t in texts[start:start + _BUILD_CHUNK]]
            lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
            doc_len[start:start + len(token_lists)] = lengths
            # setdefault with len(vocab) numbers each new word as it first appears, in one pass at C speed.
            term_ids = np.fromiter((vocab.setdefault(w, len(vocab)) for tokens in token_lists for w in tokens),
                                   dtype=np.int64, count=int(lengths.sum()))
            rows = np.repeat(np.arange(len(token_lists)), lengths)
            # Building a CSR matrix from (row, col) pairs sums the duplicates: a (passage x term) frequency block.
            blocks.append(sp.csr_matrix((np.ones(len(term_ids), dtype=np.int32), (rows, term_ids)),
                                        shape=(len(token_lists), len(vocab))))
        for block in blocks:
            block.resize((block.shape[0], len(vocab)))  # earlier blocks saw a smaller vocabulary
        tf = sp.vstack(blocks, format="csr")
        del blocks
        tf = tf.T.tocsr()  # term-major: a query reads one row per query term
        self._finish(vocab, tf, doc_len)

    # ------------------------------------------------------------------------------------------ construction

    def _setup(self, passages, texts, ids, k1, b, epsilon, tokenizer, idf="okapi") -> None:
        if not texts:
            raise ValueError("BM25Index needs at least one passage")
        if idf not in IDFS:
            raise ValueError(f"idf must be one of {list(IDFS)}, got {idf!r}")
        self.idf_kind = idf
        if ids is None:
            ids = [_passage_id(p, i) for i, p in enumerate(passages)]
        ids = list(ids)
        if len(ids) != len(texts):
            raise ValueError(f"got {len(texts)} passages but {len(ids)} ids")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.ids = ids
        self.k1, self.b, self.epsilon = float(k1), float(b), float(epsilon)
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self.cache_key: str | None = None  # set by cached(): the content key the index is shared under
        # Passages by the words of their title, for title_matches.
        self._by_title: dict[tuple[str, ...], list[int]] = {}
        for position, passage in enumerate(passages):
            title = passage.get("title") if isinstance(passage, Mapping) else getattr(passage, "title", None)
            if isinstance(title, str) and title:
                self._by_title.setdefault(tuple(self.tokenizer(title)), []).append(position)

    def _finish(self, vocab: dict[str, int], tf: sp.csr_matrix, doc_len: np.ndarray) -> None:
        """Turn term frequencies (terms x passages) into the BM25 weight matrix, exactly as BM25Okapi scores."""
        n = len(doc_len)
        avgdl = float(doc_len.sum()) / n or 1.0  # 0 only when no passage has a token: then there is nothing to weigh
        df = np.diff(tf.indptr)
        if self.idf_kind == "lucene":
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            self.average_idf = float(idf.mean()) if len(idf) else 0.0
        else:
            idf = np.log(n - df + 0.5) - np.log(df + 0.5)
            self.average_idf = float(idf.mean()) if len(idf) else 0.0
            idf[idf < 0] = self.epsilon * self.average_idf
        # idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl)), in place: at 100k passages each temporary
        # array is ~50 MB.
        weights = tf.data.astype(np.float64)
        denom = doc_len[tf.indices].astype(np.float64)
        denom *= self.b / avgdl
        denom += 1 - self.b
        denom *= self.k1
        denom += weights
        weights *= self.k1 + 1
        weights /= denom
        del denom
        weights *= np.repeat(idf, df)
        self._restore(vocab, sp.csr_matrix((weights, tf.indices, tf.indptr), shape=tf.shape), idf, doc_len)

    def _restore(self, vocab: dict[str, int], weights: sp.csr_matrix, idf: np.ndarray, doc_len: np.ndarray) -> None:
        self.vocab = vocab
        self.idf = idf
        self.doc_len = doc_len
        self.avgdl = float(doc_len.sum()) / len(doc_len)
        self._weights = weights

    # ------------------------------------------------------------------------------------------ scoring

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Memory held by the index arrays (not counting the vocabulary dict and ids)."""
        arrays = (self._weights.data, self._weights.indices, self._weights.indptr, self.idf, self.doc_len)
        return int(sum(a.nbytes for a in arrays))

    def _query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        rows, cols, vals = [], [], []
        for row, query in enumerate(queries):
            if not isinstance(query, str):
                raise TypeError(f"a query must be a str, got {type(query).__name__}")
            # A repeated query word counts once per occurrence, as in BM25Okapi's loop over query tokens.
            counts = Counter(t for t in self.tokenizer(query) if t in self.vocab)
            for term, count in counts.items():
                rows.append(row)
                cols.append(self.vocab[term])
                vals.append(float(count))
        return sp.csr_matrix((vals, (rows, cols)), shape=(len(queries), len(self.vocab)))

    def _score_rows(self, queries: Sequence[str]) -> sp.csr_matrix:
        """(queries x passages) scores; a stored entry is a passage with a non-zero score."""
        result = (self._query_matrix(queries) @ self._weights).tocsr()
        result.eliminate_zeros()
        return result

    def title_matches(self, query: str) -> list[int]:
        """Positions of the passages whose title is ``query`` word for word (as the tokenizer reads both), in corpus
        order: what a search for an article's exact name should show first, whatever its BM25 rank."""
        words = tuple(self.tokenizer(query))
        return list(self._by_title.get(words, ())) if words else []

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every passage for ``query`` (what ``BM25Okapi.get_scores`` returns)."""
        row = self._score_rows([query])
        dense = np.zeros(len(self.ids))
        dense[row.indices] = row.data
        return dense

    def scores_batch(self, queries: Sequence[str]) -> np.ndarray:
        """A (queries x passages) array of scores."""
        return self._score_rows(list(queries)).toarray()

    def search(self, query: str, k: int = 5) -> list[tuple[Hashable, float]]:
        """The ``k`` best passages as ``(id, score)``, best first; fewer when fewer passages score above 0."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Iterable[str], k: int = 5) -> list[list[tuple[Hashable, float]]]:
        """``search`` for many queries at once (one sparse product for all, e.g. a vector env's step)."""
        if isinstance(queries, str):
            raise TypeError("search_batch takes a list of queries; use search() for one")
        return [[(self.ids[i], s) for i, s in hits] for hits in self.top_k_batch(list(queries), k)]

    def top_k_batch(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Like ``search_batch`` but with corpus positions instead of ids."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        rows = self._score_rows(queries)
        return [
            _top_k(rows.indices[start:end], rows.data[start:end], int(k))
            for start, end in zip(rows.indptr[:-1], rows.indptr[1:])
        ]

    # ------------------------------------------------------------------------------------------ disk cache

    @staticmethod
    def content_key(texts: Sequence[str], ids: Sequence[Hashable], tokenizer_key: str, k1: float, b: float,
                    epsilon: float, idf: str = "okapi") -> str:
        """sha256 of everything an index depends on; names its cache file (okapi indexes keep the names they had
        before there was a choice of idf)."""
        kind = "" if idf == "okapi" else f":idf={idf}"
        h = hashlib.sha256(f"bm25:{_CACHE_FORMAT}:{tokenizer_key}:{k1!r}:{b!r}:{epsilon!r}:{len(texts)}{kind}".encode())
        for pid, text in zip(ids, texts):
            data = f"{pid!r}\x1f{text}".encode("utf-8", "surrogatepass")
            # Length prefixes keep ("ab", "c") and ("a", "bc") apart.
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return h.hexdigest()

    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (.npz); written to a temporary file first so readers never see half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        words = list(self.vocab)  # insertion order == term id
        encoded = [w.encode("utf-8", "surrogatepass") for w in words]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(
                f,
                format=np.array([_CACHE_FORMAT]),
                weights=self._weights.data, indices=self._weights.indices, indptr=self._weights.indptr,
                idf=self.idf, average_idf=np.array([self.average_idf]), doc_len=self.doc_len,
                vocab_bytes=np.frombuffer(b"".join(encoded), dtype=np.uint8), vocab_offsets=offsets,
            )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, passages: Sequence[Any], ids: Sequence[Hashable] | None = None, *,
             k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25,
             tokenizer: Callable[[str], list[str]] | None = None, idf: str = "okapi") -> "BM25Index":
        """Read an index saved by ``save`` for these same passages; raises ValueError when the file does not fit."""
        self = cls.__new__(cls)
        self._setup(passages, [passage_text(p) for p in passages], ids, k1, b, epsilon, tokenizer, idf)
        with np.load(path, allow_pickle=False) as data:
            if int(data["format"][0]) != _CACHE_FORMAT:
                raise ValueError(f"{path} has cache format {int(data['format'][0])}, expected {_CACHE_FORMAT}")
            raw, offsets = data["vocab_bytes"].tobytes(), data["vocab_offsets"]
            words = [raw[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(offsets) - 1)]
            vocab = {w: i for i, w in enumerate(words)}
            doc_len, idf = data["doc_len"], data["idf"]
            self.average_idf = float(data["average_idf"][0])
            weights = sp.csr_matrix((data["weights"], data["indices"], data["indptr"]),
                                    shape=(len(words), len(doc_len)))
        if len(vocab) != len(words) or len(idf) != len(words) or len(doc_len) != len(self.ids):
            raise ValueError(f"{path} does not match the corpus ({len(doc_len)} passages saved, {len(self.ids)} given)")
        weights.check_format(full_check=True)
        self._restore(vocab, weights, idf, doc_len)
        return self

    @classmethod
    def cached(cls, passages: Sequence[Any], ids: Sequence[Hashable] | None = None, *, k1: float = 1.5,
               b: float = 0.75, epsilon: float = 0.25, tokenizer: Callable[[str], list[str]] | None = None,
               cache_dir: str | os.PathLike | bool | None = None, idf: str = "okapi") -> "BM25Index":
        """The index of these passages: the one already alive in this process, else the one saved on disk, else a
        new one (then saved). ``cache_dir=None`` means ``default_cache_dir()``; ``False`` turns the disk off.

        Only tokenisers with a ``cache_key`` are cached (a bare function's behaviour cannot be keyed).
        A cache file that cannot be read or does not fit is rebuilt, never trusted.
        """
        tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        tokenizer_key = getattr(tokenizer, "cache_key", None)
        if not isinstance(tokenizer_key, str):
            return cls(passages, ids, k1=k1, b=b, epsilon=epsilon, tokenizer=tokenizer, idf=idf)
        texts = [passage_text(p) for p in passages]
        if ids is None:
            ids = [_passage_id(p, i) for i, p in enumerate(passages)]
        key = cls.content_key(texts, ids, tokenizer_key, k1, b, epsilon, idf)
        live = _LIVE_INDEXES.get(key)
        if live is not None:
            return live
        params = dict(k1=k1, b=b, epsilon=epsilon, tokenizer=tokenizer, idf=idf)
        index = None
        path = None
        if cache_dir is not False:
            path = Path(default_cache_dir() if cache_dir in (None, True) else cache_dir) / f"{key}.npz"
            if path.exists():
                try:
                    index = cls.load(path, passages, ids, **params)
                except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                    warnings.warn(f"rebuilding the BM25 index: the cache file {path} is unreadable ({exc})")
        if index is None:
            index = cls(passages, ids, **params)
            if path is not None:
                try:
                    index.save(path)
                except OSError as exc:
                    warnings.warn(f"could not save the BM25 index to {path} ({exc}); it will be rebuilt next time")
        index.cache_key = key
        _LIVE_INDEXES[key] = index
        return index


def _top_k(docs: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best (position, score) pairs with a positive score, best first, ties to the earlier position."""
    positive = scores > 0
    if not positive.all():
        docs, scores = docs[positive], scores[positive]
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # may hold more than k when scores tie at the boundary; the sort below settles it
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return [(int(docs[i]), float(scores[i])) for i in order]
