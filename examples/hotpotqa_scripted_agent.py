"""A scripted agent on ERL-HotpotQA-v0: search the question text, then answer with the top passage's title.

It reads only the observation text, as a language model would, so it exercises the whole loop: question ->
search call -> ranked passages -> boxed answer -> reward and feedback. Comparison questions ("which was founded
first, X or Y?") have a title as answer, so it scores above zero; bridge questions need a second hop it never makes.

    python examples/hotpotqa_scripted_agent.py                         # offline synthetic questions
    python examples/hotpotqa_scripted_agent.py --data path/to/hotpot_dev_distractor_v1.json --mode distractor
    python examples/hotpotqa_scripted_agent.py --data hf:hotpotqa/hotpot_qa:distractor:validation --episodes 100
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import erl_envs  # noqa: E402,F401  (registers the envs)

_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_TOP_HIT = re.compile(r"^\[1\] (.*) \(score -?[\d.]+\)$", re.MULTILINE)


def scripted_reply(observation: str) -> str:
    """Turn 1 (the question): search for it. Any later turn: box the title of the top hit, or give up."""
    question = _QUESTION.search(observation)
    if question:
        return f"<search>{question.group(1)}</search>"
    top = _TOP_HIT.search(observation)
    return f"The top passage is the answer: \\boxed{{{top.group(1)}}}" if top else "I do not know. \\boxed{unknown}"


def run(env: gym.Env, episodes: int, seed: int = 0, verbose: bool = False) -> dict[str, float]:
    """Play ``episodes`` episodes (question ``i`` in order) and return mean reward, exact match and recall."""
    totals = {"reward": 0.0, "em": 0.0, "recall": 0.0}
    num_questions = len(env.unwrapped.questions)
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode, options={"index": episode % num_questions})
        done, reward = False, 0.0
        while not done:
            obs, reward, terminated, truncated, info = env.step(scripted_reply(obs))
            done = terminated or truncated
        totals["reward"] += reward
        totals["em"] += float(info["em"])
        totals["recall"] += info["retrieval_recall"] or 0.0
        if verbose:
            print(f"{info['task_id']}: reward {reward:.2f} | {info['episode_feedback']} | gold {info['gold_answers']}")
    return {key: value / episodes for key, value in totals.items()}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="synthetic", help="'synthetic', a file, or an hf: spec")
    parser.add_argument("--corpus", default=None, help="open mode: a .jsonl of {id, title, text} passages")
    parser.add_argument("--mode", default="open", choices=["open", "distractor"])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    env = gym.make("ERL-HotpotQA-v0", data=args.data, corpus=args.corpus, mode=args.mode)
    summary = run(env, args.episodes, args.seed, verbose=not args.quiet)
    print(f"{args.episodes} episodes: mean reward {summary['reward']:.3f}, exact match {summary['em']:.3f}, "
          f"gold-passage recall {summary['recall']:.3f}")
    env.close()
    return summary


if __name__ == "__main__":
    main()
