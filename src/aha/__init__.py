"""aha: RL post-training for language models, built around rewards."""

__version__ = "0.1.0"
