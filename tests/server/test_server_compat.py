"""test_server_compat.py - what llama.cpp, OpenAI and Ollama clients expect beyond the basics, on the
TEST-ONLY scripted engine: OpenAI logprobs/top_logprobs (chat) and logprobs/echo (completions),
streamed and not, through the official `openai` client; a 400 naming each field muse does not
honour; llama-server's /props, /slots, /apply-template and /v1/embeddings (501: the scripted
engine computes none); the Ollama API through the official `ollama` client (chat, generate, NDJSON streaming, tags, show, ps, version,
errors); the request log line of each request."""
import json
import math
import time

from srvtest import SCRIPT, TOOLS, Server, check, ensure_venv, report

ensure_venv(["openai", "ollama"])
import ollama  # noqa: E402
import openai  # noqa: E402

USER = [{"role": "user", "content": "hello there"}]


def openai_logprobs(cl):
    r = cl.chat.completions.create(model="muse-test", messages=USER, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    check(lp is not None and lp.content, f"chat logprobs present: {lp}")
    # the scripted engine: one token per byte plus channel specials; its distribution puts the
    # sampled token first with p = 0.5, then neighbours at 0.25, 0.125
    ok = all(abs(e.logprob - math.log(0.5)) < 1e-6 and len(e.top_logprobs) == 3 and
             abs(e.top_logprobs[1].logprob - math.log(0.25)) < 1e-6 and e.top_logprobs[0].token == e.token and
             bytes(e.bytes).decode("utf-8", "replace") == e.token for e in lp.content)
    check(ok, f"chat logprob entries: {lp.content[:2]}")
    text = "".join(e.token for e in lp.content)
    check(c.message.content in text, f"the entries spell the answer: {text!r}")
    r = cl.chat.completions.create(model="muse-test", messages=USER, logprobs=True)
    check(r.choices[0].logprobs.content and all(e.top_logprobs == [] for e in r.choices[0].logprobs.content),
          "logprobs without top_logprobs: empty alternatives")
    r = cl.chat.completions.create(model="muse-test", messages=USER)
    check(r.choices[0].logprobs is None, "no logprobs unless asked")
    # streamed: the chunks' entries add up to the same list
    entries = []
    for ch in cl.chat.completions.create(model="muse-test", messages=USER, logprobs=True, top_logprobs=2, stream=True):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            entries += ch.choices[0].logprobs.content
    check([e.token for e in entries] == [e.token for e in lp.content], f"streamed chat logprobs: {len(entries)} entries")
    # the answer's tokens only: not the reasoning, not the channel markup and header (issue 32 item 3)
    think = [{"role": "user", "content": "think first"}]
    r = cl.chat.completions.create(model="muse-test", messages=think, logprobs=True, top_logprobs=1)
    c = r.choices[0]
    text = "".join(e.token for e in c.logprobs.content)
    check(c.message.content == "The answer is 42." and text == c.message.content,
          f"logprobs after reasoning spell the answer only: {text!r} ({c.message.content!r})")
    entries = []
    for ch in cl.chat.completions.create(model="muse-test", messages=think, logprobs=True, stream=True):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            entries += ch.choices[0].logprobs.content
    check("".join(e.token for e in entries) == "The answer is 42.", f"streamed: {[e.token for e in entries]}")
    r = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS,
                                   logprobs=True)
    check(r.choices[0].message.tool_calls and not r.choices[0].logprobs.content,
          f"a tool call has no answer tokens: {len(r.choices[0].logprobs.content or [])} entries")
    # a tool call cut off by max_tokens: no markup in the content, finish_reason "length" (issue 32 item 5);
    # WEATHER_CALL's ATEM block starts after ~60 tokens of reasoning and header
    weather = [{"role": "user", "content": "weather?"}]
    for n in (70, 110):
        r = cl.chat.completions.create(model="muse-test", messages=weather, tools=TOOLS, max_tokens=n,
                                       tool_choice="required")
        m = r.choices[0].message
        check(r.choices[0].finish_reason == "length" and "atem" not in (m.content or "") and not m.tool_calls,
              f"cut tool call at {n} tokens: {r.choices[0].finish_reason} {m.content!r} {m.tool_calls}")
        text = "".join((ch.choices[0].delta.content or "") for ch in
                       cl.chat.completions.create(model="muse-test", messages=weather, tools=TOOLS, max_tokens=n,
                                                  stream=True) if ch.choices)
        check("atem" not in text, f"streamed cut tool call at {n} tokens: {text!r}")
    # completions: parallel arrays, text offsets, echo
    r = cl.completions.create(model="muse-test", prompt="hello", max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    check(lp is not None and len(lp.tokens) == 6 and len(lp.token_logprobs) == 6 and len(lp.top_logprobs) == 6,
          f"completions logprobs arrays: {lp}")
    check("".join(lp.tokens) == r.choices[0].text, f"tokens spell the text: {lp.tokens} vs {r.choices[0].text!r}")
    offs = [sum(len(t.encode()) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    check(lp.text_offset == offs, f"text_offset {lp.text_offset} vs {offs}")
    check(all(len(t) <= 2 for t in lp.top_logprobs), f"top_logprobs dicts {lp.top_logprobs}")
    r = cl.completions.create(model="muse-test", prompt="hello", max_tokens=6, echo=True)
    check(r.choices[0].text.startswith("hello") and len(r.choices[0].text) > 5, f"echo: {r.choices[0].text!r}")
    text = "".join(ch.choices[0].text for ch in cl.completions.create(model="muse-test", prompt="hello", max_tokens=6,
                                                                     echo=True, stream=True) if ch.choices)
    check(text == r.choices[0].text, f"streamed echo {text!r}")
    toks = []
    for ch in cl.completions.create(model="muse-test", prompt="hello", max_tokens=6, logprobs=1, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            toks += ch.choices[0].logprobs.tokens
    check(len(toks) == 6, f"streamed completions logprobs: {toks}")


def refused_fields(srv):
    cases = [("/v1/chat/completions", {"n": 2}, "n"), ("/v1/chat/completions", {"logit_bias": {"5": 10}}, "logit_bias"),
             ("/v1/chat/completions", {"response_format": {"type": "xml"}}, "response_format"),
             ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
             ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
             ("/v1/chat/completions", {"functions": [{"name": "f"}]}, "functions"),
             ("/v1/chat/completions", {"audio": {"voice": "x"}}, "audio"),
             ("/v1/completions", {"best_of": 3}, "best_of"), ("/v1/completions", {"suffix": "end"}, "suffix"),
             ("/v1/completions", {"echo": True, "logprobs": 1}, "echo"), ("/v1/completions", {"n": 3}, "n")]
    for path, extra, field in cases:
        body = {"model": "m", **extra}
        body.update({"messages": USER} if "chat" in path else {"prompt": "hi"})
        st, _, js = srv.request("POST", path, body)
        err = js.get("error", {}) if isinstance(js, dict) else {}
        check(st == 400 and err.get("param") == field and field in err.get("message", ""),
              f"{path} {extra}: 400 naming {field} (got {st} {js})")
    st, _, js = srv.request("POST", "/completion", {"prompt": "hi", "n_probs": 2, "post_sampling_probs": True})
    check(st == 400 and js["error"]["param"] == "post_sampling_probs", f"post_sampling_probs refused ({st} {js})")
    # what is accepted as a no-op is really one: n 1, empty logit_bias, response_format text
    st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": USER, "n": 1, "logit_bias": {},
                                                             "response_format": {"type": "text"}})
    check(st == 200, f"n 1, empty logit_bias, text format accepted ({st} {js})")


def llama_endpoints(srv):
    st, _, p = srv.request("GET", "/props")
    check(st == 200 and p["total_slots"] == 2 and p["default_generation_settings"]["n_ctx"] == 2048 and
          "build_info" in p and p["model_alias"] == "muse-test", f"/props {p}")
    srv.request("POST", "/completion", {"prompt": "abc", "n_predict": 2})
    st, _, s = srv.request("GET", "/slots")
    check(st == 200 and isinstance(s, list) and [x["id"] for x in s] == [0, 1] and
          all(x["is_processing"] is False and x["n_ctx"] == 2048 for x in s), f"/slots {s}")
    check(max(x["n_cached_tokens"] for x in s) > 0, f"/slots shows a warm cache: {s}")
    st, _, t = srv.request("POST", "/apply-template", {"messages": USER})
    check(st == 200 and "hello there" in t.get("prompt", ""), f"/apply-template {t}")
    st, _, t = srv.request("POST", "/apply-template", {"messages": []})
    check(st == 400, f"/apply-template without messages: {st}")
    for path in ("/v1/embeddings", "/embeddings"):
        st, _, e = srv.request("POST", path, {"input": "hi", "model": "m"})
        check(st == 501 and "embedding" in e["error"]["message"], f"{path}: 501 with the reason ({st} {e})")
    for path in ("/api/embed", "/api/embeddings"):
        st, _, e = srv.request("POST", path, {"input": "hi", "model": "m"})
        check(st == 501 and "embedding" in e["error"], f"{path}: 501 in Ollama's error shape ({st} {e})")


def ollama_api(srv):
    cl = ollama.Client(host=srv.base, timeout=30)
    check(cl.list().models[0].model == "muse-test", f"ollama list: {cl.list()}")
    ps = cl.ps()
    check(ps.models and ps.models[0].model == "muse-test", f"ollama ps {ps}")
    sh = cl.show("muse-test")
    check(sh.details.format == "gguf" and "completion" in (sh.capabilities or []), f"ollama show {sh}")
    st, _, v = srv.request("GET", "/api/version")
    check(st == 200 and v.get("version"), f"/api/version {v}")
    r = cl.chat(model="muse-test", messages=USER, stream=False)
    check(r.message.content == "You said: hello there" and r.message.thinking == "The user said something." and r.done
          and r.done_reason == "stop" and r.eval_count > 0 and r.prompt_eval_count > 0, f"ollama chat {r}")
    r = cl.chat(model="muse-test", messages=USER, stream=False, think=False)
    check(r.message.content == "You said: hello there" and not r.message.thinking, f"think false: no thinking {r.message}")
    thinking = "".join(ch.message.thinking or "" for ch in cl.chat(model="muse-test", messages=USER, think=False, stream=True))
    check(thinking == "", f"think false, streamed: no thinking ({thinking!r})")
    parts, thinking, last = [], "", None
    for ch in cl.chat(model="muse-test", messages=[{"role": "user", "content": "stream me"}], stream=True):
        parts.append(ch.message.content)
        thinking += ch.message.thinking or ""
        last = ch
    check("".join(parts) == "You said: stream me" and thinking == "The user said something." and last.done and
          len(parts) >= 2, f"ollama chat stream {parts}")
    r = cl.chat(model="muse-test", messages=[{"role": "user", "content": "weather in Paris?"}], tools=TOOLS, stream=False)
    calls = r.message.tool_calls or []
    check(len(calls) == 1 and calls[0].function.name == "get_weather" and
          calls[0].function.arguments == {"city": "Paris", "days": 3}, f"ollama tool call {r.message}")
    streamed = [c for ch in cl.chat(model="muse-test", messages=[{"role": "user", "content": "weather in Paris?"}],
                                     tools=TOOLS, stream=True) for c in (ch.message.tool_calls or [])]
    check(len(streamed) == 1 and streamed[0].function.arguments == {"city": "Paris", "days": 3},
          f"ollama streamed tool call {streamed}")
    # the conversation goes on with the call and its result (arguments as an object, tool_name)
    r = cl.chat(model="muse-test", stream=False, tools=TOOLS, messages=[
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"}])
    check(r.done, f"ollama chat after a tool result {r}")
    r = cl.generate(model="muse-test", prompt="hello there", stream=False)
    check(r.response == "You said: hello there" and r.done, f"ollama generate {r}")
    r = cl.generate(model="muse-test", prompt="raw text", raw=True, stream=False, options={"num_predict": 5})
    check(len(r.response.encode()) == 5 and r.done_reason == "length", f"ollama generate raw, num_predict {r}")
    text = "".join(ch.response for ch in cl.generate(model="muse-test", prompt="hello there", stream=True))
    check(text == "You said: hello there", f"ollama generate stream {text!r}")
    r = cl.generate(model="muse-test", prompt="")
    check(r.done and r.done_reason == "load", f"ollama empty generate loads: {r}")
    # raw NDJSON on the wire
    st, h, body = srv.request("POST", "/api/chat", {"model": "x", "messages": USER})
    lines = [json.loads(x) for x in body.strip().split("\n")] if isinstance(body, str) else []
    check(st == 200 and h.get("content-type", "").startswith("application/x-ndjson") and len(lines) >= 2 and
          lines[-1]["done"] is True and all(not x["done"] for x in lines[:-1]), f"NDJSON stream: {h} {body!r:.300}")
    st, _, js = srv.request("POST", "/api/chat", {"model": "x", "messages": USER, "format": "yaml", "stream": False})
    check(st == 400 and "format" in js.get("error", ""), f"ollama format 'yaml': 400 naming format ({st} {js})")
    for kw, what in (({"options": {"mirostat": 2}}, "mirostat"),
                     ({"options": {"temperature": -1}}, "temperature")):
        try:
            cl.chat(model="muse-test", messages=USER, stream=False, **kw)
            check(False, f"ollama {kw} refused")
        except ollama.ResponseError as e:
            check(e.status_code == 400 and what in e.error, f"ollama {kw}: 400 naming {what} ({e.status_code} {e.error})")
    try:
        cl.chat(model="muse-test", messages=[{"role": "user", "content": "look", "images": ["aGk="]}], stream=False)
        check(False, "ollama images refused")
    except ollama.ResponseError as e:
        check(e.status_code == 400 and "images" in e.error, f"ollama images: {e.error}")


def request_log(srv):
    srv.request("POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 3})
    srv.request("GET", "/nope")
    log = srv.wait_log("POST /v1/chat/completions 200 ", "GET /nope 404")
    check(any(line.startswith("POST /v1/chat/completions 200 ") and "/3 tokens" in line and line.endswith(" ms")
              for line in log.splitlines()), f"request log line for a chat: {log[-600:]}")
    check(any(line.startswith("GET /nope 404 0/0 tokens") for line in log.splitlines()), "request log line for a 404")


def main():
    with Server(SCRIPT, "--parallel", "2") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=30)
        check(cl.models.retrieve("muse-test").id == "muse-test", "GET /v1/models/{id}")
        try:
            cl.models.retrieve("other")
            check(False, "an unknown model id is 404")
        except openai.NotFoundError:
            check(True, "an unknown model id is 404")
        openai_logprobs(cl)
        refused_fields(srv)
        llama_endpoints(srv)
        ollama_api(srv)
        request_log(srv)
    with Server(SCRIPT, "--log-disable") as srv:
        srv.request("GET", "/health")
        srv.request("GET", "/v1/models")
        time.sleep(0.1)
        check("GET /v1/models" not in srv.logtext(), "--log-disable: no request lines")
    report("test_server_compat.py")


if __name__ == "__main__":
    main()
