"""Reflection memories: where a successful reflection is kept to seed the next one.

``ReflectionMemory`` is the paper's text: one slot, overwritten whenever a second attempt fully succeeds, read only
as the base prompt of the next reflection (never on first attempts or in evaluation). ``PoolMemory`` is what the
paper's code does: the slot lives in each of its 1,024 rollout workers, reused first-in first-out, so in effect
there are 1,024 independent slots, each serving its own stream of episodes. ``RetrievalMemory`` is the paper's
stated future work: several successful reflections, each filed under the text of its task, and the one whose task
is most similar to the current one (BM25 over the task text) comes back.

All have the same interface (``start_episode``, ``get``, ``update``, ``save``/``load``, ``to_dict``/``from_dict``)
so that ``ReflectionWrapper`` and the trainer take any of them. One object can be shared by many wrappers: in a
``SyncVectorEnv`` all sub-envs see the same memory. An ``AsyncVectorEnv`` runs each sub-env in its own process, so
each gets a *copy* of the memory at start-up and the copies drift apart; share a memory only across a sync vector
env (or a plain list of envs), and save it from the process that owns it.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
from collections import Counter
from typing import Any

from erl_envs.protocol import utf8_safe
from erl_envs.safe_parse import loads_json, read_text_limited

__all__ = ["ReflectionMemory", "RetrievalMemory", "PoolMemory", "MAX_SLOTS", "MAX_MEMORY_FILE_BYTES", "load_memory",
           "memory_from_dict"]

# The largest memory file read (a ValueError names a larger one, or a name that is not a regular file): the
# paper's pool of 1,024 reflections of a few kilobytes each is a few megabytes.
MAX_MEMORY_FILE_BYTES = 1 << 30

_FORMAT_VERSION = 1
_TOKEN = re.compile(r"\w+")


def _check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str):
        raise TypeError(f"a memory prompt must be a str, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("a memory prompt must not be empty: an empty reflection is never worth remembering")
    return utf8_safe(prompt)


def _check_task_text(task_text: Any) -> str | None:
    if task_text is not None and not isinstance(task_text, str):
        raise TypeError(f"task_text must be a str or None, got {type(task_text).__name__}")
    return task_text if task_text is None else utf8_safe(task_text)


def _write_json(path: str | os.PathLike, data: dict) -> None:
    # Write to a temporary file and rename, so a crash mid-save never leaves a truncated memory behind.
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".memory-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_json(path: str | os.PathLike) -> dict:
    path = os.fspath(path)
    try:
        data = loads_json(read_text_limited(path, MAX_MEMORY_FILE_BYTES, "memory file"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no memory file at {path!r}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path!r} is not a memory file (not valid UTF-8 JSON: {e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path!r} is not a memory file: expected a JSON object, got {type(data).__name__}")
    return data


def _check_kind(data: Any, kind: str) -> None:
    if not isinstance(data, dict):
        raise TypeError(f"memory data must be a dict, got {type(data).__name__}")
    if data.get("kind") != kind:
        raise ValueError(f"this is a {data.get('kind')!r} memory, not a {kind!r} one; use erl_envs.reflection.memory.load_memory")
    if data.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unsupported memory format version {data.get('version')!r} "
                         f"(this code reads {_FORMAT_VERSION})")


def _from_file(cls: type, data: dict, path: str | os.PathLike):
    """``cls.from_dict(data)``, with any problem reported against the file it came from."""
    try:
        return cls.from_dict(data)
    except KeyError as err:
        raise ValueError(f"{os.fspath(path)!r} is not a valid memory file: the field {err} is missing") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{os.fspath(path)!r} is not a valid memory file: {err}") from None


class _LockedMemory:
    """The lock and its pickling: a lock cannot be pickled, and a copied memory needs its own lock anyway."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def start_episode(self) -> None:
        """Called by ``ReflectionWrapper`` at every reset; only ``PoolMemory`` handles act on it."""

    def save(self, path: str | os.PathLike) -> None:
        """Write the memory as JSON (atomically: the old file stays intact until the new one is complete)."""
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike):
        return _from_file(cls, _read_json(path), path)

    def to_dict(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict):  # pragma: no cover - overridden
        raise NotImplementedError


class ReflectionMemory(_LockedMemory):
    """The paper's memory: one prompt, the latest reflection whose second attempt succeeded.

    ``task_text`` is accepted (and ignored by ``get``) so that this and ``RetrievalMemory`` are interchangeable.
    """

    kind = "ReflectionMemory"

    def __init__(self, prompt: str | None = None):
        super().__init__()
        self._prompt = None if prompt is None else _check_prompt(prompt)
        self._task_text: str | None = None
        self._updates = 0

    def get(self, task_text: str | None = None) -> str | None:
        """The stored prompt, or None while nothing has been stored."""
        _check_task_text(task_text)
        with self._lock:
            return self._prompt

    def update(self, prompt: str, task_text: str | None = None) -> None:
        """Overwrite the slot (the paper's rule: the latest success wins)."""
        prompt = _check_prompt(prompt)
        task_text = _check_task_text(task_text)
        with self._lock:
            self._prompt = prompt
            self._task_text = task_text
            self._updates += 1

    def clear(self) -> None:
        with self._lock:
            self._prompt = None
            self._task_text = None

    @property
    def updates(self) -> int:
        """How many times the slot was overwritten (a cheap health signal in training logs)."""
        return self._updates

    def __len__(self) -> int:
        return 0 if self._prompt is None else 1

    def __repr__(self) -> str:
        state = "empty" if self._prompt is None else f"{len(self._prompt)} chars"
        return f"ReflectionMemory({state}, updates={self._updates})"

    def to_dict(self) -> dict:
        with self._lock:
            return {"kind": self.kind, "version": _FORMAT_VERSION, "prompt": self._prompt,
                    "task_text": self._task_text, "updates": self._updates}

    @classmethod
    def from_dict(cls, data: dict) -> "ReflectionMemory":
        _check_kind(data, cls.kind)
        memory = cls(data.get("prompt"))
        memory._task_text = _check_task_text(data.get("task_text"))
        memory._updates = int(data.get("updates", 0))
        return memory


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class RetrievalMemory(_LockedMemory):
    """Several successful reflections, filed by task text; ``get`` returns the one of the most similar task.

    Similarity is Okapi BM25 of the current task text (the query) against each entry's task text. An update for a
    task text already stored overwrites that entry (the paper's overwrite rule, per task); a new task adds an
    entry, and beyond ``capacity`` the least recently used entry (stored or retrieved longest ago) is evicted.

    When no entry scores above ``min_score`` (or ``task_text`` is None), ``get`` falls back to the most recently
    stored prompt, which is exactly the paper's single slot; pass ``fallback_to_latest=False`` to get None instead.

    Arguments:
        capacity: the most entries kept.
        min_score: a BM25 score an entry must exceed to count as relevant.
        fallback_to_latest: what ``get`` returns when nothing is relevant (see above).
        k1, b: the BM25 parameters (term-frequency saturation and length normalisation).
    """

    kind = "RetrievalMemory"

    def __init__(self, capacity: int = 64, min_score: float = 0.0, fallback_to_latest: bool = True,
                 k1: float = 1.5, b: float = 0.75):
        super().__init__()
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if not 0.0 <= b <= 1.0 or k1 < 0:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.capacity = capacity
        self.min_score = float(min_score)
        self.fallback_to_latest = bool(fallback_to_latest)
        self.k1 = float(k1)
        self.b = float(b)
        # Each entry: prompt, task_text, stored (clock of its last update), used (clock of its last update or hit),
        # hits. A logical clock rather than wall time keeps eviction deterministic and the saved file portable.
        self._entries: list[dict] = []
        self._tokens: list[list[str]] = []
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _scores(self, query: list[str]) -> list[float]:
        n = len(self._entries)
        lengths = [len(t) for t in self._tokens]
        avg = (sum(lengths) / n) or 1.0
        df = Counter(term for toks in self._tokens for term in set(toks))
        terms = set(query)
        scores = []
        for toks, length in zip(self._tokens, lengths):
            tf = Counter(toks)
            score = 0.0
            for term in terms:
                f = tf.get(term, 0)
                if f:
                    # The "+1" form of the IDF stays positive for terms in most entries, so small memories still rank.
                    idf = math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    score += idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * length / avg))
            scores.append(score)
        return scores

    def get(self, task_text: str | None = None) -> str | None:
        """The prompt stored for the task most similar to ``task_text`` (or the fallback, see the class doc)."""
        task_text = _check_task_text(task_text)
        with self._lock:
            if not self._entries:
                return None
            best = None
            if task_text is not None:
                scores = self._scores(_tokens(task_text))
                # Ties (e.g. grid boards whose tokens are all single letters) go to the most recently stored entry.
                i = max(range(len(scores)), key=lambda k: (scores[k], self._entries[k]["stored"]))
                if scores[i] > self.min_score:
                    best = self._entries[i]
            if best is None:
                if not self.fallback_to_latest:
                    return None
                best = max(self._entries, key=lambda e: e["stored"])
            best["used"] = self._tick()
            best["hits"] += 1
            return best["prompt"]

    def update(self, prompt: str, task_text: str | None = None) -> None:
        """Store ``prompt`` for ``task_text``: overwrite that task's entry, or add one and evict beyond capacity.

        Updates without a task text all share one entry (they cannot be told apart for retrieval anyway).
        """
        prompt = _check_prompt(prompt)
        task_text = _check_task_text(task_text)
        key = "" if task_text is None else task_text
        with self._lock:
            now = self._tick()
            for entry in self._entries:
                if entry["task_text"] == key:
                    entry.update(prompt=prompt, stored=now, used=now)
                    return
            self._entries.append({"prompt": prompt, "task_text": key, "stored": now, "used": now, "hits": 0})
            self._tokens.append(_tokens(key))
            if len(self._entries) > self.capacity:
                oldest = min(range(len(self._entries)), key=lambda k: self._entries[k]["used"])
                del self._entries[oldest]
                del self._tokens[oldest]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tokens.clear()

    @property
    def entries(self) -> list[dict]:
        """Copies of the entries (prompt, task_text, stored, used, hits), oldest stored first."""
        with self._lock:
            return [dict(e) for e in sorted(self._entries, key=lambda e: e["stored"])]

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"RetrievalMemory({len(self._entries)}/{self.capacity} entries)"

    def to_dict(self) -> dict:
        with self._lock:
            return {
                "kind": self.kind, "version": _FORMAT_VERSION, "capacity": self.capacity,
                "min_score": self.min_score, "fallback_to_latest": self.fallback_to_latest,
                "k1": self.k1, "b": self.b, "clock": self._clock, "entries": [dict(e) for e in self._entries],
            }

    @classmethod
    def from_dict(cls, data: dict) -> "RetrievalMemory":
        _check_kind(data, cls.kind)
        memory = cls(capacity=data["capacity"], min_score=data.get("min_score", 0.0),
                     fallback_to_latest=data.get("fallback_to_latest", True),
                     k1=data.get("k1", 1.5), b=data.get("b", 0.75))
        entries = data.get("entries", [])
        if not isinstance(entries, list):
            raise ValueError("memory data 'entries' must be a list")
        entry_of_task: dict[str, int] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not {"prompt", "task_text", "stored", "used"} <= set(entry):
                raise ValueError(f"memory entry {i} must be a dict with prompt, task_text, stored and used")
            clean = {"prompt": _check_prompt(entry["prompt"]), "task_text": str(entry["task_text"]),
                     "stored": int(entry["stored"]), "used": int(entry["used"]), "hits": int(entry.get("hits", 0))}
            # update() keeps one entry per task text; two would make retrieval and eviction depend on file order.
            first = entry_of_task.setdefault(clean["task_text"], i)
            if first != i:
                raise ValueError(f"memory entries {first} and {i} are both for the task text "
                                 f"{clean['task_text'][:80]!r}; a retrieval memory holds one entry per task")
            memory._entries.append(clean)
            memory._tokens.append(_tokens(clean["task_text"]))
        if len(memory._entries) > memory.capacity:
            raise ValueError(f"the memory data holds {len(memory._entries)} entries, "
                             f"more than its capacity {memory.capacity}")
        memory._clock = max([int(data.get("clock", 0))] + [e["used"] for e in memory._entries])
        return memory


# A pool holds one entry per slot: a count from a file is bounded before anything is allocated (the paper: 1,024).
MAX_SLOTS = 1 << 20


class PoolMemory(_LockedMemory):
    """``slots`` independent single-slot memories, the paper code's memory scope (1,024 slots in its runs).

    The reference keeps its remembered prompt in each rollout worker and hands tasks to its pool of workers first
    in, first out. Here, likewise, every episode takes the next slot in turn: each ``ReflectionWrapper`` holds a
    ``handle()``, and each reset of the wrapper (``start_episode``) assigns the episode the slot after the one the
    previous episode of *any* handle took (slot 0, 1, ..., slots - 1, 0, ...). The episode's reflection reads that
    slot as its base prompt, and a successful retry overwrites that slot only. Episodes are started in a fixed
    order by the trainer, so the assignment is deterministic. With ``slots=1`` this is ``ReflectionMemory``.

    ``get``/``update`` on the pool itself (not a handle) read and write the slot of the latest episode: handy for
    logging and tests; ``len`` counts the filled slots.
    """

    kind = "PoolMemory"

    def __init__(self, slots: int = 1024):
        super().__init__()
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"slots must be a positive int of at most {MAX_SLOTS:,}, got {slots!r}")
        self.slots = slots
        self._prompts: list[str | None] = [None] * slots
        self._next = 0  # the slot the next episode takes
        self._current = 0  # the slot of the latest episode
        self._updates = 0

    def handle(self) -> "PoolHandle":
        """A memory for one wrapper: its episodes take their slots from this pool in turn."""
        return PoolHandle(self)

    def _take_slot(self) -> int:
        with self._lock:
            slot = self._next
            self._next = (slot + 1) % self.slots
            self._current = slot
            return slot

    @property
    def next_slot(self) -> int:
        """The slot the next episode takes. A data-parallel trainer moves it so that the ranks' episodes take the
        slots a single process would give them, one rank's block after another."""
        return self._next

    @next_slot.setter
    def next_slot(self, slot: int) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"next_slot must be an int in 0..{self.slots - 1}, got {slot!r}")
        with self._lock:
            self._next = slot

    def slot_prompt(self, slot: int) -> str | None:
        with self._lock:
            return self._prompts[slot]

    def store(self, slot: int, prompt: str) -> None:
        prompt = _check_prompt(prompt)
        with self._lock:
            self._prompts[slot] = prompt
            self._updates += 1

    def get(self, task_text: str | None = None) -> str | None:
        _check_task_text(task_text)
        return self.slot_prompt(self._current)

    def update(self, prompt: str, task_text: str | None = None) -> None:
        _check_task_text(task_text)
        self.store(self._current, prompt)

    def clear(self) -> None:
        with self._lock:
            self._prompts = [None] * self.slots

    @property
    def updates(self) -> int:
        return self._updates

    def __len__(self) -> int:
        return sum(prompt is not None for prompt in self._prompts)

    def __repr__(self) -> str:
        return f"PoolMemory({len(self)} of {self.slots} slots filled, updates={self._updates})"

    def to_dict(self) -> dict:
        with self._lock:
            filled = {str(i): prompt for i, prompt in enumerate(self._prompts) if prompt is not None}
            return {"kind": self.kind, "version": _FORMAT_VERSION, "slots": self.slots, "prompts": filled,
                    "next": self._next, "current": self._current, "updates": self._updates}

    @classmethod
    def from_dict(cls, data: dict) -> "PoolMemory":
        _check_kind(data, cls.kind)
        memory = cls(slots=data["slots"])
        prompts = data.get("prompts", {})
        if not isinstance(prompts, dict):
            raise ValueError("memory data 'prompts' must be an object of slot number -> prompt")
        for key, prompt in prompts.items():
            slot = int(key)
            if not 0 <= slot < memory.slots:
                raise ValueError(f"memory slot {slot} is outside 0..{memory.slots - 1}")
            memory._prompts[slot] = _check_prompt(prompt)
        for name in ("next", "current"):
            value = int(data.get(name, 0))
            if not 0 <= value < memory.slots:
                raise ValueError(f"memory field {name!r} = {value} is outside 0..{memory.slots - 1}")
            setattr(memory, f"_{name}", value)
        memory._updates = int(data.get("updates", 0))
        return memory


class PoolHandle:
    """One wrapper's view of a ``PoolMemory``: the slot its current episode was assigned (see ``PoolMemory``)."""

    def __init__(self, pool: PoolMemory):
        self.pool = pool
        self.slot: int | None = None

    def start_episode(self) -> None:
        self.slot = self.pool._take_slot()

    def get(self, task_text: str | None = None) -> str | None:
        _check_task_text(task_text)
        return None if self.slot is None else self.pool.slot_prompt(self.slot)

    def update(self, prompt: str, task_text: str | None = None) -> None:
        _check_task_text(task_text)
        if self.slot is None:
            raise RuntimeError("this pool handle has no episode: start_episode() assigns one (ReflectionWrapper "
                               "calls it at reset)")
        self.pool.store(self.slot, prompt)

    @property
    def updates(self) -> int:
        return self.pool.updates

    def __repr__(self) -> str:
        return f"PoolHandle(slot={self.slot}, {self.pool!r})"


_KINDS = {ReflectionMemory.kind: ReflectionMemory, RetrievalMemory.kind: RetrievalMemory, PoolMemory.kind: PoolMemory}


def memory_from_dict(data: dict) -> ReflectionMemory | RetrievalMemory | PoolMemory:
    """Rebuild a memory from ``to_dict`` output, whichever class made it."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in _KINDS:
        raise ValueError(f"not memory data: unknown kind {kind!r} (known: {sorted(_KINDS)})")
    return _KINDS[kind].from_dict(data)


def load_memory(path: str | os.PathLike) -> ReflectionMemory | RetrievalMemory | PoolMemory:
    """Load a memory saved by any memory class, whichever it was."""
    data = _read_json(path)
    kind = data.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{os.fspath(path)!r} is not a memory file: unknown kind {kind!r} (known: {sorted(_KINDS)})")
    return _from_file(_KINDS[kind], data, path)
