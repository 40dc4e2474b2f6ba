"""The training methods by name (the config's `method` key): each a Method (training/method.py)."""

from __future__ import annotations

from aha.config import Config
from aha.training.rl.method import RLMethod
from aha.training.supervised.dpo import PreferenceMethod
from aha.training.supervised.kto import KTOMethod
from aha.training.supervised.prm import PRMMethod
from aha.training.supervised.reward_model import RMMethod
from aha.training.supervised.rft import RFTMethod
from aha.training.supervised.sft import SFTMethod

# config.method's allowed values are these keys (a test checks the config's Literal agrees)
METHODS = {"rl": RLMethod, "sft": SFTMethod, "dpo": PreferenceMethod, "rm": RMMethod, "prm": PRMMethod,
           "rft": RFTMethod}


def method_for(config: Config):
    """The Method a config trains with: its `method`, except that dpo.loss=kto, which learns
    from single labelled completions rather than pairs, has a step of its own."""
    if config.method == "dpo" and config.dpo.loss == "kto":
        return KTOMethod
    return METHODS[config.method]
