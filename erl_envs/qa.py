"""Question answering text: reading a model's reply (search call or final answer) and scoring the answer.

The reward is the paper's (PAPER.md section 3): normalised exact match gives 1.0, else the token F1 when it reaches
a threshold (0.3), else 0; a yes/no answer that does not match a yes/no gold scores 0. Normalisation is the usual
SQuAD/HotpotQA one (lowercase, drop punctuation and the articles a/an/the, squash whitespace), extended to Unicode
punctuation so that a curly apostrophe counts like a straight one.

Reply parsing never raises on text. A reply is one of: a search call (``<search>q</search>`` or a JSON tool call
``{"name": "search", "arguments": {"query": ..., "top_k": ...}}``, bare, in ``<tool_call>`` tags or in a code
block), a malformed call (an ordinary event the env answers with an error message), or an answer (any reply with
no tool call; its text is read from the last ``\\boxed{...}``, else the last ``<answer>...</answer>``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal

__all__ = [
    "SEARCH_TOOL",
    "QAReply",
    "QAScore",
    "parse_qa_reply",
    "extract_boxed",
    "extract_answer",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "qa_reward",
]

SEARCH_TOOL = "search"

# Answers that only match exactly: partial token overlap between "yes" and "no answer" is not partial credit.
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})

_SEARCH_OPEN = re.compile(r"<search>", re.IGNORECASE)
_SEARCH_CLOSE = re.compile(r"</search>", re.IGNORECASE)
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# Where a bare JSON tool call may start: an object whose first key names the tool or its arguments.
_JSON_CALL_START = re.compile(r"\{\s*\"(?:name|arguments|parameters)\"\s*:")
_NAMES_SEARCH = re.compile(r"\"name\"\s*:\s*\"" + SEARCH_TOOL + r"\"")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")
# LaTeX wrappers models put inside \boxed{}; their content is the answer.
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|emph|texttt)\s*\{([^{}]*)\}")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
# A reply can hold many JSON-looking spans; decoding each is linear, so cap how many we try.
_MAX_JSON_CANDIDATES = 16
# \text{\textbf{...}} nesting peeled off an answer; each layer is a pass over the answer, so bound them.
_MAX_LATEX_LAYERS = 8


@dataclass(frozen=True)
class QAReply:
    """What a reply asks for.

    ``kind`` is ``"search"`` (``query`` set, ``top_k`` set when the call gave one), ``"answer"`` (``answer`` is the
    extracted text, or ``None`` when the reply gave no readable answer) or ``"invalid"`` (a tool call that could not
    be read; ``error`` says why, in words the env can show the agent).
    """

    kind: Literal["search", "answer", "invalid"]
    query: str | None = None
    top_k: int | None = None
    answer: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class QAScore:
    em: bool
    f1: float
    reward: float


# --------------------------------------------------------------------------------------------- reply parsing


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


def _tag_bodies(text: str, open_tag: re.Pattern, close_tag: re.Pattern) -> Iterator[tuple[int, str]]:
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


def extract_answer(text: str) -> str | None:
    """The final answer of a reply: the last ``\\boxed{}``, else the last ``<answer>`` tag, else ``None``."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    tags = [body for _, body in _tag_bodies(text, _ANSWER_OPEN, _ANSWER_CLOSE)]
    if tags:
        return extract_boxed(tags[-1]) or tags[-1].strip()
    return None


def _tool_call_from_object(obj: object) -> QAReply | None:
    """A QAReply for a decoded JSON tool call, or None when the object is not a tool call at all."""
    if isinstance(obj, list) and obj:  # some chat templates emit a list of calls; we run the first
        obj = obj[0]
    if not isinstance(obj, dict) or not ({"name", "arguments", "parameters"} & obj.keys()):
        return None
    name = obj.get("name")
    if name != SEARCH_TOOL:
        return QAReply("invalid", error=f"unknown tool {name!r}; the only tool is {SEARCH_TOOL!r}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI-style calls carry the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError) as exc:
            return QAReply("invalid", error=f"the tool call's arguments are not valid JSON ({_json_problem(exc)})")
    if not isinstance(args, dict):
        return QAReply("invalid", error="the tool call's arguments must be an object with a \"query\"")
    query = args.get("query")
    if not isinstance(query, str):
        return QAReply("invalid", error="the search call needs a \"query\" string")
    top_k = args.get("top_k")
    if top_k is not None:
        try:
            top_k = int(top_k)
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e999 decodes to inf
            return QAReply("invalid", error=f"top_k must be a whole number, got {top_k!r}")
    return QAReply("search", query=query, top_k=top_k)


def _json_problem(exc: Exception) -> str:
    """Words for a JSON decoding failure; json also raises plain ValueError (huge numbers) and RecursionError."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at char {exc.pos}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return "a number is too long"


def _decode_tagged_call(body: str) -> QAReply:
    """A ``<tool_call>`` body: the tag says a call was meant, so anything unreadable is an invalid call."""
    body = body.strip()
    fence = re.match(r"```(?:json)?\s*(.*?)\s*```$", body, re.DOTALL)
    if fence:
        body = fence.group(1)
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError) as exc:
        return QAReply("invalid", error=f"the tool call is not valid JSON ({_json_problem(exc)})")
    reply = _tool_call_from_object(obj)
    if reply is None:
        return QAReply("invalid", error='the tool call must look like {"name": "search", "arguments": '
                                        '{"query": "..."}}')
    return reply


def _find_bare_call(text: str) -> tuple[int, QAReply] | None:
    """The first JSON tool call written without tags, with its position."""
    decoder = json.JSONDecoder()
    for count, match in enumerate(_JSON_CALL_START.finditer(text)):
        if count >= _MAX_JSON_CANDIDATES:
            break
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError) as exc:
            # A span that starts like a call to our tool but does not decode is a broken call, not prose.
            if _NAMES_SEARCH.search(text, match.start(), match.start() + 200):
                problem = _json_problem(exc)
                return match.start(), QAReply("invalid", error=f"the tool call is not valid JSON ({problem})")
            continue
        reply = _tool_call_from_object(obj)
        if reply is not None:
            return match.start(), reply
    return None


def _find_calls(text: str) -> list[tuple[int, QAReply]]:
    calls = []
    tag = next(_tag_bodies(text, _SEARCH_OPEN, _SEARCH_CLOSE), None)
    if tag:
        calls.append((tag[0], QAReply("search", query=tag[1])))
    else:
        unclosed = _SEARCH_OPEN.search(text)
        if unclosed:
            calls.append((unclosed.start(), QAReply("invalid", error="the <search> tag is not closed by </search>")))
    tool = _TOOL_CALL_TAG.search(text)
    if tool:
        calls.append((tool.start(), _decode_tagged_call(tool.group(1))))
    else:
        bare = _find_bare_call(text)
        if bare:
            calls.append(bare)
    return calls


def parse_qa_reply(text: str) -> QAReply:
    """Read one reply. The first tool call wins (one search per turn); a reply with no tool call is an answer."""
    if not isinstance(text, str):
        raise TypeError(f"a reply must be a str, got {type(text).__name__}")
    calls = _find_calls(text)
    if not calls:
        return QAReply("answer", answer=extract_answer(text))
    reply = min(calls, key=lambda call: call[0])[1]
    if reply.kind == "search" and not reply.query.strip():
        return QAReply("invalid", error="the search query is empty")
    return reply


# --------------------------------------------------------------------------------------------- scoring


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, squash whitespace: 'The  Beatles!' -> 'beatles'."""
    text = text.lower()
    # Deleted, not replaced by a space, as in SQuAD: "u.s." -> "us".
    text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of the normalised strings; 0 when either side is yes/no/noanswer and they differ."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
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


def qa_reward(prediction: str | None, golds: str | Iterable[str], f1_threshold: float = 0.3) -> QAScore:
    """Score an answer against one or more gold answers (the best gold counts). No answer scores 0."""
    golds = [golds] if isinstance(golds, str) else list(golds)
    if not golds:
        raise ValueError("qa_reward needs at least one gold answer")
    if prediction is None:
        return QAScore(em=False, f1=0.0, reward=0.0)
    em = any(exact_match(prediction, g) for g in golds)
    f1 = max(token_f1(prediction, g) for g in golds)
    if em:
        return QAScore(em=True, f1=f1, reward=1.0)
    return QAScore(em=False, f1=f1, reward=f1 if f1 >= f1_threshold else 0.0)
