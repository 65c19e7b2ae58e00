"""What ``erl-serve`` tells OpenEnv about its env: the metadata (``GET /metadata``), the env-specific session state
(``state`` over WebSocket, ``GET /sessions/{id}/state``) and the MCP tool surface (``POST /mcp``, ``WS /mcp``).

* ``describe(env_id, reflection, env)``: OpenEnv's ``EnvironmentMetadata``: the env id as its name, the first
  paragraph of the env's manual as its description, and a README (``readme_content``, what OpenEnv's tools show)
  holding the instructions the model gets, the rules of the game as the paper states them (symbols, moves, rewards,
  the step budget: what ``reveal_rules=True`` would tell the model), the manual's Rewards / Episode End sections, and
  the JSON schemas of the action and the observation. OpenEnv's ``/metadata`` answers with exactly the fields of
  ``EnvironmentMetadata``, so the schemas travel in the README (and in ``/schema``).
* ``ERLState``: OpenEnv's ``State`` plus the env's own: the env id, whether the episode is over, the last observation
  text, the return so far, and the last step's info (JSON-safe: for the grid games the steps left, success,
  position...; under ``ReflectionWrapper`` the phase and attempt).
* ``mcp_server_for(served)``: a FastMCP server whose tools act on one session's env, which openenv-core's ``/mcp``
  route calls (``tools/list``, ``tools/call``; with a session made by ``openenv/session/create`` the calls of one
  client share an episode). Tools: ``start_episode(seed)`` and ``act(text)`` for every env, plus ``move(direction)``
  for the grid games, ``search(query)`` / ``answer(text)`` for HotpotQA and ``reflect(rulebook)`` under
  ``ReflectionWrapper``; each returns the observation text, the reward and whether the episode is over.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Literal

import gymnasium as gym

import erl_envs
from erl_envs import protocol
from erl_envs.integrations.remote import space_to_json
from erl_envs.integrations.trl import answer_reply

try:
    from openenv.core.env_server.types import EnvironmentMetadata, State
    from pydantic import Field
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f'erl-serve needs openenv-core: pip install "openenv-core>=0.3,<0.4" uvicorn ({error})') \
        from None

__all__ = ["describe", "ERLState", "mcp_server_for", "manual_sections"]

Direction = Literal["Up", "Down", "Left", "Right"]


class ERLState(State):
    """One session's state: OpenEnv's episode id and step count, and the env's own."""

    env_id: str = Field(default="", description="the served env's id")
    done: bool | None = Field(default=None, description="the episode has ended; None before the first reset")
    observation: str = Field(default="", description="the last observation text")
    total_reward: float = Field(default=0.0, description="the episode's return so far")
    info: dict[str, Any] = Field(default_factory=dict, description="the last reset's or step's info, JSON-safe")


def manual_sections(env: gym.Env) -> dict[str, str]:
    """The ``## Section`` parts of the env class's docstring (its user's manual), by title."""
    doc = inspect.getdoc(type(env.unwrapped)) or ""
    sections: dict[str, str] = {}
    title = None
    for line in doc.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            sections[title] = ""
        elif title is not None:
            sections[title] += line + "\n"
    return {k: v.strip() for k, v in sections.items()}


def _rules(env: gym.Env) -> str:
    appendix = getattr(env.unwrapped, "_rules_appendix", None)
    return appendix().strip() if callable(appendix) else ""


def describe(env_id: str, reflection: bool, env: gym.Env, action_cls: type, observation_cls: type
             ) -> EnvironmentMetadata:
    """OpenEnv's metadata of ``env`` (an instance of ``env_id``, inside ``ReflectionWrapper`` if ``reflection``),
    whose actions and observations travel as the pydantic models ``action_cls`` and ``observation_cls``."""
    sections = manual_sections(env)
    description = (sections.get("Description", "").split("\n\n")[0] or f"the erl_envs env {env_id}")
    description = " ".join(description.split())
    if reflection:
        description += (" Served inside ReflectionWrapper: a failed first attempt is followed by a reflection "
                        "request, the reflection (<prompt>...</prompt>) and a second attempt on the same task.")
    parts = [f"# {env_id}{' with ReflectionWrapper' if reflection else ''}", description,
             "## Instructions the model gets", protocol.instructions_of(env)]
    rules = _rules(env)
    if rules:
        parts += ["## The rules (the paper's; hidden from the model unless reveal_rules=True)", rules]
    for title in ("Rewards", "Episode End"):
        if sections.get(title):
            parts += [f"## {title}", sections[title]]
    spaces = {"action_space": space_to_json(env.action_space),
              "observation_space": space_to_json(env.observation_space)}
    for title, data in (("Action schema", action_cls.model_json_schema()),
                        ("Observation schema", observation_cls.model_json_schema()), ("Gymnasium spaces", spaces)):
        parts += [f"## {title}", "```json\n" + json.dumps(data, indent=2) + "\n```"]
    return EnvironmentMetadata(name=env_id, description=description, readme_content="\n\n".join(parts),
                               version=erl_envs.__version__, author="erl-gym")


def _outcome(observation) -> str:
    tail = f"\n[reward {observation.reward:g}" + (", episode over]" if observation.done else "]")
    return observation.text + tail


def mcp_server_for(served: Any, action_cls: type):
    """A FastMCP server whose tools play ``served`` (erl-serve's ``ServedEnv``: ``env``, ``reflection``, ``reset``,
    ``step``), sending actions as ``action_cls(text=...)`` (module docstring)."""
    from fastmcp import FastMCP

    style = protocol.prompt_style_of(served.env)
    server = FastMCP(name=f"erl-gym {served.env_id}")

    def play(text: str) -> str:
        return _outcome(served.step(action_cls(text=text)))

    @server.tool
    def start_episode(seed: int | None = None) -> str:
        """Start a new episode (the task of ``seed``, or a random one) and return its first observation."""
        return served.reset(seed=seed).text

    @server.tool
    def act(text: str) -> str:
        """Send one reply to the env exactly as a model would write it; returns the next observation."""
        return play(text)

    if style == "grid":
        @server.tool
        def move(direction: Direction) -> str:
            """Move one cell on the grid; returns the new grid, the reward and whether the episode is over."""
            return play(f"```{direction}```")
    elif style == "qa":
        @server.tool
        def search(query: str) -> str:
            """Search the passage index; returns the top passages."""
            return play(f"<search>{query}</search>")

        @server.tool
        def answer(text: str) -> str:
            """Give the final answer; returns whether it was right."""
            return play(answer_reply(text))  # as TRL's answer tool: the text can never read as a search
    if served.reflection:
        @server.tool
        def reflect(rulebook: str) -> str:
            """After a failed attempt: the new system prompt for the second attempt at the same task."""
            return play(f"<prompt>{rulebook}</prompt>")

    return server
