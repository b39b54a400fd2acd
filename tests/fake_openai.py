"""A fake OpenAI-compatible streaming server (standard library, loopback) for the client, stall and engine
tests: imported, it serves in a thread (:func:`serve_in_thread`); run as a program
(``python fake_openai.py PORT [--worker-pid-file PATH]``) it is an engine process for :class:`lib.engines.Engine`.

The request's model name chooses the behaviour: ``ok``, ``grouped`` (several tokens in one chunk),
``http500``, ``reset``, ``slow`` (a 3 s pause after two tokens), ``error_event``, ``cut`` (the body ends
without a finish reason), ``long`` (:data:`LONG_TOKENS` tokens, :attr:`FakeServer.gap_s` apart), and three
that never finish (each holds the connection for :attr:`FakeServer.hang_s`): ``silent`` (reads the request
and never answers), ``stall`` (two tokens, then nothing) and ``trickle`` (one byte at a time, never a whole
line). As ``ok`` but: ``vllm`` streams as vLLM does (the role chunk with empty content, a token whose chunk
has empty content, the finish reason on the last token's chunk, the usage in a chunk of its own);
``empty_first`` gives the first token an empty-content chunk; ``close`` answers ``Connection: close`` with no
chunked framing (the body ends when the connection does) and ``http10`` answers as an HTTP/1.0 server;
``usage_short`` counts 2 completion tokens for 5 chunks, ``usage_text`` counts them as the text ``"5"``,
``usage_over`` counts 999 for any request and ``usage_prompt_huge`` a trillion prompt tokens. Otherwise the last
choice carries the finish reason and nothing else (as ``transformers serve``'s does), and the usage comes in a chunk of its own. ``GET /health`` and
``GET /v1/models`` answer 200 (the models :attr:`FakeServer.models`); :attr:`FakeServer.connections` counts the
connections accepted. Run as a program, ``--chat MODE`` gives every chat request that behaviour whatever model it names (a server whose ``/v1/models`` answers and whose chat
requests never do: ``--chat silent``). Not a test file: the test files import it.
"""

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = ["The", " sky", " is", " blue", "."]
LONG_TOKENS = 200


def event(content=None, role=None, finish=None, usage=None, choices=True) -> bytes:
    """One server-sent event of a chat completion chunk."""
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    body = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeServer(BaseHTTPRequestHandler):
    """Behaviour chosen by the request's model name (see the module's docstring)."""

    protocol_version = "HTTP/1.1"
    gap_s = 0.05
    hang_s = 30.0
    forced_mode: str | None = None  # --chat MODE
    models = ["fake-model"]
    connections = 0
    _count_lock = threading.Lock()
    raw = False  # this reply is not chunked: the body ends when the connection closes

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self._count_lock:
            type(self).connections += 1

    def do_GET(self):
        body = json.dumps({"data": [{"id": m} for m in self.models]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send(self, chunk: bytes):
        if self.raw:
            self.wfile.write(chunk)
        else:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.forced_mode or request["model"]
        if mode == "silent":
            time.sleep(self.hang_s)
            return
        if mode == "http500":
            body = b'{"error": "engine exploded"}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.raw = mode in ("close", "http10")
        if mode == "http10":
            self.protocol_version = "HTTP/1.0"  # the status line says so; the body ends with the connection
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if self.raw:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if mode == "trickle":
            deadline = time.monotonic() + self.hang_s
            while time.monotonic() < deadline:
                self._send(b"x")
                time.sleep(0.05)
            return
        self._send(event(role="assistant", content=""))
        tokens = ["x"] * LONG_TOKENS if mode == "long" else TOKENS
        usage = {"prompt_tokens": 7, "completion_tokens": len(tokens), "total_tokens": 7 + len(tokens)}
        usage["completion_tokens"] = {"usage_short": 2, "usage_text": "5", "usage_over": 999}.get(
            mode, usage["completion_tokens"])
        if mode == "usage_prompt_huge":
            usage["prompt_tokens"] = 10 ** 12
        if mode in ("vllm", "empty_first"):  # one token's chunk has empty content (a special token, half a character)
            tokens = ["", *TOKENS[1:]] if mode == "empty_first" else [TOKENS[0], "", *TOKENS[2:]]
            usage["completion_tokens"] = len(tokens)
        if mode == "vllm":
            for i, token in enumerate(tokens):
                time.sleep(self.gap_s)
                self._send(event(content=token, finish="length" if i == len(tokens) - 1 else None))
            self._send(event(choices=False, usage=usage))
            self._send(b"data: [DONE]\n\n")
            self._send(b"")
            return
        if mode == "grouped":  # tokens 2-3 and 4-5 in one write each: 3 content chunks for 5 tokens
            for group in (TOKENS[:1], TOKENS[1:3], TOKENS[3:]):
                time.sleep(self.gap_s)
                self._send(event(content="".join(group)))
        else:
            for i, token in enumerate(tokens):
                time.sleep(self.gap_s)
                if mode == "slow" and i == 2:
                    time.sleep(3)
                if mode == "stall" and i == 2:
                    time.sleep(self.hang_s)
                    return
                if mode == "reset" and i == 2:
                    # linger 0, then close every handle of the socket: the kernel sends a reset (RST)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.wfile.close()
                    self.rfile.close()
                    self.connection.close()
                    return
                if mode == "error_event" and i == 2:
                    self._send(b'data: {"error": {"message": "out of blocks"}}\n\n')
                    self._send(b"")
                    return
                if mode == "cut" and i == 2:
                    self._send(b"")  # a clean end of the body, but no finish reason
                    return
                self._send(event(content=token))
        self._send(event(finish="length"))
        self._send(event(choices=False, usage=usage))
        self._send(b"data: [DONE]\n\n")
        self._send(b"")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up (the tests' timeouts, resets): nothing to report


def serve_in_thread():
    """Start the fake server on a free loopback port in a daemon thread; return (base_url, server)."""
    httpd = _Server(("127.0.0.1", 0), FakeServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--worker-pid-file", help="first start a worker process (as an engine does) and write "
                                                  "its pid here")
    parser.add_argument("--chat", help="the behaviour of every chat request, whatever model it names (silent, ...)")
    parser.add_argument("--hang-s", type=float, default=FakeServer.hang_s)
    args = parser.parse_args()
    FakeServer.forced_mode, FakeServer.hang_s = args.chat, args.hang_s
    if args.worker_pid_file:  # a worker in the engine's process group, as vLLM's engine core is
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(args.worker_pid_file, "w") as f:
            f.write(str(worker.pid))
    _Server(("127.0.0.1", args.port), FakeServer).serve_forever()


if __name__ == "__main__":
    main()
