"""The one error of task loading, in a module of its own so every task module (and the prompt
helpers below the tasks, aha/prompts.py) can raise it."""


class TaskError(ValueError):
    """Bad task data or settings; the message names the file and line or the key."""
