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
