"""The vLLM side of aha's vLLM engine: a standalone script that the engine runs with the
Python of an environment where vLLM is installed (`make vllm` makes one), so that vLLM and
its pinned dependencies never share a process with aha's. It imports only the standard
library, torch, safetensors and vLLM, never aha.

    python vllm_worker.py SOCKET MODEL_FOLDER DTYPE SEED MAX_NUM_SEQS   (key in $AHA_VLLM_AUTHKEY)

It loads the model folder into an in-process vLLM engine, listens on the Unix socket, and
answers requests (plain lists, ints, floats and strings) until the engine says stop or goes
away:
  ("generate", {prompts, n, temperature, top_p, max_tokens, stop_token_ids})
      -> per prompt, n tuples (token ids, their sampling log-probs, "stop" | "length")
  ("generate_partial", {prompts, copies, budgets, groups, enough, temperature, top_p, stop_token_ids})
      -> per sample (copies[i] of prompt i, in order), (token ids, their sampling log-probs,
      "stop" | "length" | "partial"): vLLM's engine is stepped here and the requests still
      going are aborted once `enough` groups (groups[i]: prompt i's group) are complete
  ("load_weights", {path}) -> None: a safetensors file of the policy's weights (its Hugging
      Face names) is loaded into the running model, no restart
  ("stop", {}) -> None, then the script exits.
A failed request answers ("error", traceback) and the worker keeps serving."""

import os
import sys
import traceback


def _reload_weights(path: str):
    """A function for LLM.collective_rpc: reload the file's tensors (Hugging Face names) into
    the worker's model in place, through vLLM's own reload, which maps the names onto fused
    layers and redoes the CPU kernels' weight repacking."""
    def reload(worker):
        from safetensors.torch import load_file

        worker.reload_weights(weights_iterator=iter(load_file(path).items()), is_checkpoint_format=True)
        model = worker.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and head is not None:
            # a tied output layer is not in the checkpoint, so the reload leaves its CPU kernel
            # with a packed copy of the old embedding (measured: logits off by 0.3-0.5 nats):
            # share the new embedding again and repack it
            model.lm_head.tie_weights(model.model.embed_tokens)
            head.quant_method.process_weights_after_loading(head)
    return reload


def _generate_partial(llm, args: dict, call: int) -> list:
    """A round that may stop early (aha's partial rollouts): one request a sample, stepped
    here; once `enough` groups have every sample finished, the rest are aborted and answered
    with what they have so far."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    rows, left = {}, {}
    for i, prompt in enumerate(args["prompts"]):
        group = args["groups"][i]
        params = SamplingParams(n=1, temperature=args["temperature"], top_p=args["top_p"],
                                max_tokens=args["budgets"][i], stop_token_ids=args["stop_token_ids"],
                                ignore_eos=True, logprobs=0, detokenize=False, output_kind=RequestOutputKind.DELTA)
        for copy in range(args["copies"][i]):
            request = f"aha-{call}-{i}-{copy}"
            rows[request] = ([], [], group)
            left[group] = left.get(group, 0) + 1
            engine.add_request(request, {"prompt_token_ids": prompt}, params)
    reasons, complete = {}, 0
    while complete < args["enough"] and engine.has_unfinished_requests():
        for out in engine.step():
            ids, logprobs, group = rows[out.request_id]
            for sample in out.outputs:
                ids += list(sample.token_ids)
                logprobs += [step[t].logprob for t, step in zip(sample.token_ids, sample.logprobs or [])]
                if out.finished:
                    reasons[out.request_id] = "length" if sample.finish_reason == "length" else "stop"
                    left[group] -= 1
                    complete += left[group] == 0
    going = [request for request in rows if request not in reasons]
    if going:
        engine.abort_request(going)
        while engine.has_unfinished_requests():  # let the engine finish the abort before the next round
            engine.step()
    return [(ids, logprobs, reasons.get(request, "partial")) for request, (ids, logprobs, _) in rows.items()]


def _exit_with_parent(folder: str) -> None:
    """A thread: when the engine's process is gone (killed, out of memory) before it could
    stop this worker, remove the engine's folder in /dev/shm and exit, instead of holding
    the model and its KV cache forever."""
    import shutil
    import threading
    import time

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def serve(socket_path: str, folder: str, dtype: str, seed: int, max_num_seqs: int) -> None:
    from multiprocessing.connection import Listener

    _exit_with_parent(os.path.dirname(socket_path))

    from vllm import LLM, SamplingParams

    # processed_logprobs: the log-probs of the distribution actually sampled (after
    # temperature and top-p), which is what the learner's importance ratio needs
    llm = LLM(model=folder, dtype=dtype, seed=seed, enforce_eager=True, skip_tokenizer_init=True,
              logprobs_mode="processed_logprobs", enable_prefix_caching=False, max_num_seqs=max_num_seqs)
    # one token first: a model vLLM cannot run (e.g. an attention head size its CPU kernels
    # lack) fails here, while the engine waits for it to start, not at the first rollout
    llm.generate([{"prompt_token_ids": [0, 1]}], SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False)
    key = bytes.fromhex(os.environ.pop("AHA_VLLM_AUTHKEY"))
    with Listener(socket_path, family="AF_UNIX", authkey=key) as listener:
        with listener.accept() as conn:
            calls = 0  # request ids stay unique across rounds
            while True:
                try:
                    op, args = conn.recv()
                except EOFError:  # the engine's process went away: nothing left to serve
                    return
                try:
                    if op == "generate":
                        params = SamplingParams(n=args["n"], temperature=args["temperature"], top_p=args["top_p"],
                                                max_tokens=args["max_tokens"], stop_token_ids=args["stop_token_ids"],
                                                # stop at the engine's stop ids and only there, as the HF
                                                # engine does (the tokenizer's EOS is one of them)
                                                ignore_eos=True, logprobs=0, detokenize=False)
                        outputs = llm.generate([{"prompt_token_ids": ids} for ids in args["prompts"]], params,
                                               use_tqdm=False)
                        reply = [[(list(c.token_ids), [step[t].logprob for t, step in zip(c.token_ids, c.logprobs)],
                                   "length" if c.finish_reason == "length" else "stop") for c in out.outputs]
                                 for out in outputs]
                    elif op == "generate_partial":
                        calls += 1
                        reply = _generate_partial(llm, args, calls)
                    elif op == "load_weights":
                        llm.collective_rpc(_reload_weights(args["path"]))
                        reply = None
                    elif op == "stop":
                        conn.send(("ok", None))
                        return
                    else:
                        raise ValueError(f"unknown request {op!r}")
                except Exception:  # noqa: BLE001 - the engine shows it; the worker stays up
                    conn.send(("error", traceback.format_exc()))
                else:
                    conn.send(("ok", reply))


if __name__ == "__main__":  # vLLM spawns processes: the entry point must be guarded
    socket_path, folder, dtype, seed, max_num_seqs = sys.argv[1:6]
    serve(socket_path, folder, dtype, int(seed), int(max_num_seqs))
