"""Who writes the reflection after a failed first attempt, when it is not the agent itself.

A reflector is any callable ``reflector(request: ReflectionRequest) -> str`` returning text that holds the new
system prompt inside ``<prompt>...</prompt>``. ``ReflectionWrapper`` builds the request (the failed attempt's trace,
its return and feedback, the base prompt) and, when a reflector is given, calls it itself. Provided here:

* ``RuleReflector``: deterministic, no model. It reads the trace the way the paper's "structured reflection" would
  (which symbol moved, which cell ended the episode, which moves did nothing and why) and writes a correct rulebook
  for the grid games, or an improved search-and-answer prompt for QA (``erl_envs.reflection.rulebooks``). A strong
  baseline, and the test workhorse.
* ``HFReflector``: any Hugging Face causal LM, through its chat template when it has one.
* The agent itself: ``reflector=None`` in the wrapper, so the reflect phase is one more turn of the policy (what the
  trainer does, since reflections are trained too).

The request a reflector reads, and the trace text in it, are in ``erl_envs.reflection.trace``: a reflector sees
exactly what the agent would.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from erl_envs.grid.text import SymbolSet
from erl_envs.reflection.rulebooks import parse_grid, write_rulebook
from erl_envs.reflection.trace import ReflectionRequest

__all__ = [
    "DETAILS",
    "Reflector",
    "parse_grid",
    "RuleReflector",
    "HFReflector",
]


DETAILS = ("full", "plan", "brief")


@runtime_checkable
class Reflector(Protocol):
    """Anything that turns a reflection request into reflection text (with the prompt in ``<prompt>`` tags)."""

    def __call__(self, request: ReflectionRequest) -> str: ...


class RuleReflector:
    """A deterministic reflector: a correct, structured rulebook read off the trace, without any model.

    For the grid games it finds the agent's symbol (the one that moved), the cell that ended the episode (hole,
    goal) and the moves that changed nothing (and why: the edge, a wall, a blocked box, an unreadable reply), and
    writes ``<prompt><game_rules>...</game_rules><strategy>...</strategy></prompt>``. Symbol meanings come from the
    env's SymbolSet (``request.symbols``, or ``symbols=`` here): the reflector is privileged that way, as befits a
    baseline. Every claim about the dynamics is either seen in the trace (and says at which step) or true in every
    level of the game; with ``plan=True`` the strategy also gives a shortest solution of the attempt's board,
    which the second attempt replays. Without symbols it still infers the agent from movement and reports only
    what the trace shows. QA traces get an improved search-and-answer prompt; other envs a lessons list.

    ``detail="plan"`` writes only that shortest solution, as the action strings the env reads (falling back to the
    full rulebook when the board has none): the one part of a rulebook a small model trained from scratch can use,
    in a few dozen tokens instead of a few hundred. ``detail="brief"`` writes four lines (what the symbols are, what
    a move does, what ended the attempt, a shortest route): a rulebook sized for a small model to learn to write
    (the cpu-smol preset's teacher, about 80 tokens against about 450 for the full one).
    """

    def __init__(self, symbols: SymbolSet | None = None, plan: bool = True, detail: str = "full"):
        if symbols is not None and not isinstance(symbols, SymbolSet):
            raise TypeError(f"symbols must be a SymbolSet or None, got {type(symbols).__name__}")
        if detail not in DETAILS:
            raise ValueError(f"detail must be one of {list(DETAILS)}, got {detail!r}")
        self.symbols = symbols
        self.plan = plan
        self.detail = detail

    def __call__(self, request: ReflectionRequest) -> str:
        if not isinstance(request, ReflectionRequest):
            raise TypeError(f"RuleReflector needs a ReflectionRequest, got {type(request).__name__}")
        return write_rulebook(request, self.symbols or request.symbols, plan=self.plan, detail=self.detail)


# ---------------------------------------------------------------------------------------------- a language model


class HFReflector:
    """Reflection by any Hugging Face causal LM (the paper samples reflections at temperature 0.5, top-p 0.9).

    Uses the tokenizer's chat template when it has one (system = reflection instructions, user = the request),
    else a plain "System/User/Assistant" layout. A prompt longer than the model's context keeps its end (the
    trace's outcome and the request to write the prompt), with room left for ``max_new_tokens``.
    """

    def __init__(self, model, tokenizer, max_new_tokens: int = 1024, temperature: float = 0.5, top_p: float = 0.9):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p

    def _prompt_text(self, messages: list[dict[str, str]]) -> tuple[str, bool]:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return text, False  # the template already wrote any special tokens
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages) + "Assistant:"
        return text, True

    def _context_limit(self) -> int | None:
        config = getattr(self.model, "config", None)
        for name in ("max_position_embeddings", "n_positions"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def __call__(self, request: ReflectionRequest | str) -> str:
        import torch

        if isinstance(request, ReflectionRequest):
            messages = request.messages()
        elif isinstance(request, str):
            messages = [{"role": "user", "content": request}]
        else:
            raise TypeError(f"HFReflector needs a ReflectionRequest or a str, got {type(request).__name__}")
        text, add_special = self._prompt_text(messages)
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=add_special)["input_ids"]
        limit = self._context_limit()
        if limit is not None:
            room = limit - self.max_new_tokens
            if room < 1:
                raise ValueError(f"max_new_tokens={self.max_new_tokens} leaves no room for the prompt in the "
                                 f"model's context of {limit} tokens")
            ids = ids[:, -room:]
        device = getattr(self.model, "device", None) or torch.device("cpu")
        ids = ids.to(device)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad}
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            kwargs.update(do_sample=False)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
