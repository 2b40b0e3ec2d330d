"""GRPO on code tasks with TRL, rewarded by running completions in a sandbox.

    python examples/trl_grpo.py --tiny                 # CPU smoke run: tiny random model, 2 steps, no downloads
    python examples/trl_grpo.py --backend docker       # GPU: a real model, generation with vLLM (colocate)

Each dataset row carries its tests in a ``tests`` column; ``SandboxReward`` grades every
completion against its row's tests on the chosen backend and returns the pass rate, or
``None`` (TRL leaves the sample out) when the sandbox infrastructure failed.

``--tiny`` builds everything locally: a word-level tokenizer whose tokens are whole Python
statements and a 2-layer Qwen2 from a config. The random model then writes short random
programs (some valid, some not), so the rewards vary and the whole loop is exercised in seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from typing import Any

log = logging.getLogger("trl_grpo")

#: Statements the tiny model can emit; each token is one line of Python (some break the program).
TINY_CODE_TOKENS = ["x = 1\n", "x = 2\n", "y = x\n", "pass\n", "print(x)\n", "1 / 0\n", "def f(\n", "x += 1\n"]
TINY_PROMPT_WORDS = ["Task:", "set", "x", "to", "one", "two", "and", "print", "it", "."]

#: A few real tasks for the full run (stdin/stdout tests in verl/APPS shape).
TASKS = [
    {
        "prompt": "Write a Python program that reads two integers from stdin and prints their sum.",
        "tests": {"inputs": ["1 2\n", "-5 5\n", "100 23\n"], "outputs": ["3\n", "0\n", "123\n"]},
    },
    {
        "prompt": "Write a Python program that reads a line and prints it reversed.",
        "tests": {"inputs": ["abc\n", "racecar\n", "ab\n"], "outputs": ["cba\n", "racecar\n", "ba\n"]},
    },
    {
        "prompt": "Write a Python program that reads n and prints n! (n factorial).",
        "tests": {"inputs": ["0\n", "5\n", "10\n"], "outputs": ["1\n", "120\n", "3628800\n"]},
    },
]


def build_tiny_tokenizer() -> Any:
    """A local tokenizer (no hub): whole-word prompt tokens plus one token per line of code."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials + TINY_PROMPT_WORDS + TINY_CODE_TOKENS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.Fuse()  # concatenate tokens as they are: each code token carries its newline
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"
    return tokenizer


def build_tiny_model(tokenizer: Any, seed: int = 0) -> Any:
    """A 2-layer Qwen2 with random weights, built from a config (no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def tiny_dataset(rows: int = 8) -> Any:
    """Prompts in the tiny vocabulary; tests are assertions on ``x`` (rewards 0, 1/3, 2/3 or 1)."""
    from datasets import Dataset

    targets = [("one", 1), ("two", 2)]
    data = []
    for i in range(rows):
        word, value = targets[i % 2]
        tests = {"assert_case": ["assert True", f"assert x == {value}", "assert isinstance(x, int)"]}
        data.append({"prompt": f"Task: set x to {word} .", "tests": json.dumps(tests)})
    return Dataset.from_list(data)


def task_dataset(repeat: int = 64) -> Any:
    """The real tasks as chat prompts, repeated to make an epoch."""
    from datasets import Dataset

    rows = [
        {
            "prompt": [{"role": "user", "content": t["prompt"] + " Answer with one ```python block."}],
            "tests": json.dumps(t["tests"]),
        }
        for t in TASKS
    ]
    return Dataset.from_list(rows * repeat)


def make_trainer(
    *,
    tiny: bool,
    reward_funcs: list[Any],
    steps: int,
    output_dir: str,
    model_name: str = "Qwen/Qwen2.5-0.5B-Instruct",
    reward_weights: list[float] | None = None,
    seed: int = 0,
) -> Any:
    """A GRPOTrainer: on CPU with the tiny model, or on GPU with ``model_name`` and vLLM."""
    from trl import GRPOConfig, GRPOTrainer

    common: dict[str, Any] = {
        "output_dir": output_dir,
        "max_steps": steps,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "seed": seed,
        "reward_weights": reward_weights,
    }
    if tiny:
        tokenizer = build_tiny_tokenizer()
        args = GRPOConfig(
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=6,
            gradient_checkpointing=False,
            dataloader_num_workers=0,
            **common,
        )
        return GRPOTrainer(
            model=build_tiny_model(tokenizer, seed),
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=tiny_dataset(),
            processing_class=tokenizer,
        )
    args = GRPOConfig(
        bf16=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=512,
        learning_rate=1e-6,
        **common,
    )
    return GRPOTrainer(model=model_name, reward_funcs=reward_funcs, args=args, train_dataset=task_dataset())


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train and return the last logged metrics."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run with a tiny random model (no downloads)")
    parser.add_argument("--backend", default="subprocess", help="sandboxkit backend (subprocess, docker, ...)")
    parser.add_argument(
        "-o", "--backend-option", action="append", default=[], help="KEY=VALUE backend option, checked (repeatable)"
    )
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: 2 tiny, 50 full)")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="model for the full run")
    parser.add_argument("--max-concurrency", type=int, default=32, help="programs running at once")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.tiny:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from sandboxkit.integrations.trl import SandboxReward
    from sandboxkit.registry import parse_backend_options

    steps = args.steps or (2 if args.tiny else 50)
    reward = SandboxReward(
        args.backend,
        backend_options=parse_backend_options(args.backend, args.backend_option),  # a typo names the valid keys
        max_concurrency=args.max_concurrency,
        name="sandbox_pass_rate",
    )
    with reward, tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(
            tiny=args.tiny,
            reward_funcs=[reward.for_trl()],  # async on TRL >= 0.27, the blocking twin on older TRL
            steps=steps,
            output_dir=args.output_dir or tmp,
            model_name=args.model,
        )
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/sandbox_pass_rate/mean" in entry]
    last = {k: float(v) for k, v in logged[-1].items() if isinstance(v, (int, float))} if logged else {}
    log.info("last step: reward mean %s", last.get("rewards/sandbox_pass_rate/mean"))
    return last


if __name__ == "__main__":
    main()
