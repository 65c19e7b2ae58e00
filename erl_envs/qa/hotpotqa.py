"""ERL-HotpotQA-v0: multi-hop question answering with a search tool, as text in and text out."""

from __future__ import annotations

import operator
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable

import gymnasium as gym

from erl_envs.protocol import TEXT_CHARSET, BoundedText, FreeText, utf8_safe
from erl_envs.qa.data import (
    DataError,
    Passage,
    Question,
    corpus_from_questions,
    load_corpus,
    load_questions,
)
from erl_envs.qa import prompts as qa_prompts
from erl_envs.qa.scoring import ANSWER_EXTRACTIONS, SCORINGS, qa_reward
from erl_envs.qa.results import (NO_DOCUMENTS, TRUNCATION_MARK, extended_results, paper_hit, paper_results,
                                  shown_text)
from erl_envs.qa.search import ENGLISH_STOPWORDS, IDFS, BM25Index, Tokenizer
from erl_envs.qa.tools import MAX_CALLS_PER_REPLY, QAReply, parse_qa_calls

__all__ = ["HotpotQAEnv", "MODES", "PROTOCOLS", "MAX_REPLY_CHARS"]

MODES = ("open", "distractor")
# How tool calls are read and results shown. "paper": the reference code's agent (Hermes-parsed <tool_call>s, at most
# 5 whole passages a call, rendered as its retriever renders them); "extended": this project's original, roomier
# default (5 by default, up to 10 a call, each cut at 600 characters). max_passage_chars None: whole passages.
PROTOCOLS = {
    "paper": dict(top_k=5, max_top_k=5, max_passage_chars=None),
    "extended": dict(top_k=5, max_top_k=10, max_passage_chars=600),
}
# Under "paper" a reply may hold as many calls as it has room for; the shortest that parses,
# '<tool_call>{"name":"","arguments":0}' (an unclosed last tag), is this long: it bounds the calls of one reply.
_SHORTEST_PAPER_CALL = len('<tool_call>{"name":"","arguments":0}')
# Only the last this-many characters of a reply are read (the action space's max_length): a 10 MB reply then costs
# about what a grid step costs instead of seconds. The end is kept because that is where the answer is read from.
MAX_REPLY_CHARS = 65_536

# Distractor-mode indexes kept per source (one per question, of its own paragraphs): a reset of a question seen
# before reuses its index, even when one of its passages is megabytes long.
_QUESTION_INDEXES = 4096
# Bounds on what the env echoes back from the agent, so that every observation fits the observation space.
_MAX_ECHO_CHARS = 200
_SCORE_CHARS = 16  # "-12345678.12" and then some: a score is never printed wider than this


@dataclass(eq=False)
class _Source:
    """Everything an env instance reads but never changes, shared by instances built from the same arguments."""

    questions: list[Question]
    by_id: dict[str, int]
    passages: list[Passage]  # the open-mode corpus; empty in distractor mode
    index: BM25Index | None
    charset: frozenset[str]
    max_question_chars: int
    max_title_chars: int
    max_text_chars: int
    max_paper_hit_chars: int  # the longest hit as the paper protocol shows it (score aside); 0 under "extended"
    # Distractor mode: each question's own index, built at its first reset and kept (at most _QUESTION_INDEXES).
    question_indexes: dict[int, BM25Index] = field(default_factory=dict)


_SOURCES: "weakref.WeakValueDictionary[Hashable, _Source]" = weakref.WeakValueDictionary()


def _file_identity(value: Any) -> Hashable | None:
    """A key for a file argument that changes when the file does; None for arguments that are not files."""
    if isinstance(value, (str, Path)) and not (isinstance(value, str) and (value == "synthetic"
                                                                           or value.startswith("hf:"))):
        path = Path(value).expanduser()
        try:
            stat = path.stat()
        except OSError:
            return None
        return str(path.resolve()), stat.st_mtime_ns, stat.st_size
    if isinstance(value, str):
        return value
    return None


class HotpotQAEnv(gym.Env[str, str]):
    """
    ## Description
    Multi-hop question answering (HotpotQA, Yang et al. 2018) with a search tool, the third environment of
    Experiential RL. The agent sees a question and, turn by turn, either searches a passage index or answers.
    Questions come from real HotpotQA data or from an offline synthetic generator (``data="synthetic"``).

    ## Action Space
    ``FreeText`` (``contains`` is true of every str: ``step`` reads any).
    ``spaces.Text``: the agent's whole reply, of which the last ``max_reply_chars`` (65,536) characters are read
    (a longer reply's beginning is ignored, so a flood of text stays cheap). A reply holding
    tool calls is a search turn: ``<search>query</search>``, or the JSON call chat models emit,
    ``{"name": "search", "arguments": {"query": "...", "top_k": 3}}`` (bare, in ``<tool_call>`` tags or a code
    block; ``local_search``, the reference code's tool name, works too). Every call of the reply runs, in order (at
    most ``qa.MAX_CALLS_PER_REPLY``, 8), and each one's result is its own block of the observation; the turn counts
    once. A reply with no tool call is the final answer, read by ``answer_extraction``: ``"boxed"`` (default) takes
    the last ``\\boxed{...}`` (else the last ``<answer>...</answer>``), ``"paper"`` the reference code's reading
    (the first box, taken literally, with heuristics for unboxed replies). A tool call that cannot be read (bad
    JSON, unknown tool, empty query) gets an error block instead of results. Under ``protocol="paper"`` replies are
    read as the reference's vLLM Hermes parser reads them (``erl_envs.qa.tools.parse_paper_calls``): only
    ``<tool_call>`` JSON naming ``local_search`` searches; a malformed ``<tool_call>``, ``<search>`` tags, bare JSON or
    a code fence make the reply the final answer; another tool name or bad arguments cost the turn with an error;
    every call of the reply runs.

    ## Observation Space
    ``BoundedText`` (async vector envs carry it through shared memory).
    ``spaces.Text`` over ``TEXT_CHARSET`` plus every character of the loaded questions and passages; echoed agent
    text is stripped of other characters and cut to a bounded length, so every observation is in the space.

    ## Starting State
    A question drawn with ``self.np_random`` (or chosen by ``options={"index": i}`` / ``{"task_id": id}``).

    ## Rewards
    Only the answering step is rewarded, as in the paper: 1.0 for a normalised exact match with a gold answer, else
    the token F1 when it is at least ``f1_threshold`` (0.3), else 0; a yes/no answer that does not match scores 0.
    Normalisation is the official HotpotQA one (``scoring="official"``); ``scoring="unicode"`` also drops Unicode
    punctuation. No answer, or running out of turns, scores 0.

    ## Episode End
    Terminated when the agent answers (a reply with no tool call). Truncated when ``max_turns`` replies (5) have
    been spent without an answer.

    ## Information
    Every step: ``task_id`` (question id), ``task_text`` (the question), ``turn``, ``turns_left``, ``action``
    (``"search"``, ``"answer"`` or ``"invalid"``), ``num_calls`` (tool calls in the reply), ``num_searches``,
    ``retrieved_titles`` (all searches so far, each title once), ``results`` (this turn's hits, search by search:
    rank, id, title, score), ``feedback`` (one line),
    ``took_effect`` (False for an unreadable tool call), ``retrieval_recall`` (share of the gold supporting passages
    retrieved so far; None when the data has no supporting facts) and ``gold_retrieved`` (all of them retrieved).
    The last step adds ``answer`` (the extracted answer or None), ``em``, ``f1``, ``success`` (exact match; under
    ``protocol="paper"`` reward >= 1, so token F1 = 1 counts, as in the reference),
    ``episode_feedback`` and ``gold_answers``. ``reset`` gives ``task_id``, ``task_text`` and ``num_questions``.

    ## Arguments
    ``gym.make("ERL-HotpotQA-v0", data=..., corpus=None, mode="open", ...)``

    - ``data``: required. ``"synthetic"`` (with ``num_questions``, ``seed``: the generator's, not the reset seed),
      a ``.json``/``.jsonl``/``.parquet`` file, ``"hf:hotpotqa/hotpot_qa:distractor:validation"`` (any
      ``hf:<path>[:<config>[:<split>]]`` goes to ``datasets.load_dataset``), a ``datasets.Dataset`` or a list of
      dicts. ``split`` picks a split when the source has several; ``limit`` keeps the first questions.
    - ``corpus``: open mode only; a ``.jsonl`` of ``{id, title, text}`` (or ``contents``) passages or a list of
      dicts. Default: the union of the questions' own paragraphs, one per title.
    - ``mode``: ``"open"`` (one BM25 index over the whole corpus; the paper's setting) or ``"distractor"`` (an
      index over the question's own 10 paragraphs).
    - ``max_turns=5``; ``protocol``: ``"extended"`` (default: ``top_k=5`` passages per search when the call gives
      none, a call may ask for up to ``max_top_k=10``, passages cut at ``max_passage_chars=600``) or ``"paper"``
      (the reference's agent, the ``paper-qwen3-4b`` preset's choice: its tool-call reading, at most 5 whole
      passages rendered as its retriever renders them, the question alone as the first observation and nothing
      added to tool results, success = reward >= 1, and the paper set's system prompt
      ``erl_envs.qa.prompts.paper_instructions()``); explicit ``top_k`` / ``max_top_k`` / ``max_passage_chars``
      (None: whole passages) override the protocol's values.
      ``max_query_chars=300`` (longer queries are cut), ``max_reply_chars=65536``, ``f1_threshold=0.3``.
    - ``scoring``: ``"official"`` (HotpotQA's ``normalize_answer``) or ``"unicode"``; ``answer_extraction``:
      ``"boxed"`` or ``"paper"`` (see Action Space).
    - Index: ``idf="lucene"`` (Lucene's always-positive idf; ``"okapi"``: rank-bm25's, which is 0 or floored for
      terms in half or more of the passages, as a question's entities are among its 10 distractor-mode paragraphs;
      either way a search whose words are exactly a passage's title shows that passage first),
      ``k1=1.5``, ``b=0.75``, ``stopwords=False`` (drop English stop-words), ``fold_unicode=True`` (NFKC,
      casefold and accents folded in passages and queries: "Zoe Saldana" finds "Zoë Saldaña"), ``tokenizer``,
      ``cache_dir`` (default ``$ERL_GYM_CACHE/bm25`` or ``~/.cache/erl_gym/bm25``; ``False`` for no disk cache).
    - ``instructions``: the system prompt (default ``erl_envs.qa.prompts.QA_INSTRUCTIONS``); ``render_mode``: ``"ansi"`` or
      ``"human"``.

    ## Text format
    With ``data="synthetic"``, on reset::

        Question: In which city was the founder of Mouthurk Holdings born?
        You have 5 turns. Search, or give your final answer in \\boxed{}.

    After ``<search>Mouthurk Holdings founder</search>``::

        Search results for "Mouthurk Holdings founder":
        [1] Mouthurk Holdings (score 13.57)
        Mouthurk Holdings is a toy company headquartered in Dulind. It was founded in 1893 by Faebro Failones. ...
        [2] Chameitu Holdings (score 5.62)
        Chameitu Holdings is a publishing company headquartered in Broutoum. It was founded in 1921 by ...
        ...
        4 turns left. Search again, or give your final answer in \\boxed{}.

    ## Paper fidelity
    Same as the paper: open-domain setting (the agent sees only the question), one search tool returning the top 5
    passages with titles, up to 5 turns, the episode ends on a reply without a tool call, the EM / F1 >= 0.3 /
    yes-no reward with the official normalisation. With ``protocol="paper"`` and ``answer_extraction="paper"`` (the
    paper preset): the reference's tool-call reading and tool name ``local_search``, its rendering of whole
    passages, every tool call of a reply run, success = reward >= 1, and its reading of the answer.
    Departures (docs/fidelity.md lists each with its switch): **BM25 retrieval instead of the paper's dense E5
    retriever** (no model or GPU needed; lexical search favours queries that name entities); the default corpus is
    the questions' own paragraphs rather than the 2018 Wikipedia dump (pass ``corpus=`` with a passage dump for the
    paper's scale); the reference shows tool results as ``tool`` messages, here they are one user turn with a
    block per call, and its tool schema is written into the system prompt; under ``"extended"`` ``<search>`` tags
    and ``<answer>`` are accepted as well; the system prompt, per-step messages and episode feedback lines are this
    project's own wording, and the gold answer is never shown to the agent.

    ## Version History
    - v0: initial version; later within v0: official answer normalisation by default, every tool call of a reply
      runs, ``local_search``, ``protocol``, ``answer_extraction``, ``max_reply_chars``, Unicode folding in the
      index, ``ResetNeeded`` after the end; ``protocol="paper"`` then follows the reference's agent (Hermes tool
      calls, whole passages, success = reward >= 1); ``idf="lucene"`` by default (search scores change;
      ``idf="okapi"`` gives the earlier ones).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        data: Any = None,
        corpus: Any = None,
        mode: str = "open",
        *,
        split: str | None = None,
        num_questions: int = 200,
        seed: int = 0,
        limit: int | None = None,
        max_turns: int = 5,
        protocol: str = "extended",
        top_k: int | None = None,
        max_top_k: int | None = None,
        max_passage_chars: int | None = None,
        max_query_chars: int = 300,
        max_reply_chars: int = MAX_REPLY_CHARS,
        scoring: str = "official",
        answer_extraction: str = "boxed",
        f1_threshold: float = 0.3,
        k1: float = 1.5,
        b: float = 0.75,
        idf: str = "lucene",
        stopwords: bool = False,
        fold_unicode: bool = True,
        tokenizer: Callable[[str], list[str]] | None = None,
        cache_dir: str | os.PathLike | bool | None = None,
        instructions: str | None = None,
        render_mode: str | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        for name, value, allowed in (("protocol", protocol, tuple(PROTOCOLS)), ("scoring", scoring, SCORINGS),
                                     ("answer_extraction", answer_extraction, ANSWER_EXTRACTIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        shown = PROTOCOLS[protocol]
        top_k = shown["top_k"] if top_k is None else top_k
        max_top_k = shown["max_top_k"] if max_top_k is None else max_top_k
        max_passage_chars = shown["max_passage_chars"] if max_passage_chars is None else max_passage_chars
        if mode == "distractor" and corpus is not None:
            raise ValueError("corpus= is only used in open mode; distractor mode searches each question's own "
                             "paragraphs")
        for name, value in (("max_turns", max_turns), ("top_k", top_k), ("max_top_k", max_top_k),
                            ("max_passage_chars", 1 if max_passage_chars is None else max_passage_chars),
                            ("max_query_chars", max_query_chars), ("max_reply_chars", max_reply_chars)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if top_k > max_top_k:
            raise ValueError(f"top_k={top_k} is above max_top_k={max_top_k}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.mode = mode
        self.max_turns, self.top_k, self.max_top_k = max_turns, top_k, max_top_k
        self.max_passage_chars, self.max_query_chars = max_passage_chars, max_query_chars
        self.max_reply_chars = max_reply_chars
        self.protocol, self.scoring, self.answer_extraction = protocol, scoring, answer_extraction
        self.f1_threshold = f1_threshold
        self.render_mode = render_mode
        self.paper = protocol == "paper"
        if instructions is None:
            instructions = qa_prompts.paper_instructions() if self.paper else qa_prompts.QA_INSTRUCTIONS
        self.instructions = instructions
        self.prompt_style = "qa"
        # The reflection wrapper reads these: under the paper protocol a reflected prompt gets the paper reminder.
        self.prompt_set = "paper" if self.paper else "lenient"
        self.game_name = "HotpotQA"
        if idf not in IDFS:
            raise ValueError(f"idf must be one of {list(IDFS)}, got {idf!r}")
        self._k1, self._b, self._idf = k1, b, idf
        self._tokenizer = tokenizer if tokenizer is not None else Tokenizer(
            stopwords=ENGLISH_STOPWORDS if stopwords else frozenset(), fold=fold_unicode)

        key = self._source_key(data, corpus, split, num_questions, seed, limit)
        source = _SOURCES.get(key) if key is not None else None
        if source is None:
            source = self._load_source(data, corpus, split, num_questions, seed, limit, cache_dir)
            if key is not None:
                _SOURCES[key] = source
        self._source = source
        self.questions = source.questions

        self.observation_space = BoundedText(max_length=self._max_observation_length(), charset=source.charset)
        # Replies are free text; the env reads any str it gets (longer, other characters), so every str is in the
        # action space: max_length and the charset only bound sampling.
        self.action_space = FreeText(max_length=65_536, min_length=0, charset=source.charset)

        self._question: Question | None = None
        self._index: BM25Index | None = None
        self._passages: list[Passage] = []
        self._turn = 0
        self._searches = 0
        self._retrieved: dict[str, None] = {}
        self._done = True
        self._last_obs = ""

    # ------------------------------------------------------------------------------------------ data

    def _source_key(self, data, corpus, split, num_questions, seed, limit) -> Hashable | None:
        data_key = _file_identity(data)
        corpus_key = None if corpus is None else _file_identity(corpus)
        tokenizer_key = getattr(self._tokenizer, "cache_key", None)
        if data_key is None or (corpus is not None and corpus_key is None) or not isinstance(tokenizer_key, str):
            return None  # in-memory data: not worth hashing here; the index is still shared by content
        synthetic = (num_questions, seed) if data == "synthetic" else None
        return (data_key, corpus_key, self.mode, split, synthetic, limit, tokenizer_key, self._k1, self._b,
                self._idf, self.max_passage_chars)

    def _load_source(self, data, corpus, split, num_questions, seed, limit, cache_dir) -> _Source:
        questions = load_questions(data, split=split, num_questions=num_questions, seed=seed, limit=limit)
        passages: list[Passage] = []
        index = None
        if self.mode == "open":
            passages = load_corpus(corpus) if corpus is not None else corpus_from_questions(questions)
            if not passages:
                raise DataError(
                    "open mode needs passages to search, but these questions have no context paragraphs: pass "
                    "corpus= (a .jsonl of {id, title, text} passages, e.g. a Wikipedia dump) or use data with "
                    "paragraphs (HotpotQA distractor/fullwiki, or 'synthetic')")
            index = BM25Index.cached(passages, ids=range(len(passages)), k1=self._k1, b=self._b, idf=self._idf,
                                     tokenizer=self._tokenizer, cache_dir=cache_dir)
            shown = passages
        else:
            missing = [q.id for q in questions if not q.paragraphs]
            if missing:
                raise DataError(f"distractor mode needs each question's own paragraphs; {len(missing)} questions "
                                f"have none (first: {missing[0]!r}). Use mode='open' with corpus=, or data with "
                                "a 'context' field")
            shown = [p for q in questions for p in q.paragraphs]
        chars = set(TEXT_CHARSET)
        for q in questions:
            chars.update(q.question)
        longest_hit = 0
        for p in shown:
            chars.update(p.title)
            if self.paper:
                hit = paper_hit(1, p, 0.0)
                chars.update(hit)
                longest_hit = max(longest_hit, len(hit))
            else:
                chars.update(shown_text(p.text, self.max_passage_chars))
        return _Source(
            questions=questions,
            by_id={q.id: i for i, q in enumerate(questions)},
            passages=passages,
            index=index,
            charset=frozenset(chars),
            max_question_chars=max(len(q.question) for q in questions),
            max_title_chars=max((len(p.title) for p in shown), default=0),
            max_text_chars=max((len(p.text) for p in shown), default=0),
            max_paper_hit_chars=longest_hit,
        )

    # ------------------------------------------------------------------------------------------ text

    def _max_observation_length(self) -> int:
        """An upper bound on every observation, from the longest question, title and (cut) passage."""
        src = self._source
        footer = 200  # the turns-left line, or the ran-out-of-turns line (about 100 characters)
        question_obs = len("Question: \n") + src.max_question_chars + footer
        passage_chars = src.max_text_chars if self.max_passage_chars is None else self.max_passage_chars
        hit = len("[] (score )\n\n") + len(str(self.max_top_k)) + src.max_title_chars + _SCORE_CHARS \
            + passage_chars + len(TRUNCATION_MARK)
        search_obs = len('Search results for "" (no passage matched):\n\n') + self.max_query_chars \
            + len(TRUNCATION_MARK) + self.max_top_k * hit
        message_obs = 300 + 2 * _MAX_ECHO_CHARS  # unreadable call / end of episode, with echoed text
        if self.paper:
            # Every call of the reply runs: as many as the longest reply read can hold.
            calls = self.max_reply_chars // _SHORTEST_PAPER_CALL + 1
            search_obs = self.max_top_k * (src.max_paper_hit_chars + 2 * _SCORE_CHARS + 1) + len(NO_DOCUMENTS)
            return max(question_obs, calls * max(search_obs, message_obs) + message_obs + footer)
        # A reply runs up to MAX_CALLS_PER_REPLY tool calls, each answered by its own block.
        return max(question_obs, MAX_CALLS_PER_REPLY * max(search_obs, message_obs) + message_obs + footer)

    def _sanitize(self, text: str, max_chars: int) -> str:
        """Agent text fit to echo: characters outside the observation charset dropped, length capped."""
        charset = self._source.charset
        clean = "".join(c for c in text[: max_chars * 4] if c in charset)
        clean = " ".join(clean.split())
        return clean if len(clean) <= max_chars else clean[:max_chars] + TRUNCATION_MARK

    def _footer(self) -> str:
        left = self.max_turns - self._turn
        if left == 1:
            return "This is your last turn: give your final answer in \\boxed{}."
        return f"{left} turns left. Search again, or give your final answer in \\boxed{{}}."

    def _search(self, query: str, k: int) -> tuple[str, list[dict[str, Any]]]:
        hits = self._index.top_k_batch([query], k)[0] if k > 0 else []
        titled = self._index.title_matches(query) if k > 0 else []
        if titled:  # a search for a passage's exact title shows that passage first, whatever its BM25 rank
            scores = self._index.scores(query)
            hits = ([(i, float(scores[i])) for i in titled] + [hit for hit in hits if hit[0] not in titled])[:k]
        passages = self._passages
        results = [{"rank": r, "id": passages[i].id, "title": passages[i].title, "score": round(s, 4)}
                   for r, (i, s) in enumerate(hits, start=1)]
        shown = [(passages[i], score) for i, score in hits]
        if self.paper:
            return paper_results(shown), results
        return extended_results(self._sanitize(query, self.max_query_chars), shown, self.max_passage_chars), results

    # ------------------------------------------------------------------------------------------ gym API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        # Like the grid envs: a reset that fails on a bad option must not leave the previous episode steppable.
        self._done = True
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict or None, got {type(options).__name__}")
        options = dict(options or {})
        unknown = set(options) - {"index", "task_id"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; use 'index' or 'task_id'")
        if "task_id" in options:
            if not isinstance(options["task_id"], Hashable) or options["task_id"] not in self._source.by_id:
                raise ValueError(f"no question with task_id {options['task_id']!r}")
            position = self._source.by_id[options["task_id"]]
        elif "index" in options:
            if isinstance(options["index"], bool):
                raise TypeError("the reset option 'index' must be an int, got bool")
            try:
                position = operator.index(options["index"])
            except TypeError:
                kind = type(options["index"]).__name__
                raise TypeError(f"the reset option 'index' must be an int, got {kind}") from None
            if not 0 <= position < len(self.questions):
                raise ValueError(f"question index {position} is out of range 0..{len(self.questions) - 1}")
        else:
            position = int(self.np_random.integers(len(self.questions)))
        self._question = self.questions[position]
        if self.mode == "open":
            self._index, self._passages = self._source.index, self._source.passages
        else:
            self._passages = list(self._question.paragraphs)
            indexes = self._source.question_indexes
            self._index = indexes.get(position)
            if self._index is None:
                if len(indexes) >= _QUESTION_INDEXES:
                    indexes.clear()
                self._index = indexes[position] = BM25Index(self._passages, ids=range(len(self._passages)),
                                                            k1=self._k1, b=self._b, idf=self._idf,
                                                            tokenizer=self._tokenizer)
        self._turn = 0
        self._searches = 0
        self._retrieved = {}
        self._done = False
        if self.paper:  # the reference's agent gets the question alone
            self._last_obs = self._question.question
        else:
            self._last_obs = f"Question: {self._question.question}\n" \
                             f"You have {self.max_turns} turns. Search, or give your final answer in \\boxed{{}}."
        info = {"task_id": self._question.id, "task_text": self._question.question,
                "num_questions": len(self.questions)}
        if self.render_mode == "human":
            self.render()
        return self._last_obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            raise gym.error.ResetNeeded("the episode is over (or reset() was never called): call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"an action is the agent's reply as a str, got {type(action).__name__}")
        question = self._question
        self._turn += 1
        calls = parse_qa_calls(action[-self.max_reply_chars:], self.answer_extraction, self.protocol)
        reward, terminated, truncated = 0.0, False, False
        info: dict[str, Any] = {"results": [], "took_effect": True, "num_calls": 0}

        if calls[0].kind == "answer":
            answer = calls[0].answer
            score = qa_reward(answer, question.answers, self.f1_threshold, self.scoring)
            reward, terminated = score.reward, True
            # Success gates the retry and the memory: exact match, or under the paper protocol a reward of 1 as the
            # reference counts it (token F1 = 1 without exact match, e.g. the same words in another order).
            success = score.reward >= 1.0 if self.paper else score.em
            info.update(action="answer", answer=answer if answer is None else utf8_safe(answer), em=score.em,
                        f1=score.f1, success=success, gold_answers=list(question.answers))
            info["episode_feedback"] = self._answer_feedback(answer, score.em, score.f1)
            info["feedback"] = info["episode_feedback"]
            text = f"Episode over: {info['episode_feedback']}"
        else:
            # Every tool call of the reply runs, in order; each one's result is its own block of the observation.
            blocks, comments = [], []
            for call in calls:
                block, comment = self._run_call(call, info)
                blocks.append(block)
                comments.append(comment)
            searched = any(call.kind == "search" for call in calls)
            info.update(action="search" if searched else "invalid", took_effect=searched, num_calls=len(calls))
            info["feedback"] = "; ".join(comments)
            text = "\n".join(blocks)

        if not terminated and self._turn >= self.max_turns:
            truncated = True
            line = (f"ran out of turns: {self._turn} turns used ({self._searches} searches) without a final "
                    "answer in \\boxed{}")
            info.update(answer=None, em=False, f1=0.0, success=False, gold_answers=list(question.answers),
                        episode_feedback=line)
            text += ("" if not text or text.endswith("\n") else "\n") + f"Episode over: {line}."
        elif not terminated and not self.paper:  # the reference adds nothing to the tool results
            text += self._footer()

        self._done = terminated or truncated
        info.update(self._progress_info())
        self._last_obs = text
        if self.render_mode == "human":
            self.render()
        return text, reward, terminated, truncated, info

    def _run_call(self, call: QAReply, info: dict[str, Any]) -> tuple[str, str]:
        """One tool call: its block of the observation and its comment for the feedback line."""
        if call.kind == "invalid":
            error = self._sanitize(call.error, _MAX_ECHO_CHARS)
            return f"Your tool call could not be read: {error}.\n", f"unreadable tool call: {error}"
        query = call.query.strip()[: self.max_query_chars]
        if self.paper:  # the reference's tool: top_k (default 5) results asked for, the first 5 of them shown
            k = min(call.top_k if call.top_k is not None else self.top_k, self.max_top_k)
        else:
            k = min(max(call.top_k if call.top_k is not None else self.top_k, 1), self.max_top_k)
        text, results = self._search(query, k)
        self._searches += 1
        self._retrieved.update((r["title"], None) for r in results)
        info["results"].extend(results)
        top = f', top: "{self._sanitize(results[0]["title"], _MAX_ECHO_CHARS)}"' if results else ""
        return text, f'searched "{self._sanitize(query, 80)}": {len(results)} passages{top}'

    def _answer_feedback(self, answer: str | None, em: bool, f1: float) -> str:
        if answer is None:
            return "never answered: the reply had no tool call and no final answer in \\boxed{}"
        shown = self._sanitize(answer, _MAX_ECHO_CHARS)
        if em:
            return f'answered correctly with "{shown}" (exact match)'
        if self.paper and f1 >= 1.0:
            return f'answered correctly with "{shown}" (token F1 1.00: the gold answer\'s words, not an exact match)'
        if f1 >= self.f1_threshold:
            return f'answered partially correctly with "{shown}" (token F1 {f1:.2f}, no exact match)'
        return f'answered wrong with "{shown}" (token F1 {f1:.2f})'

    def _progress_info(self) -> dict[str, Any]:
        gold = self._question.supporting_titles
        found = sum(t in self._retrieved for t in gold)
        return {
            "task_id": self._question.id,
            "task_text": self._question.question,
            "turn": self._turn,
            "turns_left": self.max_turns - self._turn,
            "num_searches": self._searches,
            "retrieved_titles": list(self._retrieved),
            "retrieval_recall": found / len(gold) if gold else None,
            "gold_retrieved": found == len(gold) if gold else None,
        }

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("render() was called without a render_mode; use render_mode='ansi' or 'human'")
            return None
        if self.render_mode == "ansi":
            return self._last_obs
        print(self._last_obs)
        return None
