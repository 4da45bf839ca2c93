"""Honest clients under a hostile one: `dossier serve` keeps answering while another client attacks it.

Issue 45's acceptance check for findings 3-5. The server runs in this process (the real app and
uvicorn on 127.0.0.1). First, `--honest` streaming chat requests run one after another, alone:
their tokens and times are the reference. Then a hostile client sends, at once, one request with
a `--enum`-value enum schema and `--schemas` requests with distinct JSON schemas, and keeps
`--half-open` connections that send half a request head (re-opened as the server closes them) for
the rest of the run, from a process of its own (as a real attacker is: in this process its 40
client threads would take the server's interpreter lock, which no server setting can prevent;
`--attacker-in-process` measures that too). The same honest requests run again, one after another. Reported per request: tokens equal to the solo run, and time over solo time; the
check passes when every request streams its solo tokens within `--max-slowdown` x its solo time.

    python -m benchmarks.hostile_serve --model default
    python -m benchmarks.hostile_serve --model default --format json

Greedy decoding, so a request's tokens do not depend on timing. Times are wall clock on a shared
machine: run it alone, and read them as ratios.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time

QUESTIONS = ["What is the capital of France?", "Name three prime numbers.", "What colour is the sky on a clear day?",
             "How many days are in a leap year?", "What is 12 times 12?", "Who wrote Hamlet?",
             "What is the boiling point of water in Celsius?", "Name the largest ocean."]


def _stream(url: str, question: str, max_tokens: int) -> tuple[list[str], float]:
    """One streaming chat request: its text pieces and its wall time."""
    import httpx2

    body = {"model": "default", "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    started, pieces = time.perf_counter(), []
    with httpx2.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    pieces.append(delta["content"])
    return pieces, time.perf_counter() - started


class Hostile:
    """The attacker: half-open connections, a huge enum and many distinct schemas, until stopped."""

    def __init__(self, url: str, half_open: int, enum_values: int, schemas: int) -> None:
        self.url, self.half_open, self.enum_values, self.schemas = url, half_open, enum_values, schemas
        self.stop = threading.Event()
        self.statuses: dict[str, dict[int, int]] = {"enum": {}, "schemas": {}}
        self.reopened = 0
        self.threads: list[threading.Thread] = []
        self.ready = threading.Event()  # every request thread has built its bytes: send together
        self.lock = threading.Lock()
        self.spans: list[tuple[float, float]] = []  # (sent, answered) of each attack request, time.monotonic()

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._connections, daemon=True),
                        threading.Thread(target=self._requests, args=("enum", 1), daemon=True)]
        self.threads += [threading.Thread(target=self._requests, args=("schemas", i), daemon=True)
                         for i in range(self.schemas)]
        for thread in self.threads:
            thread.start()
        self.ready.set()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _connections(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        open_: list[socket.socket] = []
        while not self.stop.is_set():
            alive = []
            for sock in open_:
                try:
                    sock.settimeout(0.0)
                    if sock.recv(1) == b"":
                        sock.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    sock.close()
                    continue
                alive.append(sock)
            open_ = alive
            while len(open_) < self.half_open and not self.stop.is_set():
                try:
                    sock = socket.create_connection((host, int(port)), timeout=5)
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                except OSError:
                    break
                open_.append(sock)
                self.reopened += 1
            time.sleep(0.2)
        for sock in open_:
            sock.close()

    def _requests(self, kind: str, worker: int) -> None:
        """One request (the attack is the schema, not the load); its status is recorded.

        Sent on a raw socket with the bytes built beforehand: an HTTP client library costs the attacker's machine
        more CPU than the server spends refusing it, and here the attacker shares the server's cores.
        """
        if kind == "enum":
            schema = {"type": "object", "properties": {"pick": {"enum": [f"v{i}" for i in range(self.enum_values)]}}}
        else:
            schema = {"type": "object", "properties": {f"f{worker}": {"type": "string", "enum": ["a", "b", str(worker)]}}}
        body = json.dumps({"model": "default", "messages": [{"role": "user", "content": "pick one"}], "max_tokens": 4,
                           "temperature": 0, "response_format": {"type": "json_schema",
                                                                 "json_schema": {"name": "s", "schema": schema}}}).encode()
        host, port = self.url.removeprefix("http://").split(":")
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        self.ready.wait()
        status, sent = 0, time.monotonic()
        try:
            with socket.create_connection((host, int(port)), timeout=120) as sock:
                sock.sendall(head + body)
                reply = sock.makefile("rb")
                line = reply.readline()  # b"HTTP/1.1 200 OK\r\n"
                status = int(line.split()[1]) if line.startswith(b"HTTP/") else 0
                reply.read()  # the whole answer: the request is over when the server closes
        except OSError:  # a refused or dropped request is what the attacker expects
            pass
        with self.lock:
            self.statuses[kind][status] = self.statuses[kind].get(status, 0) + 1
            self.spans.append((sent, time.monotonic()))  # CLOCK_MONOTONIC: comparable with the server's process


class _AttackerProcess:
    """`Hostile` in a child process (`--attack URL`): started, then told to stop by closing its stdin."""

    def __init__(self, url: str, half_open: int, enum_values: int, schemas: int) -> None:
        self.command = [sys.executable, "-m", "benchmarks.hostile_serve", "--attack", url, "--half-open",
                        str(half_open), "--enum", str(enum_values), "--schemas", str(schemas)]
        self.reopened, self.statuses, self.process, self.cpu_s, self.spans = 0, {}, None, None, []

    def start(self) -> None:
        import subprocess

        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "started", "the attacker process did not start"

    def finish(self) -> None:
        self.process.stdin.close()
        report = json.loads(self.process.stdout.read())
        self.process.wait(timeout=120)
        self.cpu_s = report.get("cpu_s")
        self.spans = report["spans"]
        self.reopened = report["reopened"]
        self.statuses = {kind: {int(k): v for k, v in counts.items()} for kind, counts in report["statuses"].items()}


def _attack(url: str, half_open: int, enum_values: int, schemas: int) -> None:
    """The child's side: attack until stdin closes, then print what the server answered.

    Its own CPU time is reported: on one machine the attacker's work competes with the server's for the cores.
    """
    attacker = Hostile(url, half_open, enum_values, schemas)
    cpu_before = time.process_time()
    attacker.start()
    print("started", flush=True)
    sys.stdin.read()
    attacker.finish()
    print(json.dumps({"reopened": attacker.reopened, "statuses": attacker.statuses, "spans": attacker.spans,
                      "cpu_s": round(time.process_time() - cpu_before, 2)}), flush=True)


def run(model: str, honest: int, max_tokens: int, half_open: int, enum_values: int, schemas: int,
        max_slowdown: float, dtype: str = "float32", attacker_in_process: bool = False) -> dict:
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine
    from engine.serve.app import build_app
    from engine.serve.backend import LocalBackend
    from engine.serve.config import GRAMMAR_NEW_BURST, GRAMMAR_NEW_PER_S, ServeConfig
    from engine.serve.server import ServerThread

    # float32: on a CPU with native bf16, "auto" would let the batch's composition change the tokens (issue 48)
    engine = Engine.from_pretrained(model, EngineConfig(kv_cache_gib=1.0, dtype=dtype, grammar_new_per_s=GRAMMAR_NEW_PER_S,
                                                        grammar_new_burst=GRAMMAR_NEW_BURST))  # as `dossier serve`
    backend = LocalBackend(engine)
    backend.start()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(honest)]
    try:
        with ServerThread(build_app(backend, ServeConfig(served_model_names=("default",)))) as url:
            _stream(url, "warm up", max_tokens)
            solo = [_stream(url, q, max_tokens) for q in questions]
            attacker = (Hostile(url, half_open, enum_values, schemas) if attacker_in_process
                        else _AttackerProcess(url, half_open, enum_values, schemas))
            attacker.start()
            time.sleep(0.1)  # the attack's requests are in: their schemas compile while the honest requests run
            honest_started = time.monotonic()
            attacked = [_stream(url, q, max_tokens) for q in questions]
            attacker.finish()
    finally:
        backend.stop()
    rows = []
    for question, (solo_text, solo_s), (text, seconds) in zip(questions, solo, attacked):
        rows.append({"question": question, "solo_s": round(solo_s, 3), "attacked_s": round(seconds, 3),
                     "slowdown": round(seconds / solo_s, 2), "same_tokens": text == solo_text,
                     "tokens": len(text)})
    passed = all(r["same_tokens"] and r["slowdown"] <= max_slowdown for r in rows)
    first_ends = honest_started + attacked[0][1]
    overlapping = sum(1 for sent, answered in attacker.spans if sent < first_ends and answered > honest_started)
    return {"model": model, "dtype": dtype, "honest_requests": rows, "max_slowdown_seen": max(r["slowdown"] for r in rows),
            "median_slowdown": statistics.median(r["slowdown"] for r in rows), "allowed_slowdown": max_slowdown,
            "passed": passed, "attacker": "this process" if attacker_in_process else "its own process",
            "hostile": {"half_open_connections": half_open, "connections_opened": attacker.reopened,
                                          "enum_values": enum_values, "schema_clients": schemas,
                                          "responses": attacker.statuses,
                                          "attacker_cpu_s": getattr(attacker, "cpu_s", None),
                                          "in_flight_during_first_honest": overlapping}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model to serve (default: the embedded SmolLM2-135M)")
    parser.add_argument("--honest", type=int, default=8, help="honest streaming requests, run one after another")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens each honest request generates")
    parser.add_argument("--half-open", type=int, default=200, help="connections the attacker keeps half-sent")
    parser.add_argument("--enum", type=int, default=15_000, help="values of the attacker's enum schema")
    parser.add_argument("--schemas", type=int, default=40, help="attacker clients sending distinct schemas")
    parser.add_argument("--max-slowdown", type=float, default=2.0, help="allowed attacked / solo time per request")
    parser.add_argument("--dtype", default="float32", help="the engine's dtype (float32: batch-invariant enough "
                                                           "here that tokens can be compared)")
    parser.add_argument("--attacker-in-process", action="store_true",
                        help="ablation: the attacker's threads in the server's process (sharing its interpreter lock)")
    parser.add_argument("--attack", metavar="URL", help=argparse.SUPPRESS)  # the child process's side
    parser.add_argument("--format", choices=("human", "json"), default="human")
    args = parser.parse_args(argv)
    if args.attack:
        _attack(args.attack, args.half_open, args.enum, args.schemas)
        return 0
    result = run(args.model, args.honest, args.max_tokens, args.half_open, args.enum, args.schemas,
                 args.max_slowdown, args.dtype, args.attacker_in_process)
    if args.format == "json":
        print(json.dumps(result, indent=1))
    else:
        for row in result["honest_requests"]:
            print(f"{row['question'][:40]:40s} solo {row['solo_s']:6.2f} s  attacked {row['attacked_s']:6.2f} s  "
                  f"x{row['slowdown']:.2f}  same tokens: {'yes' if row['same_tokens'] else 'NO'}")
        hostile = result["hostile"]
        print(f"hostile ({result['attacker']}): {hostile['half_open_connections']} half-open connections ({hostile['connections_opened']} "
              f"opened in all), a {hostile['enum_values']:,}-value enum, {hostile['schema_clients']} schema clients; "
              f"responses {hostile['responses']}; the attacker's own CPU time {hostile['attacker_cpu_s']} s; "
              f"{hostile['in_flight_during_first_honest']} attack requests in flight during the first honest one")
        print(f"{'PASS' if result['passed'] else 'FAIL'}: slowest x{result['max_slowdown_seen']:.2f} (median "
              f"x{result['median_slowdown']:.2f}, allowed x{result['allowed_slowdown']:g})")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
