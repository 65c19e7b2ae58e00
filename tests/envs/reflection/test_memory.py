"""ReflectionMemory (the paper's slot) and RetrievalMemory (per-task, BM25): rules, persistence, sharing."""

import json
import pickle
import threading

import pytest

from erl_envs.reflection.memory import ReflectionMemory, RetrievalMemory, load_memory


# ----------------------------------------------------------------------------- the single slot


def test_slot_starts_empty_and_is_overwritten():
    memory = ReflectionMemory()
    assert memory.get() is None and len(memory) == 0
    memory.update("first rules", task_text="task 1")
    memory.update("second rules", task_text="task 2")
    assert memory.get() == "second rules" and memory.get("task 1") == "second rules"  # task text is ignored
    assert memory.updates == 2 and len(memory) == 1
    memory.clear()
    assert memory.get() is None


def test_slot_rejects_bad_prompts():
    memory = ReflectionMemory()
    with pytest.raises(TypeError, match="bytes"):
        memory.update(b"rules")
    with pytest.raises(ValueError, match="empty"):
        memory.update("  \n")
    with pytest.raises(TypeError, match="task_text"):
        memory.update("rules", task_text=3)
    with pytest.raises(TypeError, match="int"):
        ReflectionMemory(5)
    assert memory.get() is None


def test_slot_save_and_load(tmp_path):
    memory = ReflectionMemory()
    memory.update("r\u00e8gles \u2192 right", task_text="board")
    path = tmp_path / "memory.json"
    memory.save(path)
    loaded = ReflectionMemory.load(path)
    assert loaded.get() == "r\u00e8gles \u2192 right" and loaded.updates == 1
    assert loaded.to_dict() == memory.to_dict()
    assert isinstance(load_memory(str(path)), ReflectionMemory)
    assert json.loads(path.read_text(encoding="utf-8"))["kind"] == "ReflectionMemory"
    empty = ReflectionMemory.from_dict(ReflectionMemory().to_dict())
    assert empty.get() is None


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no memory file"):
        ReflectionMemory.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe not json")
    with pytest.raises(ValueError, match="not a memory file"):
        load_memory(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        ReflectionMemory.load(bad)
    bad.write_text(json.dumps({"kind": "Other"}))
    with pytest.raises(ValueError, match="unknown kind"):
        load_memory(bad)
    retrieval = tmp_path / "retrieval.json"
    RetrievalMemory().save(retrieval)
    with pytest.raises(ValueError, match="RetrievalMemory.*load_memory"):
        ReflectionMemory.load(retrieval)
    data = ReflectionMemory().to_dict()
    data["version"] = 99
    with pytest.raises(ValueError, match="version"):
        ReflectionMemory.from_dict(data)


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "memory.json"
    ReflectionMemory("old").save(path)
    import erl_envs.reflection.memory as memory_module

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(memory_module.json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        ReflectionMemory("new").save(path)
    monkeypatch.undo()
    assert ReflectionMemory.load(path).get() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["memory.json"]  # no temporary file left behind


def test_memories_pickle_with_a_fresh_lock():
    for memory in (ReflectionMemory("slot"), RetrievalMemory()):
        memory.update("rules", task_text="a board")
        copy = pickle.loads(pickle.dumps(memory))
        assert copy.get("a board") == "rules"
        copy.update("changed", task_text="a board")  # the copy has a working lock, and is independent
        assert memory.get("a board") == "rules"


@pytest.mark.parametrize("make", [ReflectionMemory, lambda: RetrievalMemory(capacity=1000)])
def test_concurrent_updates_lose_nothing(make):
    memory = make()

    def writer(k):
        for i in range(100):
            memory.update(f"prompt {k}-{i}", task_text=f"task {k} {i}")
            memory.get(f"task {k} {i}")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if isinstance(memory, ReflectionMemory):
        assert memory.updates == 400
    else:
        assert len(memory) == 400


# ----------------------------------------------------------------------------- the retrieval memory


def test_retrieval_returns_the_most_similar_task():
    memory = RetrievalMemory()
    memory.update("rules about rivers", task_text="Which river flows through the capital of France?")
    memory.update("rules about films", task_text="Who directed the film that won best picture in 1998?")
    memory.update("rules about bands", task_text="Which band released the album with the song Yellow?")
    assert memory.get("Which film won best picture, and who directed it?") == "rules about films"
    assert memory.get("What river runs through Paris, the capital?") == "rules about rivers"
    assert memory.get("band album song") == "rules about bands"


def test_retrieval_overwrites_the_same_task_and_adds_new_ones():
    memory = RetrievalMemory()
    memory.update("v1", task_text="grid A")
    memory.update("v2", task_text="grid A")
    memory.update("other", task_text="grid B")
    assert len(memory) == 2
    assert [e["prompt"] for e in memory.entries] == ["v2", "other"]  # oldest stored first
    assert memory.get("grid A") == "v2"


def test_retrieval_falls_back_to_the_latest_like_the_paper_slot():
    memory = RetrievalMemory()
    assert memory.get("anything") is None
    memory.update("old", task_text="alpha beta")
    memory.update("new", task_text="gamma delta")
    assert memory.get("zeta eta") == "new"  # nothing relevant: the latest success, as in the single slot
    assert memory.get(None) == "new"
    strict = RetrievalMemory(fallback_to_latest=False)
    strict.update("old", task_text="alpha beta")
    assert strict.get("zeta eta") is None and strict.get("alpha") == "old"
    picky = RetrievalMemory(min_score=100.0, fallback_to_latest=False)
    picky.update("old", task_text="alpha beta")
    assert picky.get("alpha") is None


def test_retrieval_ties_go_to_the_most_recent():
    memory = RetrievalMemory()
    memory.update("first", task_text="A B C D")
    memory.update("second", task_text="D C B A")
    assert memory.get("A B") == "second"


def test_eviction_drops_the_least_recently_used():
    memory = RetrievalMemory(capacity=3)
    for name in ("apple", "banana", "cherry"):
        memory.update(f"rules {name}", task_text=f"task {name}")
    assert memory.get("apple") == "rules apple"  # a hit makes apple recent again
    memory.update("rules durian", task_text="task durian")  # evicts banana, the least recently used
    assert len(memory) == 3
    assert {e["task_text"] for e in memory.entries} == {"task apple", "task cherry", "task durian"}
    assert memory.entries[0]["hits"] == 1


def test_retrieval_save_and_load_keep_behaviour(tmp_path):
    memory = RetrievalMemory(capacity=2, min_score=0.1, k1=1.2, b=0.5)
    memory.update("rules one", task_text="one fish")
    memory.update("rules two", task_text="two fish")
    memory.get("one")
    path = tmp_path / "retrieval.json"
    memory.save(path)
    loaded = load_memory(path)
    assert isinstance(loaded, RetrievalMemory) and loaded.to_dict() == memory.to_dict()
    # The loaded clock continues, so eviction order is preserved: "two" is now least recently used.
    loaded.update("rules three", task_text="three fish")
    memory.update("rules three", task_text="three fish")
    assert [e["prompt"] for e in loaded.entries] == [e["prompt"] for e in memory.entries]
    assert "rules two" not in [e["prompt"] for e in loaded.entries]


def test_retrieval_validates_its_data():
    with pytest.raises(ValueError, match="capacity"):
        RetrievalMemory(capacity=0)
    with pytest.raises(ValueError, match="BM25"):
        RetrievalMemory(b=2.0)
    data = RetrievalMemory(capacity=1).to_dict()
    data["entries"] = [{"prompt": "a", "task_text": "x", "stored": 1, "used": 1},
                       {"prompt": "b", "task_text": "y", "stored": 2, "used": 2}]
    with pytest.raises(ValueError, match="capacity"):
        RetrievalMemory.from_dict(data)
    data["entries"] = [{"prompt": "a"}]
    with pytest.raises(ValueError, match="entry 0"):
        RetrievalMemory.from_dict(data)
    with pytest.raises(TypeError, match="task_text"):
        RetrievalMemory().get(task_text=b"bytes")


# ----------------------------------------------------------------------------- the pool memory (the paper code's scope)


def test_pool_assigns_episodes_to_slots_in_turn_and_keeps_them_apart():
    from erl_envs.reflection.memory import PoolMemory

    pool = PoolMemory(slots=3)
    a, b = pool.handle(), pool.handle()
    taken = []
    for handle in (a, b, a, b, a):
        handle.start_episode()
        taken.append(handle.slot)
    assert taken == [0, 1, 2, 0, 1]  # first in, first out over all handles
    a.update("rulebook for slot 1")  # a's latest episode holds slot 1
    assert b.get() is None  # b's episode holds slot 0
    b.start_episode()  # slot 2
    assert b.get() is None
    b.start_episode()  # slot 0
    a.start_episode()  # slot 1
    assert a.get() == "rulebook for slot 1" and b.get() is None
    assert len(pool) == 1 and pool.updates == 1


def test_the_next_slot_can_be_moved_for_the_ranks_of_a_trainer():
    """A data-parallel trainer starts each rank's episodes where a single process would (erl_agents.trainer)."""
    from erl_envs.reflection.memory import PoolMemory

    pool = PoolMemory(slots=4)
    handle = pool.handle()
    pool.next_slot = 3
    handle.start_episode()
    assert handle.slot == 3 and pool.next_slot == 0
    for bad in (4, -1, True, 1.0):
        with pytest.raises(ValueError, match="next_slot must be an int in 0..3"):
            pool.next_slot = bad


def test_pool_memory_round_trips_through_a_file(tmp_path):
    from erl_envs.reflection.memory import PoolMemory, load_memory, memory_from_dict

    pool = PoolMemory(slots=4)
    handle = pool.handle()
    for prompt in ("first", "second", "third"):
        handle.start_episode()
        handle.update(prompt)
    pool.save(tmp_path / "pool.json")
    again = load_memory(tmp_path / "pool.json")
    assert isinstance(again, PoolMemory) and again.to_dict() == pool.to_dict()
    assert memory_from_dict(pool.to_dict()).to_dict() == pool.to_dict()
    resumed = again.handle()
    resumed.start_episode()  # slot 3: the cursor was saved too
    assert resumed.slot == 3 and resumed.get() is None
    resumed.start_episode()
    assert resumed.get() == "first"


@pytest.mark.parametrize("data, match", [
    ({"kind": "PoolMemory", "version": 1, "slots": 0}, "slots"),
    ({"kind": "PoolMemory", "version": 1, "slots": 2, "prompts": {"5": "x"}}, "slot 5"),
    ({"kind": "PoolMemory", "version": 1, "slots": 2, "prompts": {"0": " "}}, "empty"),
    ({"kind": "PoolMemory", "version": 1, "slots": 2, "next": 7}, "next"),
])
def test_pool_memory_rejects_bad_data(data, match):
    from erl_envs.reflection.memory import PoolMemory

    with pytest.raises(ValueError, match=match):
        PoolMemory.from_dict(data)


def test_a_memory_file_with_an_absurd_slot_count_is_refused_by_name(tmp_path):
    """``slots: 100000000000`` would allocate a list of 10^11 entries: refused with the bound, before any work."""
    from erl_agents.config import MAX_MEMORY_SLOTS
    from erl_envs.reflection.memory import MAX_SLOTS, PoolMemory

    assert MAX_SLOTS == MAX_MEMORY_SLOTS  # the trainer's config and the memory agree on the bound
    path = tmp_path / "memory.json"
    path.write_text(json.dumps({"kind": "PoolMemory", "version": 1, "slots": 10**11, "prompts": {}}))
    with pytest.raises(ValueError, match=f"memory.json.*slots must be a positive int of at most {MAX_SLOTS:,}, "
                                         f"got 100000000000"):
        load_memory(path)
    assert len(PoolMemory(MAX_SLOTS).to_dict()["prompts"]) == 0


def test_wrappers_with_pool_handles_write_only_their_episodes_slot():
    import gymnasium as gym

    from erl_envs.reflection.memory import PoolMemory
    from erl_envs.reflection import ReflectionWrapper
    from erl_envs.reflection.reflectors import RuleReflector

    pool = PoolMemory(slots=2)
    envs = [ReflectionWrapper(gym.make("ERL-FrozenLake-v0"), memory=pool.handle(), reflector=RuleReflector())
            for _ in range(2)]
    for env in envs:
        env.reset(options={"map": ["SH", "FG"]})
    # Env 0 (slot 0) walks into the hole, reflects, and solves the retry; env 1 (slot 1) never reflects.
    env = envs[0]
    env.step("```Right```")
    assert env.phase == "attempt2"  # the rule reflector wrote the reflection at once
    for move in ("```Down```", "```Right```"):
        *_, info = env.step(move)
    assert info["record"]["memory_updated"] is True
    assert pool.slot_prompt(0) is not None and pool.slot_prompt(1) is None


# ----------------------------------------------------------------------------- what mutation testing found unpinned


def _bm25(query, docs, k1=1.5, b=0.75):
    """Okapi BM25 with the "+1" IDF, written out term by term from its definition (Robertson & Zaragoza 2009)."""
    import math

    n = len(docs)
    avg = sum(len(d) for d in docs) / n or 1.0
    scores = []
    for doc in docs:
        score = 0.0
        for term in set(query):
            f = doc.count(term)
            if f == 0:
                continue
            df = sum(term in d for d in docs)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(doc) / avg))
        scores.append(score)
    return scores


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (1.2, 0.3), (0.0, 0.0), (2.0, 1.0)])
def test_retrieval_scores_are_okapi_bm25(k1, b):
    tasks = ["red fish blue fish", "one fish two fish red fish fish", "a cat", "red red red cat in a hat"]
    memory = RetrievalMemory(k1=k1, b=b)
    for i, task in enumerate(tasks):
        memory.update(f"rules {i}", task_text=task)
    docs = [task.split() for task in tasks]
    for query in (["red", "fish"], ["cat", "hat", "zebra"], ["fish"], ["zebra"]):
        assert memory._scores(query) == pytest.approx(_bm25(query, docs, k1, b), rel=1e-12, abs=1e-15)
    # Words are compared case-insensitively: the query and the stored task text both lower-cased.
    assert memory.get("CAT HAT") == "rules 3"


def test_retrieval_defaults_and_parameter_bounds():
    memory = RetrievalMemory()
    assert (memory.capacity, memory.min_score, memory.fallback_to_latest, memory.k1, memory.b) == (64, 0.0, True, 1.5,
                                                                                                  0.75)
    for k1, b in ((0.0, 0.0), (3.0, 1.0)):
        assert (RetrievalMemory(k1=k1, b=b).k1, RetrievalMemory(k1=k1, b=b).b) == (k1, b)
    for bad in (dict(k1=-0.1), dict(b=-0.01), dict(b=1.01)):
        with pytest.raises(ValueError, match="BM25 needs k1 >= 0 and 0 <= b <= 1"):
            RetrievalMemory(**bad)
    for bad in (True, 1.0, "2", -3):
        with pytest.raises(ValueError, match="capacity must be a positive int"):
            RetrievalMemory(capacity=bad)


def test_retrieval_clock_hits_and_overwrites():
    memory = RetrievalMemory(capacity=2)
    memory.update("first", task_text="alpha")
    memory.update("second", task_text="beta")
    assert [(e["stored"], e["used"], e["hits"]) for e in memory.entries] == [(1, 1, 0), (2, 2, 0)]
    assert memory.get("alpha") == "first" and memory.get("alpha") == "first"
    assert [(e["used"], e["hits"]) for e in memory.entries] == [(4, 2), (2, 0)]
    # Overwriting a task refreshes both its stored and used clocks, so it is the newest entry and evicted last.
    memory.update("second, better", task_text="beta")
    assert [(e["prompt"], e["stored"], e["used"]) for e in memory.entries] == [("first", 1, 4),
                                                                               ("second, better", 5, 5)]
    memory.update("third", task_text="gamma")
    assert [e["prompt"] for e in memory.entries] == ["second, better", "third"]
    # Updates without a task text share one entry filed under the empty text.
    untitled = RetrievalMemory()
    untitled.update("one")
    untitled.update("two")
    assert [(e["prompt"], e["task_text"]) for e in untitled.entries] == [("two", "")]


def test_retrieval_round_trip_keeps_every_field_and_missing_ones_take_the_defaults():
    memory = RetrievalMemory(capacity=3, min_score=0.25, fallback_to_latest=False, k1=0.9, b=0.4)
    memory.update("rules", task_text="red fish")
    memory.get("red")
    data = memory.to_dict()
    assert {key: data[key] for key in ("capacity", "min_score", "fallback_to_latest", "k1", "b", "clock")} == dict(
        capacity=3, min_score=0.25, fallback_to_latest=False, k1=0.9, b=0.4, clock=2)
    again = RetrievalMemory.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data and again.get("blue") is None  # fallback off survives the trip
    assert again._scores(["red"]) == memory._scores(["red"])  # the task's tokens were rebuilt
    bare = RetrievalMemory.from_dict({"kind": "RetrievalMemory", "version": 1, "capacity": 5})
    assert (bare.min_score, bare.fallback_to_latest, bare.k1, bare.b, bare._clock, len(bare)) == (0.0, True, 1.5,
                                                                                                 0.75, 0, 0)
    bare.update("x", task_text="t")
    assert bare.entries[0]["stored"] == 1
    # Without a saved clock, the clock resumes after the newest entry's use; hits default to 0.
    entry = {"prompt": "p", "task_text": "t", "stored": 3, "used": 7}
    resumed = RetrievalMemory.from_dict({"kind": "RetrievalMemory", "version": 1, "capacity": 2, "entries": [entry]})
    assert resumed._clock == 7 and resumed.entries[0]["hits"] == 0
    # A cleared memory keeps its clock through a save, so entries stored after it still rank after older uses.
    memory.clear()
    assert RetrievalMemory.from_dict(memory.to_dict()).to_dict() == memory.to_dict() and memory.to_dict()["clock"] == 2
    with pytest.raises(ValueError, match="memory data 'entries' must be a list"):
        RetrievalMemory.from_dict({"kind": "RetrievalMemory", "version": 1, "capacity": 2, "entries": {}})
    with pytest.raises(ValueError, match="entries 0 and 1 are both for the task text 't'"):
        RetrievalMemory.from_dict({"kind": "RetrievalMemory", "version": 1, "capacity": 2, "entries": [entry, entry]})


def test_slot_keeps_its_task_text_and_update_count_through_a_round_trip():
    memory = ReflectionMemory()
    assert memory.to_dict()["task_text"] is None
    memory.update("rules", task_text="the board")
    memory.update("rules again", task_text="the board")
    data = memory.to_dict()
    assert (data["task_text"], data["updates"]) == ("the board", 2)
    assert ReflectionMemory.from_dict(data).to_dict() == data
    assert ReflectionMemory.from_dict({"kind": "ReflectionMemory", "version": 1}).updates == 0
    assert repr(memory) == "ReflectionMemory(11 chars, updates=2)"
    memory.clear()
    assert memory.to_dict()["task_text"] is None and memory.get() is None
    assert repr(memory) == "ReflectionMemory(empty, updates=2)"
    with pytest.raises(TypeError, match="task_text must be a str or None, got int"):
        memory.get(task_text=3)


def test_memory_data_errors_name_the_problem(tmp_path):
    from erl_envs.reflection.memory import memory_from_dict

    with pytest.raises(TypeError, match="memory data must be a dict, got list"):
        ReflectionMemory.from_dict([])
    with pytest.raises(ValueError, match="unsupported memory format version 99"):
        ReflectionMemory.from_dict({"kind": "ReflectionMemory", "version": 99})
    with pytest.raises(ValueError, match=r"not memory data: unknown kind None \(known: \['PoolMemory', "):
        memory_from_dict(["not", "a", "dict"])
    with pytest.raises(ValueError, match="a memory prompt must not be empty"):
        ReflectionMemory("   ")
    path = tmp_path / "memory.json"
    path.write_text(json.dumps({"kind": "RetrievalMemory", "version": 1}))
    with pytest.raises(ValueError, match=r"memory.json' is not a valid memory file: the field 'capacity' is missing"):
        load_memory(path)
    path.write_text(json.dumps("a string"))
    with pytest.raises(ValueError, match="expected a JSON object, got str"):
        load_memory(path)


def test_saved_memory_is_readable_utf8_written_beside_the_target(tmp_path, monkeypatch):
    """Non-ASCII text is stored as itself, a lone surrogate in a task text is made safe before it is stored, and
    the temporary file is written in the target's own folder (so the final rename never crosses file systems)."""
    import erl_envs.reflection.memory as memory_module

    memory = ReflectionMemory()
    memory.update("r\u00e8gles \u2192 droite", task_text="plateau \ud800")
    seen = []
    real_dump = memory_module.json.dump

    def spying_dump(data, handle, **kwargs):
        seen.extend(p.name for p in tmp_path.iterdir())
        return real_dump(data, handle, **kwargs)

    monkeypatch.setattr(memory_module.json, "dump", spying_dump)
    memory.save(tmp_path / "memory.json")
    assert len(seen) == 1 and seen[0].startswith(".memory-") and seen[0].endswith(".json")
    text = (tmp_path / "memory.json").read_text(encoding="utf-8")
    assert "r\u00e8gles \u2192 droite" in text and "\\u" not in text
    assert load_memory(tmp_path / "memory.json").to_dict()["task_text"] == "plateau ?"


def test_pool_defaults_bounds_and_handles_before_their_first_episode():
    from erl_envs.reflection.memory import PoolMemory

    assert PoolMemory().slots == 1024 and PoolMemory(1).slots == 1
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="slots must be a positive int"):
            PoolMemory(bad)
    pool = PoolMemory(slots=3)
    assert pool.get() is None
    pool.update("on slot 0")
    assert pool.slot_prompt(0) == "on slot 0" and pool.updates == 1
    pool.store(2, "on slot 2")
    assert pool.updates == 2 and len(pool) == 2
    assert repr(pool) == "PoolMemory(2 of 3 slots filled, updates=2)"
    pool.clear()
    assert len(pool) == 0 and pool.get() is None and pool.slot_prompt(2) is None
    with pytest.raises(TypeError, match="task_text"):
        pool.update("rules", task_text=1)
    with pytest.raises(TypeError, match="task_text"):
        pool.get(task_text=1)
    handle = pool.handle()
    assert handle.slot is None and handle.get() is None
    with pytest.raises(RuntimeError, match=r"this pool handle has no episode: start_episode\(\) assigns one "
                                           r"\(ReflectionWrapper calls it at reset\)"):
        handle.update("too early")
    handle.start_episode()
    with pytest.raises(TypeError, match="task_text"):
        handle.get(task_text=1)
    with pytest.raises(TypeError, match="task_text"):
        handle.update("rules", task_text=1)


def test_pool_data_bounds_are_exact_and_missing_cursors_start_at_zero():
    from erl_envs.reflection.memory import PoolMemory

    base = {"kind": "PoolMemory", "version": 1, "slots": 3}
    bare = PoolMemory.from_dict(base)
    assert (bare._next, bare._current, bare.updates) == (0, 0, 0)
    edge = PoolMemory.from_dict(dict(base, prompts={"0": "a", "2": "c"}, next=2, current=0))
    assert (edge.slot_prompt(0), edge.slot_prompt(2), edge.next_slot) == ("a", "c", 2)
    with pytest.raises(ValueError, match=r"memory slot 3 is outside 0\.\.2"):
        PoolMemory.from_dict(dict(base, prompts={"3": "x"}))
    for name in ("next", "current"):
        with pytest.raises(ValueError, match=rf"memory field '{name}' = 3 is outside 0\.\.2"):
            PoolMemory.from_dict(dict(base, **{name: 3}))
    with pytest.raises(ValueError, match="memory data 'prompts' must be an object of slot number -> prompt"):
        PoolMemory.from_dict(dict(base, prompts=["x"]))
