"""Vector envs of ``ReflectionWrapper``s whose info keeps each episode's record whole.

Use ``ReflectionSyncVectorEnv`` / ``ReflectionAsyncVectorEnv`` instead of Gymnasium's: its info merging cannot batch
the record (a dict for one sub-env, None for another).
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

__all__ = ["ReflectionSyncVectorEnv", "ReflectionAsyncVectorEnv"]


class _WholeInfoMixin:
    """Keep some info keys per sub-env (an object array of whole values) instead of batching them key by key.

    Gymnasium batches each info key into an array typed by the first sub-env that reports it and recurses into
    dicts; a record that is None for one episode and a dict for another, or an attempt number next to a reflect
    step's None, would break that. These keys come back as ``info[key][i]`` = sub-env i's value, with the usual
    ``info["_" + key]`` mask.
    """

    whole_info_keys = ("record", "step_info", "env_info", "attempt")

    def _add_info(self, vector_infos: dict, env_info: dict, env_num: int) -> dict:
        whole = {k: env_info[k] for k in self.whole_info_keys if k in env_info}
        rest = {k: v for k, v in env_info.items() if k not in whole}
        vector_infos = super()._add_info(vector_infos, rest, env_num)
        for key, value in whole.items():
            array = vector_infos.get(key)
            if not (isinstance(array, np.ndarray) and array.dtype == object):
                array = np.full(self.num_envs, None, dtype=object)
            mask = vector_infos.get(f"_{key}")
            if mask is None:
                mask = np.zeros(self.num_envs, dtype=np.bool_)
            array[env_num] = value
            mask[env_num] = True
            vector_infos[key], vector_infos[f"_{key}"] = array, mask
        return vector_infos


class ReflectionSyncVectorEnv(_WholeInfoMixin, SyncVectorEnv):
    """A ``SyncVectorEnv`` of ReflectionWrappers: ``info["record"][i]`` is sub-env i's whole record.

    Sub-envs may share one memory object (they run in this process).
    """


class ReflectionAsyncVectorEnv(_WholeInfoMixin, AsyncVectorEnv):
    """An ``AsyncVectorEnv`` of ReflectionWrappers. Each process holds its own copy of any memory: not shared.

    Observations come back through pipes (``shared_memory=False`` by default): the wrapper's observations quote
    model-written text and have no length bound, so no shared-memory slot could hold them.
    """

    def __init__(self, env_fns, shared_memory: bool = False, **kwargs):
        super().__init__(env_fns, shared_memory=shared_memory, **kwargs)
