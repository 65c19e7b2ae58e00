"""How search results read, in the two protocols: the extended protocol's numbered list with cut passages, and the
reference retriever's rendering under ``protocol="paper"`` (whole records, with their rank id and score)."""

from __future__ import annotations

from typing import Sequence

from erl_envs.qa.records import Passage

__all__ = ["NO_DOCUMENTS", "TRUNCATION_MARK", "shown_text", "paper_hit", "paper_results", "extended_results"]

# What the reference's retriever answers when nothing matches.
NO_DOCUMENTS = "No relevant documents found for the query."
TRUNCATION_MARK = " ..."


def shown_text(text: str, max_chars: int | None) -> str:
    """A passage as the agent sees it: cut at a word boundary to at most ``max_chars`` plus a visible mark (None:
    whole)."""
    if max_chars is None or len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = cut.rfind(" ")
    if space > max_chars // 2:
        cut = cut[:space]
    return cut + TRUNCATION_MARK


def paper_hit(rank: int, passage: Passage, score: float) -> str:
    """One search hit as the reference's retriever shows it: its rank as the document id, the score to 3 decimals,
    then the whole corpus record, printed as the Python dict it is (a Wikipedia-dump line: ``id``, and ``contents``,
    the quoted title, a newline, the text). Its 300-character cut measures that dict's length, so it never fires."""
    record = {"id": passage.id, "contents": f'"{passage.title}"\n{passage.text}'}
    return f"[Document {rank}] (ID: doc_{rank}, Score: {score:.3f})\n{record}\n"


def paper_results(hits: Sequence[tuple[Passage, float]]) -> str:
    """The hits of one search as the reference shows them, in rank order, or its no-match line."""
    if not hits:
        return NO_DOCUMENTS
    return "\n".join(paper_hit(rank, passage, score) for rank, (passage, score) in enumerate(hits, start=1))


def extended_results(shown_query: str, hits: Sequence[tuple[Passage, float]], max_passage_chars: int | None) -> str:
    """The hits of one search as the extended protocol shows them: a header naming the query, then each title with
    its score and the passage cut to ``max_passage_chars``."""
    if not hits:
        return f'Search results for "{shown_query}" (no passage matched):\n'
    lines = [f'Search results for "{shown_query}":']
    for rank, (passage, score) in enumerate(hits, start=1):
        lines.append(f"[{rank}] {passage.title} (score {score:.2f})")
        lines.append(shown_text(passage.text, max_passage_chars))
    return "\n".join(lines) + "\n"
