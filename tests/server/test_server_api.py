"""test_server_api.py - `muse serve` through the official openai client (unmodified, base URL only)
and curl: chat (plain, streaming, reasoning, tools), completions, native /completion with n_probs,
/tokenize, /detokenize, /v1/models, stop strings, max_tokens, reasoning strength mapping, 16
concurrent streams. Runs on the TEST-ONLY scripted engine (a synthetic model speaks gibberish)."""
import json
import subprocess
import threading

from srvtest import SCRIPT, TOOLS, Server, check, ensure_venv, report, sse_events

ensure_venv(["openai"])
import openai  # noqa: E402

USER = [{"role": "user", "content": "hello there"}]


def chat_plain(cl):
    r = cl.chat.completions.create(model="muse-test", messages=USER)
    m = r.choices[0].message
    check(m.content == "You said: hello there", f"chat content: {m.content!r}")
    check(getattr(m, "reasoning_content", None) == "The user said something.",
          f"reasoning_content: {m.model_extra!r}")
    check(r.choices[0].finish_reason == "stop", f"finish_reason {r.choices[0].finish_reason}")
    check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, f"usage {r.usage}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")
    check(r.usage.prompt_tokens_details is not None and r.usage.prompt_tokens_details.cached_tokens is not None,
          "usage.prompt_tokens_details.cached_tokens present")
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), "chat object/id")
    check(r.model == "muse-test", f"model {r.model}")


def chat_stream(cl):
    stream = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "stream me"}],
                                        stream=True, stream_options={"include_usage": True})
    content, reasoning, finish, usage, n_chunks, roles = "", "", None, None, 0, []
    for ch in stream:
        n_chunks += 1
        if ch.usage:
            usage = ch.usage
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        if d.role:
            roles.append(d.role)
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        finish = ch.choices[0].finish_reason or finish
    check(content == "You said: stream me", f"streamed content {content!r}")
    check(reasoning == "The user said something.", f"streamed reasoning {reasoning!r}")
    check(finish == "stop", f"streamed finish {finish}")
    check(roles == ["assistant"], f"role once: {roles}")
    check(usage is not None and usage.completion_tokens > 0, f"stream usage {usage}")
    check(n_chunks >= 4, f"several chunks ({n_chunks})")


def chat_tools(cl):
    r = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "weather in Paris?"}],
                                   tools=TOOLS, tool_choice="auto")
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", f"tool finish_reason {c.finish_reason}")
    calls = c.message.tool_calls or []
    check(len(calls) == 1, f"one tool call: {calls}")
    if calls:
        check(calls[0].function.name == "get_weather", f"tool name {calls[0].function.name}")
        check(json.loads(calls[0].function.arguments) == {"city": "Paris", "days": 3},
              f"typed arguments {calls[0].function.arguments}")
        check(calls[0].type == "function" and calls[0].id.startswith("call_"), "tool call id/type")
    check(c.message.content is None, f"content null beside tool calls: {c.message.content!r}")
    check(getattr(c.message, "reasoning_content", None) == "Need the weather tool.", "reasoning before the call")
    # the same, streamed: the call arrives whole, never as partial ATEM text in content
    stream = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "weather?"}],
                                        tools=TOOLS, stream=True)
    content, calls, finish = "", [], None
    for ch in stream:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        calls += d.tool_calls or []
        finish = ch.choices[0].finish_reason or finish
    check(content == "" and "atem" not in content, f"no ATEM text streamed as content: {content!r}")
    check(len(calls) == 1 and calls[0].function.name == "get_weather", f"streamed tool call {calls}")
    check(finish == "tool_calls", f"streamed tool finish {finish}")
    # a follow-up turn carrying the call and its result is accepted and rendered
    ids = [calls[0].id] if calls else ["x"]
    r2 = cl.chat.completions.create(model="muse-test", messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": ids[0], "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": ids[0], "content": "sunny"},
        {"role": "user", "content": "thanks"}], tools=TOOLS)
    check(r2.choices[0].message.content == "You said: thanks", f"turn after tool result: {r2.choices[0].message}")
    r4 = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS,
                                    tool_choice="none")
    check(not r4.choices[0].message.tool_calls and r4.choices[0].finish_reason == "stop" and
          "get_weather" in (r4.choices[0].message.content or ""), f"tool_choice none: no call {r4.choices[0]}")
    # tool-call ids differ across turns (hermes-agent PR #83824)
    r3 = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS)
    check(r3.choices[0].message.tool_calls[0].id != r.choices[0].message.tool_calls[0].id, "unique tool-call ids")


def chat_params(cl, srv):
    r = cl.chat.completions.create(model="muse-test", messages=USER, max_tokens=5)
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5,
          f"max_tokens -> length ({r.choices[0].finish_reason}, {r.usage.completion_tokens})")
    r = cl.chat.completions.create(model="muse-test", messages=USER, stop=["there"])
    check(r.choices[0].message.content == "You said: hello ", f"stop string cuts: {r.choices[0].message.content!r}")
    check(r.choices[0].finish_reason == "stop", "stop string finish")
    r = cl.chat.completions.create(model="muse-test", messages=USER, temperature=0.2, top_p=0.9, seed=7,
                                   presence_penalty=0.5, frequency_penalty=0.1,
                                   extra_body={"top_k": 20, "min_p": 0.05})
    check(r.choices[0].message.content == "You said: hello there", "sampling parameters accepted")
    # reasoning strength: the prompt carries "Reasoning strength: R." (one byte per character here)
    base = cl.chat.completions.create(model="muse-test", messages=USER).usage.prompt_tokens
    low = cl.chat.completions.create(model="muse-test", messages=USER, reasoning_effort="low").usage.prompt_tokens
    xhigh = cl.chat.completions.create(model="muse-test", messages=USER,
                                       extra_body={"chat_template_kwargs": {"reasoning_strength": "xhigh"}}
                                       ).usage.prompt_tokens
    check(low == base - 1, f"reasoning_effort=low maps to reasoning_strength low ({low} vs {base})")
    check(xhigh == base + 1, f"chat_template_kwargs.reasoning_strength=xhigh ({xhigh} vs {base})")
    # max_tokens while a possible marker is held back: flushed as content; <|eom|> never stops
    cut = [{"role": "user", "content": "cut me"}]
    r = cl.chat.completions.create(model="muse-test", messages=cut, max_tokens=49)
    m = r.choices[0].message
    check(r.choices[0].finish_reason == "length" and m.content == "partial <|eo" and
          getattr(m, "reasoning_content", None) == "thinking", f"flush on max_tokens: {r.choices[0]}")
    parts, reasoning = [], []
    for c in cl.chat.completions.create(model="muse-test", messages=cut, max_tokens=49, stream=True):
        if c.choices:
            parts.append(c.choices[0].delta.content or "")
            reasoning.append(getattr(c.choices[0].delta, "reasoning_content", None) or "")
    check("".join(parts) == "partial <|eo" and "".join(reasoning) == "thinking",
          f"streamed flush on max_tokens: {parts} {reasoning}")
    r = cl.chat.completions.create(model="muse-test", messages=cut, max_tokens=48)
    check(r.choices[0].message.content == "partial <|e", f"one token less: {r.choices[0].message.content!r}")
    # headerless JSON reply is content (not null)
    r = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": "json please"}])
    check(r.choices[0].message.content == "{\"answer\": 42}", f"headerless JSON content {r.choices[0].message.content!r}")


def completions(cl, srv):
    r = cl.completions.create(model="muse-test", prompt="abc", max_tokens=4)
    check(r.choices[0].text == " You" and r.choices[0].finish_reason == "length", f"completions text {r.choices[0]}")
    text = "".join(c.choices[0].text for c in cl.completions.create(model="muse-test", prompt="xyz", max_tokens=200,
                                                                       stream=True) if c.choices)
    check(text.startswith(" You said: ") and text.endswith("xyz"), f"streamed completion {text!r}")
    models = cl.models.list()
    check([m.id for m in models.data] == ["muse-test"], f"models {models}")


def native(srv):
    st, _, js = srv.request("POST", "/completion", {"prompt": "abc", "n_predict": 3, "n_probs": 2,
                                                     "return_tokens": True})
    check(st == 200, f"/completion status {st}")
    check(js.get("tokens") == [ord(" "), ord("Y"), ord("o")] and js.get("content") == " Yo", f"/completion {js}")
    probs = js.get("completion_probabilities", [])
    check(len(probs) == 3 and all(len(p["top_probs"]) == 2 for p in probs), "n_probs entries")
    check(probs and probs[0]["top_probs"][0]["prob"] >= probs[0]["top_probs"][1]["prob"], "top_probs sorted")
    check(js.get("stop_type") == "limit" and js.get("tokens_predicted") == 3, "native stop_type/tokens_predicted")
    # a token-id prompt
    st, _, js2 = srv.request("POST", "/completion", {"prompt": [256, 97, 98, 99], "n_predict": 3})
    check(st == 200 and js2.get("content") == " Yo", f"/completion with ids {js2}")
    check(js2.get("tokens_cached", 0) >= 3, f"ids prompt reuses the text prompt's cache {js2.get('tokens_cached')}")
    # ignore_eos (llama-server's): the script's <|eot|> does not end the answer, and stays out of the text
    for ie, want in ((False, "eos"), (True, "limit")):
        st, _, js3 = srv.request("POST", "/completion", {"prompt": "hi", "n_predict": 30, "ignore_eos": ie})
        check(st == 200 and js3.get("stop_type") == want and js3.get("content") == " You said: hi" and
              (js3.get("tokens_predicted") == 30) == ie, f"ignore_eos {ie}: {js3}")
    st, _, js3 = srv.request("POST", "/completion", {"prompt": "hi", "ignore_eos": 1})
    check(st == 400 and "ignore_eos" in str(js3), f"ignore_eos must be a boolean: {js3}")
    # native streaming: content pieces then a final stop event
    c = srv_conn(srv)
    c.request("POST", "/completion", json.dumps({"prompt": "q", "n_predict": 6, "stream": True, "return_tokens": True}))
    evs = list(sse_events(c.getresponse()))
    check(evs and evs[-1].get("stop") is True, "native stream ends with stop:true")
    check("".join(e.get("content", "") for e in evs) == " You s", f"native stream content {evs}")
    check(sum(len(e.get("tokens", [])) for e in evs if not e.get("stop")) == 6, "native stream tokens")
    st, _, tk = srv.request("POST", "/tokenize", {"content": "hi<|eot|>", "with_pieces": True})
    check(st == 200 and [t["id"] for t in tk["tokens"]] == [104, 105, 261], f"/tokenize {tk}")
    check([t["piece"] for t in tk["tokens"]] == ["h", "i", "<|eot|>"], "/tokenize pieces")
    st, _, tk = srv.request("POST", "/tokenize", {"content": "hi", "add_special": True})
    check(tk["tokens"] == [256, 104, 105], f"/tokenize add_special {tk}")
    st, _, dt = srv.request("POST", "/detokenize", {"tokens": [104, 105, 0xe2, 0x82, 0xac]})
    check(st == 200 and dt["content"] == "hi\u20ac", f"/detokenize {dt}")


def srv_conn(srv):
    import http.client
    return http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)


def curl(srv):
    out = subprocess.run(["curl", "-sN", "--max-time", "20", srv.base + "/v1/chat/completions", "-H",
                          "Content-Type: application/json", "-d",
                          json.dumps({"messages": [{"role": "user", "content": "via curl"}], "stream": True})],
                         capture_output=True, text=True).stdout
    events = [l[6:] for l in out.splitlines() if l.startswith("data: ")]
    check(events and events[-1] == "[DONE]", f"curl SSE ends with [DONE]: {out[-200:]!r}")
    text = "".join((json.loads(e)["choices"][0]["delta"].get("content") or "") for e in events[:-1]
                   if json.loads(e)["choices"])
    check(text == "You said: via curl", f"curl streamed content {text!r}")
    out = subprocess.run(["curl", "-s", "--max-time", "20", srv.base + "/v1/chat/completions", "-d",
                          json.dumps({"messages": USER})], capture_output=True, text=True).stdout
    check(json.loads(out)["choices"][0]["message"]["content"] == "You said: hello there", "curl non-streaming")


def concurrent(srv, cl):
    """16 concurrent streams on 4 slots: every client gets exactly its own answer."""
    n = 16
    results = [None] * n

    def one(i):
        try:
            msg = f"client-{i:02d} says {'x' * i}"
            s = cl.chat.completions.create(model="muse-test", messages=[{"role": "user", "content": msg}],
                                           stream=True)
            results[i] = (msg, "".join((c.choices[0].delta.content or "") for c in s if c.choices))
        except Exception as e:  # noqa: BLE001 - reported as a failure below
            results[i] = ("", repr(e))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    bad = [(i, r) for i, r in enumerate(results) if r is None or r[1] != "You said: " + r[0]]
    check(not bad, f"16 concurrent streams, none lost or mixed: {bad[:3]}")


def main():
    script = dict(SCRIPT, token_delay_ms=1)
    with Server(script, "--parallel", "4", "--queue", "32") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=30)
        chat_plain(cl)
        chat_stream(cl)
        chat_tools(cl)
        chat_params(cl, srv)
        completions(cl, srv)
        native(srv)
        curl(srv)
        concurrent(srv, cl)
        m = srv.metrics()
        check(m["muse_requests_total"] >= 40 and m["muse_tokens_predicted_total"] > 100, f"metrics count: {m}")
        check(m["muse_slots_total"] == 4, "metrics slots gauge")
    report("test_server_api.py")


if __name__ == "__main__":
    main()
