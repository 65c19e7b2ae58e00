"""JSON and YAML parsing with limits, for every file a user or a crash can hand us (data, levels, memories, configs,
checkpoint manifests).

``json.loads`` raises ``RecursionError`` on ``[[[[...]]]]`` nested a few thousand deep, turns ``1e400`` into
``inf`` (which later breaks ``int()``) and accepts ``NaN``; ``yaml.safe_load`` has the same depth problem. Here each
of those is refused as a ``json.JSONDecodeError`` (a ``ValueError``) that says what is wrong and where (line and
column), so the loaders' existing ``except json.JSONDecodeError`` clauses report it against their file. YAML aliases
are shared when loaded but copied by everything after (a deep copy, a JSON dump): a "billion laughs" file of a few
hundred bytes expands to millions of values, so ``loads_yaml`` refuses aliases that expand beyond
``MAX_YAML_VALUES``. A key written twice in one object or mapping is refused too: both parsers would keep the last
one silently, so a setting that reads as one value would run as another.

Files are opened by ``open_regular``: a name that is a directory, a FIFO or a device (``/dev/zero``, a named pipe
that never ends) is refused by name before a byte is read, since reading one would hang or fill memory; and
``read_bytes_limited`` / ``read_text_limited`` read at most their cap, however large the file grows meanwhile.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import sys
from typing import Any, BinaryIO

__all__ = ["MAX_DEPTH", "MAX_YAML_VALUES", "loads_json", "loads_yaml", "read_text_limited", "read_bytes_limited",
           "open_regular", "check_regular", "too_large", "RefusedFileError", "nesting_depth", "expanded_size",
           "load_data_file", "key_values"]

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


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return value


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
    overflow a float, the non-standard ``NaN``/``Infinity`` and a key written twice in one object; every refusal is a
    ``json.JSONDecodeError`` whose position points at the problem."""
    if max_chars is not None and len(text) > max_chars:
        raise json.JSONDecodeError(f"the text is {len(text)} characters long, more than the {max_chars} allowed",
                                   text, max_chars)
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant,
                           object_pairs_hook=_unique_object)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text,
                                   _too_deep_at(text, max_depth)) from None
    except _NonFinite as exc:
        place = max(text.find(exc.literal), 0)
        raise json.JSONDecodeError(f"the number {exc.literal[:40]} is not a finite float", text, place) from None
    except _DuplicateKey as exc:
        quoted = json.dumps(exc.key)
        place = max(text.find(quoted, text.find(quoted) + 1), 0)  # the second time the key is written (usually)
        raise json.JSONDecodeError(f"the key {quoted[:80]} is written twice in one object", text, place) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer literal with more digits than Python converts
        raise json.JSONDecodeError(str(exc).split(";")[0], text, 0) from None
    if nesting_depth(value) > max_depth:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text, _too_deep_at(text, max_depth))
    return value


def loads_yaml(text: str, source: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``yaml.safe_load`` whose failures are one ``ValueError`` naming ``source`` and the line and column; a key
    written twice in one mapping is such a failure."""
    import yaml

    try:
        value = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
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


@functools.lru_cache(maxsize=None)
def _unique_key_loader() -> type:
    """PyYAML's ``SafeLoader`` refusing a key written twice in one mapping (merged ``<<`` keys may still override);
    built on first use, so that importing this module never imports PyYAML."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001 - PyYAML's signature
            if isinstance(node, yaml.MappingNode):
                seen: set = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:  # an unhashable key: the constructor below reports it
                        continue
                    if duplicate:
                        raise yaml.constructor.ConstructorError(
                            "while reading a mapping", node.start_mark,
                            f"the key {str(key)[:80]!r} is written twice", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


class RefusedFileError(ValueError):
    """A file refused before it is read: not a regular file (a directory, a FIFO, a device, a socket), or larger
    than its reader's cap."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_regular(path: str | os.PathLike, what: str = "file", mode: int | None = None) -> None:
    """Refuse ``path`` by name (``stat``, which opens nothing) when it is not a regular file; ``mode`` is its
    ``st_mode`` when the caller has it already."""
    mode = os.stat(path).st_mode if mode is None else mode
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise RefusedFileError(f"{os.fspath(path)} is {kind}, not a regular file: a {what} must be a file "
                                  "(reading it could hang or never end)")


def too_large(path: str | os.PathLike, size: int, max_bytes: int, what: str) -> RefusedFileError:
    """The one-line error for a file over its cap (``size`` is what is known of it: its size, or the bytes read)."""
    return RefusedFileError(f"{os.fspath(path)}: {size:,} bytes or more is too large for a {what} "
                            f"(at most {max_bytes:,})")


def open_regular(path: str | os.PathLike, what: str = "file", max_bytes: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, refused with ``RefusedFileError`` when it is not a regular file or
    when it holds more than ``max_bytes`` now (a reader that streams it counts what it reads too).

    Checked by name first (``stat`` opens nothing), then again on the opened descriptor, which was opened without
    blocking (a FIFO with no writer would block the ``open`` itself): a file swapped for a pipe in between is caught.
    ``FileNotFoundError`` and ``PermissionError`` pass through.
    """
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        check_regular(path, what, status.st_mode)
        if max_bytes is not None and status.st_size > max_bytes:
            raise too_large(path, status.st_size, max_bytes, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes_limited(path: str | os.PathLike, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``), refusing one larger than ``max_bytes``: by its size
    before reading, and by reading at most ``max_bytes + 1`` bytes, so a file that grows meanwhile is refused too."""
    with open_regular(path, what, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise too_large(path, len(data), max_bytes, what)
    return data


def read_text_limited(path: str | os.PathLike, max_bytes: int, what: str = "file", encoding: str = "utf-8") -> str:
    """The text of ``path`` as ``read_bytes_limited`` reads it; a file that is not ``encoding`` raises
    ``UnicodeDecodeError``."""
    return read_bytes_limited(path, max_bytes, what).decode(encoding)


def load_data_file(path: str | os.PathLike, what: str, max_bytes: int) -> Any:
    """The value of a ``.yaml``/``.yml`` or ``.json`` file a user hands us (a config, a prompt templates file), read
    with the bounds above (size, depth, aliases, UTF-8); every problem is one ``ValueError`` that starts with ``what``
    and the path (``FileNotFoundError`` when there is no such file). An empty YAML file is None."""
    source = f"{what} {os.fspath(path)}"
    suffix = os.path.splitext(os.fspath(path))[1]
    if suffix not in (".yaml", ".yml", ".json"):
        raise ValueError(f"{source} must end in .yaml, .yml or .json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{source} does not exist")
    try:
        text = read_text_limited(path, max_bytes, what)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if suffix != ".json":
        return loads_yaml(text, source)
    try:
        return loads_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def key_values(pairs: list[str], flag: str = "--env-kwarg") -> dict:
    """``KEY=VALUE`` command-line pairs as a dict (what ``--env-kwarg`` gives both CLIs); a value is read as JSON when
    it parses (numbers, booleans, lists), else kept as text. A pair without ``=`` or a key is a ``ValueError``."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            found[key.strip()] = loads_json(value, max_chars=1 << 20)
        except ValueError:
            found[key.strip()] = value
    return found
