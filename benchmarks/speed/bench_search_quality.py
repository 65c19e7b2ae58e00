"""Measure what HotpotQA's distractor-mode search finds: okapi vs lucene idf, and the exact-title rule.

    python benchmarks/speed/bench_search_quality.py            # the 600 questions of ../shared/hotpotqa
    python benchmarks/speed/bench_search_quality.py --render   # rewrite the .md from the committed .json only

Each question of the HotpotQA sample (``dev_distractor_sample_{train,dev}.jsonl``, 300 + 300 real dev questions
with their 10 paragraphs) is searched in its own distractor index (the env's tokeniser: Unicode-folded words), two
ways, under each idf:

* **title searches**: every paragraph's exact title as the query; the rank of that paragraph in the top 5 (a miss
  when it is not there), by BM25 alone and through the env's search (which shows an exact-title match first);
* **question searches**: the question text as the query; recall@5 = the share of the question's supporting titles
  in the top 5 (what one search by the question finds of the evidence it needs).

Also counted: questions whose text holds a word found in exactly half of their paragraphs (okapi's idf is 0 for it)
and questions with a title search that finds nothing at all. Per-question counts go to benchmarks/results/hotpotqa_search.json,
the table to hotpotqa_search.md, computed from that file. No timing: this is about what is found, not how fast.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
SHARED = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared"))
FILES = ("dev_distractor_sample_train.jsonl", "dev_distractor_sample_dev.jsonl")
IDFS = ("okapi", "lucene")


COLUMNS = ["id", "paragraphs", "supporting", "half_df_words"] + [
    f"{idf} {name}" for idf in IDFS for name in ("title misses bm25", "title first bm25", "title misses env",
                                                 "title first env", "title searches empty", "supporting in top5")]


def measure(folder: Path) -> dict:
    """One row per question (``COLUMNS``): counts over its title searches and its question search."""
    from erl_envs.qa.hotpotqa import HotpotQAEnv

    rows = []
    for name in FILES:
        envs = {idf: HotpotQAEnv(data=str(folder / name), mode="distractor", idf=idf, cache_dir=False)
                for idf in IDFS}
        for position, question in enumerate(envs["okapi"].questions):
            row = [question.id, len(question.paragraphs), len(question.supporting_titles), None]
            for env in envs.values():
                env.reset(options={"index": position})
                index, passages = env._index, env._passages
                titles = [p.title for p in passages]
                bm25 = [_rank([passages[i].title for i, _ in hits], title)
                        for hits, title in zip(index.top_k_batch(titles, 5), titles)]
                through_env = [_rank([r["title"] for r in env._search(title, 5)[1]], title) for title in titles]
                found = {passages[i].title for i, _ in index.top_k_batch([question.question], 5)[0]}
                row += [bm25.count(None), bm25.count(1), through_env.count(None), through_env.count(1),
                        sum(not hits for hits in index.top_k_batch(titles, 5)),
                        len(set(question.supporting_titles) & found)]
            row[3] = _half_df_words(envs["okapi"]._index, question.question)
            rows.append(row)
    return {"columns": COLUMNS, "rows": rows,
            "meta": {"command": "python benchmarks/speed/bench_search_quality.py", "python": platform.python_version(),
                     "files": list(FILES)}}


def _rank(found: list[str], title: str) -> int | None:
    """1-based rank of ``title`` among the titles found, or None when it is not among them."""
    return found.index(title) + 1 if title in found else None


def _half_df_words(index, text: str) -> int:
    """How many distinct words of ``text`` are in exactly half of the index's passages (okapi's idf is 0 there)."""
    import numpy as np

    df = np.diff(index._weights.indptr)
    words = {word for word in index.tokenizer(text) if word in index.vocab}
    return sum(int(df[index.vocab[word]]) * 2 == len(index) for word in words)


def summarize(data: dict) -> dict:
    rows = [dict(zip(data["columns"], row)) for row in data["rows"]]
    out = {"questions": len(rows), "title_searches": sum(r["paragraphs"] for r in rows),
           "questions_with_half_df_term": sum(r["half_df_words"] > 0 for r in rows)}
    for idf in IDFS:
        for way in ("bm25", "env"):
            out[f"{idf} {way} title misses"] = sum(r[f"{idf} title misses {way}"] for r in rows)
            out[f"{idf} {way} title first"] = sum(r[f"{idf} title first {way}"] for r in rows)
        out[f"{idf} questions with an empty title search"] = sum(r[f"{idf} title searches empty"] > 0 for r in rows)
        recalls = [r[f"{idf} supporting in top5"] / r["supporting"] for r in rows if r["supporting"]]
        out[f"{idf} recall@5"] = sum(recalls) / len(recalls)
        out[f"{idf} recall questions"] = len(recalls)
    return out


def render(data: dict) -> str:
    s = summarize(data)
    n = s["title_searches"]
    lines = ["# HotpotQA distractor-mode search: okapi vs lucene idf", "",
             f"`{data['meta']['command']}` on the {s['questions']} questions of ../shared/hotpotqa "
             f"({', '.join(data['meta']['files'])}; real HotpotQA dev questions, each with its 10 paragraphs), "
             "each searched in its own distractor index with the env's tokeniser. Every number below is computed from "
             "the per-question counts in hotpotqa_search.json.", "",
             "| measure | okapi (rank-bm25) | lucene |", "|---|---|---|"]
    for label, key, scale in [
        (f"exact-title searches whose paragraph is not in the top 5, BM25 alone (of {n:,})", "bm25 title misses", None),
        (f"... through the env's search (exact-title match first) (of {n:,})", "env title misses", None),
        (f"exact-title searches ranking their paragraph first, BM25 alone (of {n:,})", "bm25 title first", None),
        (f"... through the env's search (of {n:,})", "env title first", None),
        (f"questions with a title search that finds nothing (of {s['questions']})",
         "questions with an empty title search", None),
        ("recall@5 of supporting titles, searching the question text", "recall@5", 3),
    ]:
        okapi, lucene = s[f"okapi {key}"], s[f"lucene {key}"]
        shown = (lambda v: f"{v:.3f}") if scale else (lambda v: f"{v:,}")
        lines.append(f"| {label} | {shown(okapi)} | {shown(lucene)} |")
    lines += ["", f"{s['questions_with_half_df_term']} of {s['questions']} questions hold a word found in exactly "
              "half of their paragraphs, whose okapi idf is 0. The recall rows average over the "
              f"{s['lucene recall questions']} questions with supporting facts."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the committed .json")
    parser.add_argument("--out", default=str(RESULTS / "hotpotqa_search.md"))
    args = parser.parse_args()
    out = Path(args.out)
    raw = out.with_suffix(".json")
    if args.render:
        data = json.loads(raw.read_text())
    else:
        data = measure(SHARED / "hotpotqa")
        raw.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    out.write_text(render(data))
    print(out.read_text())


if __name__ == "__main__":
    main()
