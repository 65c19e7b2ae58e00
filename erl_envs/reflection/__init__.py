"""ERL's episode around any text env: attempt, reflection, second attempt, and the memory across episodes.

Data flows one way: ``prompts`` (what the policy is asked to reflect on) and ``trace`` (the failed attempt as data and
text) feed ``reflectors`` (who writes a reflection when the agent does not: ``RuleReflector``, whose writing is in
``rulebooks``, and ``HFReflector``) and
``wrapper`` (``ReflectionWrapper``, the gated two-attempt episode), which stores and reads ``memory``; ``vector`` holds
vector envs of wrappers.
"""

from erl_envs.reflection.memory import PoolMemory, ReflectionMemory, RetrievalMemory, load_memory
from erl_envs.reflection.reflectors import HFReflector, Reflector, RuleReflector
from erl_envs.reflection.trace import ReflectionRequest, TraceStep
from erl_envs.reflection.vector import ReflectionAsyncVectorEnv, ReflectionSyncVectorEnv
from erl_envs.reflection.wrapper import PHASES, ReflectionWrapper, extract_prompt, to_jsonable

__all__ = ["ReflectionWrapper", "ReflectionSyncVectorEnv", "ReflectionAsyncVectorEnv", "ReflectionMemory",
           "RetrievalMemory", "PoolMemory", "load_memory", "RuleReflector", "HFReflector", "Reflector",
           "ReflectionRequest", "TraceStep", "PHASES", "extract_prompt", "to_jsonable"]
