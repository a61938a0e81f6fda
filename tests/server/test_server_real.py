"""test_server_real.py - `muse serve --model` on a synthetic GGUF (muse synth --preset tiny: 4 layers,
sliding window 8): the real tokenizer, chat template, forward and sampler behind the server.
Prompt-cache reuse must not change greedy output: a warm slot (prefix kept, rewound through the
sliding-window checkpoint, or restarted) gives the same tokens as a cold one. With --batch-size 32
the rings hold 8 + 32 rows, so a rewind of more than ~33 positions needs the checkpoint. The
embeddings endpoints (OpenAI, llama.cpp, Ollama) against `muse embed`."""
import base64
import json
import math
import os
import pathlib
import struct
import subprocess
import tempfile
import time

from srvtest import MUSE, check, ensure_venv, report
import srvtest

ensure_venv(["openai", "ollama"])
import ollama  # noqa: E402
import openai  # noqa: E402


class RealServer(srvtest.Server):
    def __init__(self, model, *args, launcher=(), env=None):  # noqa: D107 - as Server, with --model instead of a script
        # launcher: a command the server runs under (mpirun ... for --tp), env: its environment
        self.dir = tempfile.TemporaryDirectory(prefix="muse-srv-real-")
        self.port_file = pathlib.Path(self.dir.name) / "port"
        self.log = open(pathlib.Path(self.dir.name) / "log", "w+")
        self.proc = subprocess.Popen([*launcher, MUSE, "serve", "--model", model, "--port", "0", "--port-file",
                                      str(self.port_file), *args], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        deadline = time.time() + 60
        while not self.port_file.exists() or not self.port_file.read_text().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: " + self.logtext())
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())
        self.base = f"http://127.0.0.1:{self.port}"
        while self.request("GET", "/health")[0] != 200:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server never became ready: " + self.logtext())
            time.sleep(0.05)


def main():
    tmp = tempfile.TemporaryDirectory(prefix="muse-real-model-")
    model = os.path.join(tmp.name, "tiny.gguf")
    subprocess.run([MUSE, "synth", "--preset", "tiny", "-q", "-o", model], check=True)
    with RealServer(model, "--parallel", "1", "--ctx-size", "2048", "--batch-size", "32") as srv:
        def completion(prompt, n=6):
            st, _, js = srv.request("POST", "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0,
                                                             "return_tokens": True}, timeout=120)
            assert st == 200, js
            return js

        def cold(prompt, n=6):
            completion([5], 1)  # an unrelated prompt: the slot keeps nothing of what follows
            js = completion(prompt, n)
            check(js["tokens_cached"] == 0, f"cold run cached {js['tokens_cached']}")
            return js

        st, _, tk = srv.request("POST", "/tokenize", {"content": "The quick brown fox jumps over the lazy dog. " * 3,
                                                       "add_special": True})
        base = tk["tokens"]
        check(len(base) > 30, f"tokenized prompt ({len(base)} tokens)")
        a = cold(base)
        again = completion(base)
        check(again["tokens_cached"] == len(base) - 1, f"identical prompt: {again['tokens_cached']} cached")
        check(again["tokens"] == a["tokens"], "identical prompt, warm: same greedy tokens")
        # live continuation: the prompt extends what the slot holds
        ext = base + a["tokens"] + base[1:6]
        warm = completion(ext)
        check(warm["tokens_cached"] >= len(base), f"extension reuses the cache ({warm['tokens_cached']})")
        check(warm["tokens"] == cold(ext)["tokens"], "extension, warm == cold")
        # a client that drops the generated turn: the prompt diverges where generation began, 60
        # positions back (more than the rings hold): the checkpoint at the prompt's end serves it
        long_gen = completion(base, 60)
        dropped = base + [300, 301]
        warm = completion(dropped)
        check(warm["tokens_cached"] == len(base), f"rewind through the checkpoint keeps {warm['tokens_cached']} "
              f"of {len(base)} (0 = restarted)")
        check(warm["tokens"] == cold(dropped)["tokens"], "checkpoint rewind, warm == cold")
        check(srv.metrics()["muse_swa_checkpoint_restores_total"] >= 1, "the checkpoint restore is counted in /metrics")
        check(len(long_gen["tokens"]) == 60, "60 tokens generated")
        # a rewind deep into the prompt: kept where the rings allow, else restarted; output unchanged
        completion(dropped, 60)
        short = base[:5] + [7, 8]
        rew = completion(short)
        check(rew["tokens_cached"] in (0, 5), f"deep rewind keeps 0 or the common prefix ({rew['tokens_cached']})")
        check(rew["tokens"] == cold(short)["tokens"], "deep rewind, warm == cold")
        # n_probs on the real logits: greedy picks the most likely token; probabilities are sorted
        st, _, pr = srv.request("POST", "/completion", {"prompt": base, "n_predict": 3, "temperature": 0,
                                                         "n_probs": 3}, timeout=120)
        cp = pr.get("completion_probabilities", [])
        check(len(cp) == 3 and all(e["id"] == e["top_probs"][0]["id"] for e in cp), f"greedy == top-1: {cp}")
        check(all(1 >= e["top_probs"][0]["prob"] >= e["top_probs"][1]["prob"] >= e["top_probs"][2]["prob"] > 0
                  for e in cp), "top probabilities sorted and in (0, 1]")
        # OpenAI chat through the real template: two turns, the second reuses the first
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "Hello there, tiny model."}]
        r1 = cl.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0)
        check(isinstance(r1.choices[0].message.content, str) and r1.usage.completion_tokens == 8,
              f"real chat answer {r1.choices[0]}")
        msgs += [{"role": "assistant", "content": r1.choices[0].message.content or ""},
                 {"role": "user", "content": "And again?"}]
        r2 = cl.chat.completions.create(model="m", messages=msgs, max_tokens=4, temperature=0.8, seed=3)
        check(r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens - 1,
              f"turn 2 reuses turn 1's prompt: {r2.usage.prompt_tokens_details.cached_tokens} of {r1.usage.prompt_tokens}")
        s = cl.chat.completions.create(model="m", messages=msgs, max_tokens=4, temperature=0.8, seed=3, stream=True)
        text = "".join((c.choices[0].delta.content or "") for c in s if c.choices)
        check(text == (r2.choices[0].message.content or ""), f"same seed, same sample: {text!r} vs {r2.choices[0].message.content!r}")
        # the server renders and tokenizes a chat exactly as `muse chat` does: same template options
        # (reasoning_effort / chat_template_kwargs -> reasoning strength), special tokens parsed,
        # the template's BOS only (no second one added)
        _, _, with_bos = srv.request("POST", "/tokenize", {"content": "x", "add_special": True})
        _, _, without = srv.request("POST", "/tokenize", {"content": "x", "add_special": False})
        bos = with_bos["tokens"][0] if len(with_bos["tokens"]) == len(without["tokens"]) + 1 else None
        check(bos is not None, f"the tiny vocab adds a BOS: {with_bos} {without}")
        for extra, cli in (({}, []), ({"reasoning_effort": "low"}, ["--reasoning", "low"]),
                           ({"chat_template_kwargs": {"reasoning_strength": "xhigh"}}, ["--reasoning", "xhigh"]),
                           ({"chat_template_kwargs": {"reasoning_effort": "medium"}}, ["--reasoning", "medium"])):
            dump = subprocess.run([MUSE, "chat", "-m", model, "-p", "Hello there, tiny model.", "--dump-prompt", *cli],
                                  check=True, capture_output=True, text=True).stdout
            ids = [int(t) for t in dump.rsplit("tokens (", 1)[1].split(":", 1)[1].split(",")]
            text = dump.rsplit("\n\ntokens (", 1)[0]
            _, _, tk = srv.request("POST", "/tokenize", {"content": text, "add_special": False, "parse_special": True})
            check(tk["tokens"] == ids, f"{cli}: /tokenize of muse chat's prompt gives its ids")
            check(ids[0] == bos and bos not in ids[1:], f"{cli}: exactly one BOS, first ({ids[:3]})")
            st, _, js = srv.request("POST", "/v1/chat/completions",
                                    dict({"messages": [{"role": "user", "content": "Hello there, tiny model."}],
                                          "max_tokens": 1}, **extra), timeout=120)
            check(st == 200 and js["usage"]["prompt_tokens"] == len(ids),
                  f"{extra}: the server's prompt is muse chat's ({js.get('usage')} vs {len(ids)} tokens)")
            # token for token: the one slot holds the chat prompt, so muse chat's ids are all cached
            again = completion(ids, 1)
            check(again["tokens_cached"] == len(ids) - 1,
                  f"{extra}: muse chat's ids match the server's prompt ({again['tokens_cached']} of {len(ids) - 1})")
        low = subprocess.run([MUSE, "chat", "-m", model, "-p", "Hi", "--dump-prompt", "--reasoning", "low"],
                             check=True, capture_output=True, text=True).stdout
        check("Reasoning strength: low." in low, "the built-in template writes the reasoning strength")
        # tools and a tool-call history through the real template (arguments arrive as JSON strings)
        from srvtest import TOOLS
        hist = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "reasoning_content": "Need the tool.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 28C"}]
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": hist, "tools": TOOLS, "max_tokens": 1},
                                timeout=120)
        check(st == 200 and js["usage"]["prompt_tokens"] > 300, f"tool history renders: {st} {str(js)[:200]}")
        bad = [dict(hist[0]), dict(hist[1], tool_calls=[{"id": "c", "type": "function",
                                                          "function": {"name": "get_weather", "arguments": "{not json"}}])]
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": bad, "tools": TOOLS}, timeout=120)
        check(st == 400 and "error" in js, f"unparsable tool-call arguments: 400 ({st})")
        # embeddings (pooling last, the default for a file without pooling_type): the openai client,
        # base64, token-id input, Ollama's two endpoints, the CLI's vectors, the refusals
        def f32(v):  # JSON numbers read back as the float32 the server wrote
            return [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]

        e = cl.embeddings.create(model="m", input=["hello world", "the cat sat"])
        vecs = [d.embedding for d in e.data]
        check(len(vecs) == 2 and len(vecs[0]) == 256 and vecs[0] != vecs[1], f"two vectors of n_embd: {len(vecs)}")
        check(all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vecs), "unit length")
        check(e.usage.prompt_tokens == e.usage.total_tokens > 4, f"usage {e.usage}")
        cli = json.loads(subprocess.run([MUSE, "embed", "-m", model, "-p", "hello world", "--pooling", "last"],
                                        check=True, capture_output=True, text=True).stdout)["data"][0]["embedding"]
        check(max(abs(a - b) for a, b in zip(cli, vecs[0])) < 1e-6, "the server's vector is muse embed's")
        st, _, js = srv.request("POST", "/v1/embeddings", {"input": "hello world", "encoding_format": "base64"})
        raw = struct.unpack("<256f", base64.b64decode(js["data"][0]["embedding"]))
        check(st == 200 and max(abs(a - b) for a, b in zip(raw, vecs[0])) == 0, "base64: the same little-endian floats")
        _, _, tk = srv.request("POST", "/tokenize", {"content": "hello world", "add_special": True})
        st, _, js = srv.request("POST", "/v1/embeddings", {"input": [tk["tokens"]]})
        check(st == 200 and f32(js["data"][0]["embedding"]) == vecs[0], "token ids in, the same vector")
        st, _, js = srv.request("POST", "/api/embed", {"model": "m", "input": ["hello world"]})
        check(st == 200 and f32(js["embeddings"][0]) == vecs[0] and js["prompt_eval_count"] == len(tk["tokens"]),
              f"/api/embed: {st} {str(js)[:120]}")
        oe = ollama.Client(host=srv.base).embed(model="m", input="hello world")
        check(f32(oe.embeddings[0]) == vecs[0], "the ollama client's embed: the same vector")
        st, _, js = srv.request("POST", "/api/embeddings", {"model": "m", "prompt": "hello world"})
        n = math.sqrt(sum(x * x for x in js["embedding"]))
        check(st == 200 and abs(n - 1) > 1e-3 and all(abs(a / n - b) < 1e-6 for a, b in zip(js["embedding"], vecs[0])),
              "/api/embeddings: the same direction, not normalized (as Ollama)")
        for body, what in (({"input": "x", "dimensions": 8}, "dimensions"), ({"input": ""}, "input"),
                           ({"input": [[1, 10 ** 9]]}, "input"), ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                           ({"input": "x " * 3000}, "context")):
            st, _, js = srv.request("POST", "/v1/embeddings", body, timeout=120)
            check(st == 400 and "error" in js, f"refused ({what}): {st} {str(js)[:160]}")
        # response_format json_schema on a random-weight model at temperature 1: valid JSON every time
        # (the whole answer is constrained, not only what follows a header the model may never write)
        schema = {"type": "object", "properties": {"n": {"type": "integer"}, "mood": {"enum": ["happy", "sad"]}},
                  "required": ["n", "mood"]}
        rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        valid = 0
        for k in range(12):
            r = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Say something {k}."}],
                                           response_format=rf, temperature=1.0, seed=100 + k, max_tokens=1600)
            try:
                js = json.loads(r.choices[0].message.content or "")
                valid += isinstance(js, dict) and set(js) == {"n", "mood"} and isinstance(js["n"], int) and \
                    js["mood"] in ("happy", "sad")
            except ValueError:
                pass
        check(valid == 12, f"json_schema at temperature 1 on a random model: {valid} of 12 valid")
        st, _, js = srv.request("POST", "/api/chat", {"model": "m", "stream": False, "format": schema,
                                                      "messages": [{"role": "user", "content": "Hi"}],
                                                      "options": {"temperature": 1.0, "seed": 7, "num_predict": 1600}},
                                timeout=300)
        check(st == 200 and set(json.loads(js["message"]["content"])) == {"n", "mood"}, f"ollama format: {st} {str(js)[:200]}")
        # a chat longer than the slot (2048): the oldest turns go, the system message and the last user
        # message stay (issue 32 item 2); a system message alone too long is still a 400
        long_turns = [{"role": "system", "content": "You are terse."}]
        for k in range(40):
            long_turns += [{"role": "user", "content": f"Question {k}: " + "words and more words " * 12},
                           {"role": "assistant", "content": f"Answer {k}: " + "fine and more fine " * 12}]
        long_turns.append({"role": "user", "content": "The last question?"})
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": long_turns, "max_tokens": 4}, timeout=120)
        check(st == 200 and js["usage"]["prompt_tokens"] + 4 <= 2048, f"a long chat shifts: {st} {str(js)[:200]}")
        log = srv.wait_log("context shift:", "oldest messages dropped")
        check("context shift:" in log and "oldest messages dropped" in log, "the log line says so")
        big_system = [{"role": "system", "content": "rules " * 3000}, {"role": "user", "content": "hi"}]
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": big_system, "max_tokens": 4}, timeout=120)
        check(st == 400 and "context-shift" in js["error"]["message"], f"an oversized system message: {st} {str(js)[:200]}")
        m = srv.metrics()
        check(m["muse_prompt_tokens_cached_total"] > 0 and m["muse_decode_tokens_per_second"] > 0, "real metrics")
    with RealServer(model, "--parallel", "1", "--ctx-size", "2048", "--no-context-shift") as srv:
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": long_turns, "max_tokens": 4}, timeout=120)
        check(st == 400, f"--no-context-shift: a long chat is a 400 ({st})")
    tmp.cleanup()
    report("test_server_real.py")


if __name__ == "__main__":
    main()
