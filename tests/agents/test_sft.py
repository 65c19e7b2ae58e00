"""The warm start: shortest-path demonstrations of training tasks only, rendered as the rollout renders an episode,
a loss on the assistant's tokens alone, and a saved folder that loads and plays."""

import json
import random

import pytest
import torch

import erl_envs  # noqa: F401  (registers the envs)
from erl_agents.config import build_config
from erl_agents.envs import make_env, tiny_corpus
from erl_agents.evaluate import EVAL_SEED_BASE
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer, load_policy
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from erl_agents.sft import (SFTConfig, demonstrations, goal_distances, render_demonstration, sft_loss,
                            shortest_first_moves, solver_moves, train_sft)
from erl_envs.paper_tasks import frozenlake_test_rows
from erl_envs.protocol import instructions_of

UP, DOWN, LEFT, RIGHT = range(4)


@pytest.fixture(scope="module")
def smol_env():
    config = build_config(flags={"preset": "cpu-smol", "env": "ERL-FrozenLake-v0"})
    return make_env(config.env, config.env_kwargs)


@pytest.fixture(scope="module")
def tiny_policy(smol_env):
    tokenizer = build_tiny_tokenizer(tiny_corpus(smol_env, episodes=30), vocab_size=400)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


def test_shortest_first_moves_avoid_holes_and_keep_every_tie(smol_env):
    smol_env.reset(seed=0, options={"map": ["SFF", "FHF", "FFG"]})
    assert sorted(shortest_first_moves(smol_env)) == [DOWN, RIGHT]
    smol_env.reset(seed=0, options={"map": ["SH", "FG"]})
    assert shortest_first_moves(smol_env) == [DOWN]
    # A cell walled in by holes has no distance; the goal's is 0.
    assert goal_distances(["SH", "HG"]) == {(1, 1): 0}
    assert goal_distances(["SFF", "FHF", "FFG"])[(0, 0)] == 4


def test_demonstrations_are_shortest_solutions_of_training_seeds_only(smol_env):
    demos = demonstrations(smol_env, [(i, None) for i in range(40)], seed=0)
    assert len(demos) >= 30
    held_out_texts = set()
    eval_env = make_env("ERL-FrozenLake-v0", {"size": [2, 4], "prompts": "small"})
    for row in frozenlake_test_rows():
        if row["size"] <= 4:
            eval_env.reset(seed=row["seed"], options={"size": row["size"], "p": row["p"]})
            held_out_texts.add("".join(eval_env.unwrapped.map_rows))
    assert len(held_out_texts) > 20  # the held-out small maps, none of which is demonstrated
    for demo in demos:
        assert 0 <= demo.seed < EVAL_SEED_BASE
        _, info = smol_env.reset(seed=demo.seed)
        assert "".join(smol_env.unwrapped.map_rows) not in held_out_texts
        assert len(demo.moves) == info["optimal_steps"]
        for move in demo.moves:
            _, _, terminated, _, info = smol_env.step(smol_env.unwrapped.valid_actions[move])
        assert terminated and info["success"]
    with pytest.raises(ValueError, match="not a training seed"):
        demonstrations(smol_env, [(EVAL_SEED_BASE, None)])


def test_ties_between_shortest_first_moves_are_broken_both_ways(smol_env):
    firsts = set()
    for seed in range(20):
        smol_env.reset(seed=0, options={"map": ["SFF", "FHF", "FFG"]})
        firsts.add(solver_moves(smol_env, random.Random(seed))[0])
    assert firsts == {DOWN, RIGHT}


def test_only_the_assistant_tokens_are_trained(smol_env, tiny_policy):
    demo = render_demonstration(tiny_policy, smol_env, demonstrations(smol_env, [(3, None)])[0])
    chat, tokenizer = tiny_policy.chat, tiny_policy.tokenizer
    # The masked spans are exactly the replies: each move's action string and its end-of-turn token.
    spans, current = [], []
    for token, trained in zip(demo.tokens, demo.mask):
        if trained:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    spans.append(current) if current else None
    actions = smol_env.unwrapped.valid_actions
    assert [tokenizer.decode(span[:-1]) for span in spans] == [actions[m] for m in demo.moves]
    assert all(span[-1] == chat.end_of_turn_id for span in spans)
    # The same tokens as a rollout renders: the opening is chat.open(system prompt, first observation).
    obs, _ = smol_env.reset(seed=3)
    opening = chat.open(instructions_of(smol_env), obs)
    assert demo.tokens[:len(opening)] == opening and not any(demo.mask[:len(opening)])
    # The loss sums the trained tokens' negative log-probabilities and nothing else.
    loss, count = sft_loss(tiny_policy.model, [demo], tiny_policy.tokenizer.pad_token_id)
    assert count == sum(demo.mask)
    with torch.no_grad():
        logits = tiny_policy.model(torch.tensor([demo.tokens])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    by_hand = -sum(float(logp[i - 1, demo.tokens[i]]) for i in range(1, len(demo.tokens)) if demo.mask[i])
    assert float(loss.detach()) == pytest.approx(by_hand, rel=1e-4)


@pytest.mark.parametrize("lora_r", [0, 4])
def test_the_warm_start_learns_saves_a_folder_that_loads_and_plays_and_resumes(tmp_path, tiny_policy, smol_env,
                                                                               lora_r):
    model_dir = tmp_path / "tiny"
    tiny_policy.save(str(model_dir))
    config = SFTConfig(model=str(model_dir), demos=12, validation=2, steps=12, batch=4, micro_batch=2, lr=3e-3,
                       lora_r=lora_r, save_at=[6], checkpoint_every=6, output=str(tmp_path / "warm"), threads=1)
    folder = train_sft(config)
    rows = [json.loads(line) for line in (tmp_path / "warm" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 12 and losses[-1] < losses[0]
    assert "validation/success" in rows[0] and "validation/success" in rows[-1]
    assert (tmp_path / "warm" / "loss.png").exists() and (tmp_path / "warm" / "step_6").is_dir()
    assert any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin"))
    policy = load_policy(str(folder), dtype="float32", safetensors_only=True)
    assert not hasattr(policy.model, "peft_config")  # LoRA merged: an ordinary model
    episodes = run_episodes(policy, [smol_env], [(5, None)], [0], SamplingParams(0.7, 0.8, 20, 16),
                            constrained=True, max_seq_len=2048, table=ConstraintTable())
    assert episodes[0].trajectories and episodes[0].generated_tokens > 0
    # Another run into the same folder is refused; a resume with more steps continues from the last checkpoint, and
    # one with other settings is refused.
    with pytest.raises(FileExistsError):
        train_sft(config)
    with pytest.raises(ValueError, match="lr"):
        train_sft(SFTConfig(**{**config.__dict__, "lr": 1e-3, "resume": True}))
    train_sft(SFTConfig(**{**config.__dict__, "steps": 14, "resume": True}))
    rows = [json.loads(line) for line in (tmp_path / "warm" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(15))


def test_sokoban_demonstrations_are_the_solvers_optimal_solutions():
    env = make_env("ERL-Sokoban-v0", {"size": 6, "prompts": "small"})
    demos = demonstrations(env, [(i, None) for i in range(4)])
    assert len(demos) == 4
    for demo in demos:
        _, info = env.reset(seed=demo.seed)
        assert len(demo.moves) == info["optimal_steps"]
        for move in demo.moves:
            _, _, terminated, _, info = env.step(env.unwrapped.valid_actions[move])
        assert terminated and info["success"]
