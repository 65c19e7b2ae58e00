"""erl-gym agents: a compact GRPO trainer for Hugging Face causal LMs, with RLVR and ERL modes."""

__version__ = "0.1.0"
