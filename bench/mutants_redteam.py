"""Red-team mutants (issue 28 areas: LoRA, Ray, asynchronous RL and partial rollouts, resume, KTO /
PRM / sequences, run identity and run.lock, eval comparison, reward composition, config cross-checks):
one-line bugs not in bench/mutants.py. Each comment says whether the tests that existed before
tests/test_redteam_*.py caught it; the killers listed are the tests that fail with it.

To run them with bench/mutants.py's runner (its options after the -), from the repository root:

    .venv/bin/python - --only 'rt-*' <<'EOF'
    import sys; sys.path.insert(0, 'bench')
    import mutants, mutants_redteam
    mutants.MUTANTS[:] = mutants_redteam.MUTANTS
    sys.exit(mutants.main(sys.argv[1:]))
    EOF
"""

from mutants import M

MUTANTS = [
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
