"""The HotpotQA tool protocol: reading a reply as search calls or, when it holds none, a final answer.

Reply parsing never raises on text. Two readings:

* ``"extended"`` (ours, the env's default): a reply holds tool calls (``<search>q</search>``, or a JSON call
  ``{"name": "search", "arguments": {"query": ..., "top_k": ...}}`` in ``<tool_call>`` tags, bare or in a code
  block; ``local_search``, the reference code's tool name, is accepted as well; at most ``MAX_CALLS_PER_REPLY``),
  malformed calls (ordinary events the env answers with an error message), or none: then it is the final answer,
  read by ``erl_envs.qa.scoring``.
* ``"paper"`` (``parse_paper_calls``): the reference's, whose vLLM server reads tool calls with the Hermes parser.
  Only ``<tool_call>`` tags hold calls (a last unclosed tag runs to the end of the reply); every tag's body must
  decode as a JSON object with a string ``"name"`` and an ``"arguments"`` key, or the reply has no tool call at all
  and is the final answer. A call naming another tool than ``local_search``, or with arguments the tool does not
  take, is answered with an error message and costs its turn. Calls per reply are bounded only by the reply.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from erl_envs.qa.scoring import extract_answer, tag_bodies

__all__ = ["SEARCH_TOOL", "TOOL_NAMES", "PAPER_TOOL", "MAX_CALLS_PER_REPLY", "QAReply", "parse_qa_reply",
           "parse_qa_calls", "parse_paper_calls"]

SEARCH_TOOL = "search"
# The reference code's retriever is called "local_search" (Qwen3 emits Hermes-style <tool_call> JSON naming it).
TOOL_NAMES = (SEARCH_TOOL, "local_search")
# The one tool of the reference's HotpotQA agent, and the only name its protocol (``"paper"``) accepts.
PAPER_TOOL = "local_search"
# Tool calls read from one reply, in order; later ones are ignored (each search costs a retrieval and its text).
MAX_CALLS_PER_REPLY = 8

_SEARCH_OPEN = re.compile(r"<search>", re.IGNORECASE)
_SEARCH_CLOSE = re.compile(r"</search>", re.IGNORECASE)
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
# Where a bare JSON tool call may start: an object whose first key names the tool or its arguments.
_JSON_CALL_START = re.compile(r"\{\s*\"(?:name|arguments|parameters)\"\s*:")
_NAMES_SEARCH = re.compile(r"\"name\"\s*:\s*\"(?:local_)?search\"")
# A reply can hold many JSON-looking spans; decoding each is linear, so cap how many we try.
_MAX_JSON_CANDIDATES = 16


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



def _tool_calls_from_object(obj: object) -> list[QAReply] | None:
    """QAReplies for a decoded JSON tool call (or a list of them), or None when the object is not a tool call."""
    if isinstance(obj, list) and obj:  # some chat templates emit a list of calls: each one runs
        calls = [_tool_call_from_object(item) for item in obj[:MAX_CALLS_PER_REPLY]]
        return None if calls[0] is None else [c or _NOT_A_CALL for c in calls]
    call = _tool_call_from_object(obj)
    return None if call is None else [call]


def _tool_call_from_object(obj: object) -> QAReply | None:
    if not isinstance(obj, dict) or not ({"name", "arguments", "parameters"} & obj.keys()):
        return None
    name = obj.get("name")
    if name not in TOOL_NAMES:
        return QAReply("invalid", error=f"unknown tool {name!r}; the only tool is {SEARCH_TOOL!r} "
                                        f"(also called {TOOL_NAMES[1]!r})")
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
    if not query.strip():
        return QAReply("invalid", error="the search query is empty")
    top_k = args.get("top_k")
    if top_k is not None:
        try:
            top_k = int(top_k)
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e999 decodes to inf
            return QAReply("invalid", error=f"top_k must be a whole number, got {top_k!r}")
    return QAReply("search", query=query, top_k=top_k)


_NOT_A_CALL = QAReply("invalid", error='a tool call must look like {"name": "search", "arguments": {"query": "..."}}')


def _json_problem(exc: Exception) -> str:
    """Words for a JSON decoding failure; json also raises plain ValueError (huge numbers) and RecursionError."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at char {exc.pos}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return "a number is too long"


def _decode_tagged_call(body: str) -> list[QAReply]:
    """A ``<tool_call>`` body: the tag says a call was meant, so anything unreadable is an invalid call."""
    body = body.strip()
    fence = re.match(r"```(?:json)?\s*(.*?)\s*```$", body, re.DOTALL)
    if fence:
        body = fence.group(1)
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError) as exc:
        return [QAReply("invalid", error=f"the tool call is not valid JSON ({_json_problem(exc)})")]
    return _tool_calls_from_object(obj) or [_NOT_A_CALL]


def _find_bare_calls(text: str) -> list[tuple[int, list[QAReply]]]:
    """The JSON tool calls written without tags, with their positions."""
    decoder = json.JSONDecoder()
    found, position = [], 0
    for count, match in enumerate(_JSON_CALL_START.finditer(text)):
        if count >= _MAX_JSON_CANDIDATES or len(found) >= MAX_CALLS_PER_REPLY:
            break
        if match.start() < position:  # inside a call already read (its "arguments" object)
            continue
        start = match.start()
        # A list of calls starts at its "[" (only spaces between it and the first object).
        bracket = text.rfind("[", 0, start)
        if bracket >= 0 and not text[bracket + 1:start].strip():
            start = bracket
        try:
            obj, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError) as exc:
            # A span that starts like a call to our tool but does not decode is a broken call, not prose.
            if _NAMES_SEARCH.search(text, match.start(), match.start() + 200):
                problem = _json_problem(exc)
                found.append((start, [QAReply("invalid", error=f"the tool call is not valid JSON ({problem})")]))
                break  # the rest of the reply cannot be told apart from the broken call
            continue
        calls = _tool_calls_from_object(obj)
        if calls is not None:
            found.append((start, calls))
            position = end
    return found


def _find_calls(text: str) -> list[tuple[int, QAReply]]:
    """Every tool call of a reply with its position: ``<search>`` tags, then ``<tool_call>`` tags or, when there
    are none, bare JSON calls."""
    calls: list[tuple[int, QAReply]] = []
    for count, (start, body) in enumerate(tag_bodies(text, _SEARCH_OPEN, _SEARCH_CLOSE)):
        if count >= MAX_CALLS_PER_REPLY:
            break
        calls.append((start, QAReply("search", query=body) if body.strip()
                       else QAReply("invalid", error="the search query is empty")))
    last_closed = max((start for start, _ in calls), default=-1)
    unclosed = [m for m in _SEARCH_OPEN.finditer(text, last_closed + 1)][-1:] if _SEARCH_OPEN.search(text) else []
    for m in unclosed:
        if not _SEARCH_CLOSE.search(text, m.end()):
            calls.append((m.start(), QAReply("invalid", error="the <search> tag is not closed by </search>")))
    tagged = False
    for count, match in enumerate(_TOOL_CALL_TAG.finditer(text)):
        if count >= MAX_CALLS_PER_REPLY:
            break
        tagged = True
        calls.extend((match.start() + k, call) for k, call in enumerate(_decode_tagged_call(match.group(1))))
    if not tagged:
        for start, found in _find_bare_calls(text):
            calls.extend((start + k, call) for k, call in enumerate(found))
    calls.sort(key=lambda call: call[0])
    return calls[:MAX_CALLS_PER_REPLY]


# The Hermes parser's reading of tool calls: a closed tag's body, or a last unclosed tag's rest of the reply.
_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_DIGITS = re.compile(r"[+-]?\d+")


def _paper_top_k(value: object) -> tuple[int | None, str]:
    """The tool's ``top_k`` argument read as an integer field is (whole numbers, their strings and integral floats
    pass), or (None, why not)."""
    if isinstance(value, bool):
        return int(value), ""
    if isinstance(value, int):
        return value, ""
    if isinstance(value, float) and value.is_integer():
        return int(value), ""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip()), ""
    return None, f"top_k must be a whole number, got {value!r}"


def _paper_call(obj: dict) -> QAReply:
    name, args = obj["name"], obj["arguments"]
    if name != PAPER_TOOL:
        return QAReply("invalid", error=f"{name!r} is not a tool; the only tool is {PAPER_TOOL!r}")
    if not isinstance(args, dict):
        return QAReply("invalid", error=f"the arguments of {PAPER_TOOL} must be an object, got {args!r}")
    query = args.get("query")
    if not isinstance(query, str):
        return QAReply("invalid", error=f"{PAPER_TOOL} needs a \"query\" string")
    top_k = None
    if "top_k" in args:
        top_k, problem = _paper_top_k(args["top_k"])
        if top_k is None:
            return QAReply("invalid", error=problem)
    return QAReply("search", query=query, top_k=top_k)


def parse_paper_calls(text: str) -> list[QAReply] | None:
    """The tool calls of a reply as the reference's Hermes parser reads them, or None when the reply has none (it
    is then the final answer): no ``<tool_call>`` tag, or any tag whose body is not a JSON object with a string
    ``"name"`` and an ``"arguments"`` key."""
    if "<tool_call>" not in text:
        return None
    calls = []
    for closed, unclosed in _HERMES_CALL.findall(text):
        try:
            obj = json.loads(closed or unclosed)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
            return None
        calls.append(obj)
    return [_paper_call(obj) for obj in calls]


def parse_qa_calls(text: str, answer_extraction: str = "boxed", protocol: str = "extended") -> list[QAReply]:
    """Read one reply: its tool calls in order (searches and unreadable calls; at most ``MAX_CALLS_PER_REPLY``
    under the ``"extended"`` protocol, all of them under ``"paper"``), or, when it has none, a one-element list
    with the answer."""
    if not isinstance(text, str):
        raise TypeError(f"a reply must be a str, got {type(text).__name__}")
    if protocol == "paper":
        paper = parse_paper_calls(text)
        return paper if paper else [QAReply("answer", answer=extract_answer(text, answer_extraction))]
    calls = _find_calls(text)
    if calls:
        return [call for _, call in calls]
    return [QAReply("answer", answer=extract_answer(text, answer_extraction))]


def parse_qa_reply(text: str, answer_extraction: str = "boxed", protocol: str = "extended") -> QAReply:
    """The first tool call of a reply, or its answer when it has none (see ``parse_qa_calls`` for all calls)."""
    return parse_qa_calls(text, answer_extraction, protocol)[0]

