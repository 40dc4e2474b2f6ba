"""The error every model loader raises for a model it cannot load (a folder missing, damaged
or not fitting its config); the CLI prints it as `aha: error: ...` (exit 2)."""


class ModelNotFound(FileNotFoundError):
    pass
