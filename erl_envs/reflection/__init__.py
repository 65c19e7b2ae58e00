"""ERL's episode around any text env: attempt, reflection, second attempt, and the memory across episodes.

Data flows one way: ``prompts`` (what the policy is asked to reflect on) and ``trace`` (the failed attempt as data and
text) feed ``reflectors`` (who writes a reflection when the agent does not: ``RuleReflector``, whose writing is in
``rulebooks``, and ``HFReflector``) and
``wrapper`` (``ReflectionWrapper``, the gated two-attempt episode, whose record ``record`` makes JSON-safe), which
stores and reads ``memory``; ``vector`` holds vector envs of wrappers.
"""

from erl_envs.reflection.memory import PoolMemory, ReflectionMemory, RetrievalMemory, load_memory
from erl_envs.reflection.reflectors import HFReflector, Reflector, RuleReflector
from erl_envs.reflection.trace import ReflectionRequest, TraceStep
from erl_envs.reflection.vector import ReflectionAsyncVectorEnv, ReflectionSyncVectorEnv
from erl_envs.reflection.record import to_jsonable
from erl_envs.reflection.wrapper import MEMORY_RULES, PHASES, ReflectionWrapper, extract_prompt, with_reminder

__all__ = ["ReflectionWrapper", "ReflectionSyncVectorEnv", "ReflectionAsyncVectorEnv", "ReflectionMemory",
           "RetrievalMemory", "PoolMemory", "load_memory", "RuleReflector", "HFReflector", "Reflector",
           "ReflectionRequest", "TraceStep", "PHASES", "MEMORY_RULES", "extract_prompt", "with_reminder", "to_jsonable"]
