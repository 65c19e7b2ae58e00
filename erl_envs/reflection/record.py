"""The episode record's values made JSON-safe: ``ReflectionWrapper`` hands back one plain, serialisable record per
episode, whatever its env puts in its infos (numpy scalars and arrays, tuples, sets, enums, odd keys, lone
surrogates)."""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any, Mapping

import numpy as np

from erl_envs.protocol import utf8_safe

__all__ = ["to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps`` accepts: numpy scalars and arrays, tuples, sets, enums, odd keys.

    Non-finite floats become the strings "nan", "inf", "-inf" (strict JSON has no such numbers); anything else
    unknown becomes its ``repr``, so a record never fails to serialise because of one exotic info value. Strings
    (keys too) lose their lone surrogates (``utf8_safe``), so the record can always be written as UTF-8.
    """
    # Exact-type fast paths first: records are mostly plain values, and this runs on every info of every step.
    kind = type(value)
    if kind is str:
        return utf8_safe(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if kind is dict:
        return {utf8_safe(k) if type(k) is str else str(to_jsonable(k)): to_jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return utf8_safe(str(value))
    if isinstance(value, Enum):
        return to_jsonable(value.value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {utf8_safe(k) if isinstance(k, str) else str(to_jsonable(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return repr(value)
