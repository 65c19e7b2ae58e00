"""A tiny tool-calling chat model built in code, so tool-use trainers (TRL's ``environment_factory``) run on CPU.

A random tiny model never writes a well-formed tool call, so a training loop that needs one would never get past
its first turn. This model is wired by hand to be a next-token table over a few tokens: with the attention and MLP
outputs zeroed, the last hidden state is the embedding of the last token, so the logits depend on that token only.
The table writes a Qwen3-style call ``<tool_call>{"name": "<tool>", "arguments": {"<arg>": "<value>"}}
</tool_call><|im_end|>`` after each ``<|im_start|>assistant\\n``, with the value drawn uniformly from ``values``.
Everything else is an ordinary Llama model and a byte-level tokenizer carrying TRL's Qwen3 chat template, so TRL
treats it like Qwen3 (tool schema in the prompt, response parsing, tool turns), and training moves its weights
away from the table like any model's.
"""

from __future__ import annotations

import json
from typing import Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = ["build_tiny_tool_caller"]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LOGIT_SCALE = 12.0  # after RMSNorm a one-hot state has norm sqrt(hidden); this makes the table nearly deterministic


def _qwen3_chat_template() -> str:
    from trl.chat_template_utils import qwen3_chat_template  # TRL recognises this exact template for parsing

    return qwen3_chat_template


def build_tiny_tool_caller(tool: str = "move", argument: str = "direction",
                           values: Sequence[str] = ("Up", "Down", "Left", "Right"), hidden_size: int = 64,
                           max_positions: int = 8192, seed: int = 0):
    """``(model, tokenizer)``: a 1-layer Llama that calls ``tool(argument=<one of values>)`` every assistant turn."""
    if len(values) < 1:
        raise ValueError("values must name at least one argument value")
    byte_vocab = {ch: i for i, ch in enumerate(sorted(set(pre_tokenizers.ByteLevel.alphabet())))}
    backend = Tokenizer(models.BPE(vocab=byte_vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    opening = "<tool_call>\n" + json.dumps({"name": tool, "arguments": {argument: "@"}}).split("@")[0]
    closing = '"}}\n</tool_call>'
    backend.add_special_tokens(SPECIAL)
    backend.add_tokens([opening, *values, closing])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        padding_side="left")
    tokenizer.chat_template = _qwen3_chat_template()

    vocab = len(tokenizer)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=max_positions, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None)
    model = LlamaForCausalLM(config)

    ids = tokenizer.convert_tokens_to_ids
    newline = tokenizer.encode("\n", add_special_tokens=False)
    # States of the table: 0 after the assistant header's newline, 1 after the opening, 2 after a value,
    # 3 after the closing, 4 after anything else.
    state_of = {newline[-1]: 0, ids(opening): 1, ids(closing): 3, **{ids(v): 2 for v in values}}
    next_tokens = {0: [ids(opening)], 1: [ids(v) for v in values], 2: [ids(closing)], 3: [tokenizer.eos_token_id],
                   4: [tokenizer.eos_token_id]}
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        embed.zero_()
        embed[:, 4] = 1.0
        for token, state in state_of.items():
            embed[token].zero_()
            embed[token, state] = 1.0
        head = model.lm_head.weight
        head.zero_()
        for state, tokens in next_tokens.items():
            head[tokens, state] = LOGIT_SCALE / hidden_size ** 0.5
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
