"""TRL's side of `aha bench`: the same GRPO setting as an aha config, run with TRL's
GRPOTrainer on the CPU, timing each optimizer step. Run as a process of its own
(`python -m aha.perf.trl_grpo CONFIG OUT_JSON [overrides]`) so that its memory and threads are
its own; needs the `bench` extra (trl).

Matched to aha: the model (the same local folder), the task's training prompts through the
same chat template, prompts_per_step x group_size completions a step and one optimizer step
on them, max_new_tokens, temperature, top_p, lr and AdamW betas, clip range (clip_low,
clip_high), bf16 where aha computes in bf16, no KL term (beta = 0), no gradient
checkpointing, the same reward (the config's composite, a cut completion scored
algorithm.truncated_reward). Not matched: TRL samples its own prompt order."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# what TRL's GRPOTrainer is given to match; any other value of these keys is refused
MATCHED = {"algorithm.advantage": "grpo", "algorithm.policy_loss": "ppo", "algorithm.kl_coef": 0.0,
           "algorithm.epochs": 1, "algorithm.mini_batches": 1, "algorithm.mask_truncated": False,
           "algorithm.length_coef": 0.0, "algorithm.overlong_buffer": 0, "algorithm.reward_noise": 0.0,
           "algorithm.advantage_scale": "std"}


def unmatched(config) -> list[str]:
    """The config's settings that the TRL side would not reproduce, as key=value."""
    out = []
    for key, expected in MATCHED.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name, expected)
        if value != expected:
            out.append(f"{key}={value!r} (the bench matches {expected!r})")
    if config.algorithm.loss_agg not in ("token_mean", "seq_mean_token_mean"):
        out.append(f"algorithm.loss_agg={config.algorithm.loss_agg!r} (the bench matches token_mean and "
                   "seq_mean_token_mean)")
    return out


def micro_batch(per_step: int, micro_batch_size: int) -> int:
    """The largest divisor of per_step not above micro_batch_size: TRL needs whole steps."""
    return max(d for d in range(1, min(per_step, micro_batch_size) + 1) if per_step % d == 0)


def trl_config_for(config, out_dir: str, steps: int):
    import torch
    from trl import GRPOConfig

    from aha.models.compute import resolve_dtype

    ro, algo, train = config.rollout, config.algorithm, config.train
    per_step = ro.prompts_per_step * ro.group_size
    micro = micro_batch(per_step, train.micro_batch_size)
    return GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=resolve_dtype(train.dtype) == torch.bfloat16,
        # aha's micro-batches: forward/backward over train.micro_batch_size sequences at a
        # time, gradients accumulated into one optimizer step over the step's completions
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_step // micro,
        num_generations=ro.group_size,
        max_completion_length=ro.max_new_tokens, temperature=ro.temperature, top_p=ro.top_p, top_k=0,
        learning_rate=train.lr, adam_beta1=train.betas[0], adam_beta2=train.betas[1], weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm, lr_scheduler_type="constant", warmup_steps=0,
        beta=0.0, epsilon=algo.clip_low, epsilon_high=algo.clip_high, num_iterations=1,
        scale_rewards="group",
        loss_type="dapo" if algo.loss_agg == "token_mean" else "grpo",
        gradient_checkpointing=False, max_steps=steps, logging_steps=1, save_strategy="no", report_to=[],
        seed=config.seed, dataloader_num_workers=0, disable_tqdm=True,
    )


def run(config_path: str, out_json: str, overrides: list[str], steps: int) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from aha.config import load_config
    from aha.models.compute import stop_ids
    from aha.models.loading import EMBEDDED, cache_dir, load
    from aha.prompts import chat_messages
    from aha.rewards import build_reward
    from aha.tasks import build_task

    config = load_config(config_path, overrides)
    task = build_task(config.task, config.base_dir)
    loaded = load(config.model, seed=config.seed)  # makes the embedded model's folder if it is not there yet
    folder = str(cache_dir() / EMBEDDED) if config.model == EMBEDDED else config.model
    reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype)
    eos = set(stop_ids(loaded.tokenizer, loaded.model))  # what both trainers stop at
    cut_value = config.algorithm.truncated_reward
    max_new = config.rollout.max_new_tokens

    def aha_reward(prompts, completions, completion_ids, sample, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = reward.score(texts, [json.loads(s) for s in sample]).total.tolist()
        if cut_value is not None:  # as aha's shaping: a completion cut at the budget scores truncated_reward
            scores = [cut_value if len(ids) >= max_new and ids[-1] not in eos else s
                      for s, ids in zip(scores, completion_ids)]
        return scores

    rows = [{"prompt": chat_messages(task, s), "sample": json.dumps(s)} for s in task.train]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.starts, self.seconds = {}, []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.t0)

    clock = StepClock()
    trainer = GRPOTrainer(model=folder, reward_funcs=aha_reward,
                          args=trl_config_for(config, str(Path(out_json).parent / "trl_out"), steps),
                          train_dataset=Dataset.from_list(rows), processing_class=loaded.tokenizer, callbacks=[clock])
    del loaded
    trainer.train()
    logs = [r for r in trainer.state.log_history if "reward" in r]
    result = {"step_s": clock.seconds, "reward": [r["reward"] for r in logs],
              "completion_length": [r.get("completions/mean_length") for r in logs]}
    Path(out_json).write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    config_path, out_json, steps, *overrides = sys.argv[1:]
    run(config_path, out_json, overrides, int(steps))
