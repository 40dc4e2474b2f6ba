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
      W + "test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped", UPDATE + "[ppo_is_weights_seq_sum]"),
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
      "critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=algo.critic_lr,",
      "critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=train.lr,",
      "critic_lr ignored: the value model's optimizer uses the policy lr",
      W + "test_build_learner_gives_each_optimizer_its_own_settings"),
    M("brief-08-reinforce-pp-no-gamma", "training/rl/estimate.py",
      "reinforce_pp_advantages(token_rewards, mask, algo.gamma,", "reinforce_pp_advantages(token_rewards, mask, 1.0,",
      "REINFORCE++ advantage ignores gamma",
      W + "test_reinforce_pp_advantages_discount_by_gamma[True]"),
    M("brief-09-overlong-factor-ignored", "training/rl/collect.py",
      "overlong_penalty(rollouts.lengths(), max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)",
      "overlong_penalty(rollouts.lengths(), max_new_tokens, algo.overlong_buffer)",
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
    M("brief-15-reset-kl-without-kl", "config.py",
      "if (a.ref_reset_every or a.ref_reset_kl) and a.kl_coef == 0:", "if a.ref_reset_every and a.kl_coef == 0:",
      "ref_reset_kl accepted without a KL term", W + "test_prorl_reset_options_need_a_kl_term"),
    M("brief-16-override-split", "config.py",
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
      "batch.returns[sl, :width], algo.value_clip)", "batch.returns[sl, :width], None)",
      "value_clip not passed to the value loss", W + "test_critic_step_uses_the_clipped_value_loss"),
    M("update-one-epoch", "training/rl/update.py",
      "for _ in range(algo.epochs):", "for _ in range(1):",
      "epochs ignored", W + "test_two_epochs_of_clipped_sgd_equal_two_steps_written_out"),
    M("adv-returns-no-gamma", "algorithms/advantages.py",
      "token_rewards[:, t] + gamma * running, 0)", "token_rewards[:, t] + running, 0)",
      "discounted returns ignore gamma", W + "test_reinforce_pp_advantages_discount_by_gamma[False]"),
    M("adv-gae-no-lambda", "algorithms/advantages.py",
      "delta + gamma * lam * torch.where(next_valid, next_adv, 0)", "delta + gamma * torch.where(next_valid, next_adv, 0)",
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
      "grpo_advantages(seq_rewards.view(-1, G), algo.advantage_scale)", 'grpo_advantages(seq_rewards.view(-1, G), "std")',
      "advantage_scale ignored (Dr. GRPO divides by std)", W + "test_sequence_advantages_with_kl_in_the_reward"),
    M("estimate-no-group-baseline", "training/rl/estimate.py",
      "G if algo.group_baseline else None", "None",
      "REINFORCE++-baseline never subtracts the group mean", W + "test_reinforce_pp_advantages_discount_by_gamma[True]"),
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
      "load_weights(module, folder, name)", "load_weights(module, folder)",
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
      "group.update(lr=config.algorithm.critic_lr,", "group.update(lr=train.lr,",
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
    M("collect-length-correct-min", "training/rl/collect.py",
      "charged = total >= algo.length_correct_min", "charged = total >= 1.0",
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
      "mask, seq_adv, G, algo.ktae_alpha)", "mask, seq_adv, G, 0.5)",
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
    M("config-tis-check-dropped", "config.py",
      'if a.tis_cap is not None and a.old_logprobs != "trainer":', "if False:",
      "tis_cap accepted with engine old log-probs", W + "test_prorl_reset_options_need_a_kl_term"),
    M("config-override-not-parsed", "config.py",
      "node[parts[-1]] = _parse_scalar(value)", "node[parts[-1]] = value",
      "override values are not read as YAML", W + "test_an_override_value_may_contain_equals_signs"),
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
            done = subprocess.run(cmd, cwd=self.copy, env=self.env, capture_output=True, text=True, timeout=self.timeout)
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
    parser.add_argument("--tests", nargs="+", metavar="SEL", help="pytest selection (default: tests/ without the sandbox files)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--full", action="store_true", help="always run the whole selection (skip the expected-killers stage)")
    parser.add_argument("--baseline-full", action="store_true", help="check that the whole selection passes unmutated")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per pytest (0: torch's default)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per pytest run; past it the mutant counts as killed")
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
            base = selection if args.baseline_full else sorted({k for m in chosen for k in m.killers if in_selection(k, selection)})
            if base:
                rc, out, dt = runner.pytest(base)
                if rc != 0:
                    print(out[-4000:])
                    sys.exit(f"mutants: the unmutated baseline fails ({len(base)} targets, status {rc}); fix that first")
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
