"""The records of HotpotQA data: a passage, and a question with its gold answers and supporting facts."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Passage", "Question"]


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
