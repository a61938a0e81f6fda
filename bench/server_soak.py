#!/usr/bin/env python3
"""server_soak.py - the load and fault soak of `muse serve` from issue 18 (not part of CI).

Reproduces the issue's figures, on loopback only, against a server this script starts:
  stalls      N sockets that send `GET /health HTTP/1.1\\r\\nHost: x\\r\\n` and nothing more (N from
              --stalls), held while /health and chat requests must still be answered; prints how
              many the server still holds and how many answers came back: "survived" = all answered
  load        64 concurrent streams x 4 bursts (each stream must carry only its own text: the
              scripted engine echoes the prompt), 400 requests from 16 clients, 1,000 mixed
              requests (chat, streams, completions, /completion with n_probs, tokenize, detokenize,
              models, health, metrics) with the server's RSS before and after
  amplify     the issue's POST /tokenize {"content": "a b " x 1,000,000, "with_pieces": true}: reply
              size, time and the server's peak RSS (VmHWM reset through /proc/PID/clear_refs), then
              four at once
  queue       --parallel 1 --queue 4, one long stream, four clients that give up after 0.5 s: is the
              next client queued (not 503) and are the four counted as cancelled?

    python3 bench/server_soak.py                         # scripted engine (TEST-ONLY), every phase
    python3 bench/server_soak.py --model demo.gguf       # `muse synth --preset demo` as in the issue
    python3 bench/server_soak.py --phases stalls --stalls 300,1000,3000,10000
    MUSE=/path/to/old/muse python3 bench/server_soak.py  # the same figures for another binary

Standard library only. The stall phase raises this process's descriptor limit as far as allowed.
"""
import argparse
import http.client
import json
import os
import pathlib
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
MODEL = None  # set from --model
SCRIPT = {"model": "muse-test", "n_ctx": 100000,
          "rules": [{"match": "slow", "output": "tick ", "repeat": True, "token_delay_ms": 15}]}


class Server:
    def __init__(self, args, *extra):
        self.tmp = tempfile.TemporaryDirectory(prefix="muse-soak-")
        d = pathlib.Path(self.tmp.name)
        port_file = d / "port"
        cmd = [os.environ.get("MUSE", str(REPO / "build" / "muse")), "serve", "--port", "0",
               "--port-file", str(port_file), *extra]
        if args.model:
            cmd += ["--model", args.model]
        else:
            (d / "script.json").write_text(json.dumps(SCRIPT))
            cmd += ["--test-script", str(d / "script.json")]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        while status(self.port, "GET", "/health") != 200:
            if time.time() > deadline:
                raise RuntimeError("server not ready")
            time.sleep(0.1)

    def kib(self, key):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith(key):
                return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.tmp.cleanup()


def request(port, method, path, body=None, timeout=60, stream=False):
    """(status, parsed body or SSE events or None); raises on connection errors."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body) if body is not None else None
    c.request(method, path, data, {"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    if stream:
        return r.status, [e[6:].decode() for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, raw


def status(port, method, path, timeout=5):
    try:
        return request(port, method, path, timeout=timeout)[0]
    except OSError:
        return None


def chat(port, text, stream=False, max_tokens=16, timeout=120):
    """A chat request; max_tokens applies to a real model only (the scripted engine's reply, which
    echoes the text, must not be cut)."""
    body = {"messages": [{"role": "user", "content": text}], "temperature": 0}
    if MODEL:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
    return request(port, "POST", "/v1/chat/completions", body, timeout=timeout, stream=stream)


def parallel(n, fn):
    out, threads = [None] * n, []

    def run(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported
            out[i] = e
    for i in range(n):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
    for t in threads:
        t.join()
    return out


# ---- phases ----

def phase_stalls(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("\n## stalled connections (`GET /health HTTP/1.1\\r\\nHost: x\\r\\n` and nothing more)")
    print("| stalled | opened | held by the server | /health ok | chat ok | server threads | verdict |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    survived = 0
    for n in [int(x) for x in args.stalls.split(",")]:
        srv = Server(args)
        socks = []
        for _ in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=2)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                break
        time.sleep(0.5)
        health = sum(status(srv.port, "GET", "/health", timeout=5) == 200 for _ in range(20))
        chats = 0
        for i in range(5):
            try:
                chats += chat(srv.port, f"hello {i}", timeout=30)[0] == 200
            except OSError:
                pass
        threads = len(os.listdir(f"/proc/{srv.proc.pid}/task"))
        held = 0
        for s in socks:
            s.setblocking(False)
            try:
                s.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                held += 1
            except OSError:
                pass
            s.close()
        ok = health == 20 and chats == 5
        survived = max(survived, n) if ok else survived
        print(f"| {n} | {len(socks)} | {held} | {health}/20 | {chats}/5 | {threads} | {'survived' if ok else 'FAILED'} |",
              flush=True)
        srv.stop()
    print(f"\nstalled connections survived (largest level with every answer): {survived}")


def phase_load(args):
    srv = Server(args, "--parallel", str(args.parallel), "--queue", "256")
    print(f"\n## load ({args.parallel} slots)")
    # 64 concurrent streams x 4 bursts: nothing lost, no stream mixed with another
    lost = mixed = 0
    t0 = time.time()
    for burst in range(4):
        def one(i, burst=burst):
            text = f"stream {burst}-{i} " + "x" * (i % 7)
            st, events = chat(srv.port, text, stream=True, max_tokens=64)
            if st != 200 or not events or events[-1] != "[DONE]":
                return "lost"
            content = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                              for e in events[:-1] if json.loads(e).get("choices"))
            return "ok" if args.model or content.endswith(text) else "mixed"
        res = parallel(64, one)
        lost += sum(r == "lost" or isinstance(r, Exception) for r in res)
        mixed += sum(r == "mixed" for r in res)
    print(f"64 concurrent streams x 4 bursts: {256 - lost - mixed}/256 complete, {lost} lost, {mixed} mixed "
          f"({time.time() - t0:.1f} s)")
    # 400 requests from 16 clients
    counter, lock, res = iter(range(400)), threading.Lock(), []

    def client(_):
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                st, js = chat(srv.port, f"question {i}")
                ok = st == 200 and (bool(args.model) or js["choices"][0]["message"]["content"] == f"You said: question {i}")
            except OSError:
                ok = False
            with lock:
                res.append(ok)
    t0 = time.time()
    parallel(16, client)
    print(f"400 requests from 16 clients: {sum(res)}/400 ok in {time.time() - t0:.1f} s")
    # 1,000 mixed requests, RSS before and after
    rss0 = srv.kib("VmRSS:")
    kinds = [
        lambda i: chat(srv.port, f"mixed {i}")[0] == 200,
        lambda i: chat(srv.port, f"mixed stream {i}", stream=True)[1][-1] == "[DONE]",
        lambda i: request(srv.port, "POST", "/v1/completions", {"prompt": f"p {i}", "max_tokens": 8})[0] == 200,
        lambda i: request(srv.port, "POST", "/completion", {"prompt": f"n {i}", "n_predict": 4, "n_probs": 3})[0] == 200,
        lambda i: request(srv.port, "POST", "/tokenize", {"content": f"tok {i}", "with_pieces": True})[0] == 200,
        lambda i: request(srv.port, "POST", "/detokenize", {"tokens": [65, 66, 67]})[0] == 200,
        lambda i: request(srv.port, "GET", "/v1/models")[0] == 200,
        lambda i: request(srv.port, "GET", "/health")[0] == 200,
        lambda i: request(srv.port, "GET", "/metrics")[0] == 200,
    ]
    counter, res = iter(range(1000)), []

    def mixed_client(_):
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                ok = kinds[i % len(kinds)](i)
            except (OSError, ValueError, KeyError, IndexError):
                ok = False
            with lock:
                res.append(ok)
    t0 = time.time()
    parallel(16, mixed_client)
    rss1 = srv.kib("VmRSS:")
    print(f"1,000 mixed requests (16 clients): {sum(res)}/1000 ok in {time.time() - t0:.1f} s; "
          f"RSS {rss0} -> {rss1} KiB ({(rss1 - rss0) / rss0 * 100:+.2f}%)")
    srv.stop()


def phase_amplify(args):
    srv = Server(args)
    print("\n## response amplification: POST /tokenize {\"content\": \"a b \" x 1,000,000, \"with_pieces\": true}")
    data = json.dumps({"content": "a b " * 1000000, "with_pieces": True})

    def raw_post(port, path, data):
        """(status, reply bytes) without keeping or parsing the reply."""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", path, data, {"Content-Type": "application/json"})
        r = c.getresponse()
        n = 0
        while True:
            b = r.read(1 << 20)
            if not b:
                break
            n += len(b)
        c.close()
        return r.status, n

    def run(k):
        with open(f"/proc/{srv.proc.pid}/clear_refs", "w") as f:
            f.write("5")
        before = srv.kib("VmRSS:")
        t0 = time.time()
        res = parallel(k, lambda i: raw_post(srv.port, "/tokenize", data))
        took = time.time() - t0
        ok = [r for r in res if not isinstance(r, Exception) and r[0] == 200]
        size = ok[0][1] if ok else 0
        print(f"{k} at once: {len(ok)}/{k} ok, reply {size / 1e6:.1f} MB, {took:.1f} s; RSS {before / 1024:.0f} MB "
              f"before, peak {srv.kib('VmHWM:') / 1024:.0f} MB", flush=True)
    run(1)
    run(4)
    srv.stop()


def phase_queue(args):
    srv = Server(args, "--parallel", "1", "--queue", "4")
    print("\n## abandoned queue places (--parallel 1 --queue 4)")
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "slow"}],
                                                           "stream": True, "max_tokens": 100000}),
              {"Content-Type": "application/json"})
    long_sock = c.sock
    r = c.getresponse()
    r.read1(100)
    quitters = []
    for i in range(4):
        body = json.dumps({"messages": [{"role": "user", "content": f"quitter {i}"}]}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (srv.port, len(body), body))
        quitters.append(s)
    time.sleep(0.5)
    for s in quitters:
        s.close()
    time.sleep(0.2)
    metrics = request(srv.port, "GET", "/metrics")[1]
    text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
    val = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")}
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", chat(srv.port, "next client", timeout=60)))
    t.start()
    time.sleep(0.5)
    depth = request(srv.port, "GET", "/metrics")[1]
    depth = [ln for ln in (depth.decode() if isinstance(depth, bytes) else str(depth)).splitlines()
             if ln.startswith("muse_queue_depth")]
    long_sock.shutdown(socket.SHUT_RDWR)
    long_sock.close()
    t.join(60)
    st = res.get("r", (None,))[0]
    print(f"after four clients gave up: queue depth {val.get('muse_queue_depth')}, cancelled "
          f"{val.get('muse_requests_cancelled_total')}; the next client: {depth[0] if depth else '?'} while waiting, "
          f"then HTTP {st}")
    srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="serve this GGUF instead of the TEST-ONLY scripted engine")
    ap.add_argument("--phases", default="stalls,load,amplify,queue")
    ap.add_argument("--stalls", default="300,1000,3000", help="stalled-connection levels")
    ap.add_argument("--parallel", type=int, default=4, help="slots for the load phase")
    args = ap.parse_args()
    global MODEL
    MODEL = args.model
    print(f"# muse serve soak: {os.environ.get('MUSE', 'build/muse')}, "
          f"{'model ' + args.model if args.model else 'scripted test engine'}")
    for p in args.phases.split(","):
        {"stalls": phase_stalls, "load": phase_load, "amplify": phase_amplify, "queue": phase_queue}[p](args)


if __name__ == "__main__":
    sys.exit(main())
