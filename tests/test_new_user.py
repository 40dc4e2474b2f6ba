"""What a new user met, tried as a TRL user would: each a fix with its test here (the signals'
are in test_stop_signals.py)."""

import pytest

from aha.config import ConfigError, load_config


def test_an_error_in_a_command_line_override_names_the_override_not_the_file(tmp_path):
    path = tmp_path / "word.yaml"
    path.write_text("train:\n  steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=fast"])
    assert str(err.value).startswith("config key 'train.lr' in the override 'train.lr=fast': ")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.stepz=4"])
    assert str(err.value) == ("unknown config key 'train.stepz' in the override 'train.stepz=4' "
                              "(did you mean train.steps?)")
    path.write_text("train:\n  steps: many\n")  # the file's own mistake still names the file
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=0.1"])
    assert str(err.value).startswith(f"config key 'train.steps' in {path}: ")
