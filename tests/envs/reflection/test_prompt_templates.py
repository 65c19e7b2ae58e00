"""Prompt templates from a file (``--prompts FILE``): the shipped file renders today's prompts byte for byte, another
file's wording reaches every env and wrapper built after it and is put back, and a bad file is refused in one line."""

import json

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401
from erl_envs.reflection import ReflectionWrapper
from erl_envs.reflection import prompt_templates as templates
from erl_envs.safe_parse import MAX_DEPTH

GRID_IDS = ("ERL-FrozenLake-v0", "ERL-Sokoban-v0")
GRID_REPLIES = ["I am not sure", "```Up```", "```Left```", "```Down```", "```Right```"] * 4
QA_REPLIES = ["<search>capital city</search>", "<tool_call>\n{\"name\": \"local_search\", \"arguments\": "
              "{\"query\": \"river\"}}\n</tool_call>", "The answer is \\boxed{nobody}."] * 3


def _episode(env, replies, reflection):
    """Every text of one episode: the prompts and observations of attempt 1, the reflection request and its system
    prompt, and attempt 2's system prompt and first observation."""
    obs, info = env.reset(seed=3)
    texts = [info["system_prompt"], obs]
    for reply in replies:
        obs, reward, terminated, truncated, info = env.step(reply)
        texts += [obs, info["system_prompt"]]
        if env.phase == "reflect":
            obs, reward, terminated, truncated, info = env.step(reflection)
            texts += [obs, info["system_prompt"]]
        if env.phase == "attempt2" or terminated or truncated:
            break
    return texts


def _render_everything():
    """Today's prompts of every env under every prompt set, rule and ablation that has texts of its own."""
    texts = []
    for env_id in GRID_IDS:
        for prompt_set in ("lenient", "paper", "small"):
            for kwargs in ({}, {"trace_rule": "project"}, {"no_reflection": True}):
                env = ReflectionWrapper(gym.make(env_id, prompts=prompt_set), **kwargs)
                texts += _episode(env, GRID_REPLIES, "<prompt>Go around the holes.</prompt>")
    for protocol in ("extended", "paper"):
        for kwargs in ({}, {"no_reflection": True}):
            env = ReflectionWrapper(gym.make("ERL-HotpotQA-v0", data="synthetic", protocol=protocol), **kwargs)
            texts += _episode(env, QA_REPLIES, "no block, so the base prompt is used")
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", symbols="gym"), reflection_instructions=None)
    texts += _episode(env, GRID_REPLIES, "<prompt>x</prompt>")
    return texts


@pytest.fixture
def restore_prompts():
    """Puts the project's wording back whatever a test applied."""
    saved = templates.project_templates()
    yield
    templates.apply_templates(saved)


def test_the_shipped_file_holds_every_template_and_renders_todays_prompts_byte_for_byte(restore_prompts):
    shipped = templates.load_templates(templates.SHIPPED_FILE)
    assert sorted(shipped) == templates.template_names() and len(shipped) == 62
    today = _render_everything()
    assert len(today) > 200 and sum(map(len, today)) > 100_000
    templates.apply_templates({name: "X" for name in ("grid.paper.instructions", "reflection.paper.metrics")})
    assert _render_everything() != today  # the comparison below can fail
    templates.apply_templates(shipped)
    assert _render_everything() == today
    # The file is what the writer makes of the project's templates: it reads back to them, text for text.
    assert templates.dump_templates(templates.project_templates()) == templates.SHIPPED_FILE.read_text()


def test_a_file_of_other_wording_reaches_every_env_built_after_it_and_is_put_back(tmp_path, restore_prompts):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({
        "grid": {"paper": {"reminder": {"Sokoban": "Remember: boxes move only when pushed into free cells."},
                           "step": {"Sokoban": {"steps_left": "{steps} moves left", "turn": "Turn {turn}"}}}},
        "reflection": {"paper": {"reflection_request": "{trace}\n\nGame: {game}. Old rules: {base_prompt}",
                                 "metrics": "mean {average:.1f}"}},
        "qa": {"paper": {"instructions": "Answer in \\boxed{}, {{literally}}."}},
    }))
    loaded = templates.load_templates(path)
    assert loaded["grid.paper.step.Sokoban.steps_left"] == "{steps} moves left"
    before = gym.make("ERL-Sokoban-v0", prompts="paper").unwrapped.instructions
    previous = templates.apply_templates(loaded)
    assert set(previous) == set(loaded) and previous["grid.paper.step.Sokoban.turn"] == "Board at turn {turn}:"
    env = ReflectionWrapper(gym.make("ERL-Sokoban-v0", prompts="paper"))
    obs, info = env.reset(seed=3)
    assert info["system_prompt"].endswith("\n\nRemember: boxes move only when pushed into free cells.")
    assert obs.startswith("Turn 0\n") and obs.endswith("\n64 moves left")
    for reply in GRID_REPLIES:
        request = env.step(reply)[0]
        if env.phase == "reflect":
            break
    assert request.startswith("## Step 1\n") and "\n\nGame: Sokoban. Old rules: You are playing" in request
    qa = gym.make("ERL-HotpotQA-v0", data="synthetic", protocol="paper").unwrapped
    # Plain text (never formatted by the code) keeps its braces as written.
    assert templates.template_fields("qa.paper.instructions") is None
    assert qa.instructions.startswith("Answer in \\boxed{}, {{literally}}.\n\n")
    templates.apply_templates(previous)
    assert gym.make("ERL-Sokoban-v0", prompts="paper").unwrapped.instructions == before
    assert templates.project_templates() == templates.load_templates(templates.SHIPPED_FILE)


@pytest.mark.parametrize("content, problem", [
    ({"grid": {"paper": {"instruction": "x"}}}, "unknown template 'grid.paper.instruction' (names under grid.paper: "
                                                "instructions, reminder, step)"),
    ({"maze": {"x": "y"}}, "unknown template 'maze.x' (top-level names: grid, qa, reflection)"),
    ({"grid": {"paper": {"step": {"Sokoban": {"moved": None}}}}},
     "grid.paper.step.Sokoban.moved must be a template's text or a mapping of names, got NoneType"),
    ({"grid": {"lenient": {"step": {"moved": "Moved."}}}}, "unknown template 'grid.lenient.step.moved'"),
    ({"qa": {"paper": {"tool": {"function": {"name": "search"}}}}}, "unknown template 'qa.paper.tool.function.name'"),
    ({"reflection": {"paper": {"reflection_request": "{trace} {gmae}"}}},
     "template 'reflection.paper.reflection_request' uses the field {gmae}, which it does not have; its fields: "
     "{base_prompt}, {game}, {metrics}, {task}, {trace}"),
    ({"grid": {"lenient": {"step": {"steps_left": "Left: {}"}}}},
     "uses the field {} (a field without a name), which it does not have; its fields: {steps}"),
    ({"reflection": {"small": {"no_move": 5}}}, "reflection.small.no_move must be a template's text or a mapping of "
                                                 "names, got int"),
    ({"reflection": {"lenient": {"request": "{trace"}}}, "is not a valid format string"),
    ({"reflection": {"paper": {"metrics": "{average:{width}}"}}}, "uses the field {width}"),
    ({"reflection": {"paper": {"metrics": "{average.__class__}"}}}, "uses the field {average.__class__}"),
    (["grid"], "the file must hold a mapping of template names, got list"),
    ({"grid": {"a.b": "x"}}, "'a.b' under grid is not a template name part"),
])
def test_a_bad_file_is_refused_in_one_line_naming_the_problem(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError) as caught:
        templates.load_templates(path)
    message = str(caught.value)
    assert problem in message and message.startswith(f"prompts file {path}") and "\n" not in message


def test_unreadable_files_are_refused_before_anything_is_applied(tmp_path, restore_prompts):
    cases = {"p.toml": ("x = 1", "must end in .yaml, .yml or .json"),
             "big.yaml": ("a: " + "x" * templates.MAX_FILE_BYTES, "too large for a prompts file"),
             "deep.json": ("[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), "nested deeper than"),
             "broken.yaml": ("grid: [", "not valid YAML"),
             "latin.yaml": (None, "is not UTF-8 text")}
    for name, (text, problem) in cases.items():
        path = tmp_path / name
        if text is None:
            path.write_bytes("grid:\n  lenient:\n    reminder: caf\xe9".encode("latin-1"))
        else:
            path.write_text(text)
        with pytest.raises(ValueError, match=problem) as caught:
            templates.load_templates(path)
        assert "\n" not in str(caught.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        templates.load_templates(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="its fields"):
        templates.apply_templates({"reflection.small.move": "{index}. {verdict}"})
    assert templates.project_templates() == templates.load_templates(templates.SHIPPED_FILE)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    assert templates.load_templates(empty) == {}
