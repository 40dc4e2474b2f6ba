"""run.lock: the live training process holds its run folder, so a second run into the same
folder fails at once instead of interleaving metrics and clobbering checkpoints."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from aha.config import ConfigError


class RunLocked(ConfigError):
    """Another live process is training in this run folder."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


class RunLock:
    """Created atomically (O_EXCL) with this process's PID and host; a lock whose PID is not
    alive on this host is stale and taken over (`stale` then holds what it said)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / "run.lock"
        self.stale: dict | None = None
        self._held = False

    def acquire(self) -> None:
        for _ in range(3):  # a stale lock removed by a racing process: try again
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale(self._read())
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump({"pid": os.getpid(), "host": socket.gethostname()}, handle)
            self._held = True
            return
        raise RunLocked(f"could not create {self.path}: it keeps reappearing; is another run starting here?")

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, OSError):  # torn: being written right now, or its writer died in between
            if time.time() - self.path.stat().st_mtime < 10:
                raise RunLocked(f"{self.path} is being created by another training process; pick another "
                                "output_dir") from None
            return {}

    def _take_over_if_stale(self, holder: dict | None) -> None:
        if holder is None:  # removed meanwhile
            return
        pid, host = holder.get("pid"), holder.get("host")
        if isinstance(pid, int) and host == socket.gethostname() and pid_alive(pid):
            raise RunLocked(f"{self.path.parent} is in use by another training process (PID {pid} on {host}, "
                            f"{self.path}); wait for it to finish, stop it, or pick another output_dir")
        if isinstance(pid, int) and host is not None and host != socket.gethostname():
            raise RunLocked(f"{self.path.parent} is in use by a training process on another host (PID {pid} on {host}, "
                            f"{self.path}); if that process is gone, delete {self.path}")
        self.stale = holder
        self.path.unlink(missing_ok=True)
