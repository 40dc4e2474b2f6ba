"""`aha train` on two CPU learner ranks (distributed.processes=2: torchrun started by aha, gloo,
FSDP2 or DDP) against one process on the same config: rl (GRPO with a KL term in the loss and
ProRL's reference reset at step 2, three micro-batches over two ranks, so one rank makes a
repeated pass) and dpo (with its held-out pairs, a collective forward; and BCO's running reward
shift) log the same metrics and end on the same weights and optimizer moments; a checkpoint
written by two ranks resumes on one and the reverse; a rank killed in the middle of a step stops
the run naming it, leaves only whole files, and the same command resumes to the straight run's
result."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from distributed_runs import (
    DPO,
    DPO_OVERRIDES,
    TOLERANCE,
    aha_train,
    assert_close,
    assert_same_checkpoint,
    assert_same_reference,
    assert_same_run,
    assert_same_weights,
    trained,
    write_rl_config,
)


def test_the_weight_comparison_allows_an_element_adam_tipped_but_not_a_shifted_tensor():
    """Two ranks' weights may differ in the odd element whose gradient summed to about zero (Adam
    moves it by up to lr either way); a difference in most elements is a wrong step."""
    weights = torch.randn(4096)
    tipped = weights.clone()
    tipped[7] += 1e-3
    assert_close(weights, tipped, ("w",))
    small, off = torch.randn(64), torch.zeros(64)
    off[0] = 1e-3
    for wrong in (weights + 2 * TOLERANCE, weights.where(torch.arange(4096) % 100 != 0, weights + 1e-3)):
        with pytest.raises(AssertionError, match="elements apart"):
            assert_close(weights, wrong, ("w",))
    with pytest.raises(AssertionError, match="elements apart"):  # a small tensor (a norm, a bias) allows none
        assert_close(small, small + off, ("norm",))
    tipped[9] += 1.0  # a tipped element stays within what Adam's steps can move it
    with pytest.raises(AssertionError, match="an element"):
        assert_close(weights, tipped, ("w",))
    with pytest.raises(AssertionError):  # step counts exactly
        assert_close(torch.tensor(3), torch.tensor(2), ("step",))


@pytest.fixture(scope="module")
def rl_config(tmp_path_factory) -> Path:
    return write_rl_config(tmp_path_factory.mktemp("rl"))


@pytest.fixture(scope="module")
def rl_straight(rl_config, tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("rl_straight") / "run"
    return out, trained(rl_config, out)


def test_rl_on_two_fsdp2_ranks_takes_the_steps_one_process_takes(rl_config, rl_straight, tmp_path):
    out, one = rl_straight
    two = trained(rl_config, tmp_path / "two", "distributed.processes=2")
    # ref/reset: ProRL's reset at step 2 (the config's ref_reset_every), the policy's shards gathered into it
    assert_same_run(one, two, ["loss/total", "kl/ref", "grad_norm", "reward/std", "ref/reset"])
    assert_same_checkpoint(out / "checkpoints/step-3", tmp_path / "two/checkpoints/step-3")
    assert_same_reference(out / "checkpoints/step-3", tmp_path / "two/checkpoints/step-3")
    # rank 0 alone wrote the run's files: one record per step and evaluation
    assert [r["step"] for r in two] == [0, 1, 2, 3, 3]


@pytest.fixture(scope="module")
def dpo_one(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("dpo_one") / "run"
    return out, trained(DPO, out, *DPO_OVERRIDES)


@pytest.mark.parametrize("strategy", ["fsdp2", pytest.param("ddp", marks=pytest.mark.slow)])
def test_dpo_on_two_ranks_takes_the_steps_one_process_takes(dpo_one, tmp_path, strategy):
    out, one = dpo_one
    two = trained(DPO, tmp_path / strategy, *DPO_OVERRIDES, "distributed.processes=2",
                  f"distributed.strategy={strategy}")
    assert_same_run(one, two, ["pref/loss", "pref/margin", "grad_norm", "pref_eval/likelier_chosen"])
    assert_same_checkpoint(out / "checkpoints/step-3", tmp_path / strategy / "checkpoints/step-3")


def test_bco_pairs_reward_shift_is_the_whole_micro_batchs_on_two_ranks(tmp_path):
    """BCO's shift is a running mean over micro-batches, so it depends on how they are cut: one
    process with micro-batches of 4 sequences (2 pairs) against two ranks of 2 (1 pair) each,
    each rank's part summed with its peers' (5 pairs: the last micro-batch is one pair, which
    rank 1 repeats at factor 0 and must not count)."""
    bco = ["dpo.loss=bco_pair", "dpo.beta=1.0"]
    one = trained(DPO, tmp_path / "one", *DPO_OVERRIDES, *bco, "train.micro_batch_size=4")
    two = trained(DPO, tmp_path / "two", *DPO_OVERRIDES, *bco, "distributed.processes=2")
    # two cuts of the same rows sum in other orders: grad_norm (~80) moves by 1e-6 of itself
    assert_same_run(one, two, ["pref/loss", "bco/delta", "grad_norm"], rel=1e-5)
    assert_same_checkpoint(tmp_path / "one/checkpoints/step-3", tmp_path / "two/checkpoints/step-3")


@pytest.mark.parametrize("saved_by, resumed_by", [(2, 1), (1, 2)])
def test_a_checkpoint_resumes_on_another_number_of_ranks(rl_config, rl_straight, tmp_path, saved_by, resumed_by):
    """One step on saved_by ranks, then the rest on resumed_by: the straight run's numbers."""
    out, straight = rl_straight
    trained(rl_config, tmp_path / "run", "train.steps=1", "eval.after=false", f"distributed.processes={saved_by}")
    resumed = trained(rl_config, tmp_path / "run", "train.resume=true", f"distributed.processes={resumed_by}")
    assert_same_run(straight, resumed, ["loss/total"])
    assert_same_checkpoint(out / "checkpoints/step-3", tmp_path / "run/checkpoints/step-3")


def test_a_config_change_on_resume_reaches_every_rank(rl_config, tmp_path):
    """One step on two ranks, then the rest at another learning rate (train.allow_config_change):
    resumed on two ranks as on one process (every rank's optimizer takes the new rate)."""
    two = tmp_path / "two"
    trained(rl_config, two, "train.steps=1", "eval.after=false", "distributed.processes=2")
    shutil.copytree(two, tmp_path / "one")
    change = ["train.resume=true", "train.allow_config_change=true", "train.lr=3e-3"]
    one = trained(rl_config, tmp_path / "one", *change)
    assert_same_run(one, trained(rl_config, two, *change, "distributed.processes=2"), ["loss/total"])
    assert_same_checkpoint(tmp_path / "one/checkpoints/step-3", two / "checkpoints/step-3")
    trainer = torch.load(two / "checkpoints/step-3/trainer.pt", weights_only=False)
    assert {group["lr"] for group in trainer["optimizers"]["policy"]["param_groups"]} == {3e-3}  # the new rate, taken


def test_a_rank_killed_mid_step_stops_the_run_and_the_same_command_resumes(rl_config, rl_straight, tmp_path):
    """Rank 1 is SIGKILLed in step 2's update, while rank 0 waits on it in a collective: the run
    stops naming rank 1 and the signal, metrics and checkpoints hold step 1 whole and nothing
    of step 2, and the same command with train.resume=true ends where the straight run ends."""
    out, straight = rl_straight
    run = tmp_path / "run"
    killed = aha_train(rl_config, run, "distributed.processes=2", env={"AHA_KILL_AT": "update@1:2"})
    assert killed.returncode != 0
    report = killed.stderr[killed.stderr.index("Failures:") if "Failures:" in killed.stderr else 0:]
    assert "rank      : 1 (local_rank: 1)" in killed.stderr and "Signal 9 (SIGKILL)" in killed.stderr, report[-3000:]
    assert "aha train: the learner ranks stopped" in killed.stderr
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [0, 1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]
    resumed = trained(rl_config, run, "distributed.processes=2", "train.resume=true")
    assert_same_run(straight, resumed, ["loss/total"])
    assert_same_checkpoint(out / "checkpoints/step-3", run / "checkpoints/step-3")


def test_a_rank_stalled_mid_step_stops_the_run_after_the_timeout(rl_config, tmp_path):
    """Rank 1 stops answering in step 2's update, alive (AHA_STALL_AT): rank 0 gives up after
    distributed.timeout_s, saying why, torchrun stops rank 1, and step 1 is kept whole."""
    run = tmp_path / "run"
    stalled = aha_train(rl_config, run, "distributed.processes=2", "distributed.timeout_s=5",
                        env={"AHA_STALL_AT": "update@1:2"})
    assert stalled.returncode != 0
    assert "learner rank 0 waited distributed.timeout_s=5 s in a collective for a peer that did not answer: a " \
           "rank stalled" in stalled.stderr, stalled.stderr[-3000:]
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [0, 1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]


def test_processes_outside_torchrun_and_a_disagreeing_world_are_refused(monkeypatch):
    from aha.config import Config, ConfigError
    from aha.training.distributed import join_ranks

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="not one of torchrun's ranks: run `aha train`"):
        join_ranks(Config(method="sft", distributed={"processes": 2}))
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match="distributed.processes=2 but torchrun started 4 ranks"):
        join_ranks(Config(method="sft", distributed={"processes": 2}))


TINY = ["model=tiny", "train.steps=2", "train.checkpoint_every=0", "task.num_eval=4", "eval.max_new_tokens=4",
        "train.report=false", "train.lr=1e-3", "train.micro_batch_size=2"]
CONFIGS = Path(__file__).parent.parent / "configs"


@pytest.mark.slow
@pytest.mark.parametrize("config, overrides, keys", [
    ("sft_arithmetic.yaml", ["sft.batch_size=5", "distributed.strategy=ddp"], ["sft/loss"]),
    ("dpo_arithmetic.yaml", ["dpo.loss=kto", "dpo.batch_size=5"], ["kto/loss", "kto/reward_desirable"]),
    ("rm_arithmetic.yaml", ["rm.batch_size=5", "rm.heads=3", "rm.pcrm=true"], ["rm/loss", "rm/head_std"]),
    ("prm_arithmetic.yaml", ["prm.batch_size=5"], ["prm/loss"]),
], ids=["sft-ddp", "kto", "rm-ensemble-pcrm", "prm"])
def test_every_supervised_method_on_two_ranks_takes_the_steps_one_process_takes(tmp_path, config, overrides, keys):
    one = trained(CONFIGS / config, tmp_path / "one", *TINY, *overrides)
    two = trained(CONFIGS / config, tmp_path / "two", *TINY, *overrides, "distributed.processes=2")
    assert_same_run(one, two, [*keys, "grad_norm"])


@pytest.mark.slow
@pytest.mark.parametrize("overrides, keys", [
    (["lora.rank=4", "train.lr=1e-2"], ["loss/total", "grad_norm"]),
    (["algorithm.advantage=gae"], ["loss/value", "grad_norm"]),
], ids=["lora", "ppo-critic"])
def test_rl_with_adapters_or_a_critic_on_two_ranks_takes_the_steps_one_process_takes(rl_config, tmp_path, overrides,
                                                                                     keys):
    """The other rank builds the policy on the meta device: LoRA's adapters and the critic (a copy
    of the policy's body with its own head) take rank 0's values when placed."""
    one = trained(rl_config, tmp_path / "one", *overrides)
    two = trained(rl_config, tmp_path / "two", *overrides, "distributed.processes=2")
    assert_same_run(one, two, keys)
    saved = sorted(p.name for p in (tmp_path / "one/checkpoints/step-3").glob("*.safetensors"))
    assert saved == sorted(p.name for p in (tmp_path / "two/checkpoints/step-3").glob("*.safetensors"))
    for name in saved:  # the policy or its adapter, the critic, the reference
        assert_same_weights(tmp_path / "one/checkpoints/step-3", tmp_path / "two/checkpoints/step-3", name)
