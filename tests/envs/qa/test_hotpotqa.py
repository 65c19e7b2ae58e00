"""ERL-HotpotQA-v0: Gymnasium API, every action form, rewards, modes, data sources, bad input, caching, vector envs."""

import gc
import importlib.util
import json
import re
import weakref

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import erl_envs  # noqa: F401  (registers the envs)
from erl_envs import protocol
from erl_envs.qa import prompts as qa_prompts
from erl_envs.qa.hotpotqa import MAX_REPLY_CHARS, HotpotQAEnv
from erl_envs.qa.data import DataError
from erl_envs.qa.results import TRUNCATION_MARK
from erl_envs.qa.search import BM25Index
from erl_envs.reflection import ReflectionWrapper
from paths import ROOT

EXAMPLE = ROOT / "examples" / "hotpotqa_scripted_agent.py"

QUESTIONS = [
    {"id": "q-yes", "question": "Were Osk Works and Bel Press founded in the same city?", "answer": "yes",
     "supporting_facts": {"title": ["Osk Works", "Bel Press"], "sent_id": [1, 1]},
     "context": {"title": ["Osk Works", "Bel Press", "Dulind", "Zürich Café"],
                 "sentences": [["Osk Works is a toy company.", " It was founded in Dulind."],
                               ["Bel Press is a publisher.", " It was founded in Dulind."],
                               ["Dulind is a city on the Marn River."],
                               ["Zürich Café is a café in Dulind, loved by 東京 tourists."]]}},
    {"id": "q-river", "question": "Which river flows through the city where Osk Works was founded?",
     "answer": "Marn River",
     "supporting_facts": {"title": ["Osk Works", "Dulind"], "sent_id": [1, 0]},
     "context": {"title": ["Osk Works", "Dulind", "Bel Press"],
                 "sentences": [["Osk Works is a toy company.", " It was founded in Dulind."],
                               ["Dulind is a city on the Marn River."],
                               ["Bel Press is a publisher.", " It was founded in Dulind."]]}},
]


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ERL_GYM_CACHE", str(tmp_path / "cache"))


def make(**kwargs):
    kwargs.setdefault("data", QUESTIONS)
    return gym.make("ERL-HotpotQA-v0", **kwargs)


def play(env, replies, **reset_kwargs):
    """Reset and send replies until the episode ends; returns every step's (obs, reward, term, trunc, info)."""
    obs, info = env.reset(**reset_kwargs)
    steps = [(obs, 0.0, False, False, info)]
    for reply in replies:
        steps.append(env.step(reply))
        assert env.observation_space.contains(steps[-1][0]), steps[-1][0]
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


# ------------------------------------------------------------------------------------------------ API


def test_synthetic_env_passes_check_env():
    env = gym.make("ERL-HotpotQA-v0", data="synthetic", num_questions=40)
    check_env(env.unwrapped, skip_render_check=False)
    assert env.unwrapped.instructions == qa_prompts.QA_INSTRUCTIONS
    assert protocol.prompt_style_of(env) == "qa"


def test_make_without_data_fails_with_the_options():
    with pytest.raises(DataError) as err:
        gym.make("ERL-HotpotQA-v0")
    for option in ("synthetic", ".jsonl", "hf:hotpotqa/hotpot_qa", "datasets.Dataset", "corpus="):
        assert option in str(err.value)


def test_reset_is_deterministic_and_options_pick_the_question():
    env = gym.make("ERL-HotpotQA-v0", data="synthetic", num_questions=50)
    first = env.reset(seed=11)
    assert env.reset(seed=11) == first
    obs, info = env.reset(options={"index": 3})
    assert info["task_id"] == env.unwrapped.questions[3].id and info["task_text"] in obs
    assert env.reset(options={"task_id": info["task_id"]})[1]["task_id"] == info["task_id"]
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"question": 1})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"index": 50})
    with pytest.raises(ValueError, match="no question with task_id"):
        env.reset(options={"task_id": "nope"})


# ------------------------------------------------------------------------------------------------ episodes


def test_search_then_correct_answer():
    env = make()
    steps = play(env, ["<search>Osk Works founded city</search>", "It is \\boxed{the Marn River}"],
                 options={"index": 1})
    obs, reward, terminated, truncated, info = steps[1]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs.startswith('Search results for "Osk Works founded city":\n[1] Osk Works (score ')
    assert "4 turns left" in obs
    assert info["action"] == "search" and info["took_effect"] and info["num_searches"] == 1
    assert [r["rank"] for r in info["results"]] == list(range(1, len(info["results"]) + 1))
    assert info["results"][0]["title"] == "Osk Works" and info["results"][0]["score"] > 0
    assert info["retrieved_titles"][0] == "Osk Works" and info["feedback"].startswith('searched "Osk Works')
    obs, reward, terminated, truncated, info = steps[2]
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["em"] and info["success"] and info["f1"] == 1.0 and info["answer"] == "the Marn River"
    assert info["episode_feedback"].startswith("answered correctly") and "Episode over" in obs
    assert info["retrieval_recall"] == 1.0 and info["gold_retrieved"] and info["gold_answers"] == ["Marn River"]


def test_reward_partial_wrong_yes_no_and_never_answered():
    env = make()
    partial = play(env, ["\\boxed{Marn}"], options={"index": 1})[-1]  # F1 = 2/3 with "marn river"
    assert partial[1] == pytest.approx(2 / 3) and not partial[4]["success"]
    assert partial[4]["episode_feedback"].startswith("answered partially correctly")
    wrong = play(env, ["<answer>Dulind</answer>"], options={"index": 1})[-1]
    assert wrong[1] == 0.0 and wrong[4]["episode_feedback"].startswith("answered wrong")
    yes_no = play(env, ["\\boxed{no}"], options={"index": 0})[-1]
    assert yes_no[1] == 0.0 and yes_no[2]
    assert play(env, ["\\boxed{Yes}"], options={"index": 0})[-1][1] == 1.0
    never = play(env, ["I think it is Dulind."], options={"index": 1})[-1]
    assert never[1] == 0.0 and never[2] and never[4]["answer"] is None
    assert never[4]["episode_feedback"].startswith("never answered")


def test_running_out_of_turns_truncates_with_zero_reward():
    env = make(max_turns=3)
    steps = play(env, ["<search>Osk</search>", "<search>Dulind</search>", '{"name": "search", "arguments": '
                       '{"query": "river"}}', "\\boxed{Marn River}"], options={"index": 1})
    assert len(steps) == 4  # the fourth reply is never sent
    assert "last turn" in steps[2][0]
    obs, reward, terminated, truncated, info = steps[3]
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["episode_feedback"].startswith("ran out of turns") and not info["success"]
    assert info["num_searches"] == 3 and "Episode over" in obs
    with pytest.raises(gym.error.ResetNeeded, match="call reset"):  # the same error as the grid envs
        env.step("\\boxed{too late}")


def test_json_tool_call_top_k_is_used_and_capped():
    env = make(data="synthetic", num_questions=30, max_top_k=7)
    env.reset(seed=0)
    _, _, _, _, info = env.step('{"name": "search", "arguments": {"query": "company founded", "top_k": 2}}')
    assert len(info["results"]) == 2
    _, _, _, _, info = env.step('<tool_call>{"name": "search", "arguments": {"query": "company", "top_k": 99}}'
                                "</tool_call>")
    assert len(info["results"]) == 7
    _, _, _, _, info = env.step("<search>company film band city</search>")
    assert len(info["results"]) == 5  # the default k


def test_malformed_calls_use_a_turn_without_effect():
    env = make()
    env.reset(options={"index": 0})
    for reply, reason in [('<tool_call>{"name": "search", "arguments": {"query": </tool_call>', "not valid JSON"),
                          ("<search></search>", "empty"),
                          ('{"name": "browse", "arguments": {"query": "x"}}', "unknown tool")]:
        obs, reward, terminated, truncated, info = env.step(reply)
        assert obs.startswith("Your tool call could not be read") and reason in obs
        assert not info["took_effect"] and info["action"] == "invalid" and reward == 0.0
    assert info["turn"] == 3 and info["num_searches"] == 0
    with pytest.raises(TypeError, match="reply as a str"):
        env.step(42)


def test_unicode_huge_and_foreign_queries_stay_inside_the_observation_space():
    env = make()
    space = env.observation_space
    steps = play(env, ["<search>Zürich Café 東京</search>", "<search>" + "Dulind " * 9_000 + "</search>",
                       "<search>🦜🦜 parrot ☃ Dulind</search>", "\\boxed{" + "🦜" * 5000 + "}"],
                 options={"index": 0})
    assert steps[1][4]["results"][0]["title"] == "Zürich Café"
    assert len(steps[2][0]) <= space.max_length and steps[2][4]["num_searches"] == 2
    assert "🦜" not in steps[3][0] and "Dulind" in steps[3][0]  # characters outside the charset are dropped
    assert "🦜" not in steps[4][0] and steps[4][2]
    assert all(space.contains(s[0]) for s in steps)


def test_only_the_last_max_reply_chars_of_a_reply_are_read_so_a_flood_costs_little():
    import time

    env = make()
    env.reset(options={"index": 0})
    flood = "\\boxed{" + "x " * 5_000_000 + "}"  # 10 MB: its box opens before the part that is read
    started = time.perf_counter()
    obs, reward, terminated, _, info = env.step(flood)
    assert time.perf_counter() - started < 0.5  # uncapped, scoring the 10 MB answer took seconds
    assert terminated and info["answer"] is None and reward == 0.0
    env.reset(options={"index": 1})
    early = "<search>Dulind</search>" + "x" * MAX_REPLY_CHARS + "\\boxed{Marn River}"  # the call is not read
    _, reward, terminated, _, info = env.step(early)
    assert terminated and info["action"] == "answer" and info["answer"] == "Marn River"
    env = make(max_reply_chars=50)
    env.reset(options={"index": 0})
    assert env.step(" " * 100 + "<search>Dulind</search>")[4]["action"] == "search"


def test_every_tool_call_of_a_reply_runs_and_local_search_is_accepted():
    env = make()
    env.reset(options={"index": 0})
    reply = ('<tool_call>{"name": "local_search", "arguments": {"query": "Osk Works"}}</tool_call>\n'
             '<tool_call>{"name": "search", "arguments": {"query": "Dulind"}}</tool_call>'
             '<tool_call>{"name": "browse", "arguments": {}}</tool_call>')
    obs, _, _, _, info = env.step(reply)
    assert info["num_searches"] == 2 and info["num_calls"] == 3 and info["turn"] == 1 and info["took_effect"]
    first, second = obs.index('Search results for "Osk Works"'), obs.index('Search results for "Dulind"')
    assert first < second < obs.index("Your tool call could not be read: unknown tool 'browse'")
    assert len(obs) <= env.observation_space.max_length


def _paper_call(query, top_k=None):
    args = {"query": query} if top_k is None else {"query": query, "top_k": top_k}
    return f"<tool_call>{json.dumps({'name': 'local_search', 'arguments': args})}</tool_call>"


def test_paper_protocol_shows_whole_passages_as_the_reference_retriever_renders_them():
    long_text = " ".join(["word"] * 500)
    data = [{"question": "Q about words?", "answer": "x",
             "context": [[f"Long {i}", [long_text + f" w{i}"]] for i in range(8)] + [["Other", ["zzz"]]]}]
    env = make(data=data, protocol="paper")
    assert (env.unwrapped.top_k, env.unwrapped.max_top_k, env.unwrapped.max_passage_chars) == (5, 5, None)
    steps = play(env, [_paper_call("word", 10), _paper_call("word w3", 2)])
    assert steps[0][0] == "Q about words?"  # the question alone, as the reference's agent gets it
    obs, _, _, _, info = steps[1]
    assert len(info["results"]) == 5 and obs.count("[Document ") == 5
    first = info["results"][0]
    record = {"id": first["id"], "contents": f'"{first["title"]}"\n{long_text} w{first["title"][-1]}'}
    header, shown, blank, second = obs.split("\n")[:4]
    assert re.fullmatch(r"\[Document 1\] \(ID: doc_1, Score: \d+\.\d{3}\)", header) and abs(
        float(header[-6:-1]) - first["score"]) < 1e-3
    assert shown == str(record) and len(shown) > 2500 and blank == "" and second.startswith("[Document 2] (ID: doc_2")
    assert "turns left" not in obs and obs.endswith("}\n")  # nothing after the tool's own text
    assert steps[2][0].count("[Document ") == 2  # top_k below 5 shows fewer
    assert make(data=data).unwrapped.max_passage_chars == 600  # the extended protocol cuts at 600
    with pytest.raises(ValueError, match="protocol"):
        make(protocol="verl")


def test_paper_protocol_tool_calls_end_or_cost_a_turn_as_in_the_reference():
    env = make(protocol="paper")
    # A call naming another tool is answered with an error and costs the turn.
    obs, reward, terminated, truncated, info = play(env, ['<tool_call>{"name": "search", "arguments": '
                                                          '{"query": "Osk Works"}}</tool_call>'],
                                                     options={"index": 1})[-1]
    assert not (terminated or truncated) and "is not a tool" in obs and info["action"] == "invalid"
    # <search> tags are not a tool call there: the reply is the final answer, scored.
    obs, reward, terminated, *_ = play(env, ["<search>Osk Works</search> \\boxed{Marn River}"],
                                       options={"index": 1})[-1]
    assert terminated and reward == 1.0
    # A malformed <tool_call> makes the whole reply the final answer too.
    reply = '<tool_call>{"name": "local_search", "arguments": {"query": "Dulind"</tool_call> \\boxed{Marn River}'
    obs, reward, terminated, truncated, info = play(env, [reply], options={"index": 1})[-1]
    assert terminated and reward == 1.0 and info["action"] == "answer"


def test_paper_protocol_counts_token_f1_of_one_as_success():
    """The reference counts reward >= 1 as correct, so the same words in another order gate the retry and the
    memory; the extended protocol keeps exact match."""
    data = [{"question": "Where is Saltillo?", "answer": "Mexico, Coahuila", "context": [["Saltillo", ["A city."]]]}]
    for kind, success in (("paper", True), ("extended", False)):
        env = make(data=data, protocol=kind)
        obs, reward, terminated, truncated, info = play(env, ["\\boxed{Coahuila, Mexico}"])[-1]
        assert (reward, info["em"], info["f1"], info["success"]) == (1.0, False, 1.0, success), kind
        wrapped = ReflectionWrapper(make(data=data, protocol=kind))
        wrapped.reset(seed=0)
        wrapped.step("\\boxed{Coahuila, Mexico}")
        assert wrapped.phase == ("done" if success else "reflect"), kind


def test_scoring_and_answer_extraction_switches():
    data = [{"question": "How much?", "answer": "$10.5 million"}]
    env = make(data=data, mode="open", corpus=[{"id": "p", "title": "T", "text": "ten million"}])
    env.reset(options={"index": 0})
    assert env.step("\\boxed{10.5 million}")[1] == 1.0  # official scoring: ASCII punctuation is dropped
    env = make(data=data, mode="open", corpus=[{"id": "p", "title": "T", "text": "t"}], answer_extraction="paper")
    env.reset(options={"index": 0})
    assert env.step("It is \\boxed{10.5 million} or \\boxed{other}")[4]["answer"] == "10.5 million"
    with pytest.raises(ValueError, match="scoring"):
        make(scoring="fancy")


def test_long_passages_are_cut_and_still_fit():
    long_text = " ".join(["word"] * 5000)
    env = make(data=[{"question": "Q about the long one?", "answer": "x",
                      "context": [["Long", [long_text]], ["Short", ["tiny"]], ["Other", ["word"]]]}],
               max_passage_chars=100)
    obs = play(env, ['{"name": "search", "arguments": {"query": "word", "top_k": 10}}'])[-1][0]
    passage_line = obs.split("\n")[2]
    assert passage_line.endswith(" ...") and len(passage_line) <= 104
    assert len(obs) <= env.observation_space.max_length


def test_render_modes():
    env = make(render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    with pytest.raises(ValueError, match="render_mode"):
        HotpotQAEnv(data=QUESTIONS, render_mode="rgb_array")


# ------------------------------------------------------------------------------------------------ modes and data


def test_distractor_mode_searches_only_the_questions_paragraphs():
    env = make(data="synthetic", num_questions=40, mode="distractor")
    for index in range(5):
        obs, info = env.reset(options={"index": index})
        question = env.unwrapped.questions[index]
        _, _, _, _, info = env.step('{"name": "search", "arguments": {"query": "the company film city band '
                                    'river born founded", "top_k": 10}}')
        assert set(info["retrieved_titles"]) <= {p.title for p in question.paragraphs}


def test_open_mode_searches_the_whole_corpus():
    env = make(data="synthetic", num_questions=40)
    corpus_titles = {p.title for p in env.unwrapped._source.passages}
    env.reset(options={"index": 0})
    _, _, _, _, info = env.step('{"name": "search", "arguments": {"query": "company founded", "top_k": 10}}')
    own = {p.title for p in env.unwrapped.questions[0].paragraphs}
    assert set(info["retrieved_titles"]) <= corpus_titles and not set(info["retrieved_titles"]) <= own


def test_mode_argument_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        make(mode="closed")
    with pytest.raises(ValueError, match="only used in open mode"):
        make(mode="distractor", corpus=[{"title": "t", "text": "x"}])
    no_passages = [{"question": "Q?", "answer": "A"}]
    with pytest.raises(DataError, match="pass corpus="):
        make(data=no_passages)
    with pytest.raises(DataError, match="distractor mode needs each question's own paragraphs"):
        make(data=no_passages, mode="distractor")
    with pytest.raises(ValueError, match="top_k=6 is above max_top_k=5"):
        make(top_k=6, max_top_k=5)
    with pytest.raises(ValueError, match="max_turns must be a positive int"):
        make(max_turns=0)


def test_questions_without_passages_work_against_a_corpus_file(tmp_path):
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "w1", "title": "Dulind", "text": "Dulind is a city on the Marn River."},
        {"id": "w2", "title": "Osk Works", "text": "Osk Works is a toy company founded in Dulind."},
        {"id": "w3", "title": "Bel Press", "text": "A publisher."}]))
    questions = [{"question": "Which river flows through Dulind?", "ground_truth": "Marn River"}]
    env = make(data=questions, corpus=corpus)
    steps = play(env, ["<search>Dulind river</search>", "\\boxed{Marn River}"])
    assert steps[1][4]["results"][0]["id"] == "w1"
    assert steps[2][1] == 1.0
    assert steps[2][4]["retrieval_recall"] is None and steps[2][4]["gold_retrieved"] is None
    with pytest.raises(FileNotFoundError):
        make(data=questions, corpus=tmp_path / "absent.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"id": 1, "title": "x", "text": "y"}\n{oops\n')
    with pytest.raises(DataError, match="broken.jsonl, line 2"):
        make(data=questions, corpus=tmp_path / "broken.jsonl")


def test_file_data_source(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    env = make(data=str(path), mode="distractor")
    assert [q.id for q in env.unwrapped.questions] == ["q-yes", "q-river"]
    assert play(env, ["\\boxed{yes}"], options={"task_id": "q-yes"})[-1][1] == 1.0


def test_real_sample_in_both_modes(hotpotqa_sample):
    path = hotpotqa_sample / "dev_distractor_sample_dev.jsonl"
    for mode, min_recall in (("open", 0.5), ("distractor", 0.6)):
        env = make(data=path, mode=mode)
        recall = 0.0
        for index in range(40):
            question = env.unwrapped.questions[index].question
            steps = play(env, [f"<search>{question}</search>", "\\boxed{unknown}"], options={"index": index})
            recall += steps[1][4]["retrieval_recall"]
        assert recall / 40 > min_recall  # the question text alone finds most gold passages with BM25


def test_paper_eval_questions_against_the_sample_corpus(paper_tasks, hotpotqa_sample, tmp_path):
    passages = {}
    for line in (hotpotqa_sample / "dev_distractor_sample_train.jsonl").read_text().splitlines():
        record = json.loads(line)
        for title, sentences in zip(record["context"]["title"], record["context"]["sentences"]):
            passages.setdefault(title, {"id": title, "title": title, "text": "".join(sentences)})
    env = make(data=paper_tasks / "hotpotqa_val_first1024.parquet", corpus=list(passages.values()))
    assert len(env.unwrapped.questions) == 1024
    steps = play(env, ["<search>Scott Derrickson Ed Wood nationality</search>", "\\boxed{yes}"],
                 options={"index": 0})
    assert steps[-1][1] == 1.0 and steps[1][4]["num_searches"] == 1


# ------------------------------------------------------------------------------------------------ sharing, caching


def test_envs_share_one_index_and_vector_env_works():
    envs = gym.make_vec("ERL-HotpotQA-v0", num_envs=3, vectorization_mode="sync", data="synthetic",
                        num_questions=60)
    obs, info = envs.reset(seed=5)
    assert len(obs) == 3 and all(o.startswith("Question: ") for o in obs)
    obs, rewards, terminated, truncated, info = envs.step(["<search>company</search>", "\\boxed{yes}",
                                                           "<search>film</search>"])
    assert list(terminated) == [False, True, False] and rewards[0] == 0.0
    indexes = {id(env.unwrapped._source.index) for env in envs.envs}
    assert len(indexes) == 1
    other = make(data="synthetic", num_questions=60)
    assert other.unwrapped._source is envs.envs[0].unwrapped._source


def test_index_is_cached_on_disk_and_reloaded(tmp_path, monkeypatch):
    cache = tmp_path / "my_cache"
    env = make(data="synthetic", num_questions=23, seed=7, cache_dir=cache)
    expected = env.unwrapped._source.index.scores("company founded")
    assert len(list(cache.glob("*.npz"))) == 1
    alive = weakref.ref(env.unwrapped._source.index)
    del env
    gc.collect()
    assert alive() is None  # nothing in memory: the next env must read the disk

    def no_build(*args, **kwargs):
        raise AssertionError("the index was rebuilt instead of loaded from the disk cache")

    monkeypatch.setattr(BM25Index, "__init__", no_build)
    env = make(data="synthetic", num_questions=23, seed=7, cache_dir=cache)
    assert (env.unwrapped._source.index.scores("company founded") == expected).all()


def test_scripted_agent_example_runs_end_to_end(capsys):
    spec = importlib.util.spec_from_file_location("hotpotqa_scripted_agent", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = module.main(["--episodes", "12", "--quiet"])
    assert 0.0 < summary["reward"] <= 1.0 and summary["recall"] > 0.3
    assert "12 episodes: mean reward" in capsys.readouterr().out
    assert module.scripted_reply("Question: Who?\nYou have 5 turns.") == "<search>Who?</search>"
    assert module.scripted_reply("Search results for \"x\":\n[1] Osk Works (score 3.10)\ntext") \
        .endswith("\\boxed{Osk Works}")


def test_paper_protocol_system_prompts_describe_the_tool_and_carry_it_into_reflected_prompts():
    """Our trainer renders no tool schema, so the paper set writes what the reference's chat template shows: the
    local_search function and the <tool_call> format, in the first prompt and appended to every reflected one."""
    env = make(protocol="paper")
    for element in ("\\boxed{}", '"name": "local_search"', "<tool_call>", "</tool_call>", '"top_k"'):
        assert element in env.unwrapped.instructions, element
    wrapped = ReflectionWrapper(make(protocol="paper"))
    wrapped.reset(seed=0, options={"index": 1})
    wrapped.step("\\boxed{the Rhine}")
    *_, info = wrapped.step("<prompt>Search for the founding city first.</prompt>")
    assert info["system_prompt"] == "Search for the founding city first.\n" + qa_prompts.paper_reminder()
    assert make().unwrapped.instructions == qa_prompts.QA_INSTRUCTIONS  # the extended protocol keeps ours


# --- search quality and cost in distractor mode ----------------------------------------------------------------


def test_the_env_searches_with_lucenes_idf_and_keeps_okapi_on_request():
    assert HotpotQAEnv(data=QUESTIONS).unwrapped._source.index.idf_kind == "lucene"
    env = HotpotQAEnv(data=QUESTIONS, mode="distractor", idf="okapi")
    env.reset(options={"index": 0})
    assert env._index.idf_kind == "okapi"
    with pytest.raises(ValueError, match="idf must be one of"):
        HotpotQAEnv(data=QUESTIONS, idf="bm42")


@pytest.mark.parametrize("idf", ["lucene", "okapi"])
def test_an_exact_title_search_in_distractor_mode_finds_its_passage_in_the_top_5(hotpotqa_sample, idf):
    """Every paragraph of 600 real questions, searched for by its exact title in its question's distractor index,
    is in the top 5 every time, whichever idf (BM25 alone misses 18 with lucene's idf and more with okapi's:
    benchmarks/results/hotpotqa_search.md)."""
    env = HotpotQAEnv(data=str(hotpotqa_sample / "dev_distractor_sample_train.jsonl"), mode="distractor", idf=idf)
    other = HotpotQAEnv(data=str(hotpotqa_sample / "dev_distractor_sample_dev.jsonl"), mode="distractor", idf=idf)
    misses, searches = [], 0
    for source in (env, other):
        for position in range(len(source.questions)):
            source.reset(options={"index": position})
            for title in [p.title for p in source._passages]:
                searches += 1
                if title not in [result["title"] for result in source._search(title, 5)[1]]:
                    misses.append((source.questions[position].id, title))
    assert searches >= 5_900 and misses == [], misses[:5]


def test_a_questions_index_is_built_once_and_shared(monkeypatch):
    built = []
    real_init = BM25Index.__init__

    def counting(self, *args, **kwargs):
        built.append(len(args[0]))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "__init__", counting)
    env = HotpotQAEnv(data="synthetic", num_questions=4, seed=3, mode="distractor")
    twin = HotpotQAEnv(data="synthetic", num_questions=4, seed=3, mode="distractor")
    for seed in range(3):
        env.reset(options={"index": 1})
        twin.reset(options={"index": 1})
        env.step("<search>anything</search>")
    assert len(built) == 1  # one question, one index, whatever the resets and the envs
    env.reset(options={"index": 2})
    assert len(built) == 2


def test_a_lone_surrogate_in_the_data_never_reaches_an_observation(tmp_path):
    record = {**QUESTIONS[1], "question": "Which river flows \ud800 near Osk Works?"}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(record) + "\n")
    env = HotpotQAEnv(data=str(path))
    obs, _ = env.reset(seed=0)
    obs.encode("utf-8")
    obs, *_ = env.step("<search>Osk Works</search>")
    obs.encode("utf-8")


def test_an_unanswered_episode_reports_no_match_and_the_gold_answers():
    """Out of turns without an answer: the info of the last step says exactly what an answer would have scored."""
    env = make(max_turns=2)
    obs, reward, terminated, truncated, info = play(env, ["<search>Osk</search>", "<search>Dulind</search>"],
                                                    options={"index": 1})[-1]
    assert truncated and info["answer"] is None and info["em"] is False and info["f1"] == 0.0
    assert info["success"] is False and info["gold_answers"] == ["Marn River"]
    assert info["episode_feedback"].startswith("ran out of turns")
    # The end is announced on its own line after the last search results.
    assert f"\nEpisode over: {info['episode_feedback']}." in obs and obs.rstrip().endswith(".")


def test_a_valid_search_takes_effect_and_counts_one_call():
    env = make()
    env.reset(options={"index": 1})
    _, _, _, _, info = env.step("<search>Osk Works</search>")
    assert info["took_effect"] is True and info["num_calls"] == 1 and info["results"]


def test_the_per_question_index_uses_the_envs_bm25_settings():
    """Distractor mode builds one BM25 index per question: with the env's k1, b, idf and tokenizer."""
    from erl_envs.qa.search import BM25Index

    env = make(mode="distractor", k1=0.4, b=0.2)
    env.reset(options={"index": 0})
    index = env.unwrapped._index
    assert (index.k1, index.b) == (0.4, 0.2) and list(index.ids) == list(range(len(env.unwrapped._passages)))
    assert index.tokenizer is env.unwrapped._tokenizer
    custom = make(mode="distractor", tokenizer=str.split)
    custom.reset(options={"index": 0})
    assert custom.unwrapped._index.tokenizer is str.split
    twin = BM25Index(env.unwrapped._passages, ids=range(len(env.unwrapped._passages)), k1=0.4, b=0.2,
                     idf=env.unwrapped._idf, tokenizer=env.unwrapped._tokenizer)
    assert index.search("founded Dulind", 3) == twin.search("founded Dulind", 3)


# ------------------------------------------------------------------------------------------------ arguments, cache


def test_the_defaults_are_the_documented_ones():
    """The docstring's defaults (the paper's 5 turns, 5 passages, F1 0.3; BM25 k1 1.5, b 0.75, Lucene idf, no
    stop-words, Unicode folding), and the names the reflection wrapper reads."""
    from erl_envs.qa.data import load_questions

    env = make(data="synthetic").unwrapped
    assert (env.max_turns, env.top_k, env.max_top_k, env.max_passage_chars) == (5, 5, 10, 600)
    assert (env.max_query_chars, env.max_reply_chars, env.f1_threshold) == (300, MAX_REPLY_CHARS, 0.3)
    assert (env.protocol, env.scoring, env.answer_extraction, env.mode) == ("extended", "official", "boxed", "open")
    assert (env._k1, env._b, env._idf) == (1.5, 0.75, "lucene")
    assert env._tokenizer.stopwords == frozenset() and env._tokenizer.fold is True
    assert (env.game_name, env.prompt_set, env.prompt_style) == ("HotpotQA", "lenient", "qa")
    assert make(data="synthetic", protocol="paper").unwrapped.prompt_set == "paper"
    # The synthetic generator's defaults: 200 questions from its seed 0.
    assert [q.id for q in env.questions] == [q.id for q in load_questions("synthetic", num_questions=200, seed=0)]
    space = env.action_space
    assert (space.min_length, space.max_length, space.character_set) == (0, 65_536, env.observation_space.character_set)
    assert space.contains("")  # an empty reply is a valid (unanswered) action
    stop = make(data="synthetic", stopwords=True, fold_unicode=False).unwrapped._tokenizer
    assert "the" in stop.stopwords and stop.fold is False


@pytest.mark.parametrize("name, value, message", [
    ("protocol", "fancy", "protocol must be one of ['paper', 'extended'], got 'fancy'"),
    ("scoring", "fancy", "scoring must be one of ['official', 'unicode'], got 'fancy'"),
    ("answer_extraction", "fancy", "answer_extraction must be one of ['boxed', 'paper'], got 'fancy'"),
    ("max_turns", 0, "max_turns must be a positive int, got 0"),
    ("top_k", 0, "top_k must be a positive int, got 0"),
    ("max_top_k", 0, "max_top_k must be a positive int, got 0"),
    ("max_passage_chars", 0, "max_passage_chars must be a positive int, got 0"),
    ("max_query_chars", 0, "max_query_chars must be a positive int, got 0"),
    ("max_reply_chars", 2.5, "max_reply_chars must be a positive int, got 2.5"),
    ("idf", "tfidf", "idf must be one of ['okapi', 'lucene'], got 'tfidf'"),
])
def test_each_bad_argument_gets_an_error_naming_it(name, value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        make(**{name: value})


def test_max_passage_chars_none_means_whole_passages():
    long_text = "Osk " + "word " * 300
    env = make(data=[{"question": "Q?", "answer": "x", "context": [["Long", [long_text]], ["B", ["b"]]]}],
               max_passage_chars=None, protocol="paper")
    assert env.unwrapped.max_passage_chars is None
    obs = play(env, [_paper_call("Osk", 1)])[-1][0]
    assert long_text.strip() in obs


def test_envs_share_a_source_only_when_every_argument_that_shapes_it_agrees(tmp_path):
    """Sources are shared by their arguments' key while an env holds them: a shared one saves memory, a wrongly
    shared one is a silent wrong data set. Each argument that changes the questions or passages must change the key
    (every env is kept alive here, so that a wrong key would hand out the first env's source)."""
    alive = []

    def questions(**kwargs):
        alive.append(make(**kwargs))
        return [q.id for q in alive[-1].unwrapped.questions]

    seed_1 = questions(data="synthetic", num_questions=20, seed=1)
    assert questions(data="synthetic", num_questions=20, seed=2) != seed_1
    assert len(questions(data="synthetic", num_questions=21, seed=1)) == 21
    assert len(questions(data="synthetic", num_questions=21, seed=1, limit=4)) == 4
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    assert questions(data=path) == ["q-yes", "q-river"] and questions(data=path, limit=1) == ["q-yes"]
    # Two in-memory data sets (no key at all) never share.
    assert questions(data=QUESTIONS[:1]) == ["q-yes"] and questions(data=QUESTIONS[1:]) == ["q-river"]
    # The same file and arguments share one source; a corpus file takes part in the key.
    corpus_a, corpus_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    corpus_a.write_text(json.dumps({"id": "a1", "title": "Dulind", "text": "A city."}) + "\n")
    corpus_b.write_text(json.dumps({"id": "b1", "title": "Dulind", "text": "A city."}) + "\n")
    first, again = make(data=path, corpus=corpus_a), make(data=path, corpus=corpus_a)
    assert first.unwrapped._source is again.unwrapped._source
    other = make(data=path, corpus=corpus_b)
    assert [p.id for p in other.unwrapped._source.passages] == ["b1"]
    # In-memory corpora are not keyed: each env reads its own.
    m1 = make(data=path, corpus=[{"id": "m1", "title": "T", "text": "x"}])
    m2 = make(data=path, corpus=[{"id": "m2", "title": "T", "text": "x"}])
    assert [p.id for p in m1.unwrapped._source.passages] == ["m1"]
    assert [p.id for p in m2.unwrapped._source.passages] == ["m2"]


def test_two_files_of_the_same_size_and_time_are_not_confused(tmp_path):
    """A file's key is its resolved path with its time and size: another file with the same time and size is
    still another source."""
    import os

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(json.dumps(QUESTIONS[0] | {"id": "q-aaa"}) + "\n")
    two.write_text(json.dumps(QUESTIONS[0] | {"id": "q-bbb"}) + "\n")
    stamp = one.stat().st_mtime_ns
    os.utime(two, ns=(stamp, stamp))
    assert one.stat().st_size == two.stat().st_size
    first = make(data=one)
    assert [q.id for q in first.unwrapped.questions] == ["q-aaa"]
    assert [q.id for q in make(data=two).unwrapped.questions] == ["q-bbb"]


def test_an_hf_spec_source_is_keyed_by_its_split(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    folder = tmp_path / "two_splits"
    folder.mkdir()
    for split, ids in (("validation", ["v1"]), ("train", ["t1", "t2"])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(QUESTIONS[0] | {"id": i}) + "\n" for i in ids))
    train = make(data=f"hf:{folder}", split="train")  # kept alive: a key without the split would share its source
    assert [q.id for q in train.unwrapped.questions] == ["t1", "t2"]
    assert [q.id for q in make(data=f"hf:{folder}", split="validation").unwrapped.questions] == ["v1"]


def test_a_tokenizer_without_a_cache_key_works_and_indexes_the_open_corpus():
    """Any callable str -> list[str] is a tokenizer; one without ``cache_key`` just goes uncached. The open-mode
    index is built with it and the env's k1 and b."""
    def prefixes(text):  # 3-letter word prefixes: "Dulindian" matches "Dul"
        return [w[:3].lower() for w in text.split()]

    env = make(tokenizer=prefixes, k1=0.9, b=0.4)
    index = env.unwrapped._source.index
    assert (index.k1, index.b) == (0.9, 0.4)
    passages = env.unwrapped._source.passages
    twin = BM25Index(passages, ids=range(len(passages)), k1=0.9, b=0.4, idf="lucene", tokenizer=prefixes)
    assert (index.scores("Dulxx") == twin.scores("Dulxx")).all() and index.scores("Dulxx").max() > 0
    env.reset(options={"index": 1})
    assert env.step("<search>Dulxx</search>")[4]["results"]


# ------------------------------------------------------------------------------------------------ steps


def test_the_feedback_names_the_verdict_and_echoes_the_answer():
    """Each ending's feedback line; F1 exactly at the threshold is partial credit; an F1 of 1 without exact match
    is 'correct' only under the paper protocol."""
    from erl_envs.qa.scoring import token_f1

    def ending(reply, **kwargs):
        return play(make(**kwargs), [reply], options={"index": 1})[-1]

    obs, reward, _, _, info = ending("\\boxed{Marn River}")
    assert info["feedback"] == info["episode_feedback"] == 'answered correctly with "Marn River" (exact match)'
    assert obs == f"Episode over: {info['episode_feedback']}" and reward == 1.0
    assert info["num_calls"] == 0 and info["took_effect"] is True and info["action"] == "answer"
    assert ending("\\boxed{Dulind}")[4]["feedback"] == 'answered wrong with "Dulind" (token F1 0.00)'
    f1 = token_f1("Marn", "Marn River")
    _, reward, _, _, info = ending("\\boxed{Marn}", f1_threshold=f1)
    assert reward == f1 and info["feedback"] == 'answered partially correctly with "Marn" (token F1 0.67, no exact match)'
    assert ending("\\boxed{River Marn}")[4]["feedback"] == \
        'answered partially correctly with "River Marn" (token F1 1.00, no exact match)'
    assert ending("\\boxed{River Marn}", protocol="paper")[4]["feedback"] == \
        'answered correctly with "River Marn" (token F1 1.00: the gold answer\'s words, not an exact match)'
    # An echoed answer of exactly 200 characters is shown whole; one more is cut.
    for length, cut in ((200, False), (201, True)):
        shown = ending("\\boxed{" + "a" * length + "}")[4]["feedback"]
        assert (f'"{"a" * 200}{TRUNCATION_MARK}"' if cut else f'"{"a" * 200}"') in shown


def test_the_scoring_choice_reaches_the_reward():
    curly = "\\boxed{“Marn River”}"  # typographic quotes: Unicode punctuation, kept by the official normalisation
    assert play(make(), [curly], options={"index": 1})[-1][1] < 1.0
    assert play(make(scoring="unicode"), [curly], options={"index": 1})[-1][1] == 1.0


def test_an_answer_with_a_lone_surrogate_is_reported_utf8_safe():
    info = play(make(), ["\\boxed{Marn\ud800 River}"], options={"index": 1})[-1][4]
    info["answer"].encode("utf-8")
    assert "\ud800" not in info["feedback"]


def test_the_search_feedback_line_and_the_turns_left():
    _, _, _, _, info = play(make(), ["<search>Osk Works</search>"], options={"index": 1})[-1]
    assert info["feedback"] == f'searched "Osk Works": {len(info["results"])} passages, top: "Osk Works"'
    assert (info["turn"], info["turns_left"]) == (1, 4)
    assert info["results"][0]["score"] == round(info["results"][0]["score"], 4) != 0


def test_a_search_for_an_exact_title_shows_that_passage_first_even_at_top_k_1():
    """'Dulind' is the title of a passage that never says 'Dulind' in its text, while others say it many times: BM25
    alone ranks it below them, the title rule puts it first, even when only one hit is asked for."""
    corpus = [{"id": "loud", "title": "Loud", "text": "Dulind Dulind Dulind Dulind Dulind."},
              {"id": "city", "title": "Dulind", "text": "A city on a river."},
              {"id": "other", "title": "Other", "text": "Dulind again Dulind."}]
    env = make(data=[{"question": "Q?", "answer": "x"}], corpus=corpus)
    index = env.unwrapped._source.index
    assert index.scores("Dulind").argmax() != 1  # BM25 alone would not put it first
    for reply, ids in (('{"name": "search", "arguments": {"query": "Dulind", "top_k": 1}}', ["city"]),
                       ('{"name": "search", "arguments": {"query": "Dulind", "top_k": 2}}', ["city", "loud"])):
        info = play(env, [reply])[-1][4]
        assert [r["id"] for r in info["results"]] == ids
    paper = make(data=[{"question": "Q?", "answer": "x"}], corpus=corpus, protocol="paper")
    assert [r["id"] for r in play(paper, [_paper_call("Dulind", 1)])[-1][4]["results"]] == ["city"]
    assert len(play(paper, [_paper_call("Dulind")])[-1][4]["results"]) == 3  # no top_k: the protocol's 5, capped
    assert play(paper, [_paper_call("Dulind", 0)])[-1][4]["results"] == []  # the reference's tool asks for 0


def test_the_end_of_an_unanswered_episode_is_one_line_after_the_results():
    """The 'Episode over' line follows the last results on its own line: one newline, never an empty line."""
    for protocol, call in (("extended", "<search>Osk</search>"), ("paper", _paper_call("Osk"))):
        obs = play(make(max_turns=1, protocol=protocol), [call], options={"index": 1})[-1][0]
        assert "\nEpisode over: ran out of turns" in obs and "\n\nEpisode over" not in obs, protocol


def test_human_rendering_prints_every_observation(capsys):
    env = make(render_mode="human")
    obs, _ = env.reset(options={"index": 1})
    assert capsys.readouterr().out == obs + "\n"
    obs = env.step("<search>Osk</search>")[0]
    assert capsys.readouterr().out == obs + "\n"
    silent = make()
    silent.reset(options={"index": 1})
    silent.step("<search>Osk</search>")
    assert capsys.readouterr().out == ""


def test_a_failed_reset_leaves_nothing_steppable():
    env = make()
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step("\\boxed{x}")  # never reset
    env.reset(options={"index": 0})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"bogus": 1})
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step("\\boxed{x}")
    with pytest.raises(TypeError, match="^the reset option 'index' must be an int, got str$"):
        env.reset(options={"index": "1"})


def test_the_per_question_index_table_is_bounded(monkeypatch):
    from erl_envs.qa import hotpotqa

    monkeypatch.setattr(hotpotqa, "_QUESTION_INDEXES", 2)
    env = make(data="synthetic", num_questions=5, mode="distractor")
    for position in range(3):
        env.reset(options={"index": position})
        assert len(env.unwrapped._source.question_indexes) <= 2
    assert list(env.unwrapped._source.question_indexes) == [2]  # full at the third: emptied, then the new one


def test_the_observation_bound_is_tight_for_the_fullest_search_turn():
    """The observation space's max_length sizes an async vector env's shared memory: it must hold the fullest turn
    the extended protocol can produce (8 calls, each the longest query and 10 of the longest, cut passages) and
    not waste more than a tenth of it."""
    title = "T" * 90
    corpus = [{"id": f"p{i}", "title": f"{title}{i}", "text": "needle " * 200} for i in range(10)]
    env = make(data=[{"question": "Where is the needle?", "answer": "x"}], corpus=corpus)
    query = "needle " * 60  # 420 characters: cut to max_query_chars
    call = json.dumps({"name": "search", "arguments": {"query": query, "top_k": 10}})
    obs = play(env, [" ".join([call] * 8)])[-1][0]
    bound = env.observation_space.max_length
    assert obs.count("Search results for") == 8
    assert 0.9 * bound <= len(obs) <= bound, (len(obs), bound)


def test_the_observation_bound_holds_the_fullest_paper_turn():
    """Under the paper protocol every call of a reply runs: a reply filled with searches (as many as
    max_reply_chars holds), each showing 5 whole passages, still fits the space, which is not more than about
    twice that turn (the bound counts the shortest call that parses, not the shortest search)."""
    corpus = [{"id": f"p{i}", "title": f"T{i}", "text": "needle " * 300} for i in range(5)]
    env = make(data=[{"question": "Where is the needle?", "answer": "x"}], corpus=corpus, protocol="paper")
    call = '<tool_call>{"name":"local_search","arguments":{"query":"needle"}}</tool_call>'
    obs = play(env, [call * (MAX_REPLY_CHARS // len(call))])[-1][0]
    bound = env.observation_space.max_length
    assert obs.count("[Document 5]") == MAX_REPLY_CHARS // len(call)
    assert 0.4 * bound <= len(obs) <= bound, (len(obs), bound)


def test_turn_texts_infos_and_errors_word_for_word():
    from erl_envs.qa.results import NO_DOCUMENTS

    env = make()
    obs, info = env.reset(options={"index": 1})
    assert info == {"task_id": "q-river", "task_text": QUESTIONS[1]["question"], "num_questions": 2}
    *_, info = env.step("<search>Osk Works</search> <search>Dulind</search>")
    assert (info["task_id"], info["task_text"]) == ("q-river", QUESTIONS[1]["question"])
    first, second = info["feedback"].split("; ")
    assert first.startswith('searched "Osk Works": ') and second.startswith('searched "Dulind": ')
    for _ in range(3):
        obs, *_ = env.step("<search>Osk</search>")
    assert obs.endswith("\nThis is your last turn: give your final answer in \\boxed{}.")
    # Two searches in one reply: two blocks, each on its own lines.
    obs = play(make(), ["<search>Osk</search><search>Bel</search>"], options={"index": 0})[-1][0]
    assert obs.count("Search results for") == 2 and '\n\nSearch results for "Bel"' in obs
    # A search that matches nothing: its line, and no "top".
    *_, info = play(make(), ["<search>zzzz</search>"], options={"index": 0})[-1]
    assert info["feedback"] == 'searched "zzzz": 0 passages'
    long_query = "Osk " * 30
    *_, info = play(make(), [f"<search>{long_query}</search>"], options={"index": 0})[-1]
    assert info["feedback"].startswith(f'searched "{long_query.strip()[:80]} ..."')
    # Under the paper protocol the no-match line has no newline of its own: the end of the episode gets one.
    obs = play(make(protocol="paper", max_turns=1), [_paper_call("zzzz")], options={"index": 0})[-1][0]
    assert obs.startswith(NO_DOCUMENTS + "\nEpisode over: ran out of turns")
    env = make()
    env.reset(options={"index": 0})
    with pytest.raises(TypeError, match="^an action is the agent's reply as a str, got int$"):
        env.step(3)
    for options, error, message in (
            ({"index": True}, TypeError, "the reset option 'index' must be an int, got bool"),
            ({"index": 2}, ValueError, "question index 2 is out of range 0..1"),
            ([("index", 0)], TypeError, "reset options must be a dict or None, got list")):
        with pytest.raises(error, match="^" + re.escape(message) + "$"):
            env.reset(options=options)
    with pytest.raises(gym.error.ResetNeeded, match="^the episode is over \\(or reset\\(\\) was never called\\)"):
        env.unwrapped.step("x")


def test_file_and_hf_sources_are_shared_whatever_the_unused_generator_arguments(tmp_path, monkeypatch):
    import datasets

    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    first = make(data=path, seed=1, num_questions=5)
    assert make(data=path, seed=2, num_questions=7).unwrapped._source is first.unwrapped._source
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    folder = tmp_path / "one_split"
    folder.mkdir()
    (folder / "validation.jsonl").write_text(json.dumps(QUESTIONS[0]) + "\n")
    spec = f"hf:{folder}::validation"
    hf = make(data=spec)
    assert make(data=spec).unwrapped._source is hf.unwrapped._source
