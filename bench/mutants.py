"""Mutation runner: plant one-line bugs in src/aha, one at a time, and check that the tests fail.

    .venv/bin/python bench/mutants.py                     # every mutant, default test selection
    .venv/bin/python bench/mutants.py --only 'brief-*'    # the review's 16 (fnmatch patterns, repeatable)
    .venv/bin/python bench/mutants.py --tests tests/test_wiring.py --only brief-01-clip-swap
    .venv/bin/python bench/mutants.py --list

The working tree (tracked files and untracked ones git does not ignore, uncommitted edits
included) is copied once into a temporary folder; each mutant is written into that copy, the
tests run there with PYTHONPATH=<copy>/src (ahead of the editable install's /work/main/src,
which is checked before anything runs), and the file is put back.

For each mutant, pytest -x -q -p no:cacheprovider first runs the mutant's expected killers that
fall inside the selection (fast); if they all pass it runs the whole selection. A mutant is
killed when pytest fails (any non-zero status but 5, "no tests collected", which is an error of
this list). One pytest runs at a time. Before the mutants, the expected killers run on the
unmutated copy and must pass (--baseline-full: the whole selection).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EXCLUDE = ("tests/test_sandbox*.py", "tests/test_humaneval_sandbox.py")  # slow, and they test the sandbox
W = "tests/test_wiring.py::"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to src/aha
    old: str  # must occur exactly once in the file
    new: str
    description: str
    killers: tuple[str, ...]  # test node ids expected to fail


def M(name, file, old, new, description, *killers):
    return Mutant(name, file, old, new, description, tuple(killers))


UPDATE = W + "test_update_loss_and_gradient_match_the_loss_written_out"

MUTANTS = [
    # ------------------------------------------------------------------ the review's 16
    M("brief-01-clip-swap", "training/rl/update.py",
      "clipped_surrogate(logp, old, advantages, algo.clip_low, algo.clip_high, algo.dual_clip)",
      "clipped_surrogate(logp, old, advantages, algo.clip_high, algo.clip_low, algo.dual_clip)",
      "clip_low / clip_high swapped in the trainer's PPO call", UPDATE + "[ppo_asymmetric_clip]"),
    M("brief-02-no-dual-clip", "training/rl/update.py",
      "clipped_surrogate(logp, old, advantages, algo.clip_low, algo.clip_high, algo.dual_clip)",
      "clipped_surrogate(logp, old, advantages, algo.clip_low, algo.clip_high)",
      "dual_clip never passed to the loss", UPDATE + "[ppo_dual_clip]"),
    M("brief-03-tis-not-applied", "training/rl/update.py",
      "loss_tok = loss_tok * batch.is_weights[sl, :width]", "loss_tok = loss_tok",
      "truncated IS weights computed but never applied to the loss",
      W + "test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped",
      UPDATE + "[ppo_is_weights_seq_sum]"),
    M("brief-04-old-from-reference", "training/rl/step.py",
      "batch.old_logprobs = forward_logprobs(learner.model, batch, shape)",
      "batch.old_logprobs = forward_logprobs(learner.ref_model, batch, shape)",
      "trainer old log-probs taken from the reference model",
      W + "test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped"),
    M("brief-05-reference-not-checkpointed", "training/rl/method.py",
      'modules["reference"] = learner.ref_model', "pass",
      "the reference model is missing from checkpoints",
      W + "test_checkpoint_holds_and_restores_the_reference_weights[algorithm.ref_reset_every=2]",
      W + "test_resume_after_a_reference_reset_restores_that_reference"),
    M("brief-06-reset-keeps-optimizer", "training/rl/step.py",
      "learner.optimizer.state.clear()", "pass",
      "ProRL reference reset keeps the optimizer state",
      W + "test_prorl_reset_copies_the_policy_into_the_reference_and_resets_the_optimizer[True]"),
    M("brief-07-critic-lr-ignored", "training/rl/method.py",
      "build_optimizer(critic.parameters(), train, lr=algo.critic_lr)",
      "build_optimizer(critic.parameters(), train)",
      "critic_lr ignored: the value model's optimizer uses the policy lr",
      W + "test_build_learner_gives_each_optimizer_its_own_settings"),
    M("brief-08-reinforce-pp-no-gamma", "training/rl/estimate.py",
      "reinforce_pp_advantages(token_rewards, mask, algo.gamma,", "reinforce_pp_advantages(token_rewards, mask, 1.0,",
      "REINFORCE++ advantage ignores gamma",
      W + "test_reinforce_pp_advantages_discount_by_gamma[True]"),
    M("brief-09-overlong-factor-ignored", "training/rl/score.py",
      "algo.overlong_buffer,\n                                         algo.overlong_penalty)",
      "algo.overlong_buffer)",
      "the overlong penalty ignores its factor", W + "test_overlong_penalty_scales_with_its_factor"),
    M("brief-10-gspo-no-token-detach", "algorithms/losses.py",
      "token_log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask).detach() + logprobs - logprobs.detach()",
      "token_log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask)",
      "GSPO without its token-level detach (sequence-level gradient)",
      W + "test_gspo_gradient_with_per_token_advantages_is_token_level", UPDATE + "[gspo_token_advantages]"),
    M("brief-11-gate-lets-total-through", "rewards/compose.py",
      "factor[i] *= float(bool(parts) and value >= comp.gate_min)",
      "factor[i] *= float(bool(parts) or value >= comp.gate_min)",
      "a failing gate reward lets the total through",
      W + "test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole"),
    M("brief-12-last-number-over-box", "rewards/verifiers.py",
      "boxed = last_boxed(completion)", "boxed = last_number(completion) or last_boxed(completion)",
      "the last number is preferred over \\boxed{} in numeric extraction",
      W + "test_boxed_answer_wins_over_a_later_number"),
    M("brief-13-answer-rules-reordered", "rewards/extract.py",
      "return sorted(boxes(text) + tags(text) + answer_lines(text), key=lambda s: s.start)",
      "return boxes(text) + tags(text) + answer_lines(text)",
      "final-answer rules tried in a fixed form order instead of by position",
      W + "test_the_last_stated_answer_wins_whatever_its_form[line-box]"),
    M("brief-14-bootstrap-90", "eval/estimators.py",
      "tail = (1 - level) / 2 * 100", "tail = (1 - level) * 100",
      "a 90% bootstrap interval passes as 95%", W + "test_bootstrap_interval_is_95_percent"),
    M("brief-15-reset-kl-without-kl", "config/checks.py",
      "bool(c.algorithm.ref_reset_every or c.algorithm.ref_reset_kl) and c.algorithm.kl_coef == 0",
      "bool(c.algorithm.ref_reset_every) and c.algorithm.kl_coef == 0",
      "ref_reset_kl accepted without a KL term", W + "test_prorl_reset_options_need_a_kl_term"),
    M("brief-16-override-split", "config/__init__.py",
      'key, value = dotted.split("=", 1)', 'key, value = dotted.rsplit("=", 1)',
      "an override value containing '=' is split at the wrong '='",
      W + "test_an_override_value_may_contain_equals_signs"),
    # ------------------------------------------------------------------ more wiring and maths
    M("update-cispo-clip-swap", "training/rl/update.py",
      "cispo_loss(logp, old, advantages, algo.clip_low, algo.clip_high)",
      "cispo_loss(logp, old, advantages, algo.clip_high, algo.clip_low)",
      "CISPO clip range swapped", UPDATE + "[cispo]"),
    M("update-gspo-clip-swap", "training/rl/update.py",
      "gspo_surrogate(logp, old, advantages, mask, algo.clip_low, algo.clip_high)",
      "gspo_surrogate(logp, old, advantages, mask, algo.clip_high, algo.clip_low)",
      "GSPO clip range swapped", UPDATE + "[gspo_token_advantages]"),
    M("update-kl-coef-ignored", "training/rl/update.py",
      "total = total + algo.kl_coef * kl", "total = total + kl",
      "KL term added without its coefficient", UPDATE + "[ppo_kl_k2_entropy]"),
    M("update-kl-estimator-ignored", "training/rl/update.py",
      "kl_tok = kl_estimate(logp, batch.ref_logprobs[sl, :width], algo.kl_estimator)",
      'kl_tok = kl_estimate(logp, batch.ref_logprobs[sl, :width], "k3")',
      "KL estimator option ignored in the loss", UPDATE + "[ppo_kl_k2_entropy]"),
    M("update-entropy-sign", "training/rl/update.py",
      "total = total - algo.entropy_coef * aggregate(stats.entropy, m, algo.loss_agg, norm)",
      "total = total + algo.entropy_coef * aggregate(stats.entropy, m, algo.loss_agg, norm)",
      "entropy bonus with the wrong sign", UPDATE + "[ppo_kl_k2_entropy]"),
    M("update-loss-agg-ignored", "training/rl/update.py",
      "pg = aggregate(loss_tok, m, algo.loss_agg, norm)", 'pg = aggregate(loss_tok, m, "token_mean", norm)',
      "loss_agg ignored for the policy loss", UPDATE + "[cispo]"),
    M("update-no-grad-clip", "training/rl/update.py",
      'totals["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))',
      'totals["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))',
      "the policy gradient is never clipped to max_grad_norm",
      W + "test_two_epochs_of_clipped_sgd_equal_two_steps_written_out"),
    M("update-ratio-against-itself", "training/rl/update.py",
      "logp, old = stats.logprobs, batch.old_logprobs[sl, :width]",
      "logp, old = stats.logprobs, stats.logprobs.detach()",
      "the importance ratio is taken against the current policy (always 1)",
      UPDATE + "[ppo_asymmetric_clip]"),
    M("update-mask-truncated-ignored", "training/rl/update.py",
      "if algo.mask_truncated:", "if False:",
      "mask_truncated ignored", UPDATE + "[ppo_mask_truncated]"),
    M("update-value-clip-ignored", "training/rl/update.py",
      "batch.returns[sl, :width],\n                                          algo.value_clip)",
      "batch.returns[sl, :width], None)",
      "value_clip not passed to the value loss", W + "test_critic_step_uses_the_clipped_value_loss"),
    M("update-one-epoch", "training/rl/update.py",
      "for _ in range(algo.epochs):", "for _ in range(1):",
      "epochs ignored", W + "test_two_epochs_of_clipped_sgd_equal_two_steps_written_out"),
    M("adv-returns-no-gamma", "algorithms/advantages.py",
      "token_rewards[:, t] + gamma * running, running)", "token_rewards[:, t] + running, running)",
      "discounted returns ignore gamma", W + "test_reinforce_pp_advantages_discount_by_gamma[False]"),
    M("adv-gae-no-lambda", "algorithms/advantages.py",
      "adv = delta + gamma * lam * next_adv", "adv = delta + gamma * next_adv",
      "GAE ignores lambda", W + "test_gae_advantages_use_gamma_and_lambda_and_whiten"),
    M("adv-whiten-biased-var", "algorithms/advantages.py",
      "var = (centered**2).sum() / (n - 1)", "var = (centered**2).sum() / n",
      "whitening with the biased variance", W + "test_reinforce_pp_advantages_discount_by_gamma[True]"),
    M("adv-grpo-biased-std", "algorithms/advantages.py",
      "std = torch.sqrt((centered**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1))",
      "std = torch.sqrt((centered**2).sum(dim=1, keepdim=True) / count.clamp(min=1))",
      "GRPO with the biased group std", W + "test_sequence_advantages_with_kl_in_the_reward"),
    M("adv-rloo-includes-self", "algorithms/advantages.py",
      "- rewards) / (count - 1).clamp(min=1)", "- rewards) / count.clamp(min=1)",
      "RLOO baseline divides by G instead of G - 1", W + "test_sequence_advantages_with_kl_in_the_reward"),
    M("loss-ppo-low-uses-high", "algorithms/losses.py",
      "torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages",
      "torch.clamp(ratio, 1.0 - clip_high, 1.0 + clip_high) * advantages",
      "PPO's lower clip bound uses clip_high", UPDATE + "[ppo_asymmetric_clip]"),
    M("loss-dual-clip-sign", "algorithms/losses.py",
      "capped = (advantages < 0) & (loss > cap)", "capped = (advantages > 0) & (loss > cap)",
      "dual clip applied to positive advantages", UPDATE + "[ppo_dual_clip]"),
    M("loss-tis-inverted", "algorithms/losses.py",
      "torch.exp(clamped_log_ratio(trainer_logprobs, engine_logprobs))",
      "torch.exp(clamped_log_ratio(engine_logprobs, trainer_logprobs))",
      "TIS weight is pi_engine / pi_trainer", W + "test_truncated_is_weights_by_hand"),
    M("loss-k2-no-half", "algorithms/losses.py",
      "return 0.5 * lr**2", "return lr**2",
      "k2 KL estimator without its 1/2", UPDATE + "[ppo_kl_k2_entropy]"),
    M("loss-seq-mean-token-mean-norm", "algorithms/losses.py",
      "(masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum() / max(norm.num_seqs, 1.0)",
      "(masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum() / max(norm.num_tokens, 1.0)",
      "seq_mean_token_mean divides by tokens, not sequences", UPDATE + "[gspo_token_advantages]"),
    M("loss-cispo-weight-not-detached", "algorithms/losses.py",
      "ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs)).detach()",
      "ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs))",
      "CISPO's importance weight carries gradient", UPDATE + "[cispo]"),
    M("estimate-scale-ignored", "training/rl/estimate.py",
      "grpo_advantages(rewards, algo.advantage_scale)", 'grpo_advantages(rewards, "std")',
      "advantage_scale ignored (Dr. GRPO divides by std)", W + "test_sequence_advantages_with_kl_in_the_reward"),
    M("estimate-no-group-baseline", "training/rl/estimate.py",
      "G if algo.group_baseline else None", "None",
      "REINFORCE++-baseline never subtracts the group mean",
      W + "test_reinforce_pp_advantages_discount_by_gamma[True]"),
    M("estimate-gae-lam-is-gamma", "training/rl/estimate.py",
      "mask, algo.gamma, algo.lam)", "mask, algo.gamma, algo.gamma)",
      "GAE gets gamma for lambda", W + "test_gae_advantages_use_gamma_and_lambda_and_whiten"),
    M("estimate-kl-reward-coef-ignored", "training/rl/estimate.py",
      "token_rewards = token_rewards - algo.kl_coef * kl", "token_rewards = token_rewards - kl",
      "KL in the reward without its coefficient", W + "test_sequence_advantages_with_kl_in_the_reward"),
    M("estimate-no-whitening", "training/rl/estimate.py",
      "if algo.whiten_advantages:", "if False:",
      "whiten_advantages ignored", W + "test_gae_advantages_use_gamma_and_lambda_and_whiten"),
    M("compose-weight-ignored", "rewards/compose.py",
      "summed[i] += comp.weight * value", "summed[i] += value",
      "reward weights ignored", W + "test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole"),
    M("compose-no-clip", "rewards/compose.py",
      "value = comp.clip(sum(parts.values())) if parts else 0.0", "value = sum(parts.values()) if parts else 0.0",
      "clip_min / clip_max ignored", W + "test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole"),
    M("compose-gate-as-product", "rewards/compose.py",
      "factor[i] *= float(bool(parts) and value >= comp.gate_min)", "factor[i] *= value",
      "a gate multiplies by its value instead of 0/1",
      W + "test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole"),
    M("compose-gate-min-dropped", "rewards/compose.py",
      "spec.weight, spec.combine, spec.gate_min, spec.clip_min", "spec.weight, spec.combine, 1.0, spec.clip_min",
      "build_reward drops gate_min", W + "test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole"),
    M("extract-first-stated", "rewards/extract.py",
      'return "" if found[-1].negated else found[-1].text', 'return "" if found[0].negated else found[0].text',
      "the first stated answer wins",
      W + "test_the_last_stated_answer_wins_whatever_its_form[line-box]"),
    M("extract-first-box", "rewards/extract.py",
      "return found[-1].text if found and found[-1].closed else None",
      "return found[0].text if found and found[0].closed else None",
      "last_boxed returns the first box", W + "test_boxed_answer_wins_over_a_later_number"),
    M("passk-with-replacement", "eval/estimators.py",
      "return 1.0 - comb_ratio(n - c, n, k)", "return 1.0 - (1 - c / n) ** k",
      "pass@k estimated as if sampled with replacement", W + "test_pass_at_k_by_enumeration"),
    M("passk-comb-off-by-one", "eval/estimators.py",
      "if k > m:", "if k >= m:",
      "C(m, k) / C(n, k) taken as 0 when k == m", W + "test_pass_at_k_by_enumeration"),
    M("compare-band-90", "eval/compare.py",
      "lo, hi = bootstrap_ci(per_problem, seed=seed)", "lo, hi = bootstrap_ci(per_problem, level=0.9, seed=seed)",
      "eval curves carry a 90% band", W + "test_bootstrap_interval_is_95_percent"),
    M("ckpt-load-model-everywhere", "training/checkpoint.py",
      "load_weights(module, folder, name, verify=False)", "load_weights(module, folder, verify=False)",
      "every module is restored from model.safetensors",
      W + "test_checkpoint_holds_and_restores_the_reference_weights[algorithm.ref_reset_every=2]"),
    M("ckpt-reference-not-saved", "training/checkpoint.py",
      'save_model(module, str(tmp / f"{name}.safetensors"))',
      'if name != "reference": save_model(module, str(tmp / f"{name}.safetensors"))',
      "save_checkpoint skips the reference",
      W + "test_checkpoint_holds_and_restores_the_reference_weights[algorithm.ref_reset_every=2]"),
    M("ckpt-optimizer-not-restored", "training/checkpoint.py",
      'optimizer.load_state_dict(blob["optimizers"][name])', "pass",
      "optimizer state not restored on resume",
      W + "test_checkpoint_holds_and_restores_the_reference_weights[algorithm.ref_reset_every=2]"),
    M("ckpt-rng-not-restored", "training/checkpoint.py",
      'set_rng_state(blob["rng"])', "pass",
      "RNG state not restored on resume", "tests/test_training.py::test_resume_continues_exactly"),
    M("rl-checkpoint-ignores-kl-reset", "training/rl/method.py",
      "(config.algorithm.ref_reset_every or config.algorithm.ref_reset_kl)", "config.algorithm.ref_reset_every",
      "the reference is not saved when only ref_reset_kl resets it",
      W + "test_checkpoint_holds_and_restores_the_reference_weights[algorithm.ref_reset_kl=0.5]"),
    M("rl-resume-critic-lr", "training/rl/method.py",
      "set_hyperparameters(learner.critic_optimizer, config.algorithm.critic_lr,",
      "set_hyperparameters(learner.critic_optimizer, train.lr,",
      "a resume with changed settings gives the critic the policy lr",
      W + "test_build_learner_gives_each_optimizer_its_own_settings"),
    M("step-reset-schedule", "training/rl/step.py",
      "step % algo.ref_reset_every == 0", "step % algo.ref_reset_every == 1",
      "ProRL resets one step off schedule",
      W + "test_prorl_reset_copies_the_policy_into_the_reference_and_resets_the_optimizer[True]"),
    M("step-reset-kl-direction", "training/rl/step.py",
      "kl_to_ref > algo.ref_reset_kl", "kl_to_ref < algo.ref_reset_kl",
      "ProRL resets when the KL is below the threshold", W + "test_prorl_reset_on_the_kl_threshold"),
    M("step-ref-logprobs-from-policy", "training/rl/step.py",
      'algo.kl_in == "loss":\n        batch.ref_logprobs = forward_logprobs(learner.ref_model, batch, shape)',
      'algo.kl_in == "loss":\n        batch.ref_logprobs = forward_logprobs(learner.model, batch, shape)',
      "the KL term's reference log-probs come from the policy",
      W + "test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped"),
    M("step-tis-never-computed", "training/rl/step.py",
      "if algo.tis_cap is not None:", "if False:",
      "tis_cap accepted but no weights computed",
      W + "test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped"),
    M("collect-length-correct-min", "training/rl/score.py",
      "charged = (total >= algo.length_correct_min", "charged = (total >= 1.0",
      "the length penalty's notion of correct ignores length_correct_min",
      W + "test_overlong_penalty_scales_with_its_factor"),
    M("step-reset-direction", "training/rl/step.py",
      "learner.ref_model.load_state_dict(learner.model.state_dict())",
      "learner.model.load_state_dict(learner.ref_model.state_dict())",
      "a ProRL reset copies the reference into the policy",
      W + "test_prorl_reset_copies_the_policy_into_the_reference_and_resets_the_optimizer[True]"),
    M("ckpt-keeps-one-more", "training/checkpoint.py",
      "for old in list_checkpoints(root)[:-keep]:", "for old in list_checkpoints(root)[:-keep - 1]:",
      "keep_checkpoints keeps one checkpoint too many", W + "test_save_checkpoint_keeps_the_newest_ones"),
    M("estimate-ktae-alpha-ignored", "training/rl/estimate.py",
      "algo.ktae_alpha)", "0.5)",
      "ktae_alpha ignored", W + "test_ktae_token_weights_use_the_configured_alpha"),
    M("update-norm-counts-masked-tokens", "training/rl/update.py",
      "norm = LossNorm.of(mask, loss_constant)",
      "norm = LossNorm.of(batch.rollouts.completion_mask[:, :width], loss_constant)",
      "the loss normaliser counts the tokens mask_truncated removed", UPDATE + "[ppo_mask_truncated]"),
    M("update-width-off-by-one", "training/rl/update.py",
      "return int(used.max()) + 1 if len(used) else 1", "return int(used.max()) if len(used) else 1",
      "the update drops the last used completion column", UPDATE + "[ppo_asymmetric_clip]"),
    M("update-kl-in-reward-also-in-loss", "training/rl/update.py",
      'kl_in_loss = learner.ref_model is not None and algo.kl_in == "loss"',
      "kl_in_loss = learner.ref_model is not None",
      "kl_in=reward also adds the KL to the loss", "tests/test_algorithm_runs.py::test_kl_in_the_reward_is_logged"),
    M("config-tis-check-dropped", "config/checks.py",
      'c.algorithm.tis_cap is not None and c.algorithm.old_logprobs != "trainer",', "False,",
      "tis_cap accepted with engine old log-probs", W + "test_prorl_reset_options_need_a_kl_term"),
    M("config-override-not-parsed", "config/__init__.py",
      "node[parts[-1]] = _parse_scalar(value)", "node[parts[-1]] = value",
      "override values are not read as YAML", W + "test_an_override_value_may_contain_equals_signs"),
]

# ====================================================================== LoRA, Ray, asynchronous and partial rollouts,
# resume (issue 28)
L = "tests/test_audit_lora.py::"
R = "tests/test_audit_ray.py::"
A = "tests/test_audit_async_resume.py::"

MUTANTS += [
    # ------------------------------------------------------------------ LoRA
    M("lora-default-alpha", "models/adapters.py",
      "lora_alpha=alpha if alpha is not None else 2 * rank", "lora_alpha=alpha if alpha is not None else rank",
      "lora.alpha unset scales the adapters by 1 instead of the documented 2 (alpha = rank, not 2 x rank)",
      L + "test_the_default_alpha_scales_the_update_by_two"),
    M("lora-config-default-alpha", "config/run_sections.py",
      "alpha: float | None = Field(None, gt=0,", "alpha: float | None = Field(16.0, gt=0,",
      "the config's lora.alpha default is a fixed 16 instead of None (-> 2 x rank)",
      L + "test_the_default_alpha_scales_the_update_by_two"),
    M("lora-alpha-zero-allowed", "config/run_sections.py",
      "alpha: float | None = Field(None, gt=0,", "alpha: float | None = Field(None, ge=0,",
      "lora.alpha=0 accepted: adapters scaled to nothing never change the model",
      L + "test_an_alpha_of_zero_is_refused"),
    M("lora-merge-leaves-frozen", "models/adapters.py",
      "return model.requires_grad_(True)", "return model",
      "merge_lora leaves the base weights frozen: a full fine-tune from a LoRA checkpoint trains nothing",
      L + "test_merge_lora_leaves_every_weight_trainable",
      L + "test_an_adapter_checkpoint_loaded_as_the_model_trains_every_weight"),
    # ------------------------------------------------------------------ Ray
    M("ray-one-seed-for-every-share", "rollout/ray_engine.py",
      "seeds = [base + index for index in range(len(calls))]", "seeds = [base for index in range(len(calls))]",
      "every share of a request gets the same seed",
      R + "test_each_share_gets_its_own_seed_drawn_from_the_drivers_rng"),
    M("ray-base-seed-not-from-rng", "rollout/ray_engine.py",
      "base = int(torch.randint(0, 1 << 62, (1,)))", "base = self.seed",
      "the shares' seeds are the engine's fixed seed, not drawn from the driver's RNG: every step samples with the "
      "same seeds",
      R + "test_each_share_gets_its_own_seed_drawn_from_the_drivers_rng"),
    M("ray-redraw-new-seed", "rollout/ray_engine.py",
      "self._submit(substitute, submitted.calls[index], submitted.seeds[index])",
      "self._submit(substitute, submitted.calls[index], submitted.seeds[index] + 1)",
      "a dead worker's share is drawn again with another seed: it differs from the share it replaces",
      R + "test_a_redrawn_share_has_its_seed_and_equals_the_share_it_replaces"),
    M("ray-redraw-wrong-share", "rollout/ray_engine.py",
      "self._submit(substitute, submitted.calls[index], submitted.seeds[index])",
      "self._submit(substitute, submitted.calls[0], submitted.seeds[index])",
      "the first share's prompts are drawn again in place of the dead worker's share",
      R + "test_a_redrawn_share_has_its_seed_and_equals_the_share_it_replaces"),
    M("ray-reward-error-taken-for-death", "rewards/ray_pool.py",
      "except self.ray.exceptions.RayActorError as err:", "except self.ray.exceptions.RayError as err:",
      "a per-sample Ray error (a value Ray cannot move) is taken for the actor's death: the actor is killed and "
      "replaced",
      R + "test_a_reward_that_fails_for_one_sample_fails_that_sample_only"),
    M("ray-reward-error-slot-dropped", "rewards/ray_pool.py",
      'outcomes[index] = Outcome(error=f"{type(err).__name__}: {str(err).splitlines()[0]}")\n                    '
      'idle.append(slot)',
      'outcomes[index] = Outcome(error=f"{type(err).__name__}: {str(err).splitlines()[0]}")\n                    '
      'dead.append(slot)',
      "after a per-sample Ray error the (live) actor is replaced as if it had died",
      R + "test_a_reward_that_fails_for_one_sample_fails_that_sample_only"),
    M("ray-reward-raise-escapes-actor", "rewards/ray_pool.py",
      'return Outcome(error=f"{type(err).__name__}: {err}")', "raise",
      "a reward raising for one sample is not caught in the actor: the sample's error is Ray's task error, not the "
      "reward's",
      R + "test_a_reward_that_fails_for_one_sample_fails_that_sample_only"),
    # ------------------------------------------------------------------ asynchronous and partial rollouts
    M("async-resumed-rounds-not-saved", "training/rl/method.py",
      'extra["in_flight"] = [ahead.chosen for ahead in self.ahead] + list(self.resumed_rounds)',
      'extra["in_flight"] = [ahead.chosen for ahead in self.ahead]',
      "rounds resumed in flight but not yet re-submitted are missing from the next checkpoint",
      A + "test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted"),
    M("async-nothing-saved-before-resubmission", "training/rl/method.py",
      "elif self.ahead or self.resumed_rounds:", "elif self.ahead:",
      "a checkpoint taken after a resume, before any round is submitted again, saves no round in flight",
      A + "test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted"),
    M("async-saved-rounds-reordered", "training/rl/method.py",
      'extra["in_flight"] = [ahead.chosen for ahead in self.ahead] + list(self.resumed_rounds)',
      'extra["in_flight"] = list(self.resumed_rounds) + [ahead.chosen for ahead in self.ahead]',
      "rounds in flight saved out of order (the ones not yet re-submitted first)",
      A + "test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted"),
    M("async-resubmit-draws-new-prompts", "training/rl/method.py",
      "chosen = (self.resumed_rounds.popleft() if self.resumed_rounds",
      "chosen = (self.resumed_rounds.popleft() if False",
      "after a resume the rounds that were in flight are never sampled again: new prompts take their place",
      A + "test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted"),
    M("async-restore-drops-in-flight", "training/rl/method.py",
      'self.resumed_rounds = deque(extra.get("in_flight", []))', "self.resumed_rounds = deque()",
      "a restore forgets the rounds that were in flight at the checkpoint",
      A + "test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted"),
    M("partial-in-flight-launch-not-saved", "training/rl/method.py",
      'extra["partial"] = self.partial.state([ahead.launch for ahead in self.ahead])',
      'extra["partial"] = self.partial.state()',
      "with partial rollouts, the groups of a round in flight (carried ones included) are missing from the checkpoint",
      A + "test_partial_groups_of_a_round_in_flight_are_saved_with_the_carried_ones"),
    # ------------------------------------------------------------------ resume
    M("resume-truncate-off-by-one", "training/run.py",
      "folder.truncate_after(start)", "folder.truncate_after(start + 1)",
      "a resume keeps the records of the first step after the checkpoint: that step is logged twice",
      A + "test_a_resumed_run_logs_each_step_after_its_checkpoint_once"),
    M("resume-truncate-drops-checkpoint-step", "tracking/run_dir.py",
      'self._rewrite(path, lambda r: r.get("step", -1) <= step)',
      'self._rewrite(path, lambda r: r.get("step", -1) < step)',
      "a resume drops the checkpoint step's own records too (its metrics, samples and groups are lost)",
      A + "test_truncate_after_keeps_the_checkpoint_step_and_drops_every_later_one",
      A + "test_a_resumed_run_logs_each_step_after_its_checkpoint_once"),
    M("resume-groups-not-truncated", "tracking/run_dir.py",
      "for path in (self.metrics_path, self.samples_path, self.groups_path):",
      "for path in (self.metrics_path, self.samples_path):",
      "groups.jsonl keeps the groups of the steps after the checkpoint: aha select counts them twice",
      A + "test_truncate_after_keeps_the_checkpoint_step_and_drops_every_later_one",
      A + "test_a_resumed_run_logs_each_step_after_its_checkpoint_once"),
]

# ====================================================================== KTO, truncation at max_length, run identity and
# run.lock, eval comparison, composition, config (issue 28)
KP = "tests/test_audit_kto_prm.py::"
ID = "tests/test_audit_identity.py::"
CC = "tests/test_audit_compare_compose.py::"
CF = "tests/test_audit_config.py::"

MUTANTS += [
    # ------------------------------------------------------------------ 1. KTO fingerprint
    M("kto-fingerprint-no-labels", "training/supervised/kto.py",
      'return sequences_id(named, f"kto {labels}")', 'return sequences_id(named, "kto")',
      "KTO's data fingerprint leaves the labels out: a resume over flipped labels reuses the reference",
      KP + "test_kto_fingerprint_changes_when_one_label_flips_in_either_split",
      KP + "test_a_label_flipped_in_the_file_changes_the_fingerprint"),
    M("kto-fingerprint-train-labels-only", "training/supervised/kto.py",
      "for split, data in sorted(self.data.items()))",
      'for split, data in sorted(self.data.items()) if split == "train")',
      "KTO's data fingerprint covers the training labels only, not dpo.eval_data's",
      KP + "test_kto_fingerprint_changes_when_one_label_flips_in_either_split",
      KP + "test_a_label_flipped_in_the_file_changes_the_fingerprint"),
    M("kto-fingerprint-no-mismatched", "training/supervised/kto.py",
      'for kind in ("sequences", "mismatched")}', 'for kind in ("sequences",)}',
      "KTO's data fingerprint leaves out the mismatched sequences whose reference log-probs are cached",
      KP + "test_kto_fingerprint_covers_the_mismatched_sequences"),
    M("kto-label-read-as-desirable", "training/supervised/kto.py",
      '"desirable": row["label"], "pair": None', '"desirable": True, "pair": None',
      "read_labelled ignores a row's label (every completion desirable)",
      KP + "test_a_label_flipped_in_the_file_changes_the_fingerprint"),
    # ------------------------------------------------------------------ 2. length budget at max_length
    M("sequences-prompt-boundary", "training/supervised/sequences.py",
      "if len(ids) >= max_length:", "if len(ids) > max_length:",
      "a prompt of exactly max_length tokens is accepted (with an empty completion)",
      KP + "test_a_prompt_of_max_length_or_more_tokens_is_refused_naming_where_and_the_key"),
    M("sequences-truncated-flag-boundary", "training/supervised/sequences.py",
      "tuple(completion[:room]), len(completion) > room)", "tuple(completion[:room]), len(completion) >= room)",
      "a sequence of exactly max_length tokens is flagged truncated",
      KP + "test_a_sequence_is_cut_only_past_max_length"),
    M("sequences-room-off-by-one", "training/supervised/sequences.py",
      "room = max_length - len(ids)", "room = max_length - len(ids) - 1",
      "the completion's room is one token short: a sequence of exactly max_length loses its stop token",
      KP + "test_a_sequence_is_cut_only_past_max_length"),
    M("prm-prompt-boundary", "training/supervised/prm.py",
      "if len(prompt) >= limit:", "if len(prompt) > limit:",
      "a PRM prompt of exactly prm.max_length tokens is accepted",
      KP + "test_prm_refuses_a_prompt_of_max_length_or_more_tokens"),
    M("prm-step-end-boundary", "training/supervised/prm.py",
      "if len(prompt) + e < limit]", "if len(prompt) + e <= limit]",
      "a step closing one past the cut (at position max_length) is still scored",
      KP + "test_prm_scores_only_the_steps_that_close_within_max_length"),
    M("prm-tokens-cut-long", "training/supervised/prm.py",
      "Solution((prompt + completion)[:limit]", "Solution((prompt + completion)[:limit + 1]",
      "a PRM solution keeps one token past prm.max_length",
      KP + "test_prm_scores_only_the_steps_that_close_within_max_length"),
    M("prm-labels-not-cut", "training/supervised/prm.py",
      'torch.tensor(row["labels"][:len(kept)], dtype=torch.float)', 'torch.tensor(row["labels"], dtype=torch.float)',
      "the labels of steps cut by prm.max_length stay, misaligned with the scored steps",
      KP + "test_prm_scores_only_the_steps_that_close_within_max_length"),
    # ------------------------------------------------------------------ 3. run identity, run.lock
    M("identity-ray-not-allowed", "tracking/run_identity.py",
      'ALLOWED_SECTIONS = ("eval.", "ray.")', 'ALLOWED_SECTIONS = ("eval.",)',
      "a resume that changes ray.* (where samples are drawn) is refused as a change of what is trained",
      ID + "test_ray_keys_change_on_resume_without_any_flag"),
    M("identity-lora-alpha-changeable", "tracking/run_identity.py",
      '"lora.rank", "lora.alpha", "lora.target_modules"', '"lora.rank", "lora.target_modules"',
      "lora.alpha may change on resume with train.allow_config_change (the adapters' scale is the checkpoint's)",
      ID + "test_lora_alpha_never_changes_even_with_allow_config_change"),
    M("identity-allow-overrides-never", "tracking/run_identity.py",
      "if never or not config.train.allow_config_change:", "if not config.train.allow_config_change:",
      "train.allow_config_change lets the NEVER keys (model, lora shape and scale) change",
      ID + "test_lora_alpha_never_changes_even_with_allow_config_change"),
    M("identity-lr-is-bookkeeping", "tracking/run_identity.py",
      '"train.steps", "train.resume",', '"train.steps", "train.lr", "train.resume",',
      "train.lr counted as bookkeeping: a resume with another lr goes on without allow_config_change",
      ID + "test_train_lr_changes_only_with_allow_config_change"),
    M("identity-eval-measure-not-noted", "tracking/run_identity.py",
      "measured = [k for k in drift if k in EVAL_MEASURE]", "measured = []",
      "an eval key that changes how held-out accuracy is measured is not noted on resume",
      ID + "test_bookkeeping_keys_and_eval_keys_change_without_a_flag_and_eval_measures_are_named"),
    M("lock-torn-window-short", "tracking/run_lock.py",
      "if time.time() - self.path.stat().st_mtime < 10:", "if time.time() - self.path.stat().st_mtime < 5:",
      "a torn run.lock 5-10 s old is taken over while its writer may still be writing it",
      ID + "test_a_torn_lock_younger_than_10_s_is_being_created"),
    M("lock-torn-always-young", "tracking/run_lock.py",
      "if time.time() - self.path.stat().st_mtime < 10:", "if time.time() - self.path.stat().st_mtime < 60:",
      "a torn run.lock 10-60 s old (its writer died) is refused instead of taken over",
      ID + "test_a_torn_lock_older_than_10_s_is_taken_over_as_stale"),
    M("lock-torn-read-as-removed", "tracking/run_lock.py",
      "            return {}\n", "            return None\n",
      "an old torn run.lock reads as removed: acquire retries and refuses instead of taking it over",
      ID + "test_a_torn_lock_older_than_10_s_is_taken_over_as_stale"),
    M("lock-json-error-escapes", "tracking/run_lock.py",
      "except (ValueError, OSError):", "except OSError:",
      "a torn run.lock's JSON error escapes instead of RunLocked / a stale take-over",
      ID + "test_a_torn_lock_younger_than_10_s_is_being_created"),
    # ------------------------------------------------------------------ 4. eval comparison groups
    M("compare-only-b-overlaps-both", "eval/estimators.py",
      '"only_b": [i for i, (a, b) in enumerate(pairs) if b and not a]',
      '"only_b": [i for i, (a, b) in enumerate(pairs) if b]',
      "coverage: problems both models solve are also listed as solved only by b",
      CC + "test_each_problem_lands_in_its_coverage_group"),
    M("compare-solved-needs-two", "eval/compare.py",
      'cov = coverage([a["solved"][i] > 0 for i in shared], [b["solved"][i] > 0 for i in shared])',
      'cov = coverage([a["solved"][i] > 1 for i in shared], [b["solved"][i] > 0 for i in shared])',
      "a problem model a solves with one correct sample counts as unsolved by a",
      CC + "test_each_problem_lands_in_its_coverage_group"),
    M("compare-models-swapped", "eval/compare.py",
      'cov = coverage([a["solved"][i] > 0 for i in shared], [b["solved"][i] > 0 for i in shared])',
      'cov = coverage([b["solved"][i] > 0 for i in shared], [a["solved"][i] > 0 for i in shared])',
      "only_a and only_b hold the other model's problems",
      CC + "test_each_problem_lands_in_its_coverage_group", CC + "test_the_groups_follow_the_models_order"),
    M("compare-correct-strict", "eval/compare.py",
      'correct = {i: [s["score"] >= CORRECT_MIN for s in samples[i]] for i in ids}',
      'correct = {i: [s["score"] > CORRECT_MIN for s in samples[i]] for i in ids}',
      "a sample scoring exactly 0.5 is not counted as correct",
      CC + "test_each_problem_lands_in_its_coverage_group"),
    M("compare-union-of-problems", "eval/compare.py",
      'shared = sorted(set(a["solved"]) & set(b["solved"]))', 'shared = sorted(set(a["solved"]) | set(b["solved"]))',
      "problems only model a was asked about are grouped too",
      CC + "test_each_problem_lands_in_its_coverage_group"),
    M("compare-console-counts-swapped", "cli/commands.py",
      "only {a} {len(cov['only_a'])}, \"\n              f\"only {b} {len(cov['only_b'])}",
      "only {a} {len(cov['only_b'])}, \"\n              f\"only {b} {len(cov['only_a'])}",
      "aha eval --samples prints each model's only-solved count under the other's name",
      CC + "test_the_console_and_the_report_count_each_group_under_its_model"),
    M("compare-report-counts-swapped", "tracking/report.py",
      "only {a} {len(cov['only_a'])}, \"", "only {a} {len(cov['only_b'])}, \"",
      "the eval report counts b's only-solved problems under a's name",
      CC + "test_the_console_and_the_report_count_each_group_under_its_model"),
    # ------------------------------------------------------------------ 5. gates with gate_min <= 0
    M("compose-failed-gate-compared", "rewards/compose.py",
      "factor[i] *= float(bool(parts) and value >= comp.gate_min)", "factor[i] *= float(value >= comp.gate_min)",
      "a failed gate scores 0 and passes whenever gate_min <= 0",
      CC + "test_a_failing_gate_closes_even_when_gate_min_is_at_most_0"),
    M("compose-gate-strict", "rewards/compose.py",
      "factor[i] *= float(bool(parts) and value >= comp.gate_min)",
      "factor[i] *= float(bool(parts) and value > comp.gate_min)",
      "a gate whose value equals gate_min closes",
      CC + "test_a_gate_passes_at_exactly_gate_min", CC + "test_a_failing_gate_closes_even_when_gate_min_is_at_most_0"),
    M("compose-batched-none-is-zero", "rewards/compose.py",
      'return [Outcome(error="no score") if v is None else Outcome(value=v) for v in values]',
      'return [Outcome(value=0.0) if v is None else Outcome(value=v) for v in values]',
      "a batched reward's None reads as a score of 0 (a gate_min 0 gate passes), not a failure",
      CC + "test_a_batched_gate_that_gives_no_score_closes_at_gate_min_0"),
    M("compose-clip-failure", "rewards/compose.py",
      "value = comp.clip(sum(parts.values())) if parts else 0.0",
      "value = comp.clip(sum(parts.values()) if parts else 0.0)",
      "a failed component's 0 is clipped: a failed sum term earns its clip_min",
      CC + "test_a_floor_does_not_pay_a_failed_sum_term_or_reopen_a_failed_gate"),
    M("compose-nan-parts-kept", "rewards/compose.py",
      'outcome, parts = Outcome(error=f"non-finite or out-of-range score {value!r}"), {}',
      'outcome = Outcome(error=f"non-finite or out-of-range score {value!r}")',
      "a NaN score stays in the parts: the gate's component logs NaN",
      CC + "test_a_failing_gate_closes_even_when_gate_min_is_at_most_0"),
    # ------------------------------------------------------------------ 6. config cross-checks
    M("config-reward-workers-ignores-gold", "config/checks.py",
      "not any(spec.workers for spec in [*c.reward, *c.monitor.gold])",
      "not any(spec.workers for spec in c.reward)",
      "ray.reward_workers refused when only monitor.gold's specs have workers",
      CF + "test_reward_workers_are_accepted_when_only_a_gold_spec_has_workers"),
    M("config-reward-workers-all-specs", "config/checks.py",
      "not any(spec.workers for spec in [*c.reward, *c.monitor.gold])",
      "not all(spec.workers for spec in [*c.reward, *c.monitor.gold])",
      "ray.reward_workers asks every reward spec for workers",
      CF + "test_reward_workers_are_accepted_when_only_a_gold_spec_has_workers",
      CF + "test_reward_workers_are_accepted_when_one_trained_reward_has_a_single_worker"),
    M("config-reward-workers-check-dropped", "config/checks.py",
      "bool(c.ray.reward_workers) and not any(", "False and not any(",
      "ray.reward_workers accepted with no spec that has workers",
      CF + "test_reward_workers_without_any_spec_with_workers_are_refused_naming_the_key"),
    M("config-staleness-any-method", "config/checks.py",
      'bool(c.rollout.max_staleness) and not (c.method == "rl" and c.ray.rollout_workers),',
      "bool(c.rollout.max_staleness) and not c.ray.rollout_workers,",
      "rollout.max_staleness accepted outside method=rl",
      CF + "test_asynchronous_rl_needs_rollout_workers_and_method_rl"),
    M("config-first-problem-only", "config/__init__.py",
      'raise ValueError("; ".join(problems))', "raise ValueError(problems[0])",
      "only the first failing cross-check is reported",
      CF + "test_every_cross_check_that_fails_is_reported_at_once"),
    M("config-error-key-loses-index", "config/__init__.py",
      'key = ".".join(str(p) for p in e["loc"])', 'key = ".".join(str(p) for p in e["loc"] if not isinstance(p, int))',
      "an error in a list of reward specs loses the spec's index (monitor.gold.workers)",
      CF + "test_a_bad_reward_spec_is_named_by_its_section_and_index"),
    M("config-suggestion-loses-index", "config/__init__.py",
      "            path.append(str(part))\n", "            pass\n",
      "a misspelled key in a reward spec is suggested without the spec's index",
      CF + "test_a_bad_reward_spec_is_named_by_its_section_and_index"),
]


# ---------------------------------------------------------------------- running

# ====================================================================== red team (issue 28): new kinds of bug in the
# same areas; each comment says whether the tests before tests/test_redteam_*.py caught it
MUTANTS += [
    # survived the existing tests; killed by the new test
    M('rt-lora-dropout-ignored', 'models/adapters.py',
      'lora_dropout=dropout,',
      'lora_dropout=0.0,',
      'lora.dropout never reaches peft: the adapters train without dropout',
      'tests/test_redteam_lora.py::test_the_policy_gets_lora_dropout_and_adapters_on_every_linear_but_the_head'),
    # caught by the existing tests
    M('rt-lora-tied-check-all', 'models/adapters.py',
      'if tied and any(name in ("lm_head", "embed_tokens") for name in named):',
      'if tied and all(name in ("lm_head", "embed_tokens") for name in named):',
      'adapters on a tied LM head are refused only when every target is lm_head/embed_tokens',
      'tests/test_lora_export.py::test_adapters_on_a_tied_lm_head_are_refused'),
    # survived the existing tests; killed by the new test
    M('rt-lora-load-missing-ignored', 'models/adapters.py',
      'if missing or result.unexpected_keys:',
      'if result.unexpected_keys:',
      "an adapter file lacking some of the model's adapters loads silently",
      'tests/test_redteam_lora.py::test_an_adapter_file_missing_some_of_the_models_adapters_is_refused'),
    # survived the existing tests; killed by the new test
    M('rt-lora-disabled-adapters', 'models/adapters.py',
      'if linear.merged or linear.disable_adapters:',
      'if linear.merged:',
      'effective_weight of a layer whose adapters are disabled raises instead of the base weight',
      'tests/test_redteam_lora.py::test_the_effective_weight_of_disabled_adapters_is_the_base_weight'),
    # survived the existing tests; killed by the new test
    M('rt-lora-dropout-one-allowed', 'config/run_sections.py',
      'dropout: float = Field(0.0, ge=0, lt=1,',
      'dropout: float = Field(0.0, ge=0, le=1,',
      'lora.dropout=1 accepted (the adapters see only zeros)',
      'tests/test_redteam_lora.py::test_a_lora_dropout_outside_0_to_1_is_refused[1]'),
    # survived the existing tests; killed by the new test
    M('rt-lora-target-default', 'config/run_sections.py',
      '"all-linear", description="the Linear layers',
      '["q_proj", "v_proj"], description="the Linear layers',
      'lora.target_modules defaults to q_proj/v_proj instead of the documented all-linear',
      'tests/test_redteam_lora.py::test_the_policy_gets_lora_dropout_and_adapters_on_every_linear_but_the_head'),
    # caught by the existing tests
    M('rt-ray-empty-shares', 'rollout/ray_engine.py',
      'for i in range(count) if bounds[i + 1] > bounds[i]]',
      'for i in range(count) if bounds[i + 1] >= bounds[i]]',
      'fewer prompts than workers: empty shares are sent to the idle workers',
      'tests/test_ray.py::test_two_ray_rollout_workers_learn_as_one_process_does'),
    # survived the existing tests; killed by the new test
    M('rt-ray-redraw-limit', 'rollout/ray_engine.py',
      'if attempts[index] > MAX_REDRAWS:',
      'if attempts[index] >= MAX_REDRAWS:',
      'a share gives up after MAX_REDRAWS workers instead of MAX_REDRAWS + 1',
      'tests/test_redteam_ray.py::test_a_share_is_drawn_on_up_to_max_redraws_new_workers'),
    # survived the existing tests; killed by the new test
    M('rt-ray-worker-seeds-same', 'rollout/ray_engine.py',
      'self.vllm_python, self.seed + started, slot)',
      'self.vllm_python, self.seed, slot)',
      'every rollout worker (and its replacements) gets the same engine seed',
      'tests/test_redteam_ray.py::test_each_rollout_worker_and_each_replacement_gets_its_own_engine_seed'),
    # survived the existing tests; killed by the new test
    M('rt-ray-worker-partial-unseeded', 'rollout/ray_worker.py',
      '        torch.manual_seed(seed)\n        return self.engine.generate_partial(prompts, plan)',
      '        return self.engine.generate_partial(prompts, plan)',
      "a worker's partial round ignores its seed: a redrawn partial share differs from the one it replaces",
      'tests/test_redteam_ray.py::test_a_workers_partial_round_is_drawn_from_its_seed'),
    # survived the existing tests; killed by the new test
    M('rt-ray-reward-args-dropped', 'rewards/ray_pool.py',
      'self.fn = bind_args(fn, args, key="reward.args") if args else fn',
      'self.fn = fn',
      "a Ray reward actor ignores the spec's args",
      'tests/test_redteam_ray.py::test_a_ray_reward_actor_calls_its_function_with_the_specs_args'),
    # caught by the existing tests
    M('rt-ray-reward-restarts-uncounted', 'rewards/ray_pool.py',
      '        self.restarts += 1\n',
      '        pass\n',
      'the Ray reward pool does not count the actors it replaced',
      'tests/test_audit_ray.py::test_a_reward_that_fails_for_one_sample_fails_that_sample_only'),
    # survived the existing tests; killed by the new test
    M('rt-ray-shares-remainder-order', 'rollout/ray_engine.py',
      'key=lambda i: exact[i] - enough[i], reverse=True)',
      'key=lambda i: exact[i] - enough[i])',
      'partial shares hand the leftover groups to the smallest remainders, not the largest',
      'tests/test_redteam_ray.py::test_partial_shares_give_the_leftover_groups_to_the_largest_remainders'),
    # caught by the existing tests
    M('rt-async-ahead-past-end', 'training/rl/method.py',
      'while len(self.ahead) < min(ro.max_staleness, self.config.train.steps - step):',
      'while len(self.ahead) < ro.max_staleness:',
      'rounds are sampled ahead for steps past train.steps',
      'tests/test_ray.py::test_asynchronous_rl_learns_with_samples_at_most_max_staleness_versions_old[1]'),
    # caught by the existing tests (and the new one)
    M('rt-async-partial-version', 'training/rl/method.py',
      'self.ahead.append(Ahead(None, submitted, step - 1, launch))',
      'self.ahead.append(Ahead(None, submitted, step, launch))',
      'a partial round sampled ahead is stamped one policy version too new',
      'tests/test_ray.py::test_asynchronous_rl_with_partial_rollouts_trains_whole_batches_and_resumes',
      'tests/test_redteam_async_resume.py::test_a_round_sampled_ahead_is_stamped_with_the_weights_it_is_drawn_on'),
    # survived the existing tests; killed by the new test
    M('rt-rl-resume-length-coef', 'training/rl/method.py',
      'self.run_state.length_coef = state.get("length_coef", self.config.algorithm.length_coef)',
      'self.run_state.length_coef = self.config.algorithm.length_coef',
      'a resume resets the adaptive length coefficient to its starting value',
      'tests/test_redteam_async_resume.py::test_a_restore_brings_back_the_adaptive_length_coefficient'),
    # caught by the existing tests
    M('rt-rl-resume-gold-lost', 'training/rl/method.py',
      'self.run_state.monitor.gold = self.gold',
      'pass',
      'after a resume the hacking monitor no longer scores the gold reward',
      'tests/test_monitor.py::test_monitor_rebuilds_on_resume'),
    # survived the existing tests; killed by the new test
    M('rt-partial-budget-boundary', 'training/rl/partial.py',
      'if not row.done and len(row.tokens) >= self.max_new_tokens:',
      'if not row.done and len(row.tokens) > self.max_new_tokens:',
      'a carried row that already holds max_new_tokens tokens is sent again with a budget of 0',
      'tests/test_redteam_async_resume.py::test_a_carried_row_that_holds_max_new_tokens_tokens_is_done_and_truncated'),
    # caught by the existing tests (and the new one)
    M('rt-partial-fresh-ignores-carried', 'training/rl/partial.py',
      'fresh = sampler.next(max(0, needed + self.extra - len(self.carried)))',
      'fresh = sampler.next(needed + self.extra)',
      'a round draws needed + extra fresh prompts on top of the carried groups',
      'tests/test_audit_async_resume.py::test_partial_groups_of_a_round_in_flight_are_saved_with_the_carried_ones',
      'tests/test_redteam_async_resume.py::test_a_carried_row_that_holds_max_new_tokens_tokens_is_done_and_truncated'),
    # caught by the existing tests
    M('rt-partial-stale-inclusive', 'training/rl/partial.py',
      'stale = sum(sum(v < version for v in row.versions) for row in rows)',
      'stale = sum(sum(v <= version for v in row.versions) for row in rows)',
      "partial/stale_token_frac counts the current version's tokens as stale",
      'tests/test_partial_rollouts.py::test_no_prompt_is_lost_or_trained_twice_and_carried_groups_go_first'),
    # caught by the existing tests
    M('rt-resume-history-step', 'training/run.py',
      'folder.append_config_history(start + 1, changes)',
      'folder.append_config_history(start, changes)',
      "config_history.jsonl dates a change to the checkpoint's step, not the next",
      'tests/test_run_identity.py::test_allow_config_change_continues_and_records_the_change'),
    # caught by the existing tests
    M('rt-resume-eval-twice', 'training/run.py',
      'and start != config.train.steps and start not in evaluated:',
      'and start != config.train.steps:',
      'a resume at an evaluated eval.every step evaluates (and logs) it again',
      'tests/test_faults.py::test_keep_best_keeps_the_best_evaluated_checkpoint_beside_the_newest[True-True]'),
    # survived the existing tests; killed by the new test
    M('rt-fresh-keeps-step0', 'training/run.py',
      'folder.truncate_after(-1)',
      'folder.truncate_after(0)',
      "a fresh run in an old run folder keeps that run's step-0 records",
      'tests/test_redteam_async_resume.py::test_a_fresh_run_in_a_folder_without_checkpoints_drops_the_old_step_0_records'),
    # caught by the existing tests
    M('rt-rundir-torn-tail-kept', 'tracking/run_dir.py',
      'if len(kept) < len(records) or len(text.encode()) != path.stat().st_size:',
      'if len(kept) < len(records):',
      'a resume keeps a torn last line when no record is dropped',
      'tests/test_training.py::test_resume_continues_exactly'),
    # survived the existing tests; killed by the new test
    M('rt-rundir-drop-samples-all-splits', 'tracking/run_dir.py',
      'lambda r: not (r.get("step") == step and r.get("split") == split)',
      'lambda r: not r.get("step") == step',
      "drop_samples drops every split's samples of the step, not only the evaluation's",
      'tests/test_redteam_async_resume.py::test_drop_samples_drops_only_that_splits_samples_of_that_step'),
    # caught by the existing tests
    M('rt-ckpt-best-tie-earlier', 'training/checkpoint.py',
      'return max(scored)[1] if scored else None',
      'return max(scored, key=lambda s: s[0])[1] if scored else None',
      'keep_best keeps the earlier of two equally scored checkpoints',
      'tests/test_faults.py::test_the_best_evaluated_checkpoint_is_chosen_from_the_held_out_records'),
    # caught by the existing tests
    M('rt-ckpt-best-any-step', 'training/checkpoint.py',
      'if r.get("eval/accuracy") is not None and r.get("step") in steps]',
      'if r.get("eval/accuracy") is not None]',
      'keep_best may pick an evaluated step that has no checkpoint (and then keeps none)',
      'tests/test_faults.py::test_the_best_evaluated_checkpoint_is_chosen_from_the_held_out_records'),
    # survived the existing tests; killed by the new test
    M('rt-resume-accuracy-before-lost', 'training/run.py',
      'self.accuracy_before = state.get("accuracy_before")',
      'pass',
      'a resumed run forgets the accuracy before training',
      'tests/test_redteam_async_resume.py::test_a_resumed_run_keeps_the_accuracy_before_training'),
    # caught by the existing tests
    M('rt-kto-partner-any-label', 'training/supervised/kto.py',
      'j = same_label[i] if same_label[i] is not None else any_label[i]',
      'j = any_label[i]',
      "KTO's mismatched partner ignores the label",
      'tests/test_kto.py::test_the_kto_loss_matches_one_written_out_from_plain_forward_passes'),
    # caught by the existing tests
    M('rt-kto-loss-per-group', 'training/supervised/kto.py',
      'return losses.sum() / len(picked)',
      'return losses.sum() / len(group)',
      "KTO's loss is averaged per micro-batch, not over the step's batch",
      'tests/test_kto.py::test_the_kto_loss_matches_one_written_out_from_plain_forward_passes'),
    # caught by the existing tests
    M('rt-kto-weights-swapped', 'training/supervised/kto.py',
      'self.cfg.kto_desirable_weight, self.cfg.kto_undesirable_weight)',
      'self.cfg.kto_undesirable_weight, self.cfg.kto_desirable_weight)',
      "KTO's desirable and undesirable weights swapped",
      'tests/test_kto.py::test_the_kto_loss_matches_one_written_out_from_plain_forward_passes'),
    # caught by the existing tests
    M('rt-kto-z0-matched-reference', 'training/supervised/kto.py',
      'reference["train_mismatched"][picked])',
      'reference["train"][picked])',
      "KTO's z0 compares the mismatched log-probs with the matched sequences' reference",
      'tests/test_kto.py::test_the_kto_loss_matches_one_written_out_from_plain_forward_passes'),
    # survived the existing tests; killed by the new test
    M('rt-kto-mismatched-truncated-boundary', 'training/supervised/kto.py',
      'sequences[j].truncated or len(completion) > room))',
      'sequences[j].truncated or len(completion) >= room))',
      'a mismatched sequence that fits exactly is flagged truncated',
      'tests/test_redteam_kto_prm.py::test_a_mismatched_sequence_is_flagged_truncated_only_past_max_length[25-False]'),
    # caught by the existing tests
    M('rt-prm-norm-per-solution', 'training/supervised/prm.py',
      'norm = max(1, sum(len(train[i].ends) for i in picked))',
      'norm = max(1, len(picked))',
      "PRM's loss is divided by the solutions, not the labelled steps",
      'tests/test_prm.py::test_the_step_1_loss_and_held_out_metrics_match_a_plain_forward'),
    # caught by the existing tests
    M('rt-prm-bool-label', 'training/supervised/prm.py',
      'if isinstance(label, bool) or label not in (0, 1):',
      'if label not in (0, 1):',
      'a PRM label true/false is accepted as 1/0',
      'tests/test_prm.py::test_bad_solutions_name_file_and_line_and_leave_no_run_folder'),
    # survived the existing tests; killed by the new test
    M('rt-prm-eval-cut-counted', 'training/supervised/prm.py',
      'whole = [(p, s.labels) for p, s in zip(probs, solutions) if s.cut == 0]',
      'whole = [(p, s.labels) for p, s in zip(probs, solutions)]',
      'PRM solution-level accuracies count solutions whose steps were cut',
      'tests/test_redteam_kto_prm.py::test_prm_solution_level_accuracy_counts_only_solutions_whose_steps_all_fit'),
    # survived the existing tests; killed by the new test
    M('rt-seq-id-no-prompt', 'training/supervised/sequences.py',
      'digest.update(f"{s.prompt}|{s.completion};".encode())',
      'digest.update(f"{s.completion};".encode())',
      "the sequences' fingerprint leaves the prompts out",
      'tests/test_redteam_kto_prm.py::test_the_sequences_fingerprint_covers_the_prompts'),
    # survived the existing tests; killed by the new test
    M('rt-pair-micro-batch', 'training/supervised/sequences.py',
      'max(1, micro_batch_size // 2), by_length=True)',
      'max(1, micro_batch_size), by_length=True)',
      'pair micro-batches hold micro_batch_size pairs (2x sequences)',
      'tests/test_redteam_kto_prm.py::test_a_pair_micro_batch_holds_micro_batch_size_sequences'),
    # survived the existing tests; killed by the new test
    M('rt-lock-permission-is-dead', 'tracking/run_lock.py',
      'except PermissionError:  # alive, owned by another user\n        return True',
      'except PermissionError:  # alive, owned by another user\n        return False',
      "a lock held by another user's live process is taken over",
      'tests/test_redteam_identity.py::test_a_lock_of_another_users_live_process_is_refused'),
    # caught by the existing tests
    M('rt-lock-release-unheld', 'tracking/run_lock.py',
      'if self._held:',
      'if True:',
      "a RunLock that never acquired removes the holder's run.lock on release",
      'tests/test_run_identity.py::test_a_run_folder_held_by_a_live_process_is_refused_at_once'),
    # survived the existing tests; killed by the new test
    M('rt-lock-hostless-refused', 'tracking/run_lock.py',
      'if isinstance(pid, int) and host is not None and host != socket.gethostname():',
      'if isinstance(pid, int) and host != socket.gethostname():',
      "a dead lock without a host is refused as another host's",
      'tests/test_redteam_identity.py::test_a_dead_lock_without_a_host_is_taken_over'),
    # caught by the existing tests
    M('rt-identity-micro-batch-refused', 'tracking/run_identity.py',
      '"train.micro_batch_size", "rollout.batch_size",',
      '"rollout.batch_size",',
      'train.micro_batch_size counted as a change of what is trained',
      'tests/test_audit_identity.py::test_bookkeeping_keys_and_eval_keys_change_without_a_flag_and_eval_measures_are_named'),
    # survived the existing tests; killed by the new test
    M('rt-identity-scorer-not-measured', 'tracking/run_identity.py',
      'EVAL_MEASURE = ("eval.limit", "eval.max_new_tokens", "eval.scorer", "eval.correct_threshold")',
      'EVAL_MEASURE = ("eval.limit", "eval.max_new_tokens", "eval.correct_threshold")',
      'a change of eval.scorer is not noted on resume',
      'tests/test_redteam_identity.py::test_each_eval_key_that_changes_how_accuracy_is_measured_is_named[eval.scorer=numeric_answer-eval.scorer]'),
    # survived the existing tests; killed by the new test
    M('rt-compare-touch-missed', 'eval/compare.py',
      'if diff[j - 1] * diff[j] < 0 or (diff[j] == 0 and diff[j - 1] != 0):',
      'if diff[j - 1] * diff[j] < 0:',
      'curves that meet (difference 0) are not listed as crossing',
      'tests/test_redteam_compare_compose.py::test_curves_that_meet_are_listed_where_they_meet'),
    # caught by the existing tests
    M('rt-compare-example-any-sample', 'eval/compare.py',
      '"sample": (right or done)[0]["completion"]',
      '"sample": done[0]["completion"]',
      'an example shows the first sample, not a correct one',
      'tests/test_audit_compare_compose.py::test_examples_are_drawn_from_each_group_with_their_solve_counts'),
    # caught by the existing tests
    M('rt-compare-blocker-no-correct', 'eval/compare.py',
      'if right else 1.0',
      'if right else 0.0',
      'maj@k is refused when no sample is correct',
      'tests/test_eval_samples.py::test_voting_is_not_computable_when_correct_samples_have_no_readable_answer'),
    # caught by the existing tests
    M('rt-compare-blocker-boundary', 'eval/compare.py',
      'if readable < MIN_VOTABLE:',
      'if readable <= MIN_VOTABLE:',
      'maj@k refused at exactly 90% readable answers',
      'tests/test_eval_samples.py::test_voting_is_not_computable_when_correct_samples_have_no_readable_answer'),
    # caught by the existing tests
    M('rt-compose-steps-ignore-factor', 'rewards/compose.py',
      'steps = [[(end, v * float(factor[i])) for end, v in row] for i, row in enumerate(steps)]',
      'steps = [[(end, v) for end, v in row] for i, row in enumerate(steps)]',
      'step rewards are not multiplied by the product and gate factors',
      'tests/test_prm.py::test_dense_gives_each_step_its_probability_where_the_step_ends'),
    # caught by the existing tests
    M('rt-compose-steps-despite-clip', 'rewards/compose.py',
      'if parts and isinstance(outcome.value, StepScores) and value == float(outcome.value):',
      'if parts and isinstance(outcome.value, StepScores):',
      'a clipped step reward still pays its unclipped steps',
      'tests/test_prm.py::test_dense_gives_each_step_its_probability_where_the_step_ends'),
    # survived the existing tests; killed by the new test
    M('rt-compose-overflow-steps-kept', 'rewards/compose.py',
      '            steps[i] = []\n',
      '            pass\n',
      'a sample whose total overflowed keeps its step rewards',
      'tests/test_redteam_compare_compose.py::test_a_total_that_overflows_keeps_no_step_rewards'),
    # survived the existing tests; killed by the new test
    M('rt-compose-first-error-overwritten', 'rewards/compose.py',
      'self.first_errors.setdefault(name, f"on sample {sample.get(\'id\', \'?\')}: {error}")',
      'self.first_errors[name] = f"on sample {sample.get(\'id\', \'?\')}: {error}"',
      "first_errors holds each component's latest error, not its first",
      'tests/test_redteam_compare_compose.py::test_first_errors_keep_each_components_first_error'),
    # survived the existing tests; killed by the new test
    M('rt-checks-pg-and', 'config/checks.py',
      '(c.algorithm.epochs > 1 or c.algorithm.mini_batches > 1)',
      '(c.algorithm.epochs > 1 and c.algorithm.mini_batches > 1)',
      'policy_loss=pg accepted with epochs > 1 alone',
      'tests/test_redteam_config.py::test_pg_is_refused_with_more_than_one_epoch_or_more_than_one_mini_batch'),
    # survived the existing tests; killed by the new test
    M('rt-checks-overlong-boundary', 'config/checks.py',
      'c.algorithm.overlong_buffer > c.rollout.max_new_tokens,',
      'c.algorithm.overlong_buffer >= c.rollout.max_new_tokens,',
      'overlong_buffer == max_new_tokens refused',
      'tests/test_redteam_config.py::test_an_overlong_buffer_as_long_as_max_new_tokens_is_accepted'),
    # survived the existing tests; killed by the new test
    M('rt-checks-ktae-remax', 'config/checks.py',
      '("grpo", "rloo", "remax")',
      '("grpo", "rloo")',
      'token_weighting=ktae refused with advantage=remax',
      'tests/test_redteam_config.py::test_ktae_is_accepted_with_every_sequence_level_advantage[remax]'),
    # survived the existing tests; killed by the new test
    M('rt-checks-kto-label-smoothing', 'config/checks.py',
      'bool(c.dpo.online or c.dpo.nll_coef or c.dpo.label_smoothing)',
      'bool(c.dpo.online or c.dpo.nll_coef)',
      'dpo.label_smoothing accepted with dpo.loss=kto',
      'tests/test_redteam_config.py::test_kto_refuses_each_pair_loss_option[dpo.label_smoothing=0.1]'),
    # survived the existing tests; killed by the new test
    M('rt-checks-keep-best-prm', 'config/checks.py',
      'c.train.keep_best and c.method in ("rm", "prm")',
      'c.train.keep_best and c.method == "rm"',
      'train.keep_best accepted with method=prm',
      'tests/test_redteam_config.py::test_keep_best_is_refused_for_methods_that_sample_no_answers[prm-prm.data=x.jsonl]'),
    # caught by the existing tests
    M('rt-checks-drifting-partial', 'config/checks.py',
      'DRIFTING = ("rollout.max_staleness", "rollout.partial_rollouts")',
      'DRIFTING = ("rollout.max_staleness",)',
      'partial_rollouts with trainer old log-probs accepted without tis_cap',
      'tests/test_partial_rollouts.py::test_settings_it_cannot_run_with_are_refused'),
    # survived the existing tests; killed by the new test
    M('rt-checks-temperatures-boundary', 'config/checks.py',
      'len(c.rollout.temperatures) > c.rollout.group_size',
      'len(c.rollout.temperatures) >= c.rollout.group_size',
      'as many temperatures as group_size refused',
      'tests/test_redteam_config.py::test_as_many_temperatures_as_the_group_size_are_accepted'),
]


def working_tree_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]  # deleted-but-tracked files are skipped


def copy_tree(dest: Path) -> None:
    for rel in working_tree_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def default_selection(copy: Path) -> list[str]:
    tests = sorted(p.relative_to(copy).as_posix() for p in (copy / "tests").glob("test_*.py"))
    tests = [t for t in tests if not any(fnmatch.fnmatch(t, pat) for pat in DEFAULT_EXCLUDE)]
    wiring = "tests/test_wiring.py"
    return ([wiring] if wiring in tests else []) + [t for t in tests if t != wiring]  # the fast file first


def in_selection(node: str, selection: list[str]) -> bool:
    path = node.split("::")[0]
    for sel in selection:
        sel_path = sel.split("::")[0].rstrip("/")
        if "::" in sel:
            if node == sel or node.startswith(sel + "["):
                return True
        elif path == sel_path or path.startswith(sel_path + "/"):
            return True
    return False


class Runner:
    def __init__(self, copy: Path, threads: int, timeout: float):
        self.copy, self.timeout = copy, timeout
        self.env = dict(os.environ, PYTHONPATH=str(copy / "src"), PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1",
                        TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        if threads:
            self.env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))

    def check_import(self) -> None:
        out = subprocess.run([sys.executable, "-c", "import aha; print(aha.__file__)"], cwd=self.copy, env=self.env,
                             capture_output=True, text=True, check=True).stdout.strip()
        if not Path(out).resolve().is_relative_to(self.copy.resolve()):
            sys.exit(f"mutants: `import aha` in the copy gives {out}, not the copy's src: refusing to run")

    def pytest(self, targets: list[str]) -> tuple[int, str, float]:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *targets]
        t0 = time.time()
        try:
            done = subprocess.run(cmd, cwd=self.copy, env=self.env, capture_output=True, text=True,
                                  timeout=self.timeout)
            return done.returncode, done.stdout + done.stderr, time.time() - t0
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return -1, out, time.time() - t0


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return match.group(1) if match else "?"


def _check_once(copy: Path, mutant: Mutant) -> str:
    text = (copy / "src/aha" / mutant.file).read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise SystemExit(f"mutant {mutant.name}: the old text occurs {count} times in src/aha/{mutant.file} "
                         f"(must be exactly once): {mutant.old!r}")
    return text


def plant(copy: Path, mutant: Mutant) -> tuple[Path, str]:
    path = copy / "src/aha" / mutant.file
    text = _check_once(copy, mutant)
    path.write_text(text.replace(mutant.old, mutant.new))
    return path, text


def run_mutant(runner: Runner, mutant: Mutant, selection: list[str], fast: bool) -> dict:
    path, original = plant(runner.copy, mutant)
    try:
        seconds = 0.0
        killers = [k for k in mutant.killers if in_selection(k, selection)]
        stages = ([("expected", killers)] if fast and killers else []) + [("selection", selection)]
        for stage, targets in stages:
            rc, out, dt = runner.pytest(targets)
            seconds += dt
            if rc == 5:
                raise SystemExit(f"mutant {mutant.name}: pytest collected no tests from {targets}\n{out[-2000:]}")
            if rc == -1:
                return {"status": "killed (timeout)", "by": stage, "test": "-", "seconds": seconds}
            if rc != 0:
                return {"status": "killed", "by": stage, "test": first_failure(out), "seconds": seconds}
        return {"status": "SURVIVED", "by": "-", "test": "-", "seconds": seconds}
    finally:
        path.write_text(original)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="NAME", help="mutant name or fnmatch pattern (repeatable)")
    parser.add_argument("--tests", nargs="+", metavar="SEL", help="pytest selection (default: tests/ without the "
            "sandbox files)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--full", action="store_true", help="always run the whole selection (skip the expected-killers "
                                                            "stage)")
    parser.add_argument("--baseline-full", action="store_true", help="check that the whole selection passes unmutated")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per pytest (0: torch's default)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per pytest run; past it the mutant counts "
            "as killed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args(argv)

    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names), "duplicate mutant names"
    chosen = [m for m in MUTANTS if not args.only or any(fnmatch.fnmatch(m.name, p) for p in args.only)]
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:38} src/aha/{m.file:24} {m.description}")
        print(f"{len(MUTANTS)} mutants")
        return 0
    if not chosen:
        sys.exit(f"mutants: nothing matches {args.only}")

    copy = Path(tempfile.mkdtemp(prefix="aha-mutants-"))
    try:
        copy_tree(copy)
        runner = Runner(copy, args.threads, args.timeout)
        runner.check_import()
        selection = args.tests or default_selection(copy)
        for m in chosen:  # fail loudly before any test runs
            _check_once(copy, m)
        if not args.no_baseline:
            killers = {k for m in chosen for k in m.killers if in_selection(k, selection)}
            base = selection if args.baseline_full else sorted(killers)
            if base:
                rc, out, dt = runner.pytest(base)
                if rc != 0:
                    print(out[-4000:])
                    sys.exit(f"mutants: the unmutated baseline fails ({len(base)} targets, status {rc}); "
                             "fix that first")
                print(f"baseline: {len(base)} targets pass unmutated ({dt:.0f} s)")
        print(f"selection: {' '.join(selection)}\n")
        header = f"{'mutant':38} {'status':17} {'stage':9} {'s':>5}  first failing test"
        print(header + "\n" + "-" * len(header))
        results = []
        for m in chosen:
            r = run_mutant(runner, m, selection, fast=not args.full)
            results.append((m, r))
            print(f"{m.name:38} {r['status']:17} {r['by']:9} {r['seconds']:5.0f}  {r['test']}", flush=True)
        killed = sum(r["status"].startswith("killed") for _, r in results)
        survivors = [m for m, r in results if not r["status"].startswith("killed")]
        for m in survivors:
            print(f"survivor {m.name}: src/aha/{m.file}: {m.description}")
        print(f"\nmutation score: {killed}/{len(results)} killed ({100 * killed / len(results):.1f}%)")
        return 0 if not survivors else 1
    finally:
        if args.keep:
            print(f"copy kept at {copy}")
        else:
            shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
