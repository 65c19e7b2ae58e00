"""What generate may sample and where a reply ends (erl_agents/decoding.py): the stop string of a prefilled
reflection, found wherever token boundaries fall. The valid-action constraint is tested through the rollout
(tests/agents/test_rollout.py), against transformers' own constrained path."""

import torch

from erl_agents.decoding import StopString, stop_string_end
from erl_agents.models import build_tiny_tokenizer

CORPUS = ["<prompt>\nA is you.\n</prompt>", "A is you, B is the goal.", "</prompt>"] * 20


def _tokenizer():
    return build_tiny_tokenizer(CORPUS, vocab_size=300)


def test_stop_string_end_cuts_after_the_token_that_completes_the_string():
    tokenizer = _tokenizer()
    for text in ("A is you.\n</prompt>", "A is you.</prompt> and more", "</prompt>"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        end = stop_string_end(tokenizer, ids, "</prompt>")
        assert "</prompt>" in tokenizer.decode(ids[:end])
        assert "</prompt>" not in tokenizer.decode(ids[:end - 1])
    # Spelled out one character per token, the string still ends the reply at its last character.
    chars = [tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in "ab</prompt>cd"]
    assert stop_string_end(tokenizer, chars, "</prompt>") == len("ab</prompt>")
    assert stop_string_end(tokenizer, tokenizer("no tag", add_special_tokens=False)["input_ids"], "</prompt>") is None


def test_the_stopping_criterion_ends_only_the_rows_whose_reply_holds_the_string():
    tokenizer = _tokenizer()
    prompt = tokenizer("</prompt> in the prompt", add_special_tokens=False)["input_ids"]
    done = tokenizer("A is you.\n</prompt>", add_special_tokens=False)["input_ids"]
    going = tokenizer("A is you, B is", add_special_tokens=False)["input_ids"]
    width = max(len(done), len(going))
    rows = [prompt + done + [0] * (width - len(done)), prompt + going + [0] * (width - len(going))]
    # Row 0's reply holds the string; row 1's only its prompt does, which does not count.
    criterion = StopString(tokenizer, "</prompt>", len(prompt))
    ids = torch.tensor(rows)
    assert criterion(ids[:, : len(prompt) + len(done)], None).tolist()[0] is True
    assert criterion(torch.tensor([prompt + going]), None).tolist() == [False]
