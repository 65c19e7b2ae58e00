"""ReflectionWrapper: the ERL episode on foreign toy text envs, on FrozenLake, and in vector envs."""

import json
import random
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import erl_envs
from erl_envs import protocol
from erl_envs.grid import prompts as grid_prompts
from erl_envs.qa import prompts as qa_prompts
from erl_envs.reflection import prompts as reflection_prompts
from erl_envs.reflection.memory import ReflectionMemory, RetrievalMemory
from erl_envs.protocol import FreeText
from erl_envs.reflection import (
    ReflectionAsyncVectorEnv,
    ReflectionSyncVectorEnv,
    ReflectionWrapper,
    extract_prompt,
    to_jsonable,
)
from erl_envs.reflection.reflectors import RuleReflector
from erl_envs.reflection.trace import ReflectionRequest
from erl_envs.reflection.wrapper import (CHARS_PER_TOKEN, DEFAULT_MAX_REFLECTION_CHARS, MAX_REFLECTION_CHARS,
                                         reflection_char_limit)
from paths import ROOT


class Corridor(gym.Env):
    """A foreign env with only the required protocol: walk "left"/"right" to the goal at the right end.

    Each seed gives a room number and a start cell, so instances are easy to tell apart.
    """

    def __init__(self, length=5, max_steps=4, numpy_info=False):
        self.length = length
        self.max_steps = max_steps
        self.numpy_info = numpy_info
        self.observation_space = spaces.Text(200)
        self.action_space = spaces.Text(200)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.room = int(self.np_random.integers(1_000_000))
        self.pos = int(self.np_random.integers(0, self.length - 1))
        if options and "start" in options:
            self.pos = options["start"]
        self.steps = 0
        return self._obs(), {}

    def _obs(self):
        return f"Room {self.room}. You are at {self.pos}. The goal is at {self.length - 1}."

    def step(self, action):
        self.steps += 1
        move = action.strip().lower()
        if move == "right":
            self.pos = min(self.pos + 1, self.length - 1)
        elif move == "left":
            self.pos = max(self.pos - 1, 0)
        terminated = self.pos == self.length - 1
        truncated = not terminated and self.steps >= self.max_steps
        info = {}
        if self.numpy_info:
            info = {"pos": np.int64(self.pos), "cell": (self.pos, 0), "seen": np.arange(3), "half": np.float32(0.5),
                    "nan": float("nan"), "flag": np.bool_(True), "nested": {1: {"set": {2, 1}}}}
        return self._obs(), float(terminated), terminated, truncated, info


class PartialCredit(gym.Env):
    """A one-turn QA-like env: "answer: X"; partial credit 0.5 for "almost", success only for "exact"."""

    prompt_style = "qa"
    instructions = "Answer in one turn as 'answer: X'."

    def __init__(self):
        self.observation_space = spaces.Text(200)
        self.action_space = spaces.Text(200)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.q = int(self.np_random.integers(100))
        return f"Question {self.q}", {"task_id": f"q{self.q}", "task_text": f"question number {self.q}"}

    def step(self, action):
        answer = action.split(":", 1)[-1].strip()
        reward = {"exact": 1.0, "almost": 0.5}.get(answer, 0.0)
        info = {"success": answer == "exact", "feedback": f"answered {answer!r}",
                "episode_feedback": "Answered correctly." if answer == "exact" else "Answered wrongly."}
        return "done", reward, True, False, info


class Drifting(Corridor):
    """Not deterministic in its seed: the room number ignores np_random."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.room = random.randrange(10**9)
        return self._obs(), info


def play(env, actions):
    """Step through ``actions`` until a step starts a new conversation or ends the episode."""
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated or info["new_conversation"]:
            return obs, reward, terminated, truncated, info
    raise AssertionError("the actions ran out before the attempt ended")


def fail_attempt(env):
    return play(env, ["left"] * 10)


def succeed_attempt(env):
    return play(env, ["right"] * 10)


GOOD_REFLECTION = "Thinking...\n<prompt>Always answer 'right'.</prompt>"


# ----------------------------------------------------------------------------- the episode


def test_reset_gives_attempt1_with_initial_instructions():
    env = ReflectionWrapper(Corridor(), memory=ReflectionMemory("remembered rules"))
    obs, info = env.reset(seed=5)
    assert info["phase"] == "attempt1" and env.phase == "attempt1"
    assert info["system_prompt"] == protocol.GENERIC_INSTRUCTIONS  # memory is never used on attempt 1
    assert info["new_conversation"] is True
    assert info["task_id"] == "seed-5" and info["episode_seed"] == 5
    assert info["env_info"] == {}
    assert info["task_text"] == obs
    assert env.observation_space.contains(obs)


def test_success_on_attempt1_ends_the_episode():
    env = ReflectionWrapper(Corridor())
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = succeed_attempt(env)
    assert terminated and not truncated and reward == 1.0
    assert info["attempt"] == 1 and info["phase"] == "attempt1" and info["new_conversation"] is False
    record = info["record"]
    assert record["gated"] is True and record["attempt2"] is None and record["reflection"] is None
    assert record["r1"] == 1.0 and record["r2"] is None and record["attempt1"]["success"] is True
    assert record["memory_prompt_used"] is None and record["memory_updated"] is False


def test_failure_below_the_gate_asks_for_a_reflection():
    env = ReflectionWrapper(Corridor(max_steps=3))
    first, _ = env.reset(seed=2)
    steps = [env.step("left") for _ in range(2)]
    assert all(not s[2] and not s[3] and s[4]["phase"] == "attempt1" and s[4]["attempt"] == 1 for s in steps)
    assert all(s[4]["new_conversation"] is False and s[4]["step_info"] == {} for s in steps)
    obs, reward, terminated, truncated, info = env.step("jump")
    assert not terminated and not truncated and reward == 0.0
    assert info["phase"] == "reflect" and info["attempt"] == 1 and info["new_conversation"] is True
    assert info["system_prompt"] == reflection_prompts.GENERIC_REFLECTION_INSTRUCTIONS
    # The request: the base prompt, every step (observation, action, reward, effect, done, comment), the outcome.
    assert obs.startswith("# The instructions you were given\n" + protocol.GENERIC_INSTRUCTIONS)
    assert obs.count("## Step ") == 3 and first in obs
    assert "Action:\njump\nReward: 0. Took effect: yes. Done: yes.\nComment: reward 0" in obs
    assert "Reward: 0. Took effect: yes. Done: no." in obs
    assert "Return: 0\nFeedback: The episode ended with return 0." in obs
    assert obs.rstrip().endswith("<prompt>...</prompt>.")


def test_gate_threshold_is_configurable():
    env = ReflectionWrapper(Corridor(), gate_threshold=0.0)
    env.reset(seed=3)
    *_, info = fail_attempt(env)
    assert info["record"]["gated"] is True and info["record"]["r1"] == 0.0


def test_gate_uses_the_envs_success_over_the_return():
    env = ReflectionWrapper(PartialCredit(), gate_threshold=0.5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("answer: almost")
    # Return 0.5 reaches the threshold, but the env says the answer is not a success (F1 credit, no exact match).
    assert reward == 0.5 and not terminated and info["phase"] == "reflect"
    assert info["system_prompt"] == reflection_prompts.QA_REFLECTION_INSTRUCTIONS
    assert "Feedback: Answered wrongly." in obs and "Comment: answered 'almost'" in obs
    obs, reward, terminated, truncated, info = env.step("<prompt>Answer exactly.</prompt>")
    assert info["system_prompt"] == "Answer exactly.\n" + qa_prompts.QA_FORMAT_REMINDER
    *_, info = env.step("answer: exact")
    assert info["record"]["attempt2"]["success"] is True and info["record"]["r2"] == 1.0


def test_reflect_step_starts_attempt2_on_the_same_instance():
    env = ReflectionWrapper(Corridor())
    first, info0 = env.reset(seed=11)
    fail_attempt(env)
    obs, reward, terminated, truncated, info = env.step(GOOD_REFLECTION)
    assert obs == first  # identical initial observation: same room, same start
    assert reward == 0.0 and not terminated and not truncated
    assert info["phase"] == "attempt2" and info["attempt"] is None and info["new_conversation"] is True
    assert info["system_prompt"] == "Always answer 'right'.\n" + reflection_prompts.GENERIC_FORMAT_REMINDER
    assert info["reflection_fallback"] is False and info["reflection_fallback_reason"] == ""
    assert info["episode_seed"] == info0["episode_seed"]
    obs, reward, terminated, truncated, info = succeed_attempt(env)
    assert terminated and info["attempt"] == 2 and info["phase"] == "attempt2"
    record = info["record"]
    assert record["same_start"] is True and record["gated"] is False
    assert record["attempt2"]["observations"][0] == record["attempt1"]["observations"][0] == first
    assert record["attempt2"]["system_prompt"] == "Always answer 'right'.\n" + reflection_prompts.GENERIC_FORMAT_REMINDER
    assert record["reflection"]["text"] == GOOD_REFLECTION
    assert record["reflection"]["prompt"] == "Always answer 'right'."
    assert record["r1"] == 0.0 and record["r2"] == 1.0


def test_unseeded_resets_draw_a_seed_and_still_replay_the_instance():
    env = ReflectionWrapper(Corridor())
    first, info = env.reset()
    fail_attempt(env)
    obs, *_ = env.step(GOOD_REFLECTION)
    assert obs == first
    env.reset(seed=7)
    seeds = [env.reset()[1]["episode_seed"] for _ in range(3)]
    other = ReflectionWrapper(Corridor())
    other.reset(seed=7)
    assert seeds == [other.reset()[1]["episode_seed"] for _ in range(3)]  # seeded generator: reproducible


def test_same_seed_same_instance_across_wrappers_and_as_the_bare_env():
    a, b = ReflectionWrapper(Corridor()), ReflectionWrapper(Corridor())
    obs_a, _ = a.reset(seed=123)
    obs_b, _ = b.reset(seed=123)
    bare, _ = Corridor().reset(seed=123)
    assert obs_a == obs_b == bare
    assert a.reset(seed=124)[0] != obs_a


def test_options_are_replayed_on_attempt2():
    env = ReflectionWrapper(Corridor())
    first, _ = env.reset(seed=4, options={"start": 0})
    assert "You are at 0." in first
    fail_attempt(env)
    obs, *_ , info = env.step(GOOD_REFLECTION)
    assert obs == first
    *_, info = succeed_attempt(env)
    assert info["record"]["options"] == {"start": 0}


def test_missing_prompt_tags_fall_back_to_the_base_prompt():
    env = ReflectionWrapper(Corridor())
    env.reset(seed=1)
    fail_attempt(env)
    obs, reward, terminated, truncated, info = env.step("I should go right next time.")
    assert info["reflection_fallback"] is True and "no complete <prompt>" in info["reflection_fallback_reason"]
    assert info["system_prompt"] == protocol.GENERIC_INSTRUCTIONS + "\n" + reflection_prompts.GENERIC_FORMAT_REMINDER
    *_, info = succeed_attempt(env)
    assert info["record"]["reflection"]["fallback"] is True
    assert info["record"]["reflection"]["prompt"] == protocol.GENERIC_INSTRUCTIONS


@pytest.mark.parametrize("text, expected, reason", [
    ("<prompt>a</prompt> then <PROMPT>\n b \n</Prompt>", "b", ""),
    ("I will write <prompt>...</prompt>. <prompt>real rules</prompt><prompt> </prompt>", "real rules", ""),
    ("<prompt>  </prompt>", None, "empty"),
    ("<prompt>cut off before the closing tag", None, "no complete"),
    ("   \n ", None, "the reflection is empty"),
])
def test_extract_prompt(text, expected, reason):
    prompt, why = extract_prompt(text)
    assert prompt == expected and reason in why


def test_step_info_and_reward_belong_to_the_right_attempt():
    env = ReflectionWrapper(Corridor(numpy_info=True))
    env.reset(seed=9)
    rewards = []
    while True:
        phase = env.phase
        action = {"attempt1": "left", "reflect": GOOD_REFLECTION, "attempt2": "right"}[phase]
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append((phase, info["attempt"], reward, "step_info" in info))
        if terminated or truncated:
            break
    assert all(att == {"attempt1": 1, "reflect": None, "attempt2": 2}[ph] for ph, att, _, _ in rewards)
    assert all(has == (ph != "reflect") for ph, _, _, has in rewards)
    assert rewards[-1][2] == 1.0 and sum(r for _, _, r, _ in rewards) == 1.0


def test_record_is_json_serialisable_with_numpy_infos():
    env = ReflectionWrapper(Corridor(numpy_info=True), memory=ReflectionMemory())
    env.reset(seed=9, options={"start": np.int64(0)})
    fail_attempt(env)
    env.step(GOOD_REFLECTION)
    *_, info = succeed_attempt(env)
    record = info["record"]
    text = json.dumps(record, allow_nan=False)
    back = json.loads(text)
    assert back == record
    step = back["attempt1"]["infos"][0]
    assert step["pos"] == 0 and step["cell"] == [0, 0] and step["seen"] == [0, 1, 2] and step["half"] == 0.5
    assert step["nan"] == "nan" and step["flag"] is True and step["nested"] == {"1": {"set": [1, 2]}}
    assert back["options"] == {"start": 0}
    for key in ("task_id", "episode_seed", "options", "gated", "attempt1", "attempt2", "reflection", "r1", "r2",
                "memory_updated", "memory_prompt_used"):
        assert key in back
    for key in ("system_prompt", "observations", "actions", "rewards", "infos", "return", "success"):
        assert key in back["attempt1"] and key in back["attempt2"]
    assert len(back["attempt1"]["observations"]) == len(back["attempt1"]["actions"]) + 1
    for key in ("request", "system_prompt", "text", "prompt", "fallback"):
        assert key in back["reflection"]


def test_to_jsonable_handles_odd_values():
    class Thing:
        def __repr__(self):
            return "<thing>"

    out = to_jsonable({(1, 2): Thing(), "b": b"\xff ok", "inf": np.float64("-inf")})
    json.dumps(out, allow_nan=False)
    assert out["[1, 2]"] == "<thing>"
    assert out["b"] == "\ufffd ok" and out["inf"] == "-inf"


# ----------------------------------------------------------------------------- bad input


def test_non_str_actions_raise_type_error_naming_the_type():
    env = ReflectionWrapper(Corridor())
    env.reset(seed=0)
    for bad, name in ((None, "NoneType"), (3, "int"), (["left"], "list")):
        with pytest.raises(TypeError, match=name):
            env.step(bad)
    with pytest.raises(TypeError, match="bytes.*decode"):
        env.step(b"left")
    fail_attempt(env)
    assert env.phase == "reflect"
    with pytest.raises(TypeError, match="bytes.*decode"):
        env.step("<prompt>ok</prompt>".encode("utf-16"))  # non-UTF-8 bytes
    with pytest.raises(TypeError, match="int"):
        env.step(0)
    assert env.phase == "reflect"  # the bad input changed nothing
    obs, *_, info = env.step("<prompt>still fine</prompt>")
    assert info["phase"] == "attempt2"


def test_a_one_megabyte_reflection_is_truncated_before_extraction():
    env = ReflectionWrapper(Corridor(), max_reflection_chars=1000)
    env.reset(seed=0)
    fail_attempt(env)
    huge = "<prompt>Go right.</prompt>" + "x" * 1_000_000
    obs, reward, terminated, truncated, info = env.step(huge)
    assert info["reflection_fallback"] is False and info["system_prompt"].startswith("Go right.\n")
    *_, info = succeed_attempt(env)
    reflection = info["record"]["reflection"]
    assert reflection["truncated"] is True and reflection["original_chars"] == len(huge)
    assert len(reflection["text"]) == 1000
    # A prompt that only starts after the cut is missing: fallback, no crash.
    env.reset(seed=0)
    fail_attempt(env)
    *_, info = env.step("y" * 1_000_000 + "<prompt>too late</prompt>")
    assert info["reflection_fallback"] is True


def test_default_cut_is_max_reflection_chars():
    env = ReflectionWrapper(Corridor())
    env.reset(seed=0)
    fail_attempt(env)
    env.step("z" * 1_000_000)
    *_, info = succeed_attempt(env)
    assert len(info["record"]["reflection"]["text"]) == 20_000


def test_empty_and_undecodable_reflections_are_handled():
    env = ReflectionWrapper(Corridor(), memory=ReflectionMemory())
    env.reset(seed=0)
    fail_attempt(env)
    *_, info = env.step("")
    assert info["reflection_fallback"] is True and "empty" in info["reflection_fallback_reason"]
    *_, info = succeed_attempt(env)
    assert info["record"]["memory_updated"] is False  # a fallback is never remembered

    # Bytes decoded leniently keep lone surrogates; the record must still be writable as UTF-8.
    text = b"<prompt>go \xff\xfe right</prompt>".decode("utf-8", errors="surrogateescape")
    env.reset(seed=0)
    fail_attempt(env)
    *_, info = env.step(text)
    assert info["reflection_fallback"] is False
    *_, info = succeed_attempt(env)
    json.dumps(info["record"], ensure_ascii=False).encode("utf-8")
    assert env.memory.get() == "go ?? right"


def test_stepping_before_reset_or_after_the_end_raises():
    env = ReflectionWrapper(Corridor())
    with pytest.raises(gym.error.ResetNeeded, match="before reset"):
        env.step("left")
    env.reset(seed=1)
    succeed_attempt(env)
    assert env.phase == "done"
    with pytest.raises(gym.error.ResetNeeded, match="ended"):
        env.step("left")


@pytest.mark.parametrize("stop_in", ["attempt1", "reflect", "attempt2"])
def test_reset_mid_episode_starts_a_fresh_episode(stop_in):
    env = ReflectionWrapper(Corridor(), memory=ReflectionMemory())
    env.reset(seed=1)
    if stop_in != "attempt1":
        fail_attempt(env)
    if stop_in == "attempt2":
        env.step(GOOD_REFLECTION)
        env.step("left")
    assert env.phase == stop_in
    first, info = env.reset(seed=2)
    assert info["phase"] == "attempt1" and info["episode_seed"] == 2
    *_, info = succeed_attempt(env)
    record = info["record"]
    assert record["attempt1"]["observations"][0] == first and record["gated"] is True
    assert record["reflection"] is None and env.memory.get() is None


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="no_reflection"):
        ReflectionWrapper(Corridor(), no_reflection=True, reflector=RuleReflector())
    with pytest.raises(TypeError, match="memory"):
        ReflectionWrapper(Corridor(), memory="slot")
    with pytest.raises(TypeError, match="reflector"):
        ReflectionWrapper(Corridor(), reflector="rules")
    with pytest.raises(ValueError, match="max_reflection_chars"):
        ReflectionWrapper(Corridor(), max_reflection_chars=0)
    with pytest.raises(TypeError, match="gate_threshold"):
        ReflectionWrapper(Corridor(), gate_threshold="high")
    with pytest.raises(ValueError, match="non-negative"):
        ReflectionWrapper(Corridor()).reset(seed=-1)


def test_overridden_prompts_are_used():
    env = ReflectionWrapper(Corridor(), reflection_instructions="REFLECT NOW", format_reminder="SAY right")
    env.reset(seed=0)
    *_, info = fail_attempt(env)
    assert info["system_prompt"] == "REFLECT NOW"
    *_, info = env.step("<prompt>P</prompt>")
    assert info["system_prompt"] == "P\nSAY right"


def test_a_nondeterministic_env_is_reported():
    env = ReflectionWrapper(Drifting())
    env.reset(seed=0)
    fail_attempt(env)
    with pytest.warns(RuntimeWarning, match="deterministic"):
        env.step(GOOD_REFLECTION)
    *_, info = succeed_attempt(env)
    assert info["record"]["same_start"] is False


# ----------------------------------------------------------------------------- memory rules


def run_episode(env, seed, attempt1, reflection, attempt2):
    env.reset(seed=seed)
    play(env, attempt1)
    if env.phase == "reflect":
        env.step(reflection)
    return play(env, attempt2)[-1]["record"]


def test_memory_is_updated_only_when_attempt2_succeeds_with_a_real_prompt():
    memory = ReflectionMemory()
    env = ReflectionWrapper(Corridor(), memory=memory)
    record = run_episode(env, 0, ["left"] * 9, "<prompt>first</prompt>", ["left"] * 9)
    assert record["memory_updated"] is False and memory.get() is None
    record = run_episode(env, 0, ["left"] * 9, "<prompt>second</prompt>", ["right"] * 9)
    assert record["memory_updated"] is True and memory.get() == "second"
    record = run_episode(env, 0, ["left"] * 9, "no tags", ["right"] * 9)
    assert record["memory_updated"] is False and memory.get() == "second"


@pytest.mark.parametrize(
    "text, project, paper",
    [
        ("<prompt>draft</prompt> on second thought <prompt>final</prompt>", "final", "draft"),
        ("<prompt>  </prompt><prompt>real</prompt>", "real", None),  # an empty first block is a fallback there
        ("<prompt>only</prompt>", "only", "only"),
        ("no tags", None, None),
    ],
)
def test_paper_rule_keeps_the_first_prompt_block(text, project, paper):
    assert extract_prompt(text)[0] == project and extract_prompt(text, "paper")[0] == paper


def test_paper_memory_rule_stores_the_retry_prompt_with_its_reminder_fallbacks_included():
    """The reference stores what the successful retry played with: the rulebook plus the format reminder, and the
    base prompt plus reminder when the reflection had no <prompt> block; the reminder is never appended twice."""
    memory = ReflectionMemory()
    env = ReflectionWrapper(Corridor(), memory=memory, memory_rule="paper")
    reminder = reflection_prompts.GENERIC_FORMAT_REMINDER
    record = run_episode(env, 0, ["left"] * 9, "<prompt>first</prompt> <prompt>second</prompt>", ["right"] * 9)
    assert record["memory_updated"] is True and memory.get() == f"first\n\n{reminder}"
    assert record["attempt2"]["system_prompt"] == memory.get()
    # A fallback retry that succeeds is stored too: the base prompt (here the memory, reminder and all), once.
    record = run_episode(env, 0, ["left"] * 9, "no tags", ["right"] * 9)
    assert record["reflection"]["fallback"] and record["memory_updated"] is True
    assert memory.get() == f"first\n\n{reminder}" and memory.get().count(reminder) == 1
    fresh = ReflectionMemory()
    env = ReflectionWrapper(Corridor(), memory=fresh, memory_rule="paper")
    run_episode(env, 0, ["left"] * 9, "<prompt> </prompt>", ["right"] * 9)  # an empty first block: the fallback
    assert fresh.get() == f"{protocol.instructions_of(Corridor())}\n\n{reminder}"
    # A failed retry stores nothing, whatever the rule.
    record = run_episode(env, 0, ["left"] * 9, "<prompt>bad</prompt>", ["left"] * 9)
    assert record["memory_updated"] is False
    with pytest.raises(ValueError, match="memory_rule"):
        ReflectionWrapper(Corridor(), memory_rule="reference")


def test_paper_memory_rule_on_a_paper_grid_game_keeps_one_reminder():
    """FrozenLake's paper prompts end with the reminder already: a fallback retry plays the initial prompt as is."""
    memory = ReflectionMemory()
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", prompts="paper"), memory=memory, memory_rule="paper")
    obs, info = env.reset(seed=1, options={"map": ["SFG"] * 1 + ["FFF", "FFF"]})
    initial = info["system_prompt"]
    reminder = grid_prompts.PAPER_SET["reminder"]["FrozenLake"]
    while env.phase == "attempt1":
        *_, info = env.step("```Left```")
    *_, info = env.step("I have no idea.")
    assert info["reflection_fallback"] and info["system_prompt"] == initial and initial.endswith(reminder)
    *_, info = env.step("```Right```")
    *_, info = env.step("```Right```")
    assert info["record"]["memory_updated"] and memory.get() == initial


def test_memory_is_the_base_of_the_next_reflection_only():
    memory = ReflectionMemory("REMEMBERED RULEBOOK")
    env = ReflectionWrapper(Corridor(), memory=memory)
    obs, info = env.reset(seed=3)
    assert "REMEMBERED" not in info["system_prompt"]
    obs, *_, info = fail_attempt(env)
    assert obs.startswith("# The instructions you were given\nREMEMBERED RULEBOOK\n")
    *_, info = env.step("no tags at all")  # the fallback is the base prompt, i.e. the memory
    assert info["system_prompt"].startswith("REMEMBERED RULEBOOK\n")
    *_, info = succeed_attempt(env)
    assert info["record"]["memory_prompt_used"] == "REMEMBERED RULEBOOK"
    assert info["record"]["base_prompt_from_memory"] is True


def test_memory_threshold_is_configurable():
    memory = ReflectionMemory()
    env = ReflectionWrapper(Corridor(), memory=memory, memory_threshold=0.0)
    record = run_episode(env, 0, ["left"] * 9, "<prompt>anything</prompt>", ["left"] * 9)
    assert record["r2"] == 0.0 and record["memory_updated"] is True and memory.get() == "anything"


def test_shared_memory_across_wrappers():
    memory = ReflectionMemory()
    a = ReflectionWrapper(Corridor(), memory=memory)
    b = ReflectionWrapper(Corridor(), memory=memory)
    run_episode(a, 0, ["left"] * 9, "<prompt>from a</prompt>", ["right"] * 9)
    b.reset(seed=1)
    obs, *_ = fail_attempt(b)
    assert "from a" in obs


def test_no_memory_ablation_never_reads_or_writes_memory():
    memory = ReflectionMemory("OLD")
    env = ReflectionWrapper(Corridor(), memory=memory, no_memory=True)
    env.reset(seed=0)
    obs, *_ = fail_attempt(env)
    assert "OLD" not in obs and protocol.GENERIC_INSTRUCTIONS in obs
    env.step("<prompt>new</prompt>")
    *_, info = succeed_attempt(env)
    assert info["record"]["memory_updated"] is False and memory.get() == "OLD"
    assert info["record"]["r2"] == 1.0


def test_no_reflection_ablation_gives_attempt2_the_raw_trace():
    memory = ReflectionMemory()
    env = ReflectionWrapper(Corridor(max_steps=2), memory=memory, no_reflection=True)
    first, info0 = env.reset(seed=6)
    env.step("left")
    obs, reward, terminated, truncated, info = env.step("up")
    assert not terminated and not truncated and obs == first
    assert info["phase"] == "attempt2" and info["new_conversation"] is True and info["attempt"] == 1
    system = info["system_prompt"]
    assert system.startswith(protocol.GENERIC_INSTRUCTIONS + "\n\n" + reflection_prompts.NO_REFLECTION_NOTE)
    assert "## Step 1" in system and "## Step 2" in system and "Action:\nup" in system
    *_, info = succeed_attempt(env)
    record = info["record"]
    assert record["reflection"] is None and record["memory_updated"] is False and memory.get() is None
    assert record["attempt2"]["system_prompt"] == system and record["r2"] == 1.0


def test_retrieval_memory_gives_each_task_its_own_reflection():
    memory = RetrievalMemory(capacity=8)
    env = ReflectionWrapper(PartialCredit(), memory=memory)
    seeds = {}
    for seed in range(40):  # find two seeds with different questions
        q = PartialCredit().reset(seed=seed)[1]["task_text"]
        seeds.setdefault(q, seed)
        if len(seeds) == 2:
            break
    (qa, sa), (qb, sb) = seeds.items()
    for seed, rule in ((sa, "rule A"), (sb, "rule B")):
        env.reset(seed=seed)
        env.step("answer: no")
        env.step(f"<prompt>{rule}</prompt>")
        *_, info = env.step("answer: exact")
        assert info["record"]["memory_updated"] is True
    env.reset(seed=sa)
    obs, *_ = env.step("answer: no")
    assert "rule A" in obs and "rule B" not in obs


# ----------------------------------------------------------------------------- reflectors in the loop


def test_a_reflector_runs_inside_the_wrapper():
    calls = []

    def reflector(request):
        calls.append(request)
        return "<prompt>Go right every time.</prompt>"

    env = ReflectionWrapper(Corridor(), reflector=reflector)
    first, _ = env.reset(seed=8)
    obs, reward, terminated, truncated, info = fail_attempt(env)
    assert obs == first and info["phase"] == "attempt2" and info["attempt"] == 1
    assert info["new_conversation"] is True and "step_info" in info
    assert info["system_prompt"].startswith("Go right every time.\n")
    request = calls[0]
    assert isinstance(request, ReflectionRequest) and request.style == "generic"
    assert request.messages()[0] == {"role": "system", "content": reflection_prompts.GENERIC_REFLECTION_INSTRUCTIONS}
    assert request.steps[0].action == "left" and request.total_return == 0.0
    *_, info = succeed_attempt(env)
    assert info["record"]["reflection"]["request"] == request.text
    assert info["record"]["reflection"]["text"] == "<prompt>Go right every time.</prompt>"


def test_a_reflector_returning_non_text_is_an_error():
    env = ReflectionWrapper(Corridor(), reflector=lambda request: None)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="returned NoneType"):
        fail_attempt(env)


def route_from(system_prompt):
    match = re.search(r"route on this board.*?: ([A-Za-z, ]+) \(\d+ moves?\)", system_prompt)
    return match.group(1).split(", ") if match else None


def test_frozen_lake_rule_reflector_episode():
    memory = ReflectionMemory()
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=(4, 6)), memory=memory, reflector=RuleReflector())
    solved = 0
    for seed in range(12):
        first, info = env.reset(seed=seed)
        assert info["system_prompt"] == grid_prompts.GRID_INSTRUCTIONS
        obs, reward, terminated, truncated, info = play(env, ["```Up```"] * 8)
        if terminated or truncated:
            continue  # Up all the way happened to win
        assert obs == first and info["phase"] == "attempt2"
        # The <prompt> tags' content is the new system prompt: the rulebook with its own sections.
        assert "<prompt>" not in info["system_prompt"] and "<game_rules>" in info["system_prompt"]
        assert info["system_prompt"].endswith(grid_prompts.GRID_FORMAT_REMINDER)
        route = route_from(info["system_prompt"])
        *_, info = play(env, [f"```{move}```" for move in route])
        assert info["record"]["r2"] == 1.0 and info["record"]["memory_updated"] is True
        assert info["record"]["same_start"] is True
        json.dumps(info["record"])
        solved += 1
    assert solved >= 6 and "Symbols:" in memory.get()


def test_frozen_lake_agent_written_reflection():
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0"))
    first, _ = env.reset(seed=21)
    obs, reward, terminated, truncated, info = play(env, ["nonsense"] * 8)
    assert info["phase"] == "reflect" and info["system_prompt"] == reflection_prompts.GRID_REFLECTION_INSTRUCTIONS
    assert "Feedback: No valid actions" in obs and "Comment: could not parse the action" in obs
    obs, *_, info = env.step("<prompt>Rules: A is you.</prompt>")
    assert obs == first and info["system_prompt"] == "Rules: A is you.\n" + grid_prompts.GRID_FORMAT_REMINDER


# ----------------------------------------------------------------------------- vector envs


def scripted_action(phase, env_index):
    """Env 0 wins at once (gated), env 1 fails then wins, env 2 fails twice: episodes of different lengths."""
    if phase == "reflect":
        return GOOD_REFLECTION if env_index != 1 else "no tags"
    if phase == "attempt1":
        return "right" if env_index == 0 else "left"
    return "right" if env_index == 1 else "left"


@pytest.mark.parametrize("vector_cls", [ReflectionSyncVectorEnv, ReflectionAsyncVectorEnv])
def test_vector_env_of_wrapped_envs(vector_cls):
    memory = ReflectionMemory()
    n = 3
    envs = vector_cls([lambda: ReflectionWrapper(Corridor(), memory=memory) for _ in range(n)])
    try:
        obs, info = envs.reset(seed=[10, 11, 12])
        assert list(info["phase"]) == ["attempt1"] * n and info["new_conversation"].all()
        phases = list(info["phase"])
        records = [None] * n
        for _ in range(40):
            actions = tuple(scripted_action(phases[i], i) for i in range(n))
            obs, reward, terminated, truncated, info = envs.step(actions)
            phases = list(info["phase"])
            for i in range(n):
                if (terminated[i] or truncated[i]) and records[i] is None:
                    assert info["_record"][i]
                    records[i] = info["record"][i]
            if all(r is not None for r in records):
                break
        assert records[0]["gated"] is True and records[0]["attempt2"] is None
        assert records[1]["reflection"]["fallback"] is True and records[1]["r2"] == 1.0
        assert records[2]["reflection"]["fallback"] is False and records[2]["r2"] == 0.0
        lengths = [len(r["attempt1"]["actions"]) + len((r["attempt2"] or {"actions": []})["actions"]) for r in records]
        assert len(set(lengths)) > 1
        for r in records:
            json.dumps(r)
        assert memory.get() is None  # env 1 succeeded on a fallback, env 2 failed: nothing to remember
    finally:
        envs.close()


def test_sync_vector_env_shares_memory():
    memory = ReflectionMemory()
    envs = ReflectionSyncVectorEnv([lambda: ReflectionWrapper(Corridor(), memory=memory) for _ in range(2)])
    envs.reset(seed=[1, 2])
    phases = ["attempt1", "attempt1"]
    updated = [None, None]
    for _ in range(20):
        actions = tuple({"attempt1": "left", "reflect": f"<prompt>shared {i}</prompt>", "attempt2": "right"}[p]
                        for i, p in enumerate(phases))
        _, _, terminated, truncated, info = envs.step(actions)
        phases = list(info["phase"])
        for i in range(2):
            if (terminated[i] or truncated[i]) and updated[i] is None:
                updated[i] = info["record"][i]["memory_updated"]
        if None not in updated:
            break
    assert updated == [True, True] and memory.get() in ("shared 0", "shared 1") and memory.updates >= 2


def test_spaces_contain_everything_the_wrapper_emits():
    env = ReflectionWrapper(Corridor())
    assert isinstance(env.observation_space, FreeText)
    obs, _ = env.reset(seed=0)
    request, *_ = fail_attempt(env)
    assert env.observation_space.contains(obs) and env.observation_space.contains(request)
    assert env.action_space.contains("\u00e9t\u00e9 <prompt>\u2192</prompt>")
    assert not env.observation_space.contains(b"bytes")
    assert isinstance(env.observation_space.sample(), str)


def test_lazy_export():
    assert erl_envs.ReflectionWrapper is ReflectionWrapper


class Mutating(Corridor):
    """Consumes its options in place, as some envs do."""

    def _take_start(self, options):
        return options.pop("start") if options else None

    def reset(self, *, seed=None, options=None):
        start = self._take_start(options)
        obs, info = super().reset(seed=seed)
        if start is not None:
            self.pos = start
            obs = self._obs()
        return obs, info


def test_an_env_that_edits_its_options_still_replays_the_instance():
    env = ReflectionWrapper(Mutating())
    options = {"start": 0}
    first, _ = env.reset(seed=4, options=options)
    assert options == {"start": 0}  # the caller's dict is untouched too
    fail_attempt(env)
    obs, *_ = env.step(GOOD_REFLECTION)
    assert obs == first and "You are at 0." in obs


def test_check_env_passes_on_the_wrapper():
    from gymnasium.utils.env_checker import check_env

    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0").unwrapped, memory=ReflectionMemory(),
                            reflector=RuleReflector())
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(env, skip_render_check=True)


def test_reflect_demo_runs(capsys, tmp_path):
    import runpy

    demo = runpy.run_path(str(ROOT / "examples" / "reflect_demo.py"))
    record = demo["main"](["--seed", "0", "--size", "4", "--memory", str(tmp_path / "memory.json")])
    out = capsys.readouterr().out
    assert record["r1"] == 0.0 and record["r2"] == 1.0 and record["memory_updated"] is True
    assert "RuleReflector wrote this system prompt" in out and "<game_rules>" in out and "[attempt2]" in out
    assert ReflectionMemory.load(tmp_path / "memory.json").get() == record["reflection"]["prompt"]


def test_a_failing_reflector_leaves_the_episode_waiting_for_a_reflection():
    def broken(request):
        raise ConnectionError("model server down")

    env = ReflectionWrapper(Corridor(), reflector=broken)
    first, _ = env.reset(seed=2)
    with pytest.raises(ConnectionError):
        fail_attempt(env)
    assert env.phase == "reflect"
    obs, *_, info = env.step("<prompt>written by hand</prompt>")
    assert obs == first and info["system_prompt"].startswith("written by hand\n")


# ----------------------------------------------------------------------------- what mutation testing found unpinned


class _RecordingMemory(ReflectionMemory):
    """The paper's slot, recording what each update was filed under."""

    def __init__(self):
        super().__init__()
        self.filed_under = []

    def update(self, prompt, task_text=None):
        self.filed_under.append(task_text)
        super().update(prompt, task_text=task_text)


def test_the_reflection_request_carries_the_attempts_facts():
    requests = []
    env = ReflectionWrapper(PartialCredit(), reflector=lambda r: requests.append(r) or "<prompt>Say exact.</prompt>",
                            gate_threshold=0.6)
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("answer: almost")
    (request,) = requests
    assert request.task_id == info["task_id"] and request.task_id.startswith("q") and request.task_text == "question number " + request.task_id[1:]
    assert (request.total_return, request.success, request.feedback) == (0.5, False, "Answered wrongly.")
    assert request.final_observation == "done"  # the attempt's last observation, not its first
    assert request.symbols is None
    # Mid-episode infos carry the current attempt's system prompt; the last one the retry's.
    assert info["system_prompt"].startswith("Say exact.")
    *_, info = env.step("answer: exact")
    assert info["system_prompt"].startswith("Say exact.")
    record = info["record"]
    assert (record["task_text"], record["style"]) == (request.task_text, "qa")
    assert record["reflection"]["fallback_reason"] == ""


def test_the_task_text_is_the_envs_when_given_and_files_the_memory():
    memory = _RecordingMemory()
    env = ReflectionWrapper(PartialCredit(), memory=memory)
    env.reset(seed=2)
    env.step("answer: wrong")
    env.step("<prompt>Say exact.</prompt>")
    *_, info = env.step("answer: exact")
    assert memory.filed_under == [info["record"]["task_text"]] and memory.filed_under[0].startswith("question number")
    # An env without a task text files the reflection under its first observation.
    memory = _RecordingMemory()
    env = ReflectionWrapper(Corridor(), memory=memory)
    first, _ = env.reset(seed=4)
    fail_attempt(env)
    env.step(GOOD_REFLECTION)
    succeed_attempt(env)
    assert memory.filed_under == [first]


def test_a_nondeterministic_env_is_reported_once_per_wrapper():
    env = ReflectionWrapper(Drifting())
    with pytest.warns(RuntimeWarning, match="deterministic") as caught:
        for seed in (0, 1):
            env.reset(seed=seed)
            fail_attempt(env)
            env.step(GOOD_REFLECTION)
            succeed_attempt(env)
    assert len([w for w in caught if "deterministic" in str(w.message)]) == 1


@pytest.mark.parametrize("length", [20_007, 25_019, 40_027])
def test_a_reflection_within_its_token_budget_is_read_whole(length):
    """The reference reads the whole reflection: a long one (the paper preset allows 10,240 tokens) whose <prompt>
    block comes at its end is read under the limit the trainer derives from the budget, and cut (a fallback to the
    base prompt) under the default."""
    block = "<prompt>Go right at the end.</prompt>"
    text = "r" * (length - len(block)) + block
    assert len(text) == length
    for limit, fallback in ((reflection_char_limit(10_240), False), (DEFAULT_MAX_REFLECTION_CHARS, True)):
        env = ReflectionWrapper(Corridor(), max_reflection_chars=limit)
        env.reset(seed=0)
        fail_attempt(env)
        info = env.step(text)[-1]
        assert info["reflection_fallback"] is fallback
        assert info["system_prompt"].startswith("Go right at the end.\n") is not fallback
        *_, info = succeed_attempt(env)
        assert info["record"]["reflection"]["truncated"] is fallback


def test_the_reflection_char_limit_follows_the_token_budget_within_bounds():
    assert reflection_char_limit(10_240) == 10_240 * CHARS_PER_TOKEN == 327_680
    assert reflection_char_limit(8_192) == 262_144
    assert reflection_char_limit(32) == DEFAULT_MAX_REFLECTION_CHARS  # never below the default
    assert reflection_char_limit(1 << 22) == MAX_REFLECTION_CHARS == 1 << 20  # the work stays bounded
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
            reflection_char_limit(bad)
    # Past the limit a reflection is still cut, whatever the budget.
    env = ReflectionWrapper(Corridor(), max_reflection_chars=reflection_char_limit(1 << 22))
    env.reset(seed=0)
    fail_attempt(env)
    env.step("z" * (MAX_REFLECTION_CHARS + 5))
    *_, info = succeed_attempt(env)
    assert len(info["record"]["reflection"]["text"]) == MAX_REFLECTION_CHARS


def test_a_reflection_of_exactly_max_reflection_chars_is_not_cut():
    text = "<prompt>" + "r" * 40 + "</prompt>"
    env = ReflectionWrapper(Corridor(), max_reflection_chars=len(text))
    env.reset(seed=0)
    fail_attempt(env)
    env.step(text)
    *_, info = succeed_attempt(env)
    assert info["record"]["reflection"]["truncated"] is False


@pytest.mark.parametrize("vector_cls", [ReflectionSyncVectorEnv, ReflectionAsyncVectorEnv])
def test_vector_infos_keep_every_sub_envs_whole_record_in_one_step(vector_cls):
    """Two sub-envs ending on the same step both keep their record; a third, still playing, has None and mask False."""
    envs = vector_cls([lambda: ReflectionWrapper(PartialCredit()) for _ in range(2)] +
                      [lambda: ReflectionWrapper(Corridor())])
    try:
        # Observations quote model text of any length: they come back through pipes, never shared-memory slots.
        assert vector_cls is ReflectionSyncVectorEnv or envs.shared_memory is False
        envs.reset(seed=[5, 6, 7])
        _, _, terminated, _, info = envs.step(("answer: exact", "answer: exact", "left"))
        assert list(terminated) == [True, True, False]
        assert info["_record"].dtype == np.bool_ and list(info["_record"]) == [True, True, False]
        assert info["record"].dtype == object and info["record"][2] is None
        assert [info["record"][i]["r1"] for i in (0, 1)] == [1.0, 1.0]
        assert info["record"][0]["task_id"] != info["record"][1]["task_id"]  # each sub-env's own record
        # The step info of the playing sub-env is kept whole too, beside the others'.
        assert list(info["_step_info"]) == [True, True, True] and info["step_info"][0]["success"] is True
        assert list(info["_phase"]) == [True, True, True]  # ordinary keys still go through Gymnasium's own merge
    finally:
        envs.close()


def test_env_spec_records_every_constructor_argument_so_the_wrapped_env_can_be_rebuilt():
    memory, reflector = ReflectionMemory(), RuleReflector()
    arguments = dict(memory=memory, gate_threshold=0.75, memory_threshold=0.5, reflector=reflector, no_memory=False,
                     no_reflection=False, reflection_instructions="Reflect.", format_reminder="Reply in a fence.",
                     max_reflection_chars=500, max_trace_field_chars=300, memory_rule="paper", trace_rule="project")
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=3), **arguments)
    spec = env.spec.additional_wrappers[-1]
    assert spec.entry_point.endswith(":ReflectionWrapper") and spec.kwargs.keys() == arguments.keys()
    # Gymnasium keeps copies of the arguments: objects by type, values as given.
    assert isinstance(spec.kwargs["memory"], ReflectionMemory) and isinstance(spec.kwargs["reflector"], RuleReflector)
    plain = {k: v for k, v in arguments.items() if k not in ("memory", "reflector")}
    assert {k: spec.kwargs[k] for k in plain} == plain
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, ReflectionWrapper) and (rebuilt.gate_threshold, rebuilt.memory_threshold) == (0.75, 0.5)
    assert isinstance(rebuilt.reflector, RuleReflector) and rebuilt.max_reflection_chars == 500


def test_spaces_are_free_text_sized_for_the_inner_env_and_argument_checks_are_exact():
    from erl_envs.protocol import TEXT_CHARSET

    env = ReflectionWrapper(Corridor())  # inner observation space: Text(200)
    for space, length in ((env.observation_space, 4096), (env.action_space, 4096)):
        assert isinstance(space, FreeText) and (space.max_length, space.min_length) == (length, 0)
        assert set(space.character_set) == set(TEXT_CHARSET)
    big = Corridor()
    big.observation_space = spaces.Text(10_000)
    assert ReflectionWrapper(big).observation_space.max_length == 10_000
    # The smallest accepted sizes, and the checks' messages naming the argument and the type.
    tiny = ReflectionWrapper(Corridor(), max_reflection_chars=1, max_trace_field_chars=1)
    assert (tiny.max_reflection_chars, tiny.max_trace_field_chars) == (1, 1)
    assert ReflectionWrapper(Corridor(), max_trace_field_chars=None).max_trace_field_chars is None
    for name in ("max_reflection_chars", "max_trace_field_chars"):
        for bad in (0, True, 2.5):
            with pytest.raises(ValueError, match=name):
                ReflectionWrapper(Corridor(), **{name: bad})
    with pytest.raises(TypeError, match="memory_threshold must be a number, got str"):
        ReflectionWrapper(Corridor(), memory_threshold="high")
    with pytest.raises(ValueError, match="gate_threshold must not be NaN"):
        ReflectionWrapper(Corridor(), gate_threshold=float("nan"))
    with pytest.raises(TypeError, match="format_reminder must be a str or None, got int"):
        ReflectionWrapper(Corridor(), format_reminder=3)
    with pytest.raises(TypeError, match="memory.*got MissingUpdate"):
        ReflectionWrapper(Corridor(), memory=type("MissingUpdate", (), {"get": lambda self, t=None: None})())


@pytest.mark.parametrize("prompts", ["lenient", "paper", "small"])
def test_max_trace_field_chars_reaches_the_trace_of_every_prompt_set(prompts):
    requests = []
    inner = gym.make("ERL-FrozenLake-v0", size=4, prompts=prompts)
    env = ReflectionWrapper(inner, reflector=lambda r: requests.append(r) or "<prompt>Go.</prompt>",
                            max_trace_field_chars=12)
    for seed in range(20):  # the first seed whose first attempt fails by walking into the top wall
        env.reset(seed=seed)
        for _ in range(50):
            *_, terminated, truncated, info = env.step("```Up```")
            if requests or terminated or truncated:
                break
        if requests:
            break
    assert "characters omitted ...]" in requests[0].text


# ----------------------------------------------------------------------------- smaller facts, one test each


class Pit(Corridor):
    """Corridor with a pit: "jump" ends the episode at once, unsolved (a terminated failure)."""

    def step(self, action):
        if action.strip() == "jump":
            self.steps += 1
            return self._obs(), 0.0, True, False, {}
        return super().step(action)


class Positions(Corridor):
    """Reports Sokoban's position facts, and nothing else, after each step."""

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"position": (0, self.pos), "boxes": [(1, 2), (3, 4)],
                                                    "goals": [(5, 6)]}


def test_the_request_shows_the_attempts_last_observation_and_which_step_ended_it():
    requests = []
    env = ReflectionWrapper(Pit(), reflector=lambda r: requests.append(r) or GOOD_REFLECTION)
    env.reset(seed=0)
    observations = [env.step(a)[0] for a in ("left", "right")]
    env.step("jump")
    (request,) = requests
    assert request.final_observation == observations[-1] and len(request.steps) == 3
    assert [s.terminated for s in request.steps] == [False, False, True]
    assert [s.truncated for s in request.steps] == [False, False, False]


def test_position_facts_are_written_into_the_trace():
    requests = []
    env = ReflectionWrapper(Positions(), reflector=lambda r: requests.append(r) or GOOD_REFLECTION)
    env.reset(seed=0)
    fail_attempt(env)
    line = requests[0].steps[0].positions
    assert line.startswith("After it: player at (0, ") and line.endswith(
        "); boxes at (1, 2), (3, 4); goals at (5, 6) (row, column from the top left, counting from 0).")


def test_the_grid_symbols_reach_the_request():
    requests = []
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=4),
                            reflector=lambda r: requests.append(r) or GOOD_REFLECTION)
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(40):
            *_, terminated, truncated, info = env.step("Left")
            if info["new_conversation"] or terminated or truncated:
                break
        if requests:
            break
    assert requests and requests[0].symbols is env.unwrapped.symbols


def test_info_system_prompts_and_env_infos_on_every_path():
    env = ReflectionWrapper(Corridor())
    obs, info = env.reset(seed=1)
    instructions = info["system_prompt"]
    assert instructions == protocol.instructions_of(env.env)
    assert env.step("left")[4]["system_prompt"] == instructions  # mid attempt 1
    *_, info = succeed_attempt(env)
    assert info["system_prompt"] == instructions and info["record"]["attempt1"]["system_prompt"] == instructions
    # A reflection's first attempt-2 step hands over the inner env's reset info of the replay.
    env = ReflectionWrapper(PartialCredit())
    _, first = env.reset(seed=3)
    env.step("answer: no")
    *_, info = env.step("<prompt>Say exact.</prompt>")
    assert info["env_info"] == first["env_info"] and info["env_info"]["task_id"].startswith("q")
    # So does the no-reflection ablation's, with its own system prompt.
    env = ReflectionWrapper(PartialCredit(), no_reflection=True)
    env.reset(seed=3)
    obs, _, _, _, info = env.step("answer: no")
    assert info["env_info"] == first["env_info"] and info["phase"] == "attempt2"
    assert info["system_prompt"].startswith(reflection_prompts.NO_REFLECTION_PROMPT.split("{")[0])
    assert "answer: no" in info["system_prompt"]


def test_the_paper_memory_rule_files_the_retry_prompt_under_the_task_text():
    memory = _RecordingMemory()
    env = ReflectionWrapper(PartialCredit(), memory=memory, memory_rule="paper")
    env.reset(seed=2)
    env.step("answer: wrong")
    env.step("<prompt>Say exact.</prompt>")
    *_, info = env.step("answer: exact")
    assert memory.filed_under == [info["record"]["task_text"]] and memory.filed_under[0].startswith("question number")


def test_a_gated_episode_never_claims_a_base_prompt_from_memory():
    memory = ReflectionMemory()
    memory.update("Remembered prompt.")
    env = ReflectionWrapper(Corridor(), memory=memory)
    env.reset(seed=1)
    record = succeed_attempt(env)[4]["record"]
    assert record["gated"] is True and record["base_prompt_from_memory"] is False
    env.reset(seed=1)
    fail_attempt(env)
    env.step(GOOD_REFLECTION)
    assert succeed_attempt(env)[4]["record"]["base_prompt_from_memory"] is True


def test_the_paper_request_quotes_its_base_prompt():
    requests = []
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=4, prompts="paper"),
                            reflector=lambda r: requests.append(r) or GOOD_REFLECTION)
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(40):
            *_, terminated, truncated, info = env.step("Left")
            if info["new_conversation"] or terminated or truncated:
                break
        if requests:
            break
    (request,) = requests[:1]
    assert request.base_prompt == protocol.instructions_of(env.env) and request.base_prompt in request.text


def test_bad_action_and_reflection_types_are_named_in_the_error():
    env = ReflectionWrapper(Corridor())
    env.reset(seed=0)
    with pytest.raises(TypeError, match="^an action must be a str, got int$"):
        env.step(3)
    fail_attempt(env)
    with pytest.raises(TypeError, match="^an action must be a str, got int$"):  # a reflection is an action too
        env.step(3)
    with pytest.raises(TypeError, match="^the reflector .* returned int, expected a str$"):
        env2 = ReflectionWrapper(Corridor(), reflector=lambda request: 3)
        env2.reset(seed=0)
        fail_attempt(env2)


@pytest.mark.parametrize("name, value, message", [
    ("reflection_instructions", 3, "reflection_instructions must be a str or None, got int"),
    ("format_reminder", b"x", "format_reminder must be a str or None, got bytes"),
    ("max_reflection_chars", 0, "max_reflection_chars must be a positive int, got 0"),
    ("max_trace_field_chars", 0, "max_trace_field_chars must be a positive int, got 0"),
    ("memory_rule", "mine", "memory_rule must be one of ['project', 'paper'], got 'mine'"),
])
def test_each_bad_argument_is_named_exactly(name, value, message):
    with pytest.raises((TypeError, ValueError), match="^" + re.escape(message) + "$"):
        ReflectionWrapper(Corridor(), **{name: value})


class NestedMutating(Mutating):
    """Edits a nested part of its options in place."""

    def _take_start(self, options):
        return options["where"].pop("start") if options and "start" in options.get("where", {}) else None


def test_options_are_copied_deeply_and_uncopyable_ones_shallowly():
    import threading

    env = ReflectionWrapper(NestedMutating())
    first, _ = env.reset(seed=4, options={"where": {"start": 0}})
    fail_attempt(env)
    obs, *_ = env.step(GOOD_REFLECTION)
    assert obs == first and "You are at 0." in obs
    env = ReflectionWrapper(Corridor())
    first, _ = env.reset(seed=4, options={"start": 0, "lock": threading.Lock()})  # a lock cannot be deep-copied
    assert "You are at 0." in first
    fail_attempt(env)
    obs, *_ = env.step(GOOD_REFLECTION)
    assert obs == first


def test_with_reminder_keeps_the_prompts_leading_text():
    from erl_envs.reflection.wrapper import with_reminder

    assert with_reminder("  indented rule\n", " Reply with a move. ") == "  indented rule\n\nReply with a move."
    assert with_reminder("rule\n\nReply with a move.", "Reply with a move.") == "rule\n\nReply with a move."
    assert with_reminder("   ", "Reply.") == "Reply."


def test_an_empty_task_text_falls_back_to_the_observation():
    class Blank(PartialCredit):
        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed, options=options)
            return obs, {**info, "task_text": ""}

    env = ReflectionWrapper(Blank())
    obs, info = env.reset(seed=5)
    assert info["task_text"] == obs


def test_a_failed_inner_reset_leaves_nothing_steppable():
    class Fragile(Corridor):
        fail = False

        def reset(self, *, seed=None, options=None):
            if self.fail:
                raise RuntimeError("the inner env broke")
            return super().reset(seed=seed, options=options)

    env = ReflectionWrapper(Fragile())
    env.reset(seed=0)
    env.step("left")
    env.unwrapped.fail = True
    with pytest.raises(RuntimeError, match="broke"):
        env.reset(seed=1)
    with pytest.raises(gym.error.ResetNeeded):
        env.step("left")


class ArrayCorridor(Corridor):
    """The same task with array observations (the wrapper works on any observation type)."""

    def __init__(self, drift=False):
        super().__init__()
        self.drift = drift
        self.observation_space = spaces.Box(0, 10**9, shape=(2,), dtype=np.int64)

    def _obs(self):
        room = random.randrange(10**9) if self.drift else self.room
        return np.array([room, self.pos], dtype=np.int64)


def test_same_start_is_checked_on_array_observations_too():
    for drift, same in ((False, True), (True, False)):
        env = ReflectionWrapper(ArrayCorridor(drift))
        env.reset(seed=2)
        fail_attempt(env)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env.step(GOOD_REFLECTION)
        assert succeed_attempt(env)[4]["record"]["same_start"] is same, drift


def test_same_start_is_unknown_for_observations_that_cannot_be_compared():
    class Incomparable:
        def __eq__(self, other):
            raise RuntimeError("cannot compare")

        __hash__ = object.__hash__

    class Odd(Corridor):
        def _obs(self):
            return Incomparable()

    env = ReflectionWrapper(Odd())
    env.reset(seed=2)
    fail_attempt(env)
    env.step(GOOD_REFLECTION)
    assert succeed_attempt(env)[4]["record"]["same_start"] is None


def test_the_record_says_how_each_attempt_ended_and_seed_errors_name_the_type():
    env = ReflectionWrapper(Pit())
    env.reset(seed=0)
    env.step("jump")
    env.step(GOOD_REFLECTION)
    *_, info = play(env, ["left"] * 10)
    record = info["record"]
    assert (record["attempt1"]["terminated"], record["attempt1"]["truncated"]) == (True, False)
    assert (record["attempt2"]["terminated"], record["attempt2"]["truncated"]) == (False, True)
    for seed, name in ((True, "bool"), ("1", "str")):
        with pytest.raises(TypeError, match=f"^seed must be an int or None, got {name}$"):
            env.reset(seed=seed)


def test_a_non_text_attempt_is_shown_as_its_text_and_only_a_symbol_set_reaches_the_request():
    class Symbolic(ArrayCorridor):
        symbols = {"agent": "A"}  # not a SymbolSet: the request carries none

    requests = []
    env = ReflectionWrapper(Symbolic(), reflector=lambda r: requests.append(r) or GOOD_REFLECTION)
    env.reset(seed=2)
    fail_attempt(env)
    (request,) = requests
    bare = Symbolic()
    bare.reset(seed=2)
    for step in request.steps:
        last = bare.step(step.action)[0]
    assert request.final_observation == str(last) and request.steps[0].observation.startswith("[")
    assert request.symbols is None


def test_vector_infos_mark_a_key_only_for_the_sub_env_that_emitted_it():
    envs = ReflectionSyncVectorEnv([lambda: ReflectionWrapper(Corridor(max_steps=4)),
                                    lambda: ReflectionWrapper(Corridor(max_steps=10))])
    envs.reset(seed=[1, 2])
    for _ in range(4):
        envs.step(["left", "left"])
    *_, info = envs.step([GOOD_REFLECTION, "left"])  # only sub-env 0 was reflecting
    assert list(info["_reflection_fallback"]) == [True, False] and not info["reflection_fallback"][0]
    assert list(info["phase"]) == ["attempt2", "attempt1"]


def test_async_vector_env_passes_its_keyword_arguments_on():
    envs = ReflectionAsyncVectorEnv([lambda: ReflectionWrapper(Corridor())] * 2, copy=False)
    try:
        assert envs.copy is False and envs.shared_memory is False
    finally:
        envs.close()
