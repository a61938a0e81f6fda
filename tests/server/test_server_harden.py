"""test_server_harden.py - `muse serve` against hostile and careless clients (issue 18), on loopback
with the TEST-ONLY scripted engine, bounded in time (~20 s) and in descriptors (~400):
  1. stalled connections: 300 sockets that never finish their head do not lock out /health or a
     chat request; the server keeps a few threads whatever is held; one address holds at most its
     cap; the head deadline is not restarted by trickling bytes (408); a body that never comes is
     cut at the request deadline; evictions and timeouts are counted;
  2. response amplification: /tokenize with_pieces of 1 MB streams its reply (peak RSS stays far
     below what a tree of the reply costs) and is correct; n_probs is capped per response;
  3. abandoned queue places: clients that give up while queued free their places at once
     (counted as cancelled), so the next client queues instead of getting 503;
  4. safe defaults: no CORS header unless --cors allows the origin; Host must be a loopback name
     with the port (else 403) unless --allow-host names it; 405 replies carry Allow;
  5. protocol: a stream cut by shutdown ends with a finish_reason chunk the openai client accepts;
     a lone surrogate escape is U+FFFD; absurd Content-Length / Transfer-Encoding get one clean
     error reply.
"""
import http.client
import json
import os
import resource
import signal
import socket
import threading
import time

from srvtest import SCRIPT, Server, check, ensure_venv, report, sse_events

ensure_venv(["openai"])
from openai import OpenAI  # noqa: E402

CHAT = "/v1/chat/completions"
HARDEN_SCRIPT = dict(SCRIPT, n_ctx=100000,
                     rules=SCRIPT["rules"] + [{"match": "forever", "output": "tick ", "repeat": True}])


def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect(port, src="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, timeout=5):
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def raw(port, data, timeout=5):
    s = connect(port)
    s.sendall(data)
    out = read_all(s, timeout)
    s.close()
    return out


def is_open(s):
    """True while the server has neither closed nor reset s (nothing to read, no EOF)."""
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)  # data (an error reply) or EOF: the server is done with it
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def stalled():
    n_stalled = min(300, raise_fd_limit(1024) - 100)
    with Server(HARDEN_SCRIPT, "--max-connections", "64", "--max-connections-per-ip", "32",
                "--read-timeout", "2") as srv:
        host = {"Host": f"127.0.0.1:{srv.port}"}
        t0 = time.time()
        socks = []
        for _ in range(n_stalled):  # the stalled client of the issue: a head without its empty line
            s = connect(srv.port)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(0.2)
        ok = sum(srv.request("GET", "/health", headers=host, timeout=3)[0] == 200 for _ in range(5))
        check(ok == 5, f"/health answered with {n_stalled} stalled connections held: {ok}/5")
        st, _, js = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "hi"}]}, timeout=5)
        check(st == 200 and js["choices"][0]["message"]["content"] == "You said: hi", f"chat answered under stall: {st}")
        threads = len(os.listdir(f"/proc/{srv.proc.pid}/task"))
        check(threads <= 16, f"held connections cost no thread each: {threads} threads")
        held = sum(is_open(s) for s in socks)
        print(f"stalled: {n_stalled} sockets, {held} held by the server, {threads} server threads", flush=True)
        check(16 <= held <= 32, f"one address holds at most its cap (32) of stalled connections: {held}")
        # another address has its own allowance (and evicts nothing of the first one's)
        other = [connect(srv.port, "127.0.0.2") for _ in range(10)]
        for s in other:
            s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.2)
        check(sum(is_open(s) for s in other) == 10, "a second address gets its own connections")
        m = srv.metrics(headers=host)
        check(m["muse_connections_evicted_total"] >= n_stalled - 32,
              f"evictions counted: {m['muse_connections_evicted_total']}")
        # the head deadline (2 s from accept) closes what is left, with a 408
        time.sleep(max(0.0, t0 + 2.8 - time.time()))
        left = [s for s in socks + other if is_open(s)]
        time.sleep(0.5)
        left = [s for s in left if is_open(s)]
        check(not left, f"stalled connections closed at the head deadline: {len(left)} still open")
        reply = read_all(other[0], 1)
        check(reply.startswith(b"HTTP/1.1 408"), f"a timed-out head gets 408: {reply[:40]!r}")
        for s in socks + other:
            s.close()

        # slow loris: a header line every 0.25 s does not restart the deadline
        s = connect(srv.port)
        t0 = time.time()
        s.sendall(b"GET /health HTTP/1.1\r\n")
        reply = b""
        s.settimeout(0.25)
        while time.time() - t0 < 6:
            try:
                s.sendall(b"X-Drip: 1\r\n")
                d = s.recv(4096)
                if not d:
                    break
                reply += d
            except socket.timeout:
                continue
            except OSError:
                break
        took = time.time() - t0
        s.close()
        print(f"slow loris cut after {took:.2f} s", flush=True)
        check(1.8 <= took <= 3.5 and reply.startswith(b"HTTP/1.1 408"),
              f"trickled head cut at the deadline, not restarted: {took:.2f}s {reply[:30]!r}")

        # a body that never comes is cut at the request deadline
        s = connect(srv.port)
        t0 = time.time()
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"content\":" % srv.port)
        read_all(s, 6)
        took = time.time() - t0
        s.close()
        check(1.8 <= took <= 3.5, f"stalled body cut at the request deadline: {took:.2f}s")
        m = srv.metrics(headers=host)
        check(m["muse_connections_timed_out_total"] >= 3, f"timeouts counted: {m['muse_connections_timed_out_total']}")
        check(srv.request("GET", "/health", headers=host)[0] == 200, "healthy afterwards")


def rss_peak_mib(pid, fn):
    """Peak RSS growth (MiB) of pid while fn() runs (VmHWM reset through clear_refs)."""
    def kib(key):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key):
                return int(line.split()[1])
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    base = kib("VmRSS:")
    fn()
    return (kib("VmHWM:") - base) / 1024


def amplification():
    with Server(HARDEN_SCRIPT, "--max-body", str(8 << 20)) as srv:
        content = "a b " * 250000  # 1 MB: 1M tokens with the scripted byte tokenizer
        out = {}

        def tokenize():
            out["r"] = srv.request("POST", "/tokenize", {"content": content, "with_pieces": True}, timeout=60)
        peak = rss_peak_mib(srv.proc.pid, tokenize)
        print(f"amplification: /tokenize with_pieces of 1 MB: peak RSS growth {peak:.1f} MiB", flush=True)
        st, _, js = out["r"]
        toks = js["tokens"] if st == 200 else []
        check(st == 200 and len(toks) == len(content) and "".join(t["piece"] for t in toks) == content and
              all(t["id"] == ord(t["piece"]) for t in toks[:100]), f"/tokenize with_pieces of 1 MB is right: {st}")
        # a cJSON tree of this reply costs ~240 MB; streamed it is the tokens and a chunk
        check(peak < 100, f"/tokenize with_pieces peak RSS growth {peak:.0f} MiB (< 100)")
        st, _, js = srv.request("POST", "/tokenize", {"content": "ab\u00e9"})
        check(st == 200 and js == {"tokens": [97, 98, 195, 169]}, f"/tokenize without pieces: {js}")
        st, _, js = srv.request("POST", "/tokenize", {"content": "\u00e9", "with_pieces": True})
        check(st == 200 and [t["piece"] for t in js["tokens"]] == ["\ufffd", "\ufffd"], f"partial UTF-8 pieces: {js}")
        st, _, js = srv.request("POST", "/tokenize", {"content": ""})
        check(st == 200 and js == {"tokens": []}, f"/tokenize of nothing: {js}")
        # n_probs: at most 2^17 probability entries per response (n_predict clamped)
        st, _, js = srv.request("POST", "/completion", {"prompt": "forever", "n_probs": 100}, timeout=60)
        check(st == 200 and js["tokens_predicted"] == (1 << 17) // 100 and js["stop_type"] == "limit" and
              len(js["completion_probabilities"]) == (1 << 17) // 100,
              f"n_probs 100 caps the reply at 1310 tokens: {st} {js.get('tokens_predicted')} {js.get('stop_type')}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "forever", "n_probs": 2, "n_predict": 3})
        check(st == 200 and len(js["completion_probabilities"]) == 3 and
              len(js["completion_probabilities"][0]["top_probs"]) == 2, "small n_probs requests unchanged")
        st, _, js = srv.request("POST", "/detokenize", {"tokens": [104, 105, 256]})
        check(st == 200 and js["content"] == "hi<|begin_of_text|>", f"/detokenize: {js}")


def stream_request(srv, content):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("POST", CHAT, json.dumps({"messages": [{"role": "user", "content": content}], "stream": True}),
              headers={"Content-Type": "application/json"})
    sock = c.sock
    return sock, c.getresponse()


def abandoned_queue():
    with Server(HARDEN_SCRIPT, "--parallel", "1", "--queue", "4") as srv:
        s1, r1 = stream_request(srv, "slow one")  # holds the only slot
        ev = sse_events(r1)
        next(ev), next(ev)
        waiters = []
        for i in range(4):  # two streaming, two plain: all wait in the queue, then give up
            body = json.dumps({"messages": [{"role": "user", "content": f"slow {i}"}], "stream": i < 2}).encode()
            s = connect(srv.port)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (srv.port, len(body), body))
            waiters.append(s)
        time.sleep(0.5)
        m = srv.metrics()
        check(m["muse_queue_depth"] == 4, f"four clients queued: {m['muse_queue_depth']}")
        st, h, _ = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "fifth"}]})
        check(st == 503 and "retry-after" in h, f"queue full while they wait: {st}")
        cancelled0 = m["muse_requests_cancelled_total"]
        for s in waiters:
            s.close()
        time.sleep(0.3)
        m = srv.metrics()
        check(m["muse_queue_depth"] == 0, f"abandoned places freed at once: depth {m['muse_queue_depth']}")
        check(m["muse_requests_cancelled_total"] == cancelled0 + 4,
              f"abandoned places counted as cancelled: {m['muse_requests_cancelled_total'] - cancelled0}")
        # the next client queues (no 503) and is served once the slot frees
        result = {}

        def late():
            result["r"] = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "late"}]}, timeout=20)
        t = threading.Thread(target=late)
        t.start()
        time.sleep(0.3)
        check(srv.metrics()["muse_queue_depth"] == 1, "a new client queues instead of 503")
        s1.shutdown(socket.SHUT_RDWR)
        s1.close()
        t.join(20)
        st, _, js = result.get("r", (None, None, None))
        check(st == 200 and js["choices"][0]["message"]["content"] == "You said: late", f"queued client served: {st}")


def safe_defaults():
    with Server(SCRIPT) as srv:
        port = srv.port
        st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://evil.example"})
        check(st == 200 and "access-control-allow-origin" not in h, f"no CORS header by default: {h}")
        st, h, _ = srv.request("OPTIONS", CHAT, headers={"Origin": "http://evil.example",
                                                          "Access-Control-Request-Method": "POST"})
        check(st == 204 and "access-control-allow-origin" not in h, f"preflight refused by default: {st} {h}")
        c, r = stream_request(srv, "hi")
        check("access-control-allow-origin" not in {k.lower() for k, _ in r.getheaders()}, "no CORS on streams")
        r.read()
        for value, want in [("evil.example:%d" % port, 403), ("evil.example", 403), ("127.0.0.1:%d" % (port + 1), 403),
                            ("127.0.0.1", 403), ("localhost:%d" % port, 200), ("LOCALHOST:%d" % port, 200),
                            ("[::1]:%d" % port, 200), ("127.0.0.1:%d" % port, 200)]:
            st, _, js = srv.request("GET", "/v1/models", headers={"Host": value})
            check(st == want, f"Host {value}: {st}, want {want}")
            if want == 403:
                check(js["error"]["type"] == "permission_error" and "--allow-host" in js["error"]["message"],
                      f"Host refusal explains itself: {js}")
        st, _, _ = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "hi"}]},
                               headers={"Host": "rebind.example:%d" % port})
        check(st == 403, f"a rebound name cannot reach the API: {st}")
        for method, path, allow in [("GET", CHAT, "POST, OPTIONS"), ("POST", "/health", "GET, HEAD, OPTIONS"),
                                    ("POST", "/v1/models", "GET, HEAD, OPTIONS"), ("DELETE", "/", "GET, HEAD, OPTIONS")]:
            st, h, _ = srv.request(method, path, body="{}" if method == "POST" else None)
            check(st == 405 and h.get("allow") == allow, f"{method} {path}: 405 with Allow {h.get('allow')!r}")
    with Server(SCRIPT, "--cors", "http://app.example,http://b.example", "--allow-host", "muse.internal") as srv:
        st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://app.example"})
        check(h.get("access-control-allow-origin") == "http://app.example" and h.get("vary") == "Origin",
              f"--cors allows its origin: {h}")
        st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://b.example"})
        check(h.get("access-control-allow-origin") == "http://b.example", "second --cors origin")
        st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://evil.example"})
        check("access-control-allow-origin" not in h, "other origins still refused")
        st, h, _ = srv.request("OPTIONS", CHAT, headers={"Origin": "http://app.example",
                                                          "Access-Control-Request-Method": "POST"})
        check(st == 204 and h.get("access-control-allow-origin") == "http://app.example" and
              "POST" in h.get("access-control-allow-methods", ""), f"preflight of an allowed origin: {h}")
        st, _, _ = srv.request("GET", "/health", headers={"Host": "muse.internal:%d" % srv.port})
        check(st == 200, f"--allow-host name accepted: {st}")
    with Server(SCRIPT, "--cors", "*") as srv:
        st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://any.example"})
        check(h.get("access-control-allow-origin") == "*", f"--cors '*': {h}")


def protocol():
    with Server(SCRIPT) as srv:
        body = b'{"messages": [{"role": "user", "content": "a\\ud800b\\udc00"}]}'
        st, _, js = srv.request("POST", CHAT, body, headers={"Content-Type": "application/json"})
        check(st == 200 and js["choices"][0]["message"]["content"] == "You said: a\ufffdb\ufffd",
              f"lone surrogates become U+FFFD: {st} {js}")
        st, _, js = srv.request("POST", CHAT, b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}',
                                headers={"Content-Type": "application/json"})
        check(st == 200 and js["choices"][0]["message"]["content"] == "You said: \U0001F600", "pairs untouched")
        for cl, status in [(b"1e20", 400), (b"-1", 400), (b"99999999999999999999999", 413), (b"5, 6", 400),
                           (b"9999999999", 413)]:
            out = raw(srv.port, b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %s\r\n\r\n" % (srv.port, cl))
            head, _, rest = out.partition(b"\r\n\r\n")
            ok = out.count(b"HTTP/1.1 ") == 1 and head.startswith(b"HTTP/1.1 %d" % status)
            try:
                ok = ok and "error" in json.loads(rest)
            except ValueError:
                ok = False
            check(ok, f"Content-Length {cl.decode()}: one clean {status} reply, got {out[:160]!r}")
        out = raw(srv.port, b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nTransfer-Encoding: gzip\r\n\r\n" % srv.port)
        check(out.count(b"HTTP/1.1 ") == 1 and out.startswith(b"HTTP/1.1 501"), f"unknown transfer coding: {out[:60]!r}")
        out = raw(srv.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX: %s\r\n\r\n" % (srv.port, b"y" * 20000))
        check(out.startswith(b"HTTP/1.1 431"), f"oversized head: {out[:60]!r}")
        m = srv.metrics()
        check(m["muse_requests_malformed_total"] >= 7, f"malformed heads counted: {m['muse_requests_malformed_total']}")
        st, _, _ = srv.request("GET", "/health")
        check(st == 200, "healthy afterwards")

    # a stream cut by shutdown: the openai client reads it to the end without an exception
    srv = Server(HARDEN_SCRIPT, "--parallel", "2")
    client = OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0)
    chunks, error = [], None
    try:
        stream = client.chat.completions.create(model="muse-test", stream=True,
                                                messages=[{"role": "user", "content": "slow forever"}])
        for ch in stream:
            chunks.append(ch)
            if len(chunks) == 3:
                threading.Thread(target=srv.stop, args=(signal.SIGTERM,)).start()
    except Exception as e:  # noqa: BLE001 - any exception is the failure being checked
        error = e
    rc = srv.proc.wait(timeout=10)
    check(error is None, f"openai client reads a stream cut by shutdown without an error: {error!r}")
    last = chunks[-1] if chunks else None
    check(last is not None and last.choices and last.choices[0].finish_reason == "error",
          f"the cut stream ends with finish_reason 'error': {last}")
    check(rc == 0, f"server exits 0: {rc}")
    srv.log.close()
    srv.dir.cleanup()


def main():
    stalled()
    amplification()
    abandoned_queue()
    safe_defaults()
    protocol()
    report("test_server_harden.py")


if __name__ == "__main__":
    main()
