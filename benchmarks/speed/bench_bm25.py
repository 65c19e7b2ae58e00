"""Benchmark erl_envs.qa.search.BM25Index against rank-bm25's BM25Okapi and bm25s: build time, memory, query
latency, top-10 agreement.

    python benchmarks/speed/bench_bm25.py                    # corpora of 10,000, 100,000 and 1,000,000 passages
    python benchmarks/speed/bench_bm25.py --sizes 20000 --queries 100
    python benchmarks/speed/bench_bm25.py --quick            # small corpora, a smoke run
    python benchmarks/speed/bench_bm25.py --report           # the table again from bm25.json

Corpora are synthetic: passages of about 100 words drawn from a Zipfian vocabulary (word frequency ~ 1/rank, like
natural text), plus the HotpotQA sample passages from ../shared when present. Queries are 4-12 words taken from
random passages, so they have matches and mix rare and common words. Both indexes see the same tokens (our default
tokeniser); build times include tokenising, query times include tokenising the query and picking the top 10.
rank-bm25 scores a query with a Python loop over every passage, so at large sizes only a subset of the queries is
timed on it (``--ref-queries``), and above ``--ref-max-passages`` it is not run (at a million passages its index
of Python dicts needs about 8 GB and a query takes seconds). bm25s (sparse matrices, like ours) is compared with our
index under the idf the HotpotQA env searches with (``idf="lucene"``, bm25s' ``method="lucene"``, the same k1 and b;
its scores are ours divided by k1 + 1, a constant): it gets our tokens as ids, so both rank the same words, and its
times include our tokenising too. Memory is the peak traced allocation while building (tracemalloc, a separate
build so that tracing does not slow the timed one; up to ``--memory-max-passages``). The raw numbers go to
benchmarks/results/bm25.json and the table, computed from that file, to bm25.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import write_keeping_analysis  # noqa: E402
from erl_envs.qa import search  # noqa: E402
from erl_envs.qa.hotpotqa import HotpotQAEnv  # noqa: E402
from erl_envs.qa.search import BM25Index, Tokenizer  # noqa: E402

TOP_K = 10
_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def zipf_corpus(size: int, rng: np.random.Generator, vocab_size: int = 60_000, mean_words: int = 100,
                chunk: int = 20_000) -> list[str]:
    """``size`` passages of ~``mean_words`` words; word frequencies follow 1/rank over ``vocab_size`` invented words.
    Drawn ``chunk`` passages at a time, so that a million passages never hold every token in one array."""
    lengths = rng.integers(3, 11, size=vocab_size)
    words = {"".join(rng.choice(_LETTERS, n)) for n in lengths}
    vocab = np.array(sorted(words))
    rng.shuffle(vocab)
    probs = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    probs /= probs.sum()
    passages: list[str] = []
    for start in range(0, size, chunk):
        doc_lens = np.clip(rng.normal(mean_words, 25, size=min(chunk, size - start)).astype(int), 20, 250)
        tokens = vocab[rng.choice(len(vocab), size=int(doc_lens.sum()), p=probs)]
        bounds = np.concatenate([[0], np.cumsum(doc_lens)])
        passages += [" ".join(tokens[bounds[i]:bounds[i + 1]]) for i in range(len(doc_lens))]
    return passages


def shared_passages() -> list[str]:
    """The HotpotQA sample passages (title + text), when ../shared is beside the project."""
    folder = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared")) / "hotpotqa"
    passages: dict[str, str] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for title, sentences in zip(record["context"]["title"], record["context"]["sentences"]):
                passages.setdefault(title, f"{title}\n{''.join(sentences)}")
    return list(passages.values())


def make_queries(texts: list[str], n: int, rng: np.random.Generator) -> list[str]:
    queries = []
    for i in rng.choice(len(texts), size=n, replace=False):
        words = texts[i].split()
        start = int(rng.integers(0, max(1, len(words) - 12)))
        queries.append(" ".join(words[start:start + int(rng.integers(4, 13))]))
    return queries


def ranked(scores: np.ndarray, k: int) -> list[int]:
    """Top-k positions with non-zero score, ties to the earlier position (BM25Index's rule) for a fair comparison."""
    hits = np.flatnonzero(scores != 0)
    order = np.lexsort((hits, -scores[hits]))[:k]
    return [int(hits[i]) for i in order]


def best_time(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def traced_peak_mb(build) -> float:
    tracemalloc.start()
    obj = build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del obj
    return peak / 2**20


def cache_times(index: BM25Index, texts: list[str]) -> dict:
    """Saving and loading the index, and an env's first and second start over the corpus as a .jsonl file (the
    second start finds the index in the disk cache: what a new process sees)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.npz"
        t = time.perf_counter()
        index.save(path)
        save = time.perf_counter() - t
        t = time.perf_counter()
        BM25Index.load(path, texts)
        load = time.perf_counter() - t
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"id": str(i), "title": "", "text": x}) + "\n"
                                  for i, x in enumerate(texts)), encoding="utf-8")
        starts = []
        for _ in range(2):
            search._LIVE_INDEXES.clear()  # as in a new process: nothing shared in memory
            t = time.perf_counter()
            env = HotpotQAEnv(data=[{"question": "a question?", "answer": "x"}], corpus=corpus,
                              cache_dir=Path(tmp) / "cache")
            starts.append(time.perf_counter() - t)
            del env
    return {"cache save (s)": save, "cache load (s)": load, "env start, no cache (s)": starts[0],
            "env start, disk cache (s)": starts[1]}


def bm25s_index(texts: list[str], tokenize: Tokenizer):
    """bm25s' index over our tokens, given as ids and their vocabulary (the tokens bm25s would see as strings)."""
    import bm25s

    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(token, len(vocab)) for token in tokenize(text)] for text in texts]
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index((ids, vocab), show_progress=False)
    return retriever


def bm25s_search(retriever, queries: list[str], tokenize: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """Top-10 ids and scores of each query, one query per call (as the env searches)."""
    found = [retriever.retrieve([tokenize(q)], k=TOP_K, show_progress=False, n_threads=1) for q in queries]
    return np.concatenate([f.documents for f in found]), np.concatenate([f.scores for f in found])


def agreement(ours: list[list[tuple[int, float]]], ids: np.ndarray, scores: np.ndarray, scale: float) -> dict:
    """How often bm25s' top 10 is ours: the same passages (as sets), and the same scores rank by rank (float32's
    precision; passages tied at the 10th score may be cut differently, so the sets can differ where scores agree)."""
    same_ids = same_scores = 0
    worst = 0.0
    for hits, row_ids, row_scores in zip(ours, ids, scores):
        mine = np.array([score for _, score in hits]) / scale
        theirs = row_scores[:len(mine)].astype(float)
        same_ids += {i for i, _ in hits} == {int(i) for i, sc in zip(row_ids, row_scores) if sc > 0}
        close = len(mine) == int((row_scores > 0).sum()) and np.allclose(mine, theirs, rtol=1e-5, atol=1e-6)
        same_scores += bool(close)
        if len(mine):
            worst = max(worst, float(np.abs(mine - theirs).max() / max(mine.max(), 1e-12)))
    return {"same_ids": same_ids, "same_scores": same_scores, "max_relative_score_diff": worst}


def bench(size: int, n_queries: int, ref_queries: int, ref_max: int, memory_max: int, seed: int) -> dict:
    from rank_bm25 import BM25Okapi

    rng = np.random.default_rng(seed)
    real = shared_passages()[:size // 10]  # at most a tenth real text, the rest Zipfian
    texts = real + zipf_corpus(size - len(real), rng)
    queries = make_queries(texts, n_queries, rng)
    tokenize = Tokenizer()
    row: dict = {"passages": size, "real_passages": len(real), "queries": len(queries), "load1_start":
                 round(os.getloadavg()[0], 2)}

    # Ours, as the env searches (lucene idf), against bm25s.
    t = time.perf_counter()
    lucene = BM25Index(texts, idf="lucene")
    row["build_ours_lucene_s"] = time.perf_counter() - t
    row["vocabulary"] = len(lucene.vocab)
    row["index_arrays_mb"] = lucene.nbytes / 2**20
    t = time.perf_counter()
    retriever = bm25s_index(texts, tokenize)
    row["build_bm25s_s"] = time.perf_counter() - t
    lucene.search(queries[0], TOP_K)  # warm-ups (first-call allocations)
    bm25s_search(retriever, queries[:1], tokenize)
    lucene_hits = [lucene.search(q, TOP_K) for q in queries]
    ids, scores = bm25s_search(retriever, queries, tokenize)
    # The two indexes' passes alternate, 5 rounds, each timed by its fastest: on a shared machine the load changes
    # from minute to minute, and alternating gives both the same machine.
    passes = {"query_ours_lucene_ms": lambda: [lucene.search(q, TOP_K) for q in queries],
              "query_bm25s_ms": lambda: bm25s_search(retriever, queries, tokenize),
              "query_ours_lucene_batched_ms": lambda: lucene.search_batch(queries, TOP_K),
              "query_bm25s_batched_ms": lambda: retriever.retrieve([tokenize(q) for q in queries], k=TOP_K,
                                                                   show_progress=False, n_threads=1)}
    fastest = {key: float("inf") for key in passes}
    for _ in range(5):
        for key, run in passes.items():
            fastest[key] = min(fastest[key], best_time(run, repeats=1))
    row.update({key: seconds / len(queries) * 1e3 for key, seconds in fastest.items()})
    found = None
    row["bm25s_vs_ours"] = agreement(lucene_hits, ids, scores, scale=lucene.k1 + 1)
    del retriever, found, lucene
    if size <= memory_max:
        row["peak_build_memory_ours_mb"] = traced_peak_mb(lambda: BM25Index(texts, idf="lucene"))
        row["peak_build_memory_bm25s_mb"] = traced_peak_mb(lambda: bm25s_index(texts, tokenize))

    # Ours with rank-bm25's idf against rank-bm25 itself, where rank-bm25 fits.
    if size <= ref_max:
        t = time.perf_counter()
        index = BM25Index(texts)
        row["build_ours_okapi_s"] = time.perf_counter() - t
        t = time.perf_counter()
        reference = BM25Okapi([tokenize(x) for x in texts])
        row["build_rank_bm25_s"] = time.perf_counter() - t
        index.search(queries[0], TOP_K)
        ours_hits = [index.search(q, TOP_K) for q in queries]
        row["query_ours_okapi_ms"] = best_time(lambda: [index.search(q, TOP_K) for q in queries]) / len(queries) * 1e3
        subset = queries[:ref_queries]
        t = time.perf_counter()
        ref_scores = []
        for q in subset:
            scores = reference.get_scores(tokenize(q))
            np.argsort(scores)[::-1][:TOP_K]  # what get_top_n does: part of a query's cost
            ref_scores.append(scores)
        row["query_rank_bm25_ms"] = (time.perf_counter() - t) / len(subset) * 1e3
        row["rank_bm25_queries"] = len(subset)
        row["rank_bm25_vs_ours_same_top10"] = sum(ranked(s, TOP_K) == [i for i, _ in hits]
                                                  for s, hits in zip(ref_scores, ours_hits))
        row["rank_bm25_vs_ours_max_score_diff"] = max(float(np.abs(index.scores(q) - s).max())
                                                      for q, s in zip(subset, ref_scores))
        del reference
        row.update(cache_times(index, texts))
        del index
        if size <= memory_max:
            row["peak_build_memory_ours_okapi_mb"] = traced_peak_mb(lambda: BM25Index(texts))
            row["peak_build_memory_rank_bm25_mb"] = traced_peak_mb(lambda: BM25Okapi([tokenize(x) for x in texts]))
    row["load1_end"] = round(os.getloadavg()[0], 2)
    return row


# (label, key or function of a row): the table's rows, each computed from the data file alone.
def _ratio(row: dict, slow: str, fast: str) -> float | None:
    return row[slow] / row[fast] if slow in row and fast in row and row[fast] > 0 else None


TABLE = [
    ("real passages (HotpotQA sample)", "real_passages"),
    ("vocabulary", "vocabulary"),
    ("load average at start / end", lambda r: f"{r['load1_start']:.1f} / {r['load1_end']:.1f}"),
    ("**ours (lucene idf) vs bm25s**", None),
    ("build ours (s)", "build_ours_lucene_s"),
    ("build bm25s (s)", "build_bm25s_s"),
    ("query ours (ms)", "query_ours_lucene_ms"),
    ("query bm25s (ms)", "query_bm25s_ms"),
    ("bm25s query time / ours", lambda r: _ratio(r, "query_bm25s_ms", "query_ours_lucene_ms")),
    ("query ours, batched (ms)", "query_ours_lucene_batched_ms"),
    ("query bm25s, batched (ms)", "query_bm25s_batched_ms"),
    ("same top-10 passages", lambda r: f"{r['bm25s_vs_ours']['same_ids']}/{r['queries']}"),
    ("same top-10 scores, rank by rank", lambda r: f"{r['bm25s_vs_ours']['same_scores']}/{r['queries']}"),
    ("max relative score difference", lambda r: r["bm25s_vs_ours"]["max_relative_score_diff"]),
    ("index arrays ours (MB)", "index_arrays_mb"),
    ("peak build memory ours (MB)", "peak_build_memory_ours_mb"),
    ("peak build memory bm25s (MB)", "peak_build_memory_bm25s_mb"),
    ("**ours (okapi idf) vs rank-bm25**", None),
    ("build ours (s)", "build_ours_okapi_s"),
    ("build rank-bm25 (s)", "build_rank_bm25_s"),
    ("query ours (ms)", "query_ours_okapi_ms"),
    ("query rank-bm25 (ms)", "query_rank_bm25_ms"),
    ("speed-up over rank-bm25", lambda r: _ratio(r, "query_rank_bm25_ms", "query_ours_okapi_ms")),
    ("identical top-10", lambda r: f"{r['rank_bm25_vs_ours_same_top10']}/{r['rank_bm25_queries']}"
     if "rank_bm25_queries" in r else None),
    ("max score difference", "rank_bm25_vs_ours_max_score_diff"),
    ("peak build memory ours (MB)", "peak_build_memory_ours_okapi_mb"),
    ("peak build memory rank-bm25 (MB)", "peak_build_memory_rank_bm25_mb"),
    ("cache save (s)", "cache save (s)"),
    ("cache load (s)", "cache load (s)"),
    ("env start, no cache (s)", "env start, no cache (s)"),
    ("env start, disk cache (s)", "env start, disk cache (s)"),
]


def _cell(value) -> str:
    if value is None:
        return "not run"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 else f"{value:.2f}"
    return str(value)


def to_markdown(data: dict) -> str:
    rows = data["rows"]
    lines = [
        "# BM25: erl_envs.qa.search.BM25Index vs bm25s and rank-bm25",
        "",
        f"Generated by `python benchmarks/speed/bench_bm25.py {data['arguments']}` into [bm25.json](bm25.json); "
        "this table is computed from that file (`--report`).",
        f"Machine: {data['cpus']} CPUs, {data['processor']}; Python {data['python']}, numpy {data['numpy']}, scipy "
        f"{data['scipy']}, bm25s {data['bm25s']}, rank-bm25 {data['rank_bm25']}. The machine was shared with other "
        "jobs (the load average at the start and end of each size is in the table), so times are noisy; ratios are "
        "measured minutes apart in one process. Query time is the mean per query over the timed queries "
        "(tokenising and top-10 included; ours against bm25s: the fastest of 5 alternating passes each; ours against "
        "rank-bm25: ours the fastest of 3 passes, rank-bm25 one pass). "
        f"rank-bm25 is not run above {data['ref_max_passages']:,} passages and memory is not traced above "
        f"{data['memory_max_passages']:,} (`not run`).",
        "",
        "| metric | " + " | ".join(f"{r['passages']:,}" for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for label, source in TABLE:
        if source is None:
            lines.append(f"| {label} |" + " |" * len(rows))
            continue
        cells = []
        for row in rows:
            try:
                value = source(row) if callable(source) else row.get(source)
            except KeyError:
                value = None
            cells.append(_cell(value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="corpus sizes (passages)")
    parser.add_argument("--queries", type=int, default=50, help="queries timed on our index and bm25s")
    parser.add_argument("--ref-queries", type=int, default=20, help="of those, how many are timed on rank-bm25")
    parser.add_argument("--ref-max-passages", type=int, default=100_000, help="largest corpus rank-bm25 is run on")
    parser.add_argument("--memory-max-passages", type=int, default=100_000, help="largest corpus whose memory is traced")
    parser.add_argument("--quick", action="store_true", help="small corpora (1,000 and 5,000), for a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bm25.md",
                        help="the table; its data goes beside it (.json)")
    parser.add_argument("--report", action="store_true", help="only rewrite the table from the data file")
    args = parser.parse_args()
    data_file = args.out.with_suffix(".json")
    if not args.report:
        import bm25s
        import rank_bm25
        import scipy
        from importlib.metadata import version

        # The command's arguments, less where the files went (a path of the machine that ran it).
        shown = [a for i, a in enumerate(sys.argv[1:]) if a != "--out" and (i == 0 or sys.argv[i] != "--out")]
        data = {"arguments": " ".join(shown), "cpus": os.cpu_count(),
                "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
                "numpy": np.__version__, "scipy": scipy.__version__, "bm25s": bm25s.__version__,
                "rank_bm25": version(rank_bm25.__name__.replace("_", "-")), "ref_max_passages": args.ref_max_passages,
                "memory_max_passages": args.memory_max_passages, "rows": []}
        for size in [1_000, 5_000] if args.quick else args.sizes:
            print(f"benchmarking {size} passages ...", flush=True)
            data["rows"].append(bench(size, args.queries, min(args.ref_queries, args.queries), args.ref_max_passages,
                                      args.memory_max_passages, args.seed))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            data_file.write_text(json.dumps(data, indent=1) + "\n")  # after each size: a long run keeps what it did
    table = to_markdown(json.loads(data_file.read_text()))
    print(table)
    write_keeping_analysis(args.out, table)  # the prose below the analysis marker survives a rerun
    print(f"written to {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
