"""Multi-hop question answering: the HotpotQA env, its data, the search tool protocol, answer scoring, BM25.

Data flows one way: ``data`` (questions and passages, ``records``, from files, ``datasets`` or the ``synthetic``
generator), ``search`` (the BM25 index), ``results`` (how its hits read), ``scoring`` (reading the final answer,
EM/F1 and the paper's reward), ``tools`` (reading a reply as search calls or an answer) and ``prompts`` feed
``hotpotqa`` (``HotpotQAEnv``).
"""

from erl_envs.qa.data import DataError, Passage, Question, generate_synthetic, load_corpus, load_questions
from erl_envs.qa.hotpotqa import HotpotQAEnv
from erl_envs.qa.scoring import exact_match, extract_answer, normalize_answer, qa_reward, token_f1
from erl_envs.qa.search import BM25Index
from erl_envs.qa.tools import QAReply, parse_qa_calls, parse_qa_reply

__all__ = ["HotpotQAEnv", "BM25Index", "Question", "Passage", "DataError", "load_questions", "load_corpus",
           "generate_synthetic", "QAReply", "parse_qa_calls", "parse_qa_reply", "extract_answer", "normalize_answer",
           "exact_match", "token_f1", "qa_reward"]
