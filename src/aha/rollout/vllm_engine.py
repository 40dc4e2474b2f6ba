"""Sampling with vLLM, run in its own environment: the engine starts vllm_worker.py with that
environment's Python, talks to it over a Unix socket, and hands it the policy's weights
through a safetensors file in shared memory after each optimizer step (lazily: at the next
generate, so methods that sample only to evaluate pay only then).

vLLM keeps its own copy of the weights in the sampling dtype and its own KV cache
(VLLM_CPU_KVCACHE_SPACE GiB, 1 unless set). Its random stream is seeded once per engine,
not per request (a per-request seed crashed vLLM's CPU engine), so a resumed run samples
other completions than one run straight through."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client
from pathlib import Path

import torch

from aha.models.adapters import plain_tensors
from aha.rollout.rollouts import PartialRound, Rollouts, rollouts_from_samples
from aha.rollout.settings import EngineSettings

START_TIMEOUT_S = 600  # loading vLLM and warming it up took 20-110 s on 2 cores
STOP_TIMEOUT_S = 10
WORKER = Path(__file__).with_name("vllm_worker.py")


class VLLMEngineError(RuntimeError):
    """The vLLM worker could not start or failed; the message holds the end of its log."""


def vllm_python(configured: str | None) -> Path | None:
    """The Python of an environment with vLLM: rollout.vllm_python if set, else
    $AHA_VLLM_PYTHON if set (empty: none), else .venv-vllm/bin/python beside the environment
    aha runs in (where `make vllm` puts it). None when there is none."""
    if configured:
        return Path(configured).expanduser()
    if "AHA_VLLM_PYTHON" in os.environ:
        return Path(os.environ["AHA_VLLM_PYTHON"]).expanduser() if os.environ["AHA_VLLM_PYTHON"] else None
    beside = Path(sys.prefix).parent / ".venv-vllm" / "bin" / "python"
    return beside if beside.is_file() else None


def weights_for_vllm(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The model's tensors under their Hugging Face names, in the sampling dtype, each stored
    once (a tied output layer shares the embedding's storage; vLLM ties it back); LoRA
    adapters folded into the weights they adapt."""
    out, seen = {}, set()
    for name, tensor in plain_tensors(model, dtype).items():
        if id(tensor) not in seen:  # the first name of a shared tensor
            seen.add(id(tensor))
            out[name] = tensor
    return out


class VLLMEngine(EngineSettings):
    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 64, dtype: torch.dtype = torch.float32, python: Path | None = None, seed: int = 0):
        if top_p < 1:
            # vLLM's processed log-probs are renormalised over the nucleus, the HF engine's and
            # the learner's are not: the importance ratio would be off even on-policy
            raise VLLMEngineError(f"rollout.engine=vllm samples with top_p=1 only (rollout.top_p={top_p}): its "
                                  "log-probs would follow another convention than the learner's; use rollout.engine=hf")
        if python is None or not python.is_file():
            raise VLLMEngineError(f"rollout.engine=vllm needs the Python of an environment with vLLM installed "
                                  f"(rollout.vllm_python or $AHA_VLLM_PYTHON; `make vllm` makes .venv-vllm); "
                                  f"found none at {python}")
        super().__init__(model, tokenizer, max_new_tokens, temperature, top_p, batch_size, dtype)
        self._stale = False
        shm = Path("/dev/shm")
        self._dir = Path(tempfile.mkdtemp(prefix="aha-vllm-", dir=shm if shm.is_dir() else None))
        self._log_path = self._dir / "worker.log"
        self._conn = self._proc = None
        try:
            self._start(python, seed)
        except OSError as err:  # no room in /dev/shm, a Python that cannot run, a refused socket
            self.close()
            raise VLLMEngineError(f"the vLLM worker could not start: {err}\n{self._log_tail()}") from err
        except BaseException:
            self.close()
            raise

    def _start(self, python: Path, seed: int) -> None:
        folder = self._dir / "model"  # the policy as it is now: config + weights, no tokenizer needed
        folder.mkdir()
        self.model.config.save_pretrained(folder)
        self.model.generation_config.save_pretrained(folder)
        self._write_weights(folder / "model.safetensors")
        key = secrets.token_bytes(16)
        cpus = sorted(os.sched_getaffinity(0))  # the CPUs this process may use, not 0..n-1
        env = {**os.environ, "AHA_VLLM_AUTHKEY": key.hex(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
               "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cpus))),
               "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(len(cpus))),
               "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", str(self._dir / "cache")),
               "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
               # idle between rollouts, vLLM's threads must not spin on the cores the learner uses
               "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        env.pop("PYTHONPATH", None)  # aha's paths are not the worker's
        socket_path = self._dir / "worker.sock"
        dtype = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[self.dtype]
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen([str(python), str(WORKER), str(socket_path), str(folder), dtype, str(seed),
                                           str(self.batch_size)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                          cwd=self._dir, start_new_session=True)  # Ctrl-C is the trainer's to handle
        deadline = time.time() + START_TIMEOUT_S
        while True:  # the socket file appears at bind, a moment before the worker listens
            if socket_path.exists():
                try:
                    self._conn = Client(str(socket_path), family="AF_UNIX", authkey=key)
                    break
                except ConnectionRefusedError:
                    pass
            if self._proc.poll() is not None:
                raise VLLMEngineError(f"the vLLM worker exited with code {self._proc.returncode} while starting:\n"
                                      f"{self._log_tail()}")
            if time.time() > deadline:
                raise VLLMEngineError(f"the vLLM worker did not start within {START_TIMEOUT_S} s:\n{self._log_tail()}")
            time.sleep(0.1)
        (folder / "model.safetensors").unlink()  # vLLM holds the weights now: free the shared memory

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _call(self, op: str, **args):
        if self._conn is None:
            raise VLLMEngineError(f"the vLLM worker is gone (closed, or a request to it was interrupted): cannot {op}")
        try:
            self._conn.send((op, args))
            status, reply = self._conn.recv()
        except (EOFError, OSError) as err:
            raise VLLMEngineError(f"the vLLM worker went away during {op} ({err!r}):\n{self._log_tail()}") from None
        except BaseException:  # e.g. Ctrl-C mid-request: its reply would answer the next request
            self._conn.close()
            self._conn = None
            raise
        if status != "ok":
            raise VLLMEngineError(f"the vLLM worker failed in {op}:\n{reply}")
        return reply

    def _write_weights(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file(weights_for_vllm(self.model, self.dtype), str(path))

    def sync_weights(self, model) -> None:
        """Sample from model's current weights from the next generate on (handed over then,
        so that steps that do not sample do not pay for it)."""
        if model is not self.model:
            raise ValueError("VLLMEngine follows the model it was built on; build a new engine for another model")
        self._stale = True

    def _push_weights(self) -> None:
        t0 = time.time()
        path = self._dir / "weights.safetensors"
        self._write_weights(path)
        try:
            self._call("load_weights", path=str(path))
        finally:
            path.unlink(missing_ok=True)
        self._stale = False
        self.sync_seconds += time.time() - t0

    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None, temperature: float | None = None) -> Rollouts:
        if self._stale:
            self._push_weights()
        # temperature 0 is vLLM's greedy; its log-probs are then those of the raw distribution,
        # as the HF engine reports for greedy decoding
        groups = self._call("generate", prompts=[list(map(int, p)) for p in prompts], n=group_size,
                            temperature=0.0 if greedy else (self.temperature if temperature is None else temperature),
                            top_p=1.0 if greedy else self.top_p,
                            max_tokens=max_new_tokens or self.max_new_tokens, stop_token_ids=self.eos_ids)
        samples = [sample for group in groups for sample in group]
        return rollouts_from_samples([prompt for prompt in prompts for _ in range(group_size)],
                                     [(ids, lps) for ids, lps, _ in samples],
                                     [reason == "length" for _, _, reason in samples],
                                     torch.arange(len(prompts)).repeat_interleave(group_size),
                                     self.tokenizer, self.pad_id)

    def generate_partial(self, prompts: list[list[int]], plan: PartialRound) -> Rollouts:
        """Sample as plan says (partial rollouts, rollout/rollouts.PartialRound): the worker
        steps vLLM's engine itself and aborts the requests still going once plan.enough groups
        are complete; they come back with their tokens so far, unfinished."""
        if self._stale:
            self._push_weights()
        samples = self._call("generate_partial", prompts=[list(map(int, p)) for p in prompts], copies=plan.copies,
                             budgets=plan.budgets, groups=plan.groups, enough=plan.enough,
                             temperature=self.temperature, top_p=self.top_p, stop_token_ids=self.eos_ids)
        return rollouts_from_samples([prompt for prompt, n in zip(prompts, plan.copies) for _ in range(n)],
                                     [(ids, lps) for ids, lps, _ in samples],
                                     [reason == "length" for _, _, reason in samples],
                                     torch.arange(len(prompts)).repeat_interleave(torch.tensor(plan.copies)),
                                     self.tokenizer, self.pad_id, [reason == "partial" for _, _, reason in samples])

    def close(self) -> None:
        """Stop the worker and remove its files; safe to call twice."""
        if self._conn is not None:
            try:  # ask; a worker that does not answer within STOP_TIMEOUT_S is killed below
                self._conn.send(("stop", {}))
                self._conn.poll(STOP_TIMEOUT_S)
            except OSError:
                pass
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self):
        if getattr(self, "_proc", None) is not None:
            self.close()
