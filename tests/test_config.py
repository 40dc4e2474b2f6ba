import re

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
    path = write(tmp_path, "rollout: {group_size: 1}\nalgorithm: {advantage_scale: none}\n")
    assert load_config(path).rollout.group_size == 1


@pytest.mark.parametrize("override, suggestion", [
    ("rollout.grop_size=2", "did you mean rollout.group_size?"),
    ("train.group_size=4", "did you mean rollout.group_size?"),  # a key in the wrong section
    ("rolout.group_size=3", "did you mean rollout?"),
    ("algorithm.kl_coeff=0.1", "did you mean algorithm.kl_coef?"),
    ("train.keep_last=3", "did you mean train.keep_checkpoints?"),  # as other frameworks name it
    ("rollout.num_generations=8", "did you mean rollout.group_size?"),
    ("train.learning_rate=1e-5", "did you mean train.lr?"),
    ("reward=[{fn: numeric_answer, wieght: 2}]", "did you mean reward.0.weight?"),
    ("weight=2", "did you mean reward: [{weight: ...}]?"),
])
def test_a_misspelled_key_gets_a_suggestion(override, suggestion):
    with pytest.raises(ConfigError, match=r"unknown config key .* \(" + re.escape(suggestion) + r"\)"):
        load_config(None, [override])
    with pytest.raises(ConfigError) as err:
        load_config(None, ["zzzz=1"])
    assert "did you mean" not in str(err.value)


def test_the_config_reference_is_current_and_describes_every_key():
    """docs/config.md is what the schema says (regenerate: python -m aha.config.reference >
    docs/config.md), and no key is left without a description."""
    from pathlib import Path

    from pydantic import BaseModel

    from aha.config import Config, RewardSpec, sections
    from aha.config.reference import reference

    page = Path(__file__).parent.parent / "docs" / "config.md"
    assert page.read_text() == reference(), "docs/config.md is stale: python -m aha.config.reference > docs/config.md"
    undescribed = []
    for model, prefix in [(Config, ""), (RewardSpec, "reward.")] + [(m, f"{n}.") for n, m in sections()]:
        for name, field in model.model_fields.items():
            section = isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
            if not section and not field.description:
                undescribed.append(prefix + name)
            if not section:
                text = page.read_text()
                assert f"`{prefix}{name}`" in text or prefix == "reward." and f"`{name}`" in text
    assert not undescribed, undescribed
