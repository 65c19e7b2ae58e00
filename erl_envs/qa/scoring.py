"""Reading the final answer out of a reply, and scoring it: the paper's HotpotQA reward.

The reward is the paper's (PAPER.md section 3): normalised exact match gives 1.0, else the token F1 when it reaches
a threshold (0.3), else 0; a yes/no/noanswer answer that does not match scores 0. Normalisation is by default
exactly the official HotpotQA ``normalize_answer`` (lowercase, delete ASCII ``string.punctuation``, drop the
articles a/an/the, squash whitespace); ``scoring="unicode"`` also deletes Unicode punctuation (a curly apostrophe
then counts like a straight one), an extension that changes some scores.

``answer_extraction="boxed"`` reads the answer from the last ``\\boxed{...}`` (else the last
``<answer>...</answer>``), LaTeX text wrappers removed; ``"paper"`` reads it the way the reference code's reward
function does (see ``extract_answer_paper``). Reading never raises on text.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator

__all__ = [
    "SCORINGS",
    "ANSWER_EXTRACTIONS",
    "QAScore",
    "extract_boxed",
    "extract_answer",
    "extract_answer_paper",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "qa_reward",
    "tag_bodies",
]

SCORINGS = ("official", "unicode")
ANSWER_EXTRACTIONS = ("boxed", "paper")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_DELETE_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


class _DeleteAllPunctuation(dict):
    """A ``str.translate`` table deleting ASCII and Unicode punctuation; learns each code point on first sight, so
    normalising stays at C speed however long the text."""

    def __missing__(self, code: int):
        char = chr(code)
        value = None if char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P") else code
        self[code] = value
        return value


_DELETE_ALL_PUNCTUATION = _DeleteAllPunctuation()

# Answers that only match exactly: partial token overlap between "yes" and "no answer" is not partial credit.
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")
# LaTeX wrappers models put inside \boxed{}; their content is the answer.
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|emph|texttt)\s*\{([^{}]*)\}")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
# \text{\textbf{...}} nesting peeled off an answer; each layer is a pass over the answer, so bound them.
_MAX_LATEX_LAYERS = 8


@dataclass(frozen=True)
class QAScore:
    em: bool
    f1: float
    reward: float


# --------------------------------------------------------------------------------------------- reading the answer


def _closing_braces(text: str, start: int) -> dict[int, int]:
    """Position of each ``{`` from ``start`` on that is closed -> position of its ``}``.

    One pass over the braces: a model that floods a reply with unclosed ``\\boxed{`` must not make reading it
    quadratic (scanning to the end once per box).
    """
    closing, open_at = {}, []
    for match in _BRACE.finditer(text, start):
        if match.group() == "{":
            open_at.append(match.start())
        elif open_at:
            closing[open_at.pop()] = match.start()
    return closing


def tag_bodies(text: str, open_tag: re.Pattern, close_tag: re.Pattern) -> Iterator[tuple[int, str]]:
    """(start, body) of each ``<tag>...</tag>`` left to right, as a lazy regex finds them, in linear time.

    Once an opening tag has no closing tag after it, no later one has either: stop there instead of rescanning the
    rest of the text from every further opening tag.
    """
    position = 0
    while True:
        opened = open_tag.search(text, position)
        closed = close_tag.search(text, opened.end()) if opened else None
        if closed is None:
            return
        yield opened.start(), text[opened.end():closed.start()]
        position = closed.end()


def extract_boxed(text: str) -> str | None:
    """The content of the last closed ``\\boxed{...}`` (nested braces allowed), LaTeX text wrappers removed."""
    boxes = list(_BOXED.finditer(text))
    if not boxes:
        return None
    closing = _closing_braces(text, boxes[0].end() - 1)
    for match in reversed(boxes):
        end = closing.get(match.end() - 1)
        if end is not None:
            body = text[match.end():end]
            for _ in range(_MAX_LATEX_LAYERS):  # unwrap \text{\textbf{x}} from the inside out
                previous, body = body, _LATEX_WRAPPER.sub(r"\1", body)
                if body == previous:
                    break
            return body.strip()
    return None


def extract_answer(text: str, answer_extraction: str = "boxed") -> str | None:
    """The final answer of a reply. ``"boxed"``: the last ``\\boxed{}``, else the last ``<answer>`` tag, else
    ``None``. ``"paper"``: the reference code's reading (``extract_answer_paper``)."""
    if answer_extraction == "paper":
        return extract_answer_paper(text)
    if answer_extraction != "boxed":
        raise ValueError(f"answer_extraction must be one of {list(ANSWER_EXTRACTIONS)}, got {answer_extraction!r}")
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    tags = [body for _, body in tag_bodies(text, _ANSWER_OPEN, _ANSWER_CLOSE)]
    if tags:
        return extract_boxed(tags[-1]) or tags[-1].strip()
    return None


# The reference reward function's fallbacks for a reply without a box, in its order of preference.
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_PAPER_FALLBACKS = (
    ("emphasis", [re.compile(r"\*\*([^*]+)\*\*"), re.compile(r"\*([^*]+)\*")]),
    ("date", [re.compile(rf"\b(?:{_MONTHS})\s+\d{{1,2}},?\s+\d{{4}}\b", re.IGNORECASE),
              re.compile(r"\b\d{1,2}[/-]\d{1,2}[/-]\d{4}\b", re.IGNORECASE),
              # "month year" starts at March in the reference (January and February are not matched there)
              re.compile(rf"\b(?:{_MONTHS.split('|', 2)[2]})\s+\d{{4}}\b", re.IGNORECASE),
              re.compile(r"\b\d{4}\b")]),
    ("name", [re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+\b")]),
    ("number", [re.compile(r"\b(\d+(?:,\d{3})*(?:\.\d+)?)\s*(?:votes?|dollars?|years?|months?|days?|people|million"
                           r"|billion|percent|%)\b"),
                re.compile(r"\b(\d+(?:,\d{3})*(?:\.\d+)?)\b")]),
)
_NOT_NAMES = frozenset({"United States", "New York", "Los Angeles", "Great Britain", "Middle East", "South Africa"})
_ANSWER_PHRASES = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in (
    r"(?:the\s+)?(?:correct\s+)?answer\s+is\s*:?\s*([^.!?]+)",
    r"(?:therefore|thus|so|hence)\s*,?\s*([^.!?]+)",
    r"(?:in\s+conclusion|to\s+summarize|in\s+summary)\s*,?\s*([^.!?]+)",
    r"(?:^|\.\s+)([A-Z][^.!?]*(?:was|is|are|were)\s+[^.!?]+)",
    r"(?:the\s+answer\s+would\s+be|it\s+(?:is|was))\s*:?\s*([^.!?]+)",
)]


def _first_box_literal(text: str) -> str | None:
    """The content of the first ``boxed{`` when its braces balance, LaTeX and all; None otherwise."""
    start = text.find("boxed{")
    if start < 0:
        return None
    opening = start + len("boxed")
    end = _closing_braces(text, opening).get(opening)
    return None if end is None else text[opening + 1:end]


def _sentence_score(sentence: str) -> int:
    return (3 * bool(re.search(r"\b\d{4}\b", sentence))
            + 2 * bool(re.search(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+\b", sentence))
            + bool(re.search(r"\b(?:was|is|are|were)\b", sentence, re.IGNORECASE))
            + (len(sentence.split()) < 15))


def extract_answer_paper(text: str) -> str:
    """The answer as the reference code's HotpotQA reward function reads a reply (``answer_extraction="paper"``).

    ``<think>`` blocks are dropped and whitespace squashed. The *first* ``boxed{...}`` wins when its braces balance,
    taken literally (``\\boxed{\\text{Paris}}`` is scored as ``\\text{Paris}``, which normalises to
    ``textparis``). A reply without one is still read, by fallbacks in this order: the first emphasised
    (``**...**``, then ``*...*``) span of 3+ characters with a letter or digit; the first date (month day year,
    d/m/yyyy, month year, any 4-digit number); the first run of 2-4 capitalised words that is not a common place
    name; the first number (with a unit, then any); the text after "the answer is", "therefore", "in conclusion",
    a declarative "X is/was ...", or "it is/was" (kept when longer than 3 characters); the sentence scoring highest
    for a year, a capitalised name, a copula and brevity; the first sentence over 5 characters; the first 100
    characters. Only an empty reply gives ``""``.
    """
    text = " ".join(_THINK_BLOCK.sub("", text.strip()).split())
    if not text:
        return ""
    boxed = _first_box_literal(text)
    if boxed is not None:
        return boxed.strip()
    for kind, patterns in _PAPER_FALLBACKS:
        for pattern in patterns:
            found = pattern.findall(text)
            if kind == "emphasis":
                found = [m.strip() for m in found if len(m.strip()) > 2 and re.search(r"\w", m)]
            elif kind == "name":
                found = [m for m in found if m not in _NOT_NAMES and len(m.split()) <= 4]
            if found:
                return found[0]
    for pattern in _ANSWER_PHRASES:
        match = pattern.search(text)
        if match:
            answer = re.sub(r"^\W+|\W+$", "", match.group(1).strip())
            if len(answer) > 3:
                return answer
    sentences = [part.strip() for part in re.split(r"[.!?]+", text)]
    informative = [s for s in sentences if len(s) > 10]
    if informative:
        best = max(informative, key=_sentence_score)  # max keeps the first of equal scores
        if _sentence_score(best) > 0:
            return best
    substantial = [s for s in sentences if len(s) > 5]
    return substantial[0] if substantial else text[:100].strip()


# --------------------------------------------------------------------------------------------- scoring


def normalize_answer(text: str, scoring: str = "official") -> str:
    """Lowercase, delete punctuation, drop articles, squash whitespace: 'The  Beatles!' -> 'beatles'.

    ``"official"`` is the HotpotQA/SQuAD definition: the punctuation deleted is ASCII ``string.punctuation``
    (so "$10.5 million" and "10.5 million" match), deleted rather than replaced by a space ("u.s." -> "us").
    ``"unicode"`` also deletes every Unicode punctuation character (curly quotes, dashes, "…").
    """
    text = text.lower()
    if scoring == "official":
        text = text.translate(_DELETE_ASCII_PUNCTUATION)
    elif scoring == "unicode":
        text = text.translate(_DELETE_ALL_PUNCTUATION)
    else:
        raise ValueError(f"scoring must be one of {list(SCORINGS)}, got {scoring!r}")
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str, scoring: str = "official") -> bool:
    return normalize_answer(prediction, scoring) == normalize_answer(gold, scoring)


def token_f1(prediction: str, gold: str, scoring: str = "official") -> float:
    """Token-level F1 of the normalised strings; 0 when either side is yes/no/noanswer and they differ."""
    pred, ref = normalize_answer(prediction, scoring), normalize_answer(gold, scoring)
    if (pred in _CLOSED_ANSWERS or ref in _CLOSED_ANSWERS) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = Counter(pred_tokens) & Counter(ref_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def qa_reward(prediction: str | None, golds: str | Iterable[str], f1_threshold: float = 0.3,
              scoring: str = "official") -> QAScore:
    """Score an answer against one or more gold answers (the best gold counts). No answer scores 0."""
    golds = [golds] if isinstance(golds, str) else list(golds)
    if not golds:
        raise ValueError("qa_reward needs at least one gold answer")
    if prediction is None:
        return QAScore(em=False, f1=0.0, reward=0.0)
    em = any(exact_match(prediction, g, scoring) for g in golds)
    f1 = max(token_f1(prediction, g, scoring) for g in golds)
    if em:
        return QAScore(em=True, f1=f1, reward=1.0)
    return QAScore(em=False, f1=f1, reward=f1 if f1 >= f1_threshold else 0.0)
