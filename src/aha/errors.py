"""Errors every layer may raise or must let pass: task loading's (so every task module, and the
prompt helpers below the tasks, aha/prompts.py, can raise it), and the stop signals'."""


class TaskError(ValueError):
    """Bad task data or settings; the message names the file and line or the key."""


class SignalStop(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would raise a KeyboardInterrupt (training/interrupt.py).
    Only aha's own handler raises it, so code that contains a user's failures (a reward's) lets it pass."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum
