"""test_server_options.py - `muse serve` options a deployment needs, on the trained tiny model
(models/glimmer-tiny-f16.gguf): -t, --kv / -ctk / -ctv, the per-slot context (default: the trained
context capped by memory), --alias (default: the file's base name), --chat-template-file, --host
given as a name, -v; and the probabilities the model reports: n_probs gives the sampled token's
own probability also when it is outside the top n, OpenAI logprobs agree with greedy decoding."""
import json
import math
import os
import time
import pathlib
import subprocess
import tempfile

from srvtest import MUSE, REPO, check, ensure_venv, report
from test_server_real import RealServer

ensure_venv(["openai"])
import openai  # noqa: E402

MODEL = str(REPO / "models" / "glimmer-tiny-f16.gguf")


def refused(args, what):
    p = subprocess.run([MUSE, "serve", "-m", MODEL, "--port", "0", *args], capture_output=True, text=True, timeout=30)
    err = p.stderr.strip()
    check(p.returncode == 2 and what in err and len(err.splitlines()) <= 2, f"serve {args}: refused naming {what!r} ({p.returncode} {err!r})")


def main():
    refused(["-ctk", "f16", "-ctv", "q8_0"], "-ctk f16 and -ctv q8_0 differ")
    refused(["-t", "100000"], "-t")
    refused(["--kv", "q4"], "--kv")
    refused(["--host", "no-such-host.invalid"], "cannot resolve")
    refused(["--alias", ""], "--alias")

    # the exact kernels (MUSE_CPU=exact): the same-seed comparisons below sample at temperature 3 with
    # no top-k, where a 1e-4 logit difference flips tokens; in the fast mode a prompt evaluated whole
    # (flash attention, 4+ rows) and one served from the cache (1 row) differ by that much (docs/cpu-backend.md)
    os.environ["MUSE_CPU"] = "exact"
    try:
        srv_np2 = RealServer(MODEL, "-np", "2")
    finally:
        del os.environ["MUSE_CPU"]
    with srv_np2 as srv:
        st, _, m = srv.request("GET", "/v1/models")
        check(m["data"][0]["id"] == "glimmer-tiny-f16.gguf", f"default model id is the file's base name: {m}")
        st, _, p = srv.request("GET", "/props")
        check(p["default_generation_settings"]["n_ctx"] == 1024, f"default context: the trained 1024 ({p})")
        check(p["muse"]["kv_type"] == "f16", f"default KV f16 {p['muse']}")
        # n_probs: the sampled token's own probability, inside the top n or not (same seed: same tokens)
        body = {"prompt": "Once upon a time", "n_predict": 24, "temperature": 3, "top_k": 0, "seed": 7}
        st, _, one = srv.request("POST", "/completion", {**body, "n_probs": 1}, timeout=60)
        st, _, many = srv.request("POST", "/completion", {**body, "n_probs": 100}, timeout=60)
        outside = 0
        for a, b in zip(one["completion_probabilities"], many["completion_probabilities"]):
            top = {t["id"]: t["prob"] for t in b["top_probs"]}
            check(a["id"] == b["id"], "same seed, same tokens")
            check(0 < a["prob"] <= 1 and abs(a["prob"] - b["prob"]) < 1e-6, f"prob independent of n_probs {a} {b}")
            if a["id"] in top:
                check(abs(a["prob"] - top[a["id"]]) < 1e-6, f"prob = its top_probs entry ({a['prob']} {top[a['id']]})")
            if a["id"] != a["top_probs"][0]["id"]:
                outside += 1
                check(a["prob"] <= a["top_probs"][0]["prob"], "a sampled token outside the top 1 is not more likely")
                check(abs(a["logprob"] - math.log(a["prob"])) < 1e-6, "logprob = log(prob)")
        check(outside >= 3, f"hot sampling picked tokens outside the top 1 ({outside} of 24)")
        # OpenAI logprobs, greedy: the sampled token is the most likely one
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=60)
        r = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell me a story."}],
                                       max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        n_gen = r.usage.completion_tokens - (r.choices[0].finish_reason == "stop")  # the stop token has none
        # the entries are the answer's tokens only (not the channel header or reasoning): they spell the content
        check(len(lp) <= n_gen and "".join(e.token for e in lp) == (r.choices[0].message.content or "") and
              all(e.token == e.top_logprobs[0].token and abs(e.logprob - e.top_logprobs[0].logprob) < 1e-9
                  and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in lp),
              f"greedy chat logprobs: {lp[:2]} for {r.choices[0].message.content!r}")

    tmp = tempfile.TemporaryDirectory(prefix="muse-srv-opt-")
    tmpl = pathlib.Path(tmp.name) / "t.jinja"
    tmpl.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                    "{% if add_generation_prompt %}[assistant]{% endif %}")
    with RealServer(MODEL, "-t", "1", "--kv", "q8_0", "-c", "512", "--alias", "tiny", "--host", "localhost",
                    "--chat-template-file", str(tmpl), "-v") as srv:
        st, _, m = srv.request("GET", "/v1/models")
        check(m["data"][0]["id"] == "tiny" and m["data"][0]["meta"]["n_ctx"] == 512, f"--alias, -c: {m}")
        st, _, p = srv.request("GET", "/props")
        check(p["muse"]["kv_type"] == "q8_0" and p["muse"]["n_threads"] == 1, f"--kv q8_0, -t 1: {p['muse']}")
        check(p["chat_template"] == tmpl.read_text(), "/props shows the --chat-template-file template")
        st, _, t = srv.request("POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
        check(t.get("prompt") == "[user] hi\n[assistant]", f"--chat-template-file renders: {t}")
        st, _, c = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                                 "max_tokens": 4}, headers={"Host": f"localhost:{srv.port}"})
        check(st == 200, f"chat with the q8_0 cache and Host localhost ({st} {c})")
        log = srv.wait_log("POST /v1/chat/completions 200")
        check("listening on http://127.0.0.1:" in log, f"--host localhost binds 127.0.0.1: {log[:300]}")
        check("muse-glimmer" in log and "n_embd" in log, "-v prints the model")
        check("POST /v1/chat/completions 200" in log and "cached" in log and "tok/s" in log, "-v request details")
    report("test_server_options.py")


if __name__ == "__main__":
    main()
