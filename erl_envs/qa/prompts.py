"""HotpotQA's prompts: the first-attempt system prompt and the reminder of the reply format appended to a reflected
system prompt. Override by passing ``instructions=`` to the env, by a templates file (``erl-train --prompts FILE``;
these texts are its ``qa.*`` names), or by assigning to these module attributes.
(What the policy is asked to write after a wrong answer is in ``erl_envs.reflection.prompts``.)

Two sets, following the env's ``protocol``: ours (the module constants, ``<search>`` tags), and under
``protocol="paper"`` the paper set (``PAPER_SET``): the reference solver's instructions (answer directly, final answer
in ``\\boxed{}``) in our own words, followed by what its chat template shows the model about its one tool: the
``local_search`` function's JSON description and how to call it (a JSON object in ``<tool_call>`` tags). Our trainer
renders no tool schema, so the description is part of the system prompt, and of every reflected one (the reminder).
"""

from __future__ import annotations

import json

__all__ = ["QA_INSTRUCTIONS", "QA_FORMAT_REMINDER", "PAPER_SET", "paper_instructions", "paper_reminder"]

QA_INSTRUCTIONS = (
    "Answer the question. You can search a Wikipedia index as many times as you need: write "
    "<search>your query</search> and the top passages come back. When you know the answer, reply without a "
    "search and put the final answer, as short as possible, in \\boxed{...}."
)

QA_FORMAT_REMINDER = "Search with <search>query</search>; give the final answer in \\boxed{...}."

# The paper set. A dict, not module constants: the tiny model's tokenizer is trained on the prompt modules' constant
# strings (erl_agents.envs.prompt_constants), and the paper set must not change it.
PAPER_SET = {
    "instructions": "You are a helpful assistant. Answer each question directly, without detours, and write your "
                    "final answer inside \\boxed{}.",
    "reminder": "Always write your final answer inside \\boxed{}.",
    # The function as the reference declares it to the chat template (name, parameters), described in our words.
    "tool": {
        "type": "function",
        "function": {
            "name": "local_search",
            "description": "Search a Wikipedia passage index; returns the best-matching passages with their scores",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to search for"},
                    "top_k": {"type": "integer", "description": "how many results to return (default: 5)",
                              "minimum": 1, "maximum": 50},
                },
                "required": ["query"],
            },
        },
    },
    "tools_note": (
        "# Tools\n\n"
        "You may call the function below, as often as you need, to help answer. Its description, in JSON:\n"
        "<tools>\n{tool}\n</tools>\n\n"
        "To call it, write a JSON object with the function's name and its arguments inside <tool_call></tool_call> "
        "tags, for example:\n"
        "<tool_call>\n{{\"name\": \"local_search\", \"arguments\": {{\"query\": \"...\"}}}}\n</tool_call>"
    ),
}


def paper_reminder() -> str:
    """What the paper set appends to every system prompt, a reflected one included: the reply-format reminder, then
    the tool's description and how to call it (what the reference's chat template adds to its system message)."""
    tool = json.dumps(PAPER_SET["tool"])
    return PAPER_SET["reminder"] + "\n\n" + PAPER_SET["tools_note"].format(tool=tool)


def paper_instructions() -> str:
    """The first-attempt system prompt under ``protocol="paper"``."""
    return PAPER_SET["instructions"] + "\n\n" + paper_reminder()
