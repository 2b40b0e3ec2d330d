#!/usr/bin/env bash
# GRPO with verl (>= 0.7.1, checked on 0.9.1): rewards from sandboxkit's compute_score, and a multi-turn
# code_interpreter tool backed by sandboxkit.
#
#   bash examples/verl/run.sh --smoke      # CPU: load both pieces the way verl does and run them once (no GPU, no Ray)
#   bash examples/verl/run.sh              # GPUs: a real training run (set MODEL / TRAIN / VAL / N_GPUS)
#
# Data (parquet, verl's usual columns): prompt (chat messages), data_source, agent_name: tool_agent,
# reward_model: {ground_truth: <tests: {"inputs": [...], "outputs": [...]} or the judge's own shapes>}, extra_info.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--smoke" ]]; then
  exec python "$HERE/smoke.py"
fi

MODEL="${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}"
TRAIN="${TRAIN:-$HOME/data/code/train.parquet}"
VAL="${VAL:-$HOME/data/code/test.parquet}"
N_GPUS="${N_GPUS:-8}"
export SANDBOXKIT_BACKEND="${SANDBOXKIT_BACKEND:-docker}"   # read by every Ray reward and rollout worker

python -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$TRAIN" data.val_files="$VAL" \
  data.train_batch_size=64 data.max_prompt_length=1024 data.max_response_length=2048 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.rollout.multi_turn.enable=true \
  actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5 \
  actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2000 \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/sandbox_tool_config.yaml" \
  reward.custom_reward_function.path=pkg://sandboxkit.integrations.verl \
  reward.custom_reward_function.name=compute_score \
  +reward.custom_reward_function.reward_kwargs.timeout=10 \
  +reward.custom_reward_function.reward_kwargs.deadline_s=300 \
  trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes=1 \
  trainer.total_epochs=1 trainer.logger='["console"]' \
  "$@"
