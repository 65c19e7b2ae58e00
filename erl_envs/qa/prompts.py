"""HotpotQA's prompts: the first-attempt system prompt and the reminder of the reply format appended to a reflected
system prompt. Override by passing ``instructions=`` to the env, or by assigning to these module attributes.
(What the policy is asked to write after a wrong answer is in ``erl_envs.reflection.prompts``.)"""

from __future__ import annotations

__all__ = ["QA_INSTRUCTIONS", "QA_FORMAT_REMINDER"]

QA_INSTRUCTIONS = (
    "Answer the question. You can search a Wikipedia index as many times as you need: write "
    "<search>your query</search> and the top passages come back. When you know the answer, reply without a "
    "search and put the final answer, as short as possible, in \\boxed{...}."
)

QA_FORMAT_REMINDER = "Search with <search>query</search>; give the final answer in \\boxed{...}."
