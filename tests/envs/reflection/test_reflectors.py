"""Reflectors: the trace text, grid reading, RuleReflector's rulebooks (checked claim by claim), HFReflector."""

import dataclasses
import re

import gymnasium as gym
import numpy as np
import pytest

import erl_envs  # noqa: F401  (registers the envs)
from erl_envs.grid.actions import ACTION_NAMES, MOVES
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, SOKOBAN_SYMBOLS, GridRenderer
from erl_envs.reflection import ReflectionWrapper, extract_prompt
from erl_envs.reflection.reflectors import HFReflector, Reflector, RuleReflector, parse_grid
from erl_envs.reflection.trace import ReflectionRequest, TraceStep, clip_text, format_trace

MOVE_REPLIES = [f"```{name}```" for name in ACTION_NAMES]


def trace_of(env_id, seed, actions, options=None, **kwargs):
    """Play ``actions`` on a bare env and build the reflection request by hand, keeping every info."""
    env = gym.make(env_id, **kwargs).unwrapped
    obs, info = env.reset(seed=seed, options=options)
    infos, steps, total = [info], [], 0.0
    for action in actions:
        nxt, reward, terminated, truncated, info = env.step(action)
        steps.append(TraceStep(obs, action, reward, info["took_effect"], terminated, truncated, info["feedback"]))
        infos.append(info)
        total += reward
        obs = nxt
        if terminated or truncated:
            break
    request = ReflectionRequest(
        text="", system_prompt="", base_prompt=env.instructions, style=env.prompt_style, steps=tuple(steps),
        final_observation=obs, total_return=total, success=bool(infos[-1]["success"]),
        feedback=infos[-1].get("episode_feedback", ""), symbols=getattr(env, "symbols", None),
    )
    return request, infos


def replay(env_id, seed, moves, options=None, **kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    env.reset(seed=seed, options=options)
    info = {}
    for move in moves:
        *_, info = env.step(f"```{move}```")
    return info


def rulebook_of(request, **kwargs):
    text = RuleReflector(**kwargs)(request)
    prompt, reason = extract_prompt(text)
    assert prompt is not None, reason
    assert text.count("<prompt>") == 1 and prompt.count("<game_rules>") == 1 and prompt.count("<strategy>") == 1
    assert prompt.index("</game_rules>") < prompt.index("<strategy>")
    return prompt


def cell(row, col):
    return int(row) - 1, int(col) - 1


def steps_list(text):
    return [int(s) for s in text.split(", ")]


# ----------------------------------------------------------------------------- trace text and grids


def test_format_trace_lists_every_field():
    steps = (TraceStep("obs one", "left", 0.0, False, False, False, "bumped"),
             TraceStep("obs two", "  ", 1.5, True, True, False, "won"))
    text = format_trace(steps, "final", 1.5, "You won.")
    assert ("## Step 1\nObservation:\nobs one\nAction:\nleft\nReward: 0. Took effect: no. Done: no.\n"
            "Comment: bumped") in text
    assert "Action:\n(an empty reply)\nReward: 1.5. Took effect: yes. Done: yes.\nComment: won" in text
    assert text.endswith("## Outcome\nFinal observation:\nfinal\nReturn: 1.5\nFeedback: You won.")


def test_clip_text_keeps_head_and_tail():
    text = "HEAD" + "x" * 10_000 + "```Up```"
    clipped = clip_text(text, 100)
    assert clipped.startswith("HEAD") and clipped.endswith("```Up```") and "characters omitted" in clipped
    assert len(clipped) < 200 and clip_text("short", 100) == "short" and clip_text(text, None) == text


def test_parse_grid_reads_the_renderer_layout():
    renderer = GridRenderer(FROZEN_LAKE_SYMBOLS["abstract"])
    kinds = [["agent", "frozen", "hole"], ["frozen", "frozen", "goal"]]
    text = renderer.render(kinds) + "\nYour last action had no effect.\nSteps remaining: 3"
    assert parse_grid(text) == [["A", "D", "C"], ["D", "D", "B"]]
    assert parse_grid(text.strip()) == [["A", "D", "C"], ["D", "D", "B"]]  # an env that strips its text
    assert parse_grid("no grid here\njust words") is None
    assert parse_grid(" A \t B \t\n C \t") is None  # ragged
    assert parse_grid("name\tvalue\nkey\tother") is None  # tab-separated words are not cells


# ----------------------------------------------------------------------------- FrozenLake rulebooks


def test_frozen_lake_rulebook_on_a_known_map():
    # S F H / F H F / F F G: Left bumps the edge, a reply without a move, Right, then Down into the hole.
    request, infos = trace_of("ERL-FrozenLake-v0", 0, ["```Left```", "let me think", "```Right```", "```Down```"],
                              options={"map": ["SFH", "FHF", "FFG"]})
    prompt = rulebook_of(request)
    assert "- A: you." in prompt and "- C: a hole. Stepping onto it ends the game as a failure." in prompt
    assert "The board has 3 rows and 3 columns" in prompt
    assert "(seen at step 1: Left from row 1, column 1 ran into the edge of the board)" in prompt
    assert "- Right moves you one column right (seen at step 3)." in prompt
    assert "- Up was not seen moving you in the last attempt; expect it to move you one row up." in prompt
    assert "(seen at step 2)" in prompt and "readable move" in prompt
    assert "(seen at step 4: Down from row 1, column 2 into the hole at row 2, column 2)" in prompt
    assert ("from your start at row 1, column 1 to the goal at row 3, column 3: "
            "Down, Down, Right, Right (4 moves)") in prompt
    assert "Last time 2 of 4 turns did nothing (steps 1, 2)" in prompt
    assert "cut off" not in prompt
    assert replay("ERL-FrozenLake-v0", 0, ["Down", "Down", "Right", "Right"],
                  options={"map": ["SFH", "FHF", "FFG"]})["success"]


def test_frozen_lake_rulebook_after_running_out_of_steps():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Left```"] * 3, options={"map": ["SF", "FG"], "max_steps": 3})
    prompt = rulebook_of(request)
    assert "- The last attempt was cut off after 3 turns before reaching B: finish within 3 moves." in prompt
    assert "fell" not in prompt and "Moving onto C ends the game at once as a failure." in prompt
    assert "route" in prompt and "(2 moves)" in prompt


def check_frozen_lake_claims(prompt, request, infos, seed, size):
    """Every claim tied to a step is checked against the env's own infos."""
    actions = [parse for parse in (s.action for s in request.steps)]
    positions = [tuple(info["position"]) for info in infos]
    for name, step in re.findall(r"- (Up|Down|Left|Right) moves you one \w+ \w+ \(seen at step (\d+)\)", prompt):
        k = int(step)
        assert actions[k - 1] == f"```{name}```" and infos[k]["took_effect"]
        dr, dc = MOVES[ACTION_NAMES.index(name)]
        assert positions[k] == (positions[k - 1][0] + dr, positions[k - 1][1] + dc)
    for step, name, r, c in re.findall(r"seen at step (\d+): (\w+) from row (\d+), column (\d+) ran into the edge",
                                       prompt):
        k = int(step)
        assert positions[k - 1] == cell(r, c) and not infos[k]["took_effect"]
        dr, dc = MOVES[ACTION_NAMES.index(name)]
        row, col = positions[k - 1][0] + dr, positions[k - 1][1] + dc
        assert not (0 <= row < size and 0 <= col < size)
    fell = re.search(r"seen at step (\d+): (\w+) from row (\d+), column (\d+) into the hole at row (\d+), column (\d+)",
                     prompt)
    assert bool(fell) == ("hole" in infos[-1]["feedback"])
    if fell:
        k, name, r, c, r2, c2 = fell.groups()
        assert int(k) == len(request.steps) and positions[-2] == cell(r, c) and positions[-1] == cell(r2, c2)
    assert ("cut off after" in prompt) == request.steps[-1].truncated
    wasted = re.search(r"Last time (\d+) of (\d+) turns did nothing \(steps? ([\d, ]+)\)", prompt)
    idle = [k + 1 for k, step in enumerate(request.steps) if not step.took_effect]
    assert (steps_list(wasted.group(3)) if wasted else []) == idle
    unreadable = re.search(r"without a readable move does nothing and wastes the turn \(seen at steps? ([\d, ]+)\)",
                           prompt)
    parse_errors = [k for k in range(1, len(infos)) if infos[k]["feedback"].startswith("could not parse")]
    assert (steps_list(unreadable.group(1)) if unreadable else []) == parse_errors
    route = re.search(r"route on this board.*?: ([A-Za-z, ]+) \((\d+) moves?\)", prompt)
    assert route, "a route exists on every generated board"
    moves = route.group(1).split(", ")
    assert len(moves) == int(route.group(2)) == infos[0]["optimal_steps"]
    assert replay("ERL-FrozenLake-v0", seed, moves, size=size)["success"]


@pytest.mark.parametrize("size", [3, 5])
def test_frozen_lake_rulebooks_are_correct_on_random_traces(size):
    rng = np.random.default_rng(size)
    checked = 0
    for seed in range(40):
        actions = [str(rng.choice(MOVE_REPLIES + ["no idea"], p=[0.22] * 4 + [0.12])) for _ in range(8)]
        request, infos = trace_of("ERL-FrozenLake-v0", seed, actions, size=size)
        if request.success:
            continue
        check_frozen_lake_claims(rulebook_of(request), request, infos, seed, size)
        checked += 1
    assert checked >= 20


def test_unreadable_replies_under_both_invalid_action_policies():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["hmm", "```Up, Left```", "```Right```", "well"],
                          options={"map": ["SFF", "FFF", "FFG"], "max_steps": 4})
    prompt = rulebook_of(request)
    # "Up, Left" is unparseable for a one-move env but is not "a reply without a move": it is only counted as idle.
    assert "without a readable move does nothing and wastes the turn (seen at steps 1, 4)" in prompt
    assert "Last time 3 of 4 turns did nothing (steps 1, 2, 4)" in prompt
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Right```", "no move"], invalid_action="terminate",
                          options={"map": ["SFF", "FFF", "FFG"]})
    prompt = rulebook_of(request)
    assert "- A reply without a readable move ended the game at once (seen at step 2)." in prompt
    assert "does nothing and wastes" not in prompt


def test_multi_move_turns_are_not_misattributed():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Right, Right```", "```Down```", "```Left, Left, Left```"],
                          max_actions_per_turn=3, action_format="lenient",
                          options={"map": ["SFF", "FFF", "FFG"], "max_steps": 6})
    prompt = rulebook_of(request)
    assert "- Down moves you one row down (seen at step 2)." in prompt
    assert "- Right was not seen moving you" in prompt and "readable" not in prompt


def test_frozen_lake_rulebook_with_other_symbols():
    request, infos = trace_of("ERL-FrozenLake-v0", 3, ["```Up```", "```Left```"] * 4, symbols="gym", size=4)
    prompt = rulebook_of(request)
    assert "- H: a hole." in prompt and "- P: you." in prompt and "- G: the goal." in prompt
    if not request.success:
        check_frozen_lake_claims(prompt, request, infos, 3, 4)


def test_plan_can_be_switched_off():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Left```"] * 3, options={"map": ["SF", "FG"], "max_steps": 3})
    assert "shortest safe route" not in rulebook_of(request, plan=False)


@pytest.mark.parametrize("env_id", ["ERL-FrozenLake-v0", "ERL-Sokoban-v0"])
def test_plan_detail_writes_only_a_shortest_solution_in_action_strings(env_id):
    kwargs = {"size": 4} if env_id == "ERL-FrozenLake-v0" else {}
    rng = np.random.default_rng(3)
    checked = 0
    for seed in range(20):
        request, infos = trace_of(env_id, seed, [str(rng.choice(MOVE_REPLIES)) for _ in range(6)], **kwargs)
        if request.success:
            continue
        prompt, reason = extract_prompt(RuleReflector(detail="plan")(request))
        assert prompt is not None, reason
        assert "<game_rules>" not in prompt and len(prompt) < 200
        moves = re.findall(r"```(\w+)```", prompt)
        assert len(moves) == infos[0]["optimal_steps"]
        assert replay(env_id, seed, moves, **kwargs)["success"]
        checked += 1
    assert checked >= 10


def test_plan_detail_falls_back_to_the_rulebook_when_there_is_no_plan():
    # Without symbols the goal cannot be found, so there is nothing to plan: the same text as detail="full".
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Right```", "```Up```"], options={"map": ["SF", "FG"]})
    blind = dataclasses.replace(request, symbols=None)
    assert RuleReflector(detail="plan")(blind) == RuleReflector()(blind)
    with pytest.raises(ValueError, match="detail"):
        RuleReflector(detail="short")


# ----------------------------------------------------------------------------- Sokoban rulebooks


def board_at(request, k):
    """The board before step k (1-based); k = len(steps) + 1 is the final board."""
    text = request.steps[k - 1].observation if k <= len(request.steps) else request.final_observation
    return parse_grid(text)


def test_sokoban_rulebook_wall_push_and_step_limit():
    level = ["#######", "#@ $ .#", "#     #", "#######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Up```", "```Right```", "```Right```"],
                          options={"level": level, "max_steps": 3})
    prompt = rulebook_of(request)
    assert "- B: a box that is not on a target yet." in prompt and "- E: a wall: nothing can enter it." in prompt
    assert "(seen at step 1: Up from row 2, column 2 ran into a wall (E) at row 1, column 2)" in prompt
    assert "(Seen at step 3: Right pushed a box from row 2, column 4 to row 2, column 5.)" in prompt
    assert "- The last attempt was cut off after 3 turns before every box was on a target" in prompt
    assert "A shortest solution for this board from the start: Right, Right, Right (3 moves)." in prompt
    assert replay("ERL-Sokoban-v0", 0, ["Right"] * 3, options={"level": level})["success"]


def test_sokoban_rulebook_blocked_push():
    level = ["######", "# $. #", "# @  #", "######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Up```", "```Left```"], options={"level": level, "max_steps": 2})
    prompt = rulebook_of(request)
    assert "(seen at step 1: Up from row 3, column 3 ran into a box (B) at row 2, column 3 with E behind it)" in prompt
    assert "- Left moves you one column left (seen at step 2)." in prompt
    assert "Left, Up, Right (3 moves)" in prompt
    assert replay("ERL-Sokoban-v0", 0, ["Left", "Up", "Right"], options={"level": level})["success"]


def test_sokoban_rulebooks_are_correct_on_random_traces():
    rng = np.random.default_rng(1)
    kinds = SOKOBAN_SYMBOLS["abstract"].symbols
    checked = 0
    for seed in range(25):
        actions = [str(rng.choice(MOVE_REPLIES)) for _ in range(8)]
        request, infos = trace_of("ERL-Sokoban-v0", seed, actions)
        if request.success:
            continue
        prompt = rulebook_of(request)
        for step, frm_r, frm_c, to_r, to_c in re.findall(
                r"step (\d+): \w+ pushed a box from row (\d+), column (\d+) to row (\d+), column (\d+)", prompt):
            before, after = board_at(request, int(step)), board_at(request, int(step) + 1)
            r, c = cell(frm_r, frm_c)
            r2, c2 = cell(to_r, to_c)
            assert before[r][c] in (kinds["box"], kinds["box_on_target"])
            assert after[r2][c2] in (kinds["box"], kinds["box_on_target"])
        for step, r, c in re.findall(r"step (\d+): \w+ from row \d+, column \d+ ran into a wall \(E\) at row (\d+), "
                                     r"column (\d+)", prompt):
            row, col = cell(r, c)
            assert board_at(request, int(step))[row][col] == kinds["wall"] and not infos[int(step)]["took_effect"]
        solution = re.search(r"shortest solution for this board from the start: ([A-Za-z, ]+) \((\d+) moves?\)", prompt)
        assert solution
        moves = solution.group(1).split(", ")
        assert len(moves) == infos[0]["optimal_steps"]  # as short as the env's own solver says
        assert replay("ERL-Sokoban-v0", seed, moves)["success"]
        checked += 1
    assert checked >= 15


# ----------------------------------------------------------------------------- other envs


def test_unknown_grid_infers_the_agent_from_movement():
    def board(rows):
        return "\n".join("".join(f" {ch} \t" for ch in row) for row in rows)

    boards = [board(["..O", "P.."]), board(["..O", ".P."]), board(["..O", ".P."]), board([".PO", "..."]),
              board(["..P", "..."])]
    steps = (TraceStep(boards[0], "```Right```", 0.0, True, False, False, "moved"),
             TraceStep(boards[1], "```Down```", 0.0, False, False, False, "bumped"),
             TraceStep(boards[2], "```Up```", 0.0, True, False, False, "moved"),
             TraceStep(boards[3], "```Right```", 0.0, True, True, False, "fell"))
    request = ReflectionRequest(text="", system_prompt="", base_prompt="Play.", style="grid", steps=steps,
                                final_observation=boards[4], total_return=0.0, success=False,
                                feedback="You fell off the world.")
    prompt = rulebook_of(request)
    assert "- P: you (this symbol moved when you moved)." in prompt
    assert "- O: moving onto it ended the game (step 4, return 0)." in prompt
    assert "(seen at step 2: Down from row 2, column 2 ran into the edge of the board)" in prompt
    assert "- .: on the board; the last attempt did not show what it does." in prompt
    assert "You fell off the world." in prompt and "shortest" not in prompt


def test_grid_style_without_a_grid_falls_back_to_lessons():
    steps = (TraceStep("no board", "go", 0.0, False, True, False, "nothing"),)
    request = ReflectionRequest(text="", system_prompt="", base_prompt="BASE", style="grid", steps=steps,
                                final_observation="still no board", total_return=0.0, success=False, feedback="lost")
    prompt, _ = extract_prompt(RuleReflector()(request))
    assert prompt.startswith("BASE") and 'These actions had no effect: "go" (step 1)' in prompt


def test_generic_lessons():
    steps = (TraceStep("o1", "push", 0.0, False, False, False, "stuck"),
             TraceStep("o2", "pull", 0.0, True, False, True, "ok"))
    request = ReflectionRequest(text="", system_prompt="", base_prompt="Do the task.", style="generic", steps=steps,
                                final_observation="o3", total_return=0.0, success=False, feedback="Out of time.")
    prompt, _ = extract_prompt(RuleReflector()(request))
    assert prompt.startswith("Do the task.\n")
    assert "It took 2 steps and ended with return 0: Out of time." in prompt
    assert 'These actions had no effect: "push" (step 1)' in prompt and 'Actions you tried: "push", "pull"' in prompt


def qa_request(actions, seed=0):
    captured = []

    def reflector(request):
        captured.append(request)
        return RuleReflector()(request)

    env = ReflectionWrapper(gym.make("ERL-HotpotQA-v0", data="synthetic"), reflector=reflector)
    env.reset(seed=seed)
    for action in actions:
        *_, info = env.step(action)
        if info["new_conversation"]:
            break
    return captured[0], info


def test_qa_prompt_from_a_wrong_answer():
    request, info = qa_request(["<search>Raizark Pehoti nationality</search>", "Done: \\boxed{Atlantis}"])
    prompt = info["system_prompt"]
    assert request.style == "qa" and info["phase"] == "attempt2"
    assert '"Raizark Pehoti nationality"' in prompt and '"Atlantis" was not judged correct' in prompt
    assert "\\boxed{...}" in prompt and "Split the question into its hops" in prompt


def test_qa_prompt_without_search_or_answer():
    request, info = qa_request(["I do not know."])
    prompt, _ = extract_prompt(RuleReflector()(request))
    assert "made no search" in prompt and "gave no final answer" in prompt


def test_rule_reflector_input_checks():
    with pytest.raises(TypeError, match="ReflectionRequest"):
        RuleReflector()("just text")
    with pytest.raises(TypeError, match="SymbolSet"):
        RuleReflector(symbols={"agent": "A"})
    assert isinstance(RuleReflector(), Reflector)


# ----------------------------------------------------------------------------- a Hugging Face model


@pytest.fixture(scope="module")
def tiny_lm():
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    specials = ["[UNK]", "[PAD]", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
    corpus = ["You are playing a grid game <prompt> rules </prompt> Up Down Left Right A B C D hole goal",
              "The instructions you were given Your attempt Step Observation Action Reward Took effect Done"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=specials))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                        eos_token="<|eos|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=96, n_embd=16, n_layer=1, n_head=2,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    return GPT2LMHeadModel(config).eval(), tokenizer


def fl_request():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Left```", "```Right```", "```Down```"],
                          options={"map": ["SFH", "FHF", "FFG"]})
    return request


def test_hf_reflector_without_chat_template(tiny_lm):
    model, tokenizer = tiny_lm
    reflector = HFReflector(model, tokenizer, max_new_tokens=12)
    text = reflector(fl_request())  # the request is longer than the 96-token context: its end is kept
    assert isinstance(text, str)
    assert isinstance(reflector("a plain string request"), str)


def test_hf_reflector_with_chat_template_is_deterministic_when_greedy(tiny_lm):
    model, tokenizer = tiny_lm
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|eos|> {% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    try:
        reflector = HFReflector(model, tokenizer, max_new_tokens=10, temperature=0.0)
        request = fl_request()
        assert reflector(request) == reflector(request)
        sampled = HFReflector(model, tokenizer, max_new_tokens=10)(request)
        assert isinstance(sampled, str)
    finally:
        tokenizer.chat_template = None


def test_hf_reflector_in_the_wrapper(tiny_lm):
    model, tokenizer = tiny_lm
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=3), reflector=HFReflector(model, tokenizer,
                                                                                        max_new_tokens=8))
    first, _ = env.reset(seed=1)
    for _ in range(8):
        obs, reward, terminated, truncated, info = env.step("nothing")
        if info["new_conversation"] or terminated or truncated:
            break
    assert info["phase"] == "attempt2" and obs == first
    assert info["reflection_fallback"] is True  # a random model writes no <prompt> tags


def test_hf_reflector_checks_its_arguments(tiny_lm):
    model, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="no room"):
        HFReflector(model, tokenizer, max_new_tokens=96)(fl_request())
    with pytest.raises(ValueError, match="max_new_tokens"):
        HFReflector(model, tokenizer, max_new_tokens=0)
    with pytest.raises(TypeError, match="ReflectionRequest or a str"):
        HFReflector(model, tokenizer)(b"bytes")


def test_rule_reflector_goes_by_what_the_env_read():
    """Under the paper's format a bare "Up" is no move at all: the rulebook must call those replies unreadable,
    not say that Up had no effect (it reads the env's action_read, which the wrapper's trace carries)."""
    from erl_envs.reflection import ReflectionWrapper

    seen = []

    def reflector(request):
        seen.append(request)
        return RuleReflector()(request)

    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0"), reflector=reflector)
    env.reset(seed=0, options={"map": ["FFF", "FSF", "FFG"], "max_steps": 3})
    for _ in range(3):
        env.step("Up")
    steps = seen[0].steps
    assert [(s.action_read, s.action_reported) for s in steps] == [(None, True)] * 3
    prompt = RuleReflector()(seen[0])
    assert "Up from row 2, column 2 had no effect" not in prompt and "readable" in prompt


# ----------------------------------------------------------------------------- the brief rulebook (cpu-smol's teacher)


@pytest.mark.parametrize("env_id", ["ERL-FrozenLake-v0", "ERL-Sokoban-v0"])
def test_brief_detail_names_the_symbols_the_mistake_and_a_route_that_solves_the_board(env_id):
    kwargs = {"size": 4} if env_id == "ERL-FrozenLake-v0" else {}
    rng = np.random.default_rng(5)
    checked = 0
    for seed in range(20):
        request, infos = trace_of(env_id, seed, [str(rng.choice(MOVE_REPLIES)) for _ in range(6)], **kwargs)
        if request.success:
            continue
        text = RuleReflector(detail="brief")(request)
        prompt, reason = extract_prompt(text)
        assert prompt is not None, reason
        assert text.startswith("<prompt>\n") and text.endswith("\n</prompt>")
        assert "<game_rules>" not in prompt and len(prompt) < 400  # a few lines, not the full rulebook
        symbols = request.symbols.symbols
        assert f"{symbols['agent']} is you" in prompt
        route = re.search(r"Route from the start to the goal: (.*)\.", prompt).group(1).split(", ")
        assert len(route) == infos[0]["optimal_steps"]
        assert replay(env_id, seed, route, **kwargs)["success"]
        checked += 1
    assert checked >= 10


def test_brief_detail_says_where_the_agent_fell():
    # S F / H G: Down from the start falls into the hole at row 2, column 1.
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Down```"], options={"map": ["SF", "HG"]})
    prompt, _ = extract_prompt(RuleReflector(detail="brief")(request))
    assert "Last time Down from row 1, column 1 fell into the hole at row 2, column 1." in prompt
    assert "Route from the start to the goal: Right, Down." in prompt
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Up```"] * 2, options={"map": ["SF", "HG"], "max_steps": 2})
    prompt, _ = extract_prompt(RuleReflector(detail="brief")(request))
    assert "Last time: Hit the max step limit before reaching the goal." in prompt


class _RecordingTokenizer:
    """The tiny tokenizer behind a recorder: what HFReflector asks of a tokenizer, and with which options."""

    def __init__(self, inner, chat_template=None, pad_token_id="inner"):
        self.inner, self.chat_template, self.calls = inner, chat_template, []
        self.pad_token_id = inner.pad_token_id if pad_token_id == "inner" else pad_token_id
        self.eos_token_id = inner.eos_token_id

    def __call__(self, text, **kwargs):
        self.calls.append(("encode", text, kwargs))
        return self.inner(text, **kwargs)

    def apply_chat_template(self, messages, **kwargs):
        self.calls.append(("template", messages, kwargs))
        return " ".join(f"<|{m['role']}|> {m['content']}" for m in messages) + " <|assistant|>"

    def decode(self, ids, **kwargs):
        self.calls.append(("decode", ids.tolist(), kwargs))
        return self.inner.decode(ids, **kwargs)


class _RecordingLM:
    """A causal LM stand-in: records what ``generate`` was given and answers with fixed token ids."""

    def __init__(self, reply_ids, **config):
        from types import SimpleNamespace

        self.config, self.reply_ids, self.calls = SimpleNamespace(**config), reply_ids, []

    def generate(self, **kwargs):
        import torch

        self.calls.append(kwargs)
        prompt = kwargs["input_ids"]  # the reply follows the prompt's length; its ids are never read back
        return torch.cat([torch.zeros(prompt.shape, dtype=torch.long), torch.tensor([self.reply_ids])], dim=1)


def test_hf_reflector_hands_the_model_the_paper_sampling_and_the_right_prompt(tiny_lm):
    _, inner = tiny_lm
    reply = [inner.convert_tokens_to_ids("rules"), inner.eos_token_id]
    assert HFReflector(None, inner).max_new_tokens == 1024
    assert (HFReflector(None, inner).temperature, HFReflector(None, inner).top_p) == (0.5, 0.9)

    # No chat template: a plain User/Assistant layout, tokenized with the tokenizer's own special tokens.
    model, tokenizer = _RecordingLM(reply), _RecordingTokenizer(inner)
    assert HFReflector(model, tokenizer, max_new_tokens=12)("hole goal") == "rules"  # eos dropped
    (_, text, options), decode = tokenizer.calls[0], tokenizer.calls[-1]
    assert text == "User: hole goal\n\nAssistant:" and options == {"return_tensors": "pt", "add_special_tokens": True}
    assert decode == ("decode", reply, {"skip_special_tokens": True})
    (call,) = model.calls
    ids = inner(text, return_tensors="pt")["input_ids"]
    assert call["input_ids"].tolist() == ids.tolist() and call["attention_mask"].tolist() == [[1] * ids.shape[1]]
    assert {k: v for k, v in call.items() if k not in ("input_ids", "attention_mask")} == dict(
        max_new_tokens=12, pad_token_id=inner.pad_token_id, do_sample=True, temperature=0.5, top_p=0.9)

    # A chat template writes the special tokens itself; greedy decoding passes no sampling settings; a tokenizer
    # without a pad token pads with end-of-sequence.
    model, tokenizer = _RecordingLM(reply), _RecordingTokenizer(inner, chat_template="any", pad_token_id=None)
    HFReflector(model, tokenizer, max_new_tokens=4, temperature=0.0)("hole goal")
    assert tokenizer.calls[0] == ("template", [{"role": "user", "content": "hole goal"}],
                                  {"tokenize": False, "add_generation_prompt": True})
    assert tokenizer.calls[1][1] == "<|user|> hole goal <|assistant|>"
    assert tokenizer.calls[1][2] == {"return_tensors": "pt", "add_special_tokens": False}
    assert {k: v for k, v in model.calls[0].items() if k not in ("input_ids", "attention_mask")} == dict(
        max_new_tokens=4, pad_token_id=inner.eos_token_id, do_sample=False)


@pytest.mark.parametrize("config, kept", [({"max_position_embeddings": 7}, 3), ({"n_positions": 5}, 1),
                                          ({"max_position_embeddings": 0, "n_positions": 6}, 2), ({}, None)])
def test_hf_reflector_keeps_the_prompts_end_within_the_models_context(tiny_lm, config, kept):
    _, inner = tiny_lm
    model, tokenizer = _RecordingLM([inner.eos_token_id], **config), _RecordingTokenizer(inner)
    text = "Up Down Left Right A B C D"
    HFReflector(model, tokenizer, max_new_tokens=4)(text)
    ids = inner("User: " + text + "\n\nAssistant:")["input_ids"]
    assert model.calls[0]["input_ids"].tolist() == [ids[-kept:] if kept else ids]


def test_hf_reflector_puts_the_prompt_on_the_models_device(tiny_lm):
    import torch

    _, inner = tiny_lm
    model = _RecordingLM([inner.eos_token_id])
    model.device = torch.device("meta")  # a device that is not the CPU, on any machine
    HFReflector(model, _RecordingTokenizer(inner), max_new_tokens=2)("hole goal")
    assert model.calls[0]["input_ids"].device.type == "meta"
    assert model.calls[0]["attention_mask"].device.type == "meta"


def test_reflector_errors_name_what_they_were_given():
    with pytest.raises(TypeError, match="HFReflector needs a ReflectionRequest or a str, got bytes"):
        HFReflector(None, None)(b"bytes")
    with pytest.raises(ValueError, match="temperature must be >= 0 \\(0 = greedy\\), got -0.1"):
        HFReflector(None, None, temperature=-0.1)
    assert HFReflector(None, None, max_new_tokens=1).max_new_tokens == 1
    with pytest.raises(TypeError, match="RuleReflector needs a ReflectionRequest, got str"):
        RuleReflector()("just text")
    with pytest.raises(TypeError, match="symbols must be a SymbolSet or None, got dict"):
        RuleReflector(symbols={"agent": "A"})
    symbols = SOKOBAN_SYMBOLS["abstract"]
    assert RuleReflector(symbols=symbols).symbols is symbols


def _board(text):
    return [list(row) for row in text.split("/")]


def test_the_agent_of_an_unknown_grid_is_the_symbol_that_moves_one_cell_most_often():
    """A one-cell move earns a vote on each pair of consecutive boards, a jump none; the most votes wins, so a
    symbol that moved once cannot outvote one that moved on every step (reading a board is not a single pair)."""
    from erl_envs.reflection.rulebooks import _infer_agent

    boards = [_board(b) for b in ("@.../....Y/....", ".@../Y.../....", "..@./...Y/....", "..../..@Y/....",
                                  "..../..@./...Y")]
    # "@" moves one cell on three of the 4 steps; "Y" jumps twice (no vote), stays once and moves one cell once.
    assert _infer_agent(boards) == frozenset("@")
    # "@" earns the first vote, "Y" the next two: votes add up, so "Y" wins although "@" was counted first.
    assert _infer_agent([_board(b) for b in ("@Y../....", "...Y/@...", "..Y./...@", ".Y../@...")]) == frozenset("Y")
    # Each pair of consecutive boards is read, the last one included; no move, no agent.
    assert _infer_agent([_board("@./.."), _board("@./.."), _board(".@/..")]) == frozenset("@")
    assert _infer_agent([_board("@./.."), _board("@./..")]) == frozenset()
    # A symbol appearing twice is never the agent; a diagonal step is not a one-cell move.
    assert _infer_agent([_board("@@./..."), _board(".@@/...")]) == frozenset()
    assert _infer_agent([_board("@../..."), _board(".../.@.")]) == frozenset()


# ----------------------------------------------------------------------------- rulebook facts, one per test


def _grid_text(board):
    return "\n".join("".join(f" {ch} \t" for ch in row) for row in board.split("/"))


def _grid_request(boards, actions, truncated=False, terminated=False, feedback="The attempt ended."):
    """A grid-style request from board strings ("P../.X./...": rows split by "/"): one step per action."""
    steps = tuple(TraceStep(_grid_text(boards[i]), action, 0.0, boards[i] != boards[i + 1],
                            terminated and i == len(actions) - 1, truncated and i == len(actions) - 1, "")
                  for i, action in enumerate(actions))
    return ReflectionRequest(text="", system_prompt="", base_prompt="Play.", style="grid", steps=steps,
                             final_observation=_grid_text(boards[-1]), total_return=0.0, success=False,
                             feedback=feedback)


def test_an_unknown_grid_rulebook_reports_jumps_untried_moves_vanished_symbols_and_the_cut():
    """The agent moves one row down in the lower rows (its only one-cell move), then jumps two rows up; "K", where it
    stepped, is gone after the first step but is still one of the board's symbols."""
    boards = [".../P../K../...", ".../.../P../...", "P../.../.../..."]
    prompt = rulebook_of(_grid_request(boards, ["```Down```", "```Up```"], truncated=True))
    assert "- P: you (this symbol moved when you moved)." in prompt
    assert "- K: on the board; the last attempt did not show what it does." in prompt
    assert "- Down moves you one row down (seen at step 1)." in prompt
    assert "- Up moves you by -2 rows and 0 columns (seen at step 2)." in prompt
    # A move went an unusual way: untried moves are not promised the usual direction.
    assert "- Left was not seen moving you in the last attempt; try it once to learn its effect." in prompt
    assert "- The last attempt was cut off after 2 turns before succeeding: finish within 2 moves." in prompt


def test_an_unknown_grid_rulebook_reads_every_step_after_one_where_only_something_else_moved():
    """Step 1 bumps into "X" for no reason the board shows; at step 2 "Y" moves while the agent stays; the moves
    after it are still read."""
    boards = ["PX./.../..Y", "PX./.../..Y", "PX./.../.Y.", "PX./P../.Y.".replace("PX./P", ".X./P"),
              ".X./.../PY."]
    prompt = rulebook_of(_grid_request(boards, ["```Right```", "```Up```", "```Down```", "```Down```"]))
    assert "- At step 1, Right from row 1, column 1 had no effect." in prompt
    assert "- Down moves you one row down (seen at step 3)." in prompt


def test_sokoban_no_effect_reasons_name_the_cell_behind_a_box_and_the_wall_in_the_outer_column():
    """A push to the right with a wall behind the box (the player's row and column differ), a walk into the wall in
    column 1 (inside the board: a wall, not the edge), and a push of two boxes at once."""
    level = ["#######", "#   . #", "#@$#  #", "#     #", "#######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Right```", "```Left```"], options={"level": level, "max_steps": 2})
    prompt = rulebook_of(request)
    assert "(seen at step 1: Right from row 3, column 2 ran into a box (B) at row 3, column 3 with E behind it)" in prompt
    assert "(seen at step 2: Left from row 3, column 2 ran into a wall (E) at row 3, column 1)" in prompt
    level = ["#######", "#     #", "#@$$ .#", "#    .#", "#######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Right```"], options={"level": level, "max_steps": 1})
    assert "(seen at step 1: Right from row 3, column 2 ran into a box (B) at row 3, column 3 with B behind it)" in \
        rulebook_of(request)


def test_rulebook_lines_that_carry_an_example_keep_their_rule():
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Left```", "let me think", "```Right```", "```Down```"],
                          options={"map": ["SFH", "FHF", "FFG"]})
    prompt = rulebook_of(request)
    assert ("- Moving onto C ends the game at once as a failure (seen at step 4: Down from row 1, column 2 into the "
            "hole at row 2, column 2).") in prompt
    assert "wastes the turn.\n" not in prompt  # the edge was seen: its rule comes with the example only
    assert ("- Last time you fell into the hole at row 2, column 2; check the cell you are about to enter every "
            "turn.") in prompt
    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Right```", "```Down```"], options={"map": ["SFF", "FHF", "FFG"]})
    prompt = rulebook_of(request)
    assert "- A move off the edge of the board leaves you where you are and wastes the turn.\n" in prompt
    level = ["#######", "#@ $ .#", "#     #", "#######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Up```", "```Right```", "```Right```"],
                          options={"level": level, "max_steps": 3})
    assert ("then you step into the box's old cell. Otherwise nothing moves. (Seen at step 3: Right pushed a box "
            "from row 2, column 4 to row 2, column 5.)") in rulebook_of(request)


def test_a_symbol_without_a_meaning_or_legend_is_named_by_its_kind():
    from erl_envs.grid.text import SymbolSet
    from erl_envs.reflection.rulebooks import _FROZEN_LAKE_MEANINGS, _symbol_lines

    symbols = SymbolSet("custom", {"agent": "A", "thin_ice": "T", "goal": "G"}, legend={"goal": "the exit"})
    assert _symbol_lines(symbols, {"agent": "you."}) == ["- A: you.", "- T: thin ice", "- G: the exit"]
    assert _symbol_lines(FROZEN_LAKE_SYMBOLS["abstract"], _FROZEN_LAKE_MEANINGS)[0] == "- A: you."


def test_the_qa_prompt_quotes_the_last_answer_at_most_8_searches_and_clips_long_text():
    from erl_envs.reflection.rulebooks import write_rulebook

    long = "x" * 130
    steps = (TraceStep("obs", f"<search>{long}</search>", 0.0, True, False, False, ""),) + tuple(
        TraceStep("obs", f"<search>query {i}</search>", 0.0, True, False, False, "") for i in range(9)) + (
        TraceStep("obs", "first \\boxed{Paris}", 0.0, True, False, False, ""),
        TraceStep("obs", "then \\boxed{" + long + "}", 0.0, True, False, False, ""),
        TraceStep("obs", "no answer in this reply", 0.0, True, True, False, ""))
    request = ReflectionRequest(text="", system_prompt="", base_prompt="Q", style="qa", steps=steps,
                                final_observation="end", total_return=0.4, success=True, feedback="partial")
    prompt = write_rulebook(request, None)
    assert f'"{clip_text(long, 120)}"; "query 0"' in prompt  # searches clipped at 120 characters
    assert "query 6" in prompt and "query 7" not in prompt  # the first 8 searches
    assert f'- Its final answer "{clip_text(long, 120)}" was correct (partial).' in prompt
    assert clip_text(long, 120) != clip_text(long, 121) and "Paris" not in prompt
    request = dataclasses.replace(request, success=False)
    assert "was not judged correct (partial)" in write_rulebook(request, None)


def test_the_generic_lessons_show_at_most_8_idle_and_10_tried_actions_clipped_at_80():
    from erl_envs.reflection.rulebooks import write_rulebook

    long = "y" * 90
    actions = [long] + [f"act{i}" for i in range(11)]
    steps = tuple(TraceStep("o", a, 0.0, False, False, False, "") for a in actions)
    request = ReflectionRequest(text="", system_prompt="", base_prompt="Do it.", style="generic", steps=steps,
                                final_observation="o", total_return=0.0, success=False, feedback="lost")
    prompt = write_rulebook(request, None)
    idle = prompt.split("These actions had no effect: ")[1].split(". Do not")[0]
    assert idle.count("(step ") == 8 and '"act6" (step 8)' in idle and f'"{clip_text(long, 80)}" (step 1)' in idle
    tried = prompt.split("Actions you tried: ")[1].split(". Where")[0]
    assert tried.count('"') == 20 and '"act8"' in tried and '"act9"' not in tried
    steps = (TraceStep("o", long, 0.0, True, False, False, ""),)
    prompt = write_rulebook(dataclasses.replace(request, steps=steps), None)
    assert f'"{clip_text(long, 80)}"' in prompt and clip_text(long, 80) != clip_text(long, 81)


def test_a_symbol_set_of_exactly_a_games_kinds_gets_its_rulebook():
    """FrozenLake and Sokoban are recognised by the kinds they need: a set of exactly those kinds is one of them."""
    from erl_envs.grid.text import SymbolSet
    from erl_envs.reflection.rulebooks import write_rulebook

    request, _ = trace_of("ERL-FrozenLake-v0", 0, ["```Right```", "```Down```"], options={"map": ["SFF", "FHF", "FFG"]})
    minimal = SymbolSet("minimal", {k: FROZEN_LAKE_SYMBOLS["abstract"].symbols[k]
                                    for k in ("agent", "goal", "hole", "frozen")})
    assert "a hole. Stepping onto it ends the game" in write_rulebook(request, minimal)
    level = ["#######", "#@ $ .#", "#     #", "#######"]
    request, _ = trace_of("ERL-Sokoban-v0", 0, ["```Up```"], options={"level": level, "max_steps": 1})
    kinds = ("agent", "agent_on_target", "box", "box_on_target", "target", "wall", "floor")
    minimal = SymbolSet("minimal", {k: SOKOBAN_SYMBOLS["abstract"].symbols[k] for k in kinds})
    assert "Boxes can only be pushed" in write_rulebook(request, minimal)
    # Without a kind its rulebook or planner reads, a set is not Sokoban: general lessons, not a crash.
    partial = SymbolSet("partial", {k: SOKOBAN_SYMBOLS["abstract"].symbols[k] for k in kinds if k != "box_on_target"})
    assert write_rulebook(request, partial).startswith("<prompt>\n" + request.base_prompt)
    # The default detail is the full rulebook, not the plan alone.
    plain = write_rulebook(request, request.symbols)
    assert plain == write_rulebook(request, request.symbols, detail="full") and "Boxes can only be pushed" in plain


def test_a_move_is_attributed_to_what_the_env_read_not_to_the_reply_text():
    """The wrapper's trace carries the env's own reading (action_read): the rulebook attributes the move to it."""
    boards = ["P../.../...", ".../P../..."]
    request = _grid_request(boards, ["```Left```"])
    request = dataclasses.replace(request, steps=(dataclasses.replace(request.steps[0], action_read="Down",
                                                                      action_reported=True),))
    assert "- Down moves you one row down (seen at step 1)." in rulebook_of(request)
