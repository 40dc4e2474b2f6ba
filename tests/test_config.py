import pytest

from aha.config import ConfigError, load_config


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_yaml_and_dotted_overrides(tmp_path):
    path = write(tmp_path, "model: tiny\ntrain:\n  steps: 5\n")
    config = load_config(path, ["train.lr=3e-4", "rollout.group_size=4", "task.operators=['+','*']", "eval.limit=null"])
    assert config.model == "tiny"
    assert config.train.steps == 5 and config.train.lr == 3e-4
    assert config.rollout.group_size == 4
    assert config.task.operators == ["+", "*"]
    assert config.eval.limit is None
    assert config.base_dir == str(tmp_path)


def test_unknown_key_is_named_with_its_file(tmp_path):
    path = write(tmp_path, "train:\n  stepz: 5\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.stepz' in .*run\.yaml"):
        load_config(path)


def test_unknown_override_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout\.groupsize'"):
        load_config(write(tmp_path, "model: tiny\n"), ["rollout.groupsize=4"])


def test_bad_value_names_key_and_value(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'rollout\.group_size' .*greater than or equal to 1.*got 0"):
        load_config(write(tmp_path, "rollout: {group_size: 0}\n"))
    with pytest.raises(ConfigError, match=r"config key 'algorithm\.advantage_scale'"):
        load_config(write(tmp_path, "algorithm: {advantage_scale: max}\n"))


def test_bad_files_and_overrides(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "train: [unclosed\n"))
    with pytest.raises(ConfigError, match="not of the form key=value"):
        load_config(None, ["train.steps"])
    with pytest.raises(ConfigError, match="train.steps is not a section"):
        load_config(write(tmp_path, "train: {steps: 3}\n"), ["train.steps.x=1"])


def test_std_advantages_need_groups_of_two(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout\.group_size must be >= 2 with algorithm\.advantage_scale=std"):
        load_config(write(tmp_path, "rollout: {group_size: 1}\n"))
    assert load_config(write(tmp_path, "rollout: {group_size: 1}\nalgorithm: {advantage_scale: none}\n")).rollout.group_size == 1
