"""JSON and YAML parsing with limits, for every file a user or a crash can hand us (data, levels, memories, configs,
checkpoint manifests).

``json.loads`` raises ``RecursionError`` on ``[[[[...]]]]`` nested a few thousand deep, turns ``1e400`` into
``inf`` (which later breaks ``int()``) and accepts ``NaN``; ``yaml.safe_load`` has the same depth problem. Here each
of those is refused as a ``json.JSONDecodeError`` (a ``ValueError``) that says what is wrong and where (line and
column), so the loaders' existing ``except json.JSONDecodeError`` clauses report it against their file. YAML aliases
are shared when loaded but copied by everything after (a deep copy, a JSON dump): a "billion laughs" file of a few
hundred bytes expands to millions of values, so ``loads_yaml`` refuses aliases that expand beyond
``MAX_YAML_VALUES``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_YAML_VALUES", "loads_json", "loads_yaml", "read_text_limited", "nesting_depth",
           "expanded_size"]

MAX_DEPTH = 100  # containers inside containers; real data files nest a handful deep
# Values a YAML document may stand for once its aliases are expanded: a 1 MB file without aliases holds at most
# about half a million, so only alias expansion reaches this.
MAX_YAML_VALUES = 1_000_000

_BRACKETS = re.compile(r'["\\\[\]{}]')


class _NonFinite(ValueError):
    def __init__(self, literal: str):
        super().__init__(literal)
        self.literal = literal


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NonFinite(literal)
    return value


def _refuse_constant(literal: str) -> float:
    raise _NonFinite(literal)


def nesting_depth(value: Any) -> int:
    """How deeply lists and dicts nest inside ``value`` (a scalar is 0), without recursion. Shared containers (YAML
    aliases) are measured once, so an alias bomb costs no more than its text; a container inside itself (a recursive
    YAML alias) nests without end and counts as ``sys.maxsize``."""
    height: dict[int, int] = {}  # id -> levels of containers from that container down
    open_ids: set[int] = set()  # containers whose children are being measured: meeting one again is a cycle
    stack = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        if not isinstance(item, (list, dict)):
            continue
        children = [c for c in (item.values() if isinstance(item, dict) else item) if isinstance(c, (list, dict))]
        if children_done:
            open_ids.discard(id(item))
            height[id(item)] = 1 + max((height[id(c)] for c in children), default=0)
            continue
        if id(item) in height:
            continue
        if id(item) in open_ids:
            return sys.maxsize
        open_ids.add(id(item))
        stack.append((item, True))
        for child in children:
            if id(child) in open_ids:
                return sys.maxsize
            if id(child) not in height:
                stack.append((child, False))
    return height.get(id(value), 0)


def expanded_size(value: Any) -> int:
    """How many values ``value`` holds once every shared container (a YAML alias) is counted at each place it is
    used: what a deep copy would build. Computed over the shared structure, without building it; the value must
    not contain itself (``nesting_depth`` finds that first)."""
    sizes: dict[int, int] = {}
    stack = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        if not isinstance(item, (list, dict)) or (id(item) in sizes and not children_done):
            continue
        children = list(item.values()) if isinstance(item, dict) else item
        if children_done:
            sizes[id(item)] = 1 + len(item) + sum(sizes[id(c)] - 1 for c in children if isinstance(c, (list, dict)))
            continue
        stack.append((item, True))
        stack.extend((c, False) for c in children if isinstance(c, (list, dict)) and id(c) not in sizes)
    return sizes.get(id(value), 1)


def _too_deep_at(text: str, max_depth: int) -> int:
    """The offset of the bracket that opens level ``max_depth + 1`` of a JSON text (0 when none is found)."""
    depth, in_string, escaped = 0, False, False
    for match in _BRACKETS.finditer(text):
        char = match.group()
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                # An escape: the next character is taken literally, so an escaped quote does not end the string.
                escaped = match.end() < len(text) and text[match.end()] in '"\\'
                if escaped:
                    continue
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return match.start()
        elif char in "]}":
            depth -= 1
    return 0


def loads_json(text: str, *, max_depth: int = MAX_DEPTH, max_chars: int | None = None) -> Any:
    """``json.loads`` refusing text longer than ``max_chars``, nesting deeper than ``max_depth``, numbers that
    overflow a float and the non-standard ``NaN``/``Infinity``; every refusal is a ``json.JSONDecodeError`` whose
    position points at the problem."""
    if max_chars is not None and len(text) > max_chars:
        raise json.JSONDecodeError(f"the text is {len(text)} characters long, more than the {max_chars} allowed",
                                   text, max_chars)
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text,
                                   _too_deep_at(text, max_depth)) from None
    except _NonFinite as exc:
        place = max(text.find(exc.literal), 0)
        raise json.JSONDecodeError(f"the number {exc.literal[:40]} is not a finite float", text, place) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer literal with more digits than Python converts
        raise json.JSONDecodeError(str(exc).split(";")[0], text, 0) from None
    if nesting_depth(value) > max_depth:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text, _too_deep_at(text, max_depth))
    return value


def loads_yaml(text: str, source: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``yaml.safe_load`` whose failures are one ``ValueError`` naming ``source`` and the line and column."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or exc.context or "not valid YAML"
        raise ValueError(f"{source}: {place}not valid YAML ({problem})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise ValueError(f"{source}: nested deeper than YAML can be read here (the limit is {max_depth} levels)") \
            from None
    if nesting_depth(value) > max_depth:
        raise ValueError(f"{source}: nested deeper than {max_depth} levels")
    if expanded_size(value) > MAX_YAML_VALUES:
        raise ValueError(f"{source}: its aliases expand to more than {MAX_YAML_VALUES:,} values (a YAML 'billion "
                         f"laughs'); write the values out or use fewer aliases")
    return value


def read_text_limited(path: str | os.PathLike, max_bytes: int, what: str = "file") -> str:
    """The UTF-8 text of ``path``, refusing a file larger than ``max_bytes`` before reading it."""
    size = os.path.getsize(path)
    if size > max_bytes:
        raise ValueError(f"{os.fspath(path)}: {size} bytes is too large for a {what} (at most {max_bytes})")
    with open(path, encoding="utf-8") as f:
        return f.read()
