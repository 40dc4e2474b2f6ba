"""A small OpenAI-compatible chat endpoint on 127.0.0.1 for the HTTP judge's tests: it serves a
real model (the tiny one by default) through its chat template, greedy, with the first
tokens' top log-probs and a `usage` count, as vLLM's /v1/chat/completions does. Started and
stopped inside a test (`with JudgeServer() as server: ... server.base_url`), on a free port.

Modes, for the failures the judge must survive: "ok"; "garbage" (status 200, a body that is
not JSON); "not_chat" (JSON without choices); "slow" (answers only after sleep_s, past the
client's timeout); "error" (HTTP 500); "flaky" (HTTP 503 on every first try of a
conversation, then ok).

Run by hand: `python tests/judge_server.py --model smollm2-135m --port 8000`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from aha.models import load


class JudgeServer:
    def __init__(self, model: str = "tiny", mode: str = "ok", sleep_s: float = 2.0, port: int = 0):
        self.loaded = load(model)
        self.loaded.model.requires_grad_(False).eval()
        self.mode, self.sleep_s = mode, sleep_s
        self.requests: list[dict] = []  # every request body received, in order
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = server.answer(self.path, body, self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "JudgeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()  # a "slow" handler wakes and ends
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def answer(self, path: str, body: dict, authorization: str | None) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append({**body, "authorization": authorization})
            first_try = json.dumps(body["messages"]) not in self._seen
            self._seen.add(json.dumps(body["messages"]))
        if path != "/v1/chat/completions":
            return 404, b'{"error": "not found"}'
        if self.mode == "slow":
            self.stop.wait(self.sleep_s)
        if self.mode == "garbage":
            return 200, b"<html>Service Unavailable</html>"
        if self.mode == "not_chat":
            return 200, json.dumps({"object": "error", "message": "overloaded"}).encode()
        if self.mode == "error" or (self.mode == "flaky" and first_try):
            return 500 if self.mode == "error" else 503, b'{"error": "internal"}'
        with self._lock:  # one forward pass at a time
            return 200, json.dumps(self.complete(body)).encode()

    @torch.no_grad()
    def complete(self, body: dict) -> dict:
        """Greedy decoding from the chat template, with each token's top log-probs."""
        model, tokenizer = self.loaded.model, self.loaded.tokenizer
        ids = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        prompt_tokens, generated, content = len(ids), [], []
        for _ in range(int(body.get("max_tokens", 16))):
            logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            token = int(logprobs.argmax())
            if token == tokenizer.eos_token_id:
                break
            top = torch.topk(logprobs, min(int(body.get("top_logprobs") or 0), len(logprobs)))
            content.append({"token": tokenizer.decode([token]), "logprob": float(logprobs[token]),
                            "top_logprobs": [{"token": tokenizer.decode([int(i)]), "logprob": float(v)}
                                             for v, i in zip(top.values, top.indices)]})
            generated.append(token)
            ids.append(token)
        message = {"role": "assistant", "content": tokenizer.decode(generated)}
        return {"object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop",
                             "logprobs": {"content": content} if body.get("logprobs") else None}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(generated),
                          "total_tokens": prompt_tokens + len(generated)}}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    with JudgeServer(args.model, port=args.port) as running:
        print(f"serving {args.model} at {running.base_url}")
        running.thread.join()
