"""aha: RL post-training for language models, built around rewards.

From Python: `from aha import train, evaluate, load_config` (aha/api/, docs/python.md). They are
imported on first use, so `import aha` stays light (no torch) until a run is asked for."""

__version__ = "0.1.0"
__all__ = ["Config", "Run", "evaluate", "load_config", "train"]


def __getattr__(name: str):
    if name in ("train", "evaluate", "load_config", "Run"):
        from aha import api

        return getattr(api, name)
    if name == "Config":
        from aha.config import Config

        return Config
    import importlib

    try:  # a subpackage: aha.config.ConfigError without importing aha.config first
        return importlib.import_module(f"aha.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"aha.{name}":  # the subpackage is there, a module it imports is not: say so
            raise
        raise AttributeError(f"module 'aha' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
