"""The one error of task loading, in a module of its own so every task module can raise it."""


class TaskError(ValueError):
    """Bad task data or settings; the message names the file and line or the key."""
