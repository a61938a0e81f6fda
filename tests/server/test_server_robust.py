"""test_server_robust.py - `muse serve` under bad input and bad clients: malformed JSON and wrong
types (400 with an OpenAI error object), bodies over --max-body (413), prompts over the context
(400), unknown endpoints, the API key, /health while loading (503), a full queue (503 +
Retry-After), a client disconnecting mid-stream (generation cancelled, slot freed at once),
graceful shutdown on SIGTERM/SIGINT mid-stream, the default loopback bind. Standard library only."""
import http.client
import json
import signal
import socket
import time

from srvtest import SCRIPT, Server, check, report, sse_events

CHAT = "/v1/chat/completions"
OK_MSG = [{"role": "user", "content": "hi"}]


def expect_error(srv, status, path, body, what, param=None, raw=False):
    st, _, js = srv.request("POST", path, body if raw else json.dumps(body),
                            headers={"Content-Type": "application/json"})
    ok = st == status and isinstance(js, dict) and isinstance(js.get("error"), dict) and \
        isinstance(js["error"].get("message"), str) and js["error"].get("type")
    check(ok, f"{what}: want {status} + error object, got {st} {js!r:.300}")
    if ok and param:
        check(js["error"].get("param") == param, f"{what}: param {js['error'].get('param')!r}, want {param!r}")


def malformed(srv):
    for body, what in [("{", "truncated JSON"), ("not json", "garbage"), ("", "empty body"),
                       ("[1, 2]", "array instead of object"), ('{"messages": []} trailing', "trailing junk"),
                       ('{"a": "\xff"', "bad bytes")]:
        expect_error(srv, 400, CHAT, body, what, raw=True)
    bad = [({"messages": "hi"}, "messages"), ({"messages": []}, "messages"), ({}, "messages"),
           ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
           ({"messages": [{"role": "user"}]}, "messages"),
           ({"messages": [{"role": "user", "content": 5}]}, "messages"),
           ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
           ({"messages": OK_MSG, "temperature": "hot"}, "temperature"),
           ({"messages": OK_MSG, "temperature": -1}, "temperature"),
           ({"messages": OK_MSG, "top_p": 2}, "top_p"),
           ({"messages": OK_MSG, "top_k": 1.5}, "top_k"),
           ({"messages": OK_MSG, "max_tokens": -1}, "max_tokens"),
           ({"messages": OK_MSG, "max_tokens": "10"}, "max_tokens"),
           ({"messages": OK_MSG, "seed": "abc"}, "seed"),
           ({"messages": OK_MSG, "stop": 5}, "stop"),
           ({"messages": OK_MSG, "stop": [""]}, "stop"),
           ({"messages": OK_MSG, "stop": ["a"] * 17}, "stop"),
           ({"messages": OK_MSG, "n": 2}, "n"),
           ({"messages": OK_MSG, "stream": "yes"}, "stream"),
           ({"messages": OK_MSG, "presence_penalty": 3}, "presence_penalty"),
           ({"messages": OK_MSG, "tools": {"type": "function"}}, "tools"),
           ({"messages": OK_MSG, "tools": [{"type": "function", "function": {}}]}, "tools"),
           ({"messages": OK_MSG, "tool_choice": "sometimes"}, "tool_choice"),
           ({"messages": OK_MSG, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
           ({"messages": OK_MSG, "reasoning_effort": "extreme"}, "reasoning_effort"),
           ({"messages": OK_MSG, "chat_template_kwargs": {"reasoning_strength": 3}},
            "chat_template_kwargs.reasoning_strength"),
           ({"messages": OK_MSG, "chat_template_kwargs": "x"}, "chat_template_kwargs"),
           ({"messages": OK_MSG, "stream_options": 1}, "stream_options")]
    for body, param in bad:
        expect_error(srv, 400, CHAT, body, f"wrong type {json.dumps(body)[:80]}", param)
    for path, body, param in [("/v1/completions", {"prompt": 5}, "prompt"),
                              ("/v1/completions", {"prompt": [1, -2]}, "prompt"),
                              ("/completion", {"prompt": "x", "n_probs": -1}, "n_probs"),
                              ("/completion", {"prompt": "x", "n_predict": "many"}, "n_predict"),
                              ("/completion", {"prompt": [999999]}, "prompt"),
                              ("/tokenize", {"content": 5}, "content"),
                              ("/detokenize", {"tokens": "1 2"}, "tokens"),
                              ("/detokenize", {"tokens": [1, 1e9]}, "tokens")]:
        expect_error(srv, 400, path, body, f"{path} {json.dumps(body)}", param)
    st, _, js = srv.request("GET", "/nope")
    check(st == 404 and "error" in js, f"unknown endpoint 404: {st}")
    st, _, js = srv.request("GET", CHAT)
    check(st == 405 and "error" in js, f"wrong method 405: {st}")
    # the server still answers normally after all that
    st, _, js = srv.request("POST", CHAT, {"messages": OK_MSG})
    check(st == 200 and js["choices"][0]["message"]["content"] == "You said: hi", "server fine after bad input")


def limits(srv):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 70000}]})
    expect_error(srv, 413, CHAT, big, "body over --max-body (Content-Length)", raw=True)
    # chunked upload without a Content-Length
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.putrequest("POST", CHAT)
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.endheaders()
    for i in range(0, len(big), 8192):
        part = big[i:i + 8192].encode()
        try:
            c.send(b"%x\r\n%s\r\n" % (len(part), part))
        except OSError:
            break
    try:
        c.send(b"0\r\n\r\n")
        r = c.getresponse()
        check(r.status == 413 and "error" in json.loads(r.read()), f"chunked body over --max-body: {r.status}")
    except OSError as e:
        check(False, f"chunked 413: connection error {e}")
    c.close()
    # a prompt longer than the context (n_ctx 2048 in the script, one token per byte here)
    expect_error(srv, 400, CHAT, {"messages": [{"role": "user", "content": "y" * 3000}]}, "prompt over the context",
                 "messages")
    st, _, js = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "y" * 3000}]})
    check("context" in js["error"]["message"], f"clear context message: {js['error']['message']}")
    expect_error(srv, 400, "/completion", {"prompt": list(range(100)) * 25}, "token prompt over the context", "prompt")


def auth():
    with Server(SCRIPT, "--api-key", "s3cret") as srv:
        st, _, _ = srv.request("GET", "/health")
        check(st == 200, f"/health open without a key: {st}")
        st, _, _ = srv.request("GET", "/")
        check(st == 200, "chat page open without a key")
        for path in ["/v1/models", "/metrics"]:
            st, h, js = srv.request("GET", path)
            check(st == 401 and js["error"]["type"] == "authentication_error", f"{path} without key: {st}")
        st, _, _ = srv.request("POST", CHAT, {"messages": OK_MSG}, headers={"Authorization": "Bearer wrong"})
        check(st == 401, f"wrong key: {st}")
        st, _, _ = srv.request("POST", CHAT, {"messages": OK_MSG}, headers={"Authorization": "Bearer s3cret!"})
        check(st == 401, f"key with a suffix: {st}")
        st, _, js = srv.request("POST", CHAT, {"messages": OK_MSG}, headers={"Authorization": "Bearer s3cret"})
        check(st == 200 and js["choices"][0]["message"]["content"] == "You said: hi", f"right key: {st}")


def loading_and_bind():
    srv = Server(dict(SCRIPT, load_delay_ms=1500), wait_ready=False)
    with srv:
        st, h, js = srv.request("GET", "/health")
        check(st == 503 and js["error"]["message"] == "Loading model", f"/health 503 while loading: {st} {js}")
        st, _, _ = srv.request("POST", CHAT, {"messages": OK_MSG})
        check(st == 503, f"API 503 while loading: {st}")
        deadline = time.time() + 10
        while srv.request("GET", "/health")[0] != 200 and time.time() < deadline:
            time.sleep(0.05)
        check(srv.request("GET", "/health")[0] == 200, "/health 200 once loaded")
        # default bind is loopback only: the listening socket's local address is 127.0.0.1
        listening = open("/proc/net/tcp").read().splitlines()[1:]
        mine = [l.split()[1] for l in listening if l.split()[1].endswith(":%04X" % srv.port) and l.split()[3] == "0A"]
        check(mine == ["0100007F:%04X" % srv.port], f"binds 127.0.0.1 by default: {mine}")


def stream_request(srv, content, **extra):
    """(socket, response) of a streaming chat request (the server closes every connection after its
    reply, so http.client hands the socket to the response: keep it to disconnect by hand)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("POST", CHAT, json.dumps(dict({"messages": [{"role": "user", "content": content}], "stream": True},
                                            **extra)), headers={"Content-Type": "application/json"})
    sock = c.sock
    return sock, c.getresponse()


def queue_and_cancel():
    with Server(dict(SCRIPT, n_ctx=100000), "--parallel", "1", "--queue", "1") as srv:
        c1, r1 = stream_request(srv, "slow one")   # holds the only slot
        ev = sse_events(r1)
        next(ev), next(ev)                         # role chunk + first text
        c2, r2 = stream_request(srv, "slow two")   # waits in the queue
        time.sleep(0.1)
        st, h, js = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "third"}]})
        check(st == 503 and "retry-after" in h and js["error"]["type"], f"full queue: 503 + Retry-After ({st}, {h})")
        m = srv.metrics()
        check(m["muse_queue_depth"] == 1 and m["muse_slots_busy"] == 1, f"queue gauges {m['muse_queue_depth']}")
        # the first client goes away mid-stream: its generation stops and the queued one starts at once
        t0 = time.time()
        c1.shutdown(socket.SHUT_RDWR)
        c1.close()
        ev2 = sse_events(r2)
        first = next(ev2)
        took = time.time() - t0
        check(first["choices"][0]["delta"].get("role") == "assistant" and took < 1.5,
              f"queued request starts right after the disconnect ({took:.2f}s)")
        time.sleep(0.3)
        m = srv.metrics()
        check(m["muse_requests_cancelled_total"] >= 1, f"cancel counted: {m['muse_requests_cancelled_total']}")
        gen = m["muse_tokens_predicted_total"]
        # the second client disconnects too: the slot is free again within a moment
        c2.shutdown(socket.SHUT_RDWR)
        c2.close()
        time.sleep(0.5)
        m = srv.metrics()
        check(m["muse_slots_busy"] == 0 and m["muse_requests_cancelled_total"] >= 2, f"slot freed after cancel: {m}")
        gen2 = srv.metrics()["muse_tokens_predicted_total"]
        time.sleep(0.3)
        check(srv.metrics()["muse_tokens_predicted_total"] == gen2 and gen2 >= gen, "no tokens after cancellation")
        # non-streaming client that disconnects while waiting is cancelled as well
        s = socket.create_connection(("127.0.0.1", srv.port))
        body = json.dumps({"messages": [{"role": "user", "content": "slow three"}]}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (srv.port, len(body), body))
        time.sleep(0.3)
        s.close()
        time.sleep(0.5)
        m = srv.metrics()
        check(m["muse_slots_busy"] == 0 and m["muse_requests_cancelled_total"] >= 3,
              f"non-streaming disconnect cancels: {m['muse_requests_cancelled_total']}")
        st, _, js = srv.request("POST", CHAT, {"messages": OK_MSG})
        check(st == 200, "server serves after cancellations")


def shutdown(sig):
    srv = Server(dict(SCRIPT, n_ctx=100000), "--parallel", "2")
    c, r = stream_request(srv, "slow forever")
    ev = sse_events(r)
    next(ev), next(ev)
    t0 = time.time()
    rc = srv.stop(sig)
    rest = list(ev)
    check(rc == 0 and time.time() - t0 < 5, f"graceful shutdown on {sig.name}: rc {rc} in {time.time() - t0:.1f}s")
    check(rest and rest[-1] == "[DONE]", f"open stream closed cleanly on {sig.name}: {rest[-2:]}")
    srv.log.close()
    srv.dir.cleanup()


def main():
    with Server(SCRIPT, "--max-body", "65536") as srv:
        malformed(srv)
        limits(srv)
        m = srv.metrics()
        check(m["muse_requests_errors_total"] >= 40, f"errors counted: {m['muse_requests_errors_total']}")
    auth()
    loading_and_bind()
    queue_and_cancel()
    shutdown(signal.SIGTERM)
    shutdown(signal.SIGINT)
    report("test_server_robust.py")


if __name__ == "__main__":
    main()
