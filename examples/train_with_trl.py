"""Train on an erl_envs game with TRL's GRPOTrainer, the env's methods acting as the model's tools.

    pip install -e ".[trl]"
    python examples/train_with_trl.py --tiny --max-steps 2          # CPU, a tiny tool-calling model built in code
    python examples/train_with_trl.py --model smollm2-135m --max-steps 2 --num-generations 2   # offline, CPU, LoRA:
                                                                   # about 3 minutes on 2 cores
    python examples/train_with_trl.py --model Qwen/Qwen3-0.6B       # a real tool-calling chat model (GPU)
    python examples/train_with_trl.py --model Qwen/Qwen3-0.6B --reflection   # ERL's retry loop as tool turns

TRL's no-dataset recipe: the env owns its tasks (``reset`` draws them from the trainer's seed, one task per GRPO
group of ``--num-generations`` rollouts); ``--tasks N`` trains on a dataset of N seeded tasks instead. The reward is
the env's own (``get_reward``, logged by TRL as ``rewards/ERLFrozenLakeEnv/mean``).
"""

from __future__ import annotations

import argparse
import os

import trl
from trl.chat_template_utils import add_response_schema

from erl_envs.integrations.trl import make_dataset, make_trl_environment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ERL-FrozenLake-v0")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B",
                        help="a chat model whose template TRL can parse, or smollm2-135m (offline, erl-gym's template)")
    parser.add_argument("--tiny", action="store_true", help="use the tiny tool-calling model built in code (CPU)")
    parser.add_argument("--reflection", action="store_true", help="ERL: reflect and retry after a failed attempt")
    parser.add_argument("--size", type=int, nargs=2, default=None, metavar=("MIN", "MAX"),
                        help="FrozenLake board sizes (default: the paper's 2-9)")
    parser.add_argument("--tasks", type=int, default=None, help="train on N seeded tasks (default: env-owned)")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--output-dir", default="runs/trl")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    env_kwargs = {"size": tuple(args.size)} if args.size else {}
    peft_config, completion, tool_turns = None, 2048, 20 if args.reflection else 8
    if args.tiny:
        from erl_agents.tiny_tool_model import build_tiny_tool_caller

        model, tokenizer = build_tiny_tool_caller()
        env_kwargs.setdefault("size", (2, 4))
        learning_rate, use_cpu = max(args.learning_rate, 1e-2), True
        add_response_schema(tokenizer)
    elif args.model == "smollm2-135m":
        from erl_agents.models import add_tool_chat_template, drop_gguf_quantizer, load_model

        policy = load_model("smollm2-135m", dtype="float32")
        model, tokenizer = drop_gguf_quantizer(policy.model), add_tool_chat_template(policy.tokenizer)
        # What makes 2 steps finish in minutes on 2 CPU cores: LoRA adapters (cpu-smol's choice; full fine-tuning of
        # 135M weights in fp32 is several times slower), small boards and short tool loops.
        import peft

        peft_config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        env_kwargs.setdefault("size", (2, 3))
        learning_rate, use_cpu = max(args.learning_rate, 1e-4), True
        completion, tool_turns = 256, 8 if args.reflection else 4
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model)
        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        learning_rate, use_cpu = args.learning_rate, False
        add_response_schema(tokenizer)

    env_class = make_trl_environment(args.env, reflection=args.reflection, num_generations=args.num_generations,
                                     **env_kwargs)
    dataset = make_dataset(env_class, args.tasks, seed=0) if args.tasks else None
    config = trl.GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, num_generations=args.num_generations,
        per_device_train_batch_size=args.num_generations, max_completion_length=completion,
        max_tool_calling_iterations=tool_turns, learning_rate=learning_rate, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=use_cpu,
        # TRL turns gradient checkpointing on by default, which also turns the KV cache off while generating: every
        # sampled token then re-reads the whole conversation (0 of 2 SmolLM2 steps in 7 minutes on 2 cores).
        gradient_checkpointing=not use_cpu,
    )
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=config, environment_factory=env_class,
                              train_dataset=dataset, peft_config=peft_config)
    trainer.train()
    key = f"rewards/{env_class.__name__}/mean"
    for entry in trainer.state.log_history:
        if key in entry:
            print(f"step {entry['step']}: env reward {entry[key]:.3f}, tool calls per rollout "
                  f"{entry.get('tools/call_frequency', 0):.1f}")


if __name__ == "__main__":
    main()
