"""srvtest.py - helpers for the `muse serve` end-to-end tests: start a server on loopback with the
TEST-ONLY scripted engine (--test-script), raw HTTP on 127.0.0.1, metrics parsing, checks."""
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
MUSE = os.environ.get("MUSE", str(REPO / "build" / "muse"))
VENV_PY = REPO / "build" / "venv" / "bin" / "python"


def ensure_venv(modules):
    """Re-run this script under build/venv (scripts/install-deps.sh --test) when a module is missing."""
    try:
        for m in modules:
            __import__(m)
    except ImportError:
        if VENV_PY.exists() and os.path.realpath(sys.prefix) != os.path.realpath(VENV_PY.parents[1]):
            os.execv(str(VENV_PY), [str(VENV_PY)] + sys.argv)
        sys.exit(f"FAIL: python modules {modules} missing: run `bash scripts/install-deps.sh --test`")


failures = []
passes = 0


def check(cond, what):
    global passes
    if cond:
        passes += 1
    else:
        failures.append(what)
        print("FAIL:", what, flush=True)


def report(name):
    print(f"{name}: {passes} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


class Server:
    """`muse serve --test-script` on 127.0.0.1 and a free port; stopped with SIGTERM on exit."""

    def __init__(self, script, *args, wait_ready=True):
        self.dir = tempfile.TemporaryDirectory(prefix="muse-srv-")
        sp = pathlib.Path(self.dir.name) / "script.json"
        sp.write_text(json.dumps(script))
        self.port_file = pathlib.Path(self.dir.name) / "port"
        self.log = open(pathlib.Path(self.dir.name) / "log", "w+")
        self.proc = subprocess.Popen([MUSE, "serve", "--test-script", str(sp), "--port", "0",
                                      "--port-file", str(self.port_file), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not self.port_file.exists() or not self.port_file.read_text().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: " + self.logtext())
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.base = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            while self.request("GET", "/health")[0] != 200:
                if time.time() > deadline:
                    raise RuntimeError("server never became ready: " + self.logtext())
                time.sleep(0.02)

    def logtext(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def wait_log(self, *parts, timeout=10):
        """The log once it holds every one of parts, or as it is after timeout seconds. A request's log line
        is written when its connection completes, which may be just after the client has read the answer."""
        deadline = time.time() + timeout
        log = self.logtext()
        while not all(p in log for p in parts) and time.time() < deadline:
            time.sleep(0.05)
            log = self.logtext()
        return log

    def request(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers dict, parsed JSON or text)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            return r.status, hdrs, json.loads(data)
        except ValueError:
            return r.status, hdrs, data.decode("utf-8", "replace")

    def metrics(self, headers=None):
        st, _, text = self.request("GET", "/metrics", headers=headers)
        assert st == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k] = float(v)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.stop()
        check(rc == 0, f"server exits 0 on SIGTERM (got {rc}); log:\n{self.logtext()[-2000:]}")
        self.log.close()
        self.dir.cleanup()


def sse_events(resp):
    """Yield the parsed `data:` payloads of an SSE http.client response ('[DONE]' as a string)."""
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    payload = line[6:].decode()
                    yield payload if payload == "[DONE]" else json.loads(payload)


# The scripted outputs every test server uses (TEST-ONLY engine; docs/server.md).
WEATHER_CALL = (" to=self<|message|>Need the weather tool.<|eom|><|start|>assistant to=get_weather<|message|>"
                "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n"
                "<atem:parameter name=\"city\">Paris</atem:parameter>\n"
                "<atem:parameter name=\"days\">3</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
CUT_REPLY = " to=self<|message|>thinking<|eom|><|start|>assistant to=user<|message|>partial <|eox"
SCRIPT = {
    "model": "muse-test",
    "n_ctx": 2048,
    "rules": [
        {"match": "weather", "output": WEATHER_CALL},
        {"match": "slow", "output": "tick ", "repeat": True, "token_delay_ms": 15},
        {"match": "json please", "output": "{\"answer\": 42}"},
        # 37 tokens of reasoning and headers (specials are one token each, text one per byte), then
        # "partial <|eo" (12 tokens): max_tokens 49 cuts inside what could become <|eot|>
        {"match": "cut me", "output": CUT_REPLY},
        # reasoning, then the answer's header, then the answer: chat logprobs list the answer only
        {"match": "think first", "output": " to=self<|message|>Let me think.<|eom|><|start|>assistant to=user"
                                           "<|message|>The answer is 42."},
    ],
}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
