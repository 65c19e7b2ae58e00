"""The two prompt sets: the paper set carries every information element of the reference's prompts (docs/fidelity.md),
the lenient set stays the default of the envs, and both are chosen by one env argument."""

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401
from erl_envs.grid import prompts as grid_prompts
from erl_envs.reflection import ReflectionWrapper
from erl_envs.reflection import prompts as reflection_prompts

GRID_IDS = ("ERL-FrozenLake-v0", "ERL-Sokoban-v0")


def _fail_and_reflect(env_id, trace_rule="paper", **kwargs):
    """A wrapped env whose first attempt wastes its budget (one unreadable reply, then bumps); returns the request."""
    env = ReflectionWrapper(gym.make(env_id, prompts="paper", **kwargs), trace_rule=trace_rule)
    env.reset(seed=3)
    replies = ["I am not sure", "```Up```", "```Left```", "```Down```", "```Right```"] * 4
    obs, info = None, {}
    for reply in replies:
        obs, reward, terminated, truncated, info = env.step(reply)
        if env.phase != "attempt1":
            break
    return env, obs, info


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_paper_system_prompt_asks_for_structured_reasoning_and_the_reply_format(env_id):
    text = gym.make(env_id, prompts="paper").unwrapped.instructions
    for element in ("reasoning engine", "best guesses", "NEXT ACTION", "<reason>", "Value of the state",
                    "High / Medium / Low", "two most promising actions", "result, because", "Up, Down, Left and Right",
                    "```Up```"):
        assert element in text, element
    push_rule = "push a box only when the cell behind it"
    assert (push_rule in text) == (env_id == "ERL-Sokoban-v0")


def test_paper_sokoban_attempts_see_two_reminders_and_its_reflections_start_from_the_prompt_without_the_push_rule():
    """The reference's Sokoban workflow starts from the grid prompt, which ends with the two-line reminder, and appends
    its own three-line reminder (with the push rule) to every attempt's prompt: two "Always remember" blocks. Its
    reflection, while the memory is empty, starts from the initial prompt: no push rule."""
    frozen = gym.make("ERL-FrozenLake-v0", prompts="paper").unwrapped.instructions
    sokoban = gym.make("ERL-Sokoban-v0", prompts="paper").unwrapped.instructions
    reminders = grid_prompts.PAPER_SET["reminder"]
    assert frozen.endswith(reminders["FrozenLake"]) and frozen.count("Always remember:") == 1
    assert sokoban == frozen + "\n\n" + reminders["Sokoban"] and sokoban.count("Always remember:") == 2
    assert grid_prompts.paper_initial_prompt() == frozen
    env, request, _ = _fail_and_reflect("ERL-Sokoban-v0")
    base = request.split("\n\n# Batch metrics")[0]
    assert base == "# The rulebook so far (inferred from past attempts; it may be inaccurate)\n" + frozen
    assert "push a box" not in base
    # A reflection without a <prompt> block falls back to that base, and the retry gets the Sokoban reminder: under
    # the reference's memory rule after a blank line, which makes it the first attempt's prompt again.
    info = env.step("no block here")[-1]
    assert info["reflection_fallback"] and info["system_prompt"] == frozen + "\n" + reminders["Sokoban"]
    env, _, _ = _fail_and_reflect("ERL-Sokoban-v0")
    env.memory_rule = "paper"
    assert env.step("no block here")[-1]["system_prompt"] == sokoban
    # Instructions of the user's own are their own base.
    own = ReflectionWrapper(gym.make("ERL-Sokoban-v0", prompts="paper", instructions="Push the box."))
    own.reset(seed=3)
    while own.phase == "attempt1":
        request = own.step("```Up```")[0]
    assert "it may be inaccurate)\nPush the box." in request


def test_lenient_set_stays_the_default_and_names_no_game():
    for env_id in GRID_IDS:
        env = gym.make(env_id).unwrapped
        assert env.prompt_set == "lenient" and env.instructions == grid_prompts.GRID_INSTRUCTIONS
    with pytest.raises(ValueError, match="prompts"):
        gym.make("ERL-FrozenLake-v0", prompts="verbose")


def test_paper_sokoban_step_messages_speak_of_walls_and_pushing():
    env = gym.make("ERL-Sokoban-v0", prompts="paper")
    env.reset(options={"level": ["#####", "#@$.#", "#   #", "#####"]})
    obs = env.step("```Up```")[0]  # into the wall
    assert "wall" in obs and "blocked" in obs and "Not solved yet" in obs and "At most 63 moves remain." in obs
    obs = env.step("```Down```")[0]
    assert "worked (you moved, or pushed a box)" in obs and "not solved yet" in obs
    env.step("```Up```")
    obs, reward, terminated, *_ = env.step("```Right```")  # pushes the box onto the goal
    assert terminated and reward == 1.0 and "worked" not in obs  # no "plan your next move" after the end


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_paper_observations_carry_the_turn_index_and_the_goal_line_from_the_first_turn(env_id):
    env = gym.make(env_id, prompts="paper")
    obs, _ = env.reset(seed=4)
    lines = obs.split("\n")
    assert lines[0] == "Board at turn 0:" and "Not solved yet. Give your next action." in lines
    obs = env.step("no move here")[0]
    assert obs.startswith("Board at turn 1:\n") and obs.index("Not solved yet") < obs.index("No valid")
    lenient, _ = gym.make(env_id).reset(seed=4)
    assert "turn" not in lenient and "Not solved yet" not in lenient  # the lenient set is unchanged


def test_paper_sokoban_counts_down_the_references_64_moves_while_the_episode_ends_at_8():
    """The reference's Sokoban agent tells the model "Maximum remaining moves: 64", minus one per reply, while its
    levels end after 8 steps: the paper set shows what the paper's model saw; elsewhere the true budget."""
    env = gym.make("ERL-Sokoban-v0", prompts="paper")
    obs, _ = env.reset(seed=0)
    assert obs.endswith("\nAt most 64 moves remain.")
    for turn in range(1, 9):
        obs, reward, terminated, truncated, info = env.step("```Left```" if turn % 2 else "```Right```")
        assert obs.endswith(f"\nAt most {64 - turn} moves remain.")
        if terminated:
            break
    assert (terminated or truncated) and turn <= 8 and info["steps_left"] == 8 - turn
    obs, _ = gym.make("ERL-Sokoban-v0").reset(seed=0)
    assert obs.endswith("\nSteps remaining: 8")
    obs, _ = gym.make("ERL-FrozenLake-v0", prompts="paper").reset(seed=0)
    assert obs.endswith("\nSteps remaining: 8")


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_paper_reflection_request_lists_every_element(env_id):
    env, request, info = _fail_and_reflect(env_id)
    assert env.phase == "reflect"
    game = "FrozenLake" if "Frozen" in env_id else "Sokoban"
    assert f"A failed attempt at {game}" in request and f"improved {game} rulebook" in request
    assert "Board seen before the action:" in request  # the grid of every step
    assert "Action read from the reply: Up" in request  # the parsed action, not the raw reply
    assert "Action read from the reply: 0\n" in request and "I am not sure" not in request
    assert "Reward: 0." in request and "Took effect: no" in request and "Episode ended: yes" in request
    assert ("After it: player at" in request) == (game == "Sokoban")
    assert ("boxes at" in request and "goals at" in request) == (game == "Sokoban")
    assert "## Outcome\nReward of the attempt: 0. Solved: no.\nFeedback:" in request
    system = info["system_prompt"]
    for part in ("Symbol Meanings", "Information & Interpretation", "Gameplay & Actions", "Action Effects",
                 "Game Objective & Termination", "Core Strategies", "Tactical Tips", "<prompt>"):
        assert part in system, part


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_the_trace_rule_writes_an_unreadable_reply_and_the_end_as_the_reference_or_the_project_does(env_id):
    """The reference's trace shows an unreadable reply as its invalid-action code 0 with the no-move comment (a wall is
    blamed) and has no final board; the project's rule says no action was read and shows the final board."""
    game = "FrozenLake" if "Frozen" in env_id else "Sokoban"
    paper = _fail_and_reflect(env_id)[1]
    project = _fail_and_reflect(env_id, trace_rule="project")[1]
    comment = reflection_prompts.PAPER_SET["unreadable"]["comment"][game]
    paper_step = paper.split("## Step 1\n")[1].split("## Step 2")[0]
    assert "Action read from the reply: 0\n" in paper_step and f"Comment: {comment}\n" in paper_step
    assert "Took effect: no" in paper_step and "could not parse" not in paper and "Final board" not in paper
    project_step = project.split("## Step 1\n")[1].split("## Step 2")[0]
    assert "Action read from the reply: none (no valid action in the reply: an invalid action)\n" in project_step
    assert "Comment: could not parse the action\n" in project_step and "## Outcome\nFinal board:\n" in project
    # Apart from those lines, the two traces agree.
    final_board = project.split("## Outcome\n")[1].split("Reward of the attempt")[0]
    paper = paper.replace("reply: 0\n", "reply: ?\n").replace(f"Comment: {comment}\n", "Comment: ?\n")
    project = project.replace("reply: none (no valid action in the reply: an invalid action)\n", "reply: ?\n")
    assert paper == project.replace("Comment: could not parse the action\n", "Comment: ?\n").replace(final_board, "")
    with pytest.raises(ValueError, match="trace_rule must be one of"):
        ReflectionWrapper(gym.make(env_id, prompts="paper"), trace_rule="verl")


def test_an_unreadable_last_reply_is_named_by_the_trace_rule_in_the_feedback():
    for rule, named in (("paper", "Last action: 0."), ("project", "Last action: none (no valid action in the reply).")):
        env = ReflectionWrapper(gym.make("ERL-Sokoban-v0", prompts="paper"), trace_rule=rule)
        env.reset(options={"level": ["######", "#@ $.#", "#    #", "######"]})
        for _ in range(8):
            request = env.step("no move")[0]
        assert named in request.split("Feedback: ")[1]


def test_paper_reflection_system_prompt_frames_a_collection_to_learn_from_by_contrast():
    system = _fail_and_reflect("ERL-FrozenLake-v0")[2]["system_prompt"]
    for element in ("collection of winning and failed playthroughs", "contrast between the games that were won",
                    "general truths", "one unified theory", "authoritative"):
        assert element in system, element


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_paper_request_has_the_batch_metrics_the_task_and_the_correctness_flag(env_id):
    env, request, _ = _fail_and_reflect(env_id)
    # The reference's workflow batch is this one episode: its reward, a success rate of 0, a batch of 1.
    assert ("# Batch metrics\n- Average reward of the first attempts: 0.0000\n"
            "- Share of first attempts that succeeded: 0.0000\n- First attempts in the batch: 1") in request
    assert "Reward of the attempt: 0. Solved: no." in request
    inner = env.unwrapped
    if env_id == "ERL-FrozenLake-v0":
        assert f"Task: seed 3, board size {inner._n}, frozen-tile probability {inner._level_p}\n" in request
    else:
        info = env._env_info  # the level's name: its size, then goal, box and player cells, as in the paper's files
        (gr, gc), = info["goals"]
        (br, bc), = info["boxes"]
        pr, pc = info["position"]
        layout = "\n".join(r.replace("\t", "").replace(" ", "") for r in info["task_text"].split("\n"))
        size = f"{len(layout.split())}x{len(layout.split()[0])}"
        assert f"Level sokoban_{size}_g{gr}{gc}_b{br}{bc}_p{pr}{pc}, step budget 8. Its starting board:\n{layout}\n" \
            in request
    # The board of each step, not the lines about the turn that came with it.
    assert "Board seen before the action:\nBoard at turn" not in request


def test_paper_feedback_counts_no_effect_moves_and_names_the_last_action_and_the_final_state():
    env = ReflectionWrapper(gym.make("ERL-Sokoban-v0", prompts="paper"))
    env.reset(options={"level": ["######", "#@ $.#", "#    #", "######"]})
    for reply in ["```Down```", "```Right```", "no move", "```Down```", "```Down```", "```Left```", "```Down```",
                  "```Down```"]:
        request, *_ = env.step(reply)
    feedback = request.split("Feedback: ")[1].split("\n")[0]
    assert feedback == ("Hit the max step limit before solving the puzzle. 5 of the actions had no effect. The last 2 "
                        "actions in a row did nothing. Last action: Down. Final state: the puzzle unsolved when the "
                        "steps ran out. Reward 0.00 after 8 steps.")


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_paper_retry_gets_the_games_reminder(env_id):
    env, request, info = _fail_and_reflect(env_id)
    obs, reward, terminated, truncated, info = env.step("<prompt>Walk to the goal.</prompt>")
    assert info["system_prompt"].startswith("Walk to the goal.")
    assert grid_prompts.PAPER_SET["reminder"][env.game_name] in info["system_prompt"]


def test_lenient_request_is_unchanged():
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0"))
    env.reset(seed=3)
    while env.phase == "attempt1":
        obs, *_ = env.step("no idea")
    assert obs.startswith("# The instructions you were given\n") and "no idea" in obs


def test_paper_texts_do_not_change_the_tiny_tokenizer_corpus():
    """The trainer trains the tiny tokenizer on the prompt modules' constant strings; the paper set lives in dicts."""
    from erl_agents.envs import prompt_constants

    constants = prompt_constants()
    assert len(constants) == 16 and grid_prompts.GRID_INSTRUCTIONS in constants
    assert not any("reasoning engine" in text or "Master Rulebook" in text for text in constants)


# ----------------------------------------------------------------------------- the small-model set


MOVE_NAMES = ("Up", "Down", "Left", "Right")


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_small_set_names_no_move_so_no_move_is_favoured(env_id):
    """A format example is what a 135M model plays (the lenient ```Up``` made SmolLM2 play Up 84% of the time): the
    small set's prompt and reminder name no move at all."""
    env = gym.make(env_id, prompts="small").unwrapped
    assert env.instructions == grid_prompts.SMALL_SET["instructions"]
    for text in (env.instructions, grid_prompts.format_reminder("small", env.game_name)):
        assert "triple-backtick" in text
        assert not any(name in text for name in MOVE_NAMES), text


def _small_request(env_id="ERL-FrozenLake-v0", prompts="small"):
    env = ReflectionWrapper(gym.make(env_id, prompts=prompts))
    env.reset(seed=3, options={"map": ["SFF", "FHF", "FFG"]} if "Frozen" in env_id else None)
    obs = None
    for reply in ["```Right```", "```Up```", "```Down```", "```Down```", "```Down```"]:
        obs, reward, terminated, truncated, info = env.step(reply)
        if env.phase != "attempt1":
            return env, obs, info
    raise AssertionError("the scripted first attempt did not fail")


def test_small_request_shows_the_start_and_end_boards_and_one_line_per_move():
    env, request, info = _small_request()
    assert request.startswith("Your instructions were:\n" + grid_prompts.SMALL_SET["instructions"])
    assert "Board at the start:\n A \t D \t D \t\n D \t C \t D \t\n D \t D \t B \t\nYour moves:\n" in request
    assert "1. Right: moved Right\n2. Up: tried Up, did not move\n3. Down: moved Down and fell into a hole\n" in request
    assert "Board at the end:\n D \t D \t D \t\n D \t X \t D \t\n D \t D \t B \t\nOutcome: Fell into a hole." in request
    # No board per step, no notices or counters: what a small model would copy back.
    assert request.count("\t\n D \t") == 4 and "Steps remaining" not in request and "Not solved" not in request
    assert info["system_prompt"] == reflection_prompts.SMALL_SET["reflection_instructions"]
    lenient = _small_request(prompts="lenient")[1]
    assert len(request) < len(lenient) / 2


def test_small_retry_gets_the_small_reminder():
    env, request, info = _small_request()
    obs, reward, terminated, truncated, info = env.step("<prompt>Go Right, then Down.</prompt>")
    assert info["system_prompt"] == "Go Right, then Down.\n" + grid_prompts.SMALL_SET["reminder"]


def test_small_texts_do_not_change_the_tiny_tokenizer_corpus():
    from erl_agents.envs import prompt_constants

    constants = prompt_constants()
    assert len(constants) == 16
    small = list(grid_prompts.SMALL_SET.values()) + list(reflection_prompts.SMALL_SET.values())
    assert not any(text in constants for text in small)
