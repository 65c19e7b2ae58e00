"""The tiny tokenizer/model and token-level chat formatting (erl_agents/models.py)."""

import pytest
import torch

from erl_agents.models import ChatFormat, Policy, build_tiny_model, build_tiny_tokenizer, load_policy
from erl_envs.grid.actions import format_action
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, GridRenderer
from erl_envs.grid import prompts as grid_prompts
from erl_envs.qa import prompts as qa_prompts

GRID = GridRenderer(FROZEN_LAKE_SYMBOLS["abstract"]).render(
    [["agent", "frozen", "hole"], ["frozen", "frozen", "goal"], ["hole", "frozen", "frozen"]])
ACTIONS = [format_action(a) for a in range(4)]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [grid_prompts.GRID_INSTRUCTIONS, GRID + "\nSteps remaining: 8"] * 5 + ACTIONS * 10
    return build_tiny_tokenizer(corpus, vocab_size=400)


def test_byte_level_round_trip_of_any_text(tokenizer):
    for text in [GRID, "caf\u00e9 \u2192 \U0001F600 \t\n", qa_prompts.QA_INSTRUCTIONS, "```Up```"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text


def test_one_token_per_grid_cell_and_per_move(tokenizer):
    for symbol in "ABCD":
        assert len(tokenizer(f" {symbol} \t", add_special_tokens=False)["input_ids"]) == 1
    for action in ACTIONS:
        assert len(tokenizer(action, add_special_tokens=False)["input_ids"]) == 1


def test_row_grid_tokens_give_one_token_per_row_and_still_round_trip():
    corpus = [grid_prompts.GRID_INSTRUCTIONS, GRID + "\nSteps remaining: 8"] * 5 + ACTIONS * 10
    rows = build_tiny_tokenizer(corpus, vocab_size=1024, grid_tokens="row")
    grid_ids = rows(GRID + "\n", add_special_tokens=False)["input_ids"]
    assert len(grid_ids) == 3  # three rows, each with its newline
    assert rows.decode(grid_ids) == GRID + "\n"
    # A row the corpus never showed still encodes (in pieces) and decodes exactly.
    unseen = " B \t B \t B \t B \t B \t\n"
    assert rows.decode(rows(unseen, add_special_tokens=False)["input_ids"]) == unseen
    for action in ACTIONS:
        assert len(rows(action, add_special_tokens=False)["input_ids"]) == 1


def test_unknown_grid_token_unit_is_rejected():
    with pytest.raises(ValueError, match="grid_tokens"):
        build_tiny_tokenizer(["x"], grid_tokens="column")


def test_tokenizer_build_is_deterministic(tokenizer):
    again = build_tiny_tokenizer([grid_prompts.GRID_INSTRUCTIONS, GRID + "\nSteps remaining: 8"] * 5 + ACTIONS * 10, 400)
    assert again.get_vocab() == tokenizer.get_vocab()


def test_chat_segments_extend_the_template_rendering(tokenizer):
    chat = ChatFormat(tokenizer)
    reply = tokenizer("```Left```", add_special_tokens=False)["input_ids"] + [chat.end_of_turn_id]
    tokens = chat.open("SYS", "first") + reply + chat.user_turn("second")
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "SYS"}, {"role": "user", "content": "first"},
         {"role": "assistant", "content": "```Left```"}, {"role": "user", "content": "second"}],
        tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(tokens) == rendered
    assert chat.reply_text(reply) == "```Left```"


def test_save_and_load_like_any_hf_model(tokenizer, tmp_path):
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=3)
    Policy(model, tokenizer).save(str(tmp_path))
    loaded = load_policy(str(tmp_path))
    ids = torch.tensor([tokenizer(GRID, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded.model(ids).logits)
    assert loaded.chat.open("s", "u") == ChatFormat(tokenizer).open("s", "u")
    # Same seed, same weights; the global RNG is left alone.
    state = torch.random.get_rng_state()
    twin = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_load_policy_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unknown dtype"):
        load_policy("anything", dtype="float8")
