"""The turn protocol of GridTextEnv, checked on a toy corridor game so no real game's rules get in the way."""

import gymnasium as gym
import pytest

from erl_envs.grid import prompts as grid_prompts
from erl_envs.grid.actions import GridAction
from erl_envs.grid.env import (
    EPISODE_FEEDBACK,
    MAX_STEPS_LIMIT,
    NO_EFFECT_NOTICE,
    NOT_SOLVED_LINE,
    PARSE_ERROR_NOTICE,
    SOME_NO_EFFECT_NOTICE,
    GridTextEnv,
    MoveOutcome,
)
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, GridRenderer


class Corridor(GridTextEnv):
    """A 1 x length corridor: Right walks towards the goal at the end, Left back, Up/Down do nothing."""

    symbol_presets = FROZEN_LAKE_SYMBOLS
    level_options = frozenset({"length"})
    task_prefix = "corridor"
    rules_text = "Walk right to the goal within {max_steps} moves."
    episode_feedback_lines = {"success": "Reached the end."}

    def __init__(self, length=4, **kwargs):
        self.length = length
        super().__init__(max_grid_shape=(1, 6), **kwargs)

    def _new_level(self, options):
        self.n = options.get("length", self.length)
        if not 2 <= self.n:
            raise ValueError(f"length must be >= 2, got {self.n}")
        self.pos = 0

    def _apply_move(self, action):
        step = {GridAction.RIGHT: 1, GridAction.LEFT: -1}.get(action, 0)
        new = self.pos + step
        if step == 0 or not 0 <= new < self.n:
            return MoveOutcome(False, 0.0, False, "did not move")
        self.pos = new
        at_goal = new == self.n - 1
        return MoveOutcome(True, 1.0 if at_goal else 0.0, at_goal, "moved")

    def _is_success(self):
        return self.pos == self.n - 1

    def _tile_kinds(self):
        row = ["frozen"] * self.n
        row[-1] = "goal"
        row[self.pos] = "agent_on_goal" if self.pos == self.n - 1 else "agent"
        return [row]

    def _level_text(self):
        return f"corridor {self.n}"

    def _optimal_steps(self):
        return self.n - 1

    def _extra_info(self):
        return {"pos": self.pos}


def lines(obs):
    return obs.split("\n")


def test_first_observation_is_grid_and_budget():
    env = Corridor()
    obs, info = env.reset(seed=0)
    assert lines(obs) == [" A \t D \t D \t B \t", "Steps remaining: 8"]
    assert info["task_text"] == " A \t D \t D \t B \t"
    assert info["steps_left"] == 8 and info["steps_used"] == 0 and not info["success"]
    assert info["optimal_steps"] == 3 and info["pos"] == 0
    assert info["task_id"].startswith("corridor-") and len(info["task_id"]) == len("corridor-") + 16
    assert env.observation_space.contains(obs)


def test_observation_lines_follow_the_protocol():
    env = Corridor()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("```Right```")
    assert lines(obs) == [" D \t A \t D \t B \t", NOT_SOLVED_LINE, "Steps remaining: 7"]
    assert (reward, terminated, truncated, info["took_effect"], info["feedback"]) == (0.0, False, False, True, "moved")
    obs, *_, info = env.step("```Up```")
    assert lines(obs)[1:] == [NO_EFFECT_NOTICE, NOT_SOLVED_LINE, "Steps remaining: 6"]
    assert info["no_effect_moves"] == 1 and not info["took_effect"]
    obs, *_, info = env.step("go right please")
    assert lines(obs)[1:] == [PARSE_ERROR_NOTICE, NOT_SOLVED_LINE, "Steps remaining: 5"]
    assert info["parse_errors"] == 1 and info["no_effect_moves"] == 1
    assert info["feedback"] == "could not parse the action"
    env.step("```Right```")
    obs, reward, terminated, truncated, info = env.step("```Right```")
    assert lines(obs) == [" D \t D \t D \t Y \t", "Steps remaining: 3"]
    assert reward == 1.0 and terminated and not truncated
    assert info["success"] and info["episode_feedback"] == "Reached the end."


def test_task_id_depends_on_level_only():
    a, b = Corridor(), Corridor(symbols="gym")
    assert a.reset(seed=1)[1]["task_id"] == b.reset(seed=2)[1]["task_id"]
    assert a.reset(options={"length": 5})[1]["task_id"] != b.reset()[1]["task_id"]


def test_budget_truncates_and_reports_the_step_limit():
    env = Corridor(max_steps=2)
    env.reset()
    assert env.step("```Up```")[3] is False
    obs, reward, terminated, truncated, info = env.step("```Right```")
    assert truncated and not terminated and reward == 0.0
    assert NOT_SOLVED_LINE not in obs and obs.endswith("Steps remaining: 0")
    assert info["episode_feedback"] == EPISODE_FEEDBACK["step_limit"] and not info["success"]


def test_only_unparseable_replies_give_no_valid_actions_feedback():
    env = Corridor(max_steps=3)
    env.reset()
    for _ in range(3):
        *_, truncated, info = env.step("I am not sure")
    assert truncated and info["parse_errors"] == 3
    assert info["episode_feedback"] == EPISODE_FEEDBACK["no_valid_actions"]


def test_terminate_policy_ends_on_an_unparseable_reply():
    env = Corridor(invalid_action="terminate")
    env.reset()
    env.step("```Right```")
    obs, reward, terminated, truncated, info = env.step("```jump```")
    assert terminated and not truncated and reward == 0.0 and not info["success"]
    assert info["episode_feedback"] == EPISODE_FEEDBACK["invalid_action"] and info["steps_used"] == 2
    assert PARSE_ERROR_NOTICE in obs and NOT_SOLVED_LINE not in obs


def test_several_moves_per_turn_each_use_a_step():
    env = Corridor(length=5, max_actions_per_turn=3, action_format="lenient")
    env.reset()
    obs, reward, terminated, _, info = env.step("```Right, Up, Right```")
    assert info["steps_used"] == 3 and info["pos"] == 2 and info["no_effect_moves"] == 1
    assert info["feedback"] == "moved; did not move; moved" and info["took_effect"]
    assert SOME_NO_EFFECT_NOTICE in obs
    # Reaching the goal mid-turn drops the rest of the turn.
    obs, reward, terminated, _, info = env.step("Right Right Left")
    assert terminated and reward == 1.0 and info["steps_used"] == 5 and info["pos"] == 4
    # Too many moves for the turn is unparseable rather than truncated.
    env.reset()
    *_, info = env.step("Right Right Right Right")
    assert info["parse_errors"] == 1 and info["pos"] == 0


def test_moves_stop_when_the_budget_runs_out():
    env = Corridor(length=6, max_steps=2, max_actions_per_turn=3, action_format="lenient")
    env.reset()
    *_, truncated, info = env.step("Right Right Right")
    assert truncated and info["steps_used"] == 2 and info["pos"] == 2


def test_step_rejects_non_text_and_steps_after_the_end():
    env = Corridor()
    with pytest.raises(gym.error.ResetNeeded):
        env.step("```Right```")
    env.reset()
    for bad in (3, b"Right", None, GridAction.RIGHT):
        with pytest.raises(TypeError, match=type(bad).__name__):
            env.step(bad)
    for _ in range(3):
        env.step("```Right```")
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        env.step("```Right```")


def test_reset_options_are_checked():
    env = Corridor()
    with pytest.raises(ValueError, match=r"'lenght'.*\['length', 'max_steps'\]"):
        env.reset(options={"lenght": 3})
    with pytest.raises(TypeError, match="dict"):
        env.reset(options=["length"])
    with pytest.raises(ValueError, match="max_steps"):
        env.reset(options={"max_steps": 0})
    obs, info = env.reset(options={"max_steps": 3, "length": 3})
    assert info["steps_left"] == 3 and obs.endswith("Steps remaining: 3")
    # The option lasts one episode.
    assert env.reset()[1]["steps_left"] == 8


def test_failed_reset_leaves_no_playable_episode():
    env = Corridor()
    env.reset()
    with pytest.raises(ValueError, match="length"):
        env.reset(options={"length": 1})
    with pytest.raises(gym.error.ResetNeeded):
        env.step("```Right```")


def test_the_longest_observation_fits_the_space():
    env = Corridor(max_steps=MAX_STEPS_LIMIT, max_actions_per_turn=2, action_format="lenient")
    env.reset(options={"length": 6})
    obs = env.step("Right Up")[0]
    assert SOME_NO_EFFECT_NOTICE in obs and env.observation_space.contains(obs)
    obs = env.step("```the longest notice```")[0]
    assert PARSE_ERROR_NOTICE in obs and env.observation_space.contains(obs)
    assert len(obs) <= env.observation_space.max_length < len(obs) + 60


def test_a_level_bigger_than_the_space_is_refused():
    env = Corridor()
    with pytest.raises(ValueError, match="1x7.*1x6"):
        env.reset(options={"length": 7})


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"invalid_action": "skip"}, ValueError),
        ({"max_steps": 0}, ValueError),
        ({"max_steps": 2.5}, TypeError),
        ({"max_steps": True}, TypeError),
        ({"max_actions_per_turn": 0}, ValueError),
        ({"render_mode": "rgb"}, ValueError),
        ({"symbols": "xsb"}, ValueError),
        ({"symbols": {"agent": "A"}}, ValueError),
        ({"instructions": 7}, TypeError),
    ],
)
def test_bad_constructor_arguments(kwargs, error):
    with pytest.raises(error):
        Corridor(**kwargs)


def test_instructions_and_revealed_rules():
    assert Corridor().instructions == grid_prompts.GRID_INSTRUCTIONS
    assert Corridor(instructions="Play.").instructions == "Play."
    revealed = Corridor(reveal_rules=True, max_steps=5, symbols="gym").instructions
    assert revealed.startswith(grid_prompts.GRID_INSTRUCTIONS)
    assert "- P: you" in revealed and "- H: a hole" in revealed and "within 5 moves" in revealed
    assert Corridor().prompt_style == "grid"


def test_valid_actions_and_symbols_are_public():
    env = Corridor(symbols="gym")
    assert env.valid_actions == ["```Up```", "```Down```", "```Left```", "```Right```"]
    assert env.symbols is FROZEN_LAKE_SYMBOLS["gym"]
    env.reset()
    assert env.step(env.valid_actions[3])[4]["pos"] == 1


def test_ansi_render_is_the_current_grid():
    env = Corridor(render_mode="ansi")
    env.reset()
    env.step("```Right```")
    assert env.render() == " D \t A \t D \t B \t"
    assert GridRenderer(env.symbols).parse(env.render()) == env._tile_kinds()


def test_infos_are_fresh_objects():
    env = Corridor()
    _, info0 = env.reset()
    info1 = env.step("```Right```")[4]
    assert info0 is not info1 and info0["pos"] == 0 and info1["pos"] == 1
