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
