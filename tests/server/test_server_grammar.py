"""test_server_grammar.py - constrained decoding through `muse serve --model` on the trained tiny model
(models/glimmer-tiny-f16.gguf; a synthetic one when absent), with the official `openai` client:
response_format json_schema / json_object return JSON that validates (Python jsonschema), streamed or
not; llama-server's native `grammar` and `json_schema` fields on /completion; bad grammars and schemas
are 400 naming the position or keyword; the scripted adapter refuses to run a grammar it cannot enforce."""
import json
import os
import pathlib
import re
import subprocess
import tempfile

from srvtest import MUSE, SCRIPT, check, ensure_venv, report
import srvtest

ensure_venv(["openai", "jsonschema"])
import jsonschema  # noqa: E402
import openai  # noqa: E402
from test_server_real import RealServer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                           "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
          "required": ["name", "age"]}


def main():
    tmp = tempfile.TemporaryDirectory(prefix="muse-srv-grammar-")
    model = str(REPO / "models" / "glimmer-tiny-f16.gguf")
    if not os.path.exists(model):
        model = os.path.join(tmp.name, "tiny.gguf")
        subprocess.run([MUSE, "synth", "--preset", "tiny", "-q", "-o", model], check=True)
    with RealServer(model, "--parallel", "1", "--ctx-size", "1024") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "Describe a person."}]
        complete = 0
        for seed in (1, 2, 3, 4):
            r = cl.chat.completions.create(model="m", messages=msgs, max_tokens=400, temperature=1, seed=seed,
                                           response_format={"type": "json_schema", "json_schema": {
                                               "name": "person", "strict": True, "schema": PERSON}})
            c = r.choices[0]
            if c.finish_reason != "stop":
                continue
            complete += 1
            try:
                jsonschema.validate(json.loads(c.message.content), PERSON)
                check(True, "")
            except Exception as e:  # noqa: BLE001
                check(False, f"json_schema seed {seed}: {c.message.content!r}: {e}")
        check(complete >= 2, f"json_schema answers complete within max_tokens ({complete}/4)")

        objects = 0
        for seed in (1, 2, 3, 4):
            c = cl.chat.completions.create(model="m", messages=msgs, max_tokens=300, temperature=1, seed=seed,
                                           response_format={"type": "json_object"}).choices[0]
            if c.finish_reason == "stop":
                doc = json.loads(c.message.content)
                check(isinstance(doc, dict), f"json_object gives an object: {c.message.content!r}")
                objects += 1
        check(objects >= 1, "json_object: some answer completes within max_tokens")

        # streamed: the deltas join to the same valid document
        parts, fin = [], None
        for ch in cl.chat.completions.create(model="m", messages=msgs, max_tokens=400, temperature=0, stream=True,
                                             response_format={"type": "json_schema", "json_schema": {
                                                 "name": "p", "schema": PERSON}}):
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            if ch.choices and ch.choices[0].finish_reason:
                fin = ch.choices[0].finish_reason
        if fin == "stop":
            try:
                jsonschema.validate(json.loads("".join(parts)), PERSON)
                check(True, "")
            except Exception as e:  # noqa: BLE001
                check(False, f"streamed json_schema: {''.join(parts)!r}: {e}")

        # the Ollama API's format: a schema, or "json" (any object)
        ok = 0
        for seed in (1, 2, 3):
            st, _, js = srv.request("POST", "/api/chat", {"model": "m", "messages": msgs, "stream": False, "format": PERSON,
                                                          "options": {"seed": seed, "temperature": 1, "num_predict": 400}})
            if st == 200 and js.get("done_reason") == "stop":
                ok += 1
                try:
                    jsonschema.validate(json.loads(js["message"]["content"]), PERSON)
                    check(True, "")
                except Exception as e:  # noqa: BLE001
                    check(False, f"ollama format schema: {js['message']['content']!r}: {e}")
            else:
                check(st == 200, f"ollama format schema: {st} {js}")
        check(ok >= 1, "ollama format: some answer completes")
        st, _, js = srv.request("POST", "/api/generate", {"model": "m", "prompt": "A person:", "stream": False,
                                                          "format": "json", "options": {"seed": 4, "num_predict": 300}})
        if st == 200 and js.get("done_reason") == "stop":
            check(isinstance(json.loads(js["response"]), dict), f"ollama format json: {js['response']!r}")
        else:
            check(st == 200, f"ollama generate format json: {st} {js}")

        # native /completion: grammar and json_schema
        st, _, js = srv.request("POST", "/completion", {"prompt": "Answer:", "n_predict": 40, "temperature": 1,
                                                         "seed": 5, "grammar": 'root ::= ("yes" | "no") "!"'})
        check(st == 200 and js["content"] in ("yes!", "no!"), f"/completion grammar: {st} {js}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "Data:", "n_predict": 300, "temperature": 0,
                                                         "json_schema": {"type": "array", "items": {"type": "integer"},
                                                                         "minItems": 2, "maxItems": 3}})
        ok = st == 200 and js["stop_type"] == "eos"
        doc = json.loads(js["content"]) if ok else None
        check(ok and isinstance(doc, list) and 2 <= len(doc) <= 3 and all(isinstance(x, int) for x in doc),
              f"/completion json_schema: {st} {js.get('content')!r}")
        st, _, js = srv.request("POST", "/v1/completions", {"prompt": "Answer:", "max_tokens": 30, "model": "m",
                                                            "grammar": 'root ::= [0-9]{3}'})
        check(st == 200 and re.fullmatch(r"[0-9]{3}", js["choices"][0]["text"]) is not None,
              f"/v1/completions grammar: {st} {js}")

        # errors: 400 with the position / keyword, through the client too
        st, _, js = srv.request("POST", "/completion", {"prompt": "x", "grammar": 'root ::= "a"\nitem ::= ( "b"'})
        check(st == 400 and "line 2, column" in js["error"]["message"] and js["error"]["param"] == "grammar",
              f"bad grammar -> 400: {st} {js}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "x", "json_schema": {"type": "string", "pattern": "(?=x)"}})
        check(st == 400 and "pattern" in js["error"]["message"], f"bad pattern -> 400: {st} {js}")
        try:
            cl.chat.completions.create(model="m", messages=msgs, response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object", "patternProperties": {"^a": {}}}}})
            check(False, "unsupported keyword accepted")
        except openai.BadRequestError as e:
            check("patternProperties" in str(e), f"unsupported keyword -> 400 naming it: {e}")
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": msgs, "response_format": {"type": "xml"}})
        check(st == 400 and js["error"]["param"] == "response_format", f"bad response_format type: {st} {js}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "x", "grammar": 'root ::= "a"', "json_schema": {}})
        check(st == 400, f"grammar + json_schema -> 400: {st}")
        # the server still serves plain requests afterwards
        st, _, js = srv.request("POST", "/completion", {"prompt": "x", "n_predict": 3})
        check(st == 200, "plain request after the errors")

    # forced tool calls (a synthetic model: the tools block needs more context than the trained one has)
    synth = os.path.join(tmp.name, "synth.gguf")
    subprocess.run([MUSE, "synth", "--preset", "tiny", "--ctx", "4096", "-q", "-o", synth], check=True)
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["c", "f"]}, "hourly": {"type": "boolean"}}, "required": ["city", "days"]}}},
        {"type": "function", "function": {
            "name": "add", "description": "Add numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                                                            "tags": {"type": "array", "items": {"type": "string"},
                                                                     "maxItems": 2}},
                           "required": ["a", "b"]}}}]
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    with RealServer(synth, "--parallel", "1", "--ctx-size", "4096") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        for choice in ("required", {"type": "function", "function": {"name": "add"}}):
            for seed in (1, 2):
                r = cl.chat.completions.create(model="m", messages=msgs, tools=tools, tool_choice=choice, seed=seed,
                                               temperature=1, max_tokens=1500)
                c = r.choices[0]
                calls = c.message.tool_calls or []
                check(c.finish_reason == "tool_calls" and len(calls) == 1,
                      f"tool_choice {choice} seed {seed}: one tool call ({c.finish_reason}, {c.message})")
                for call in calls:
                    if isinstance(choice, dict):
                        check(call.function.name == "add", f"the named function is called: {call.function.name}")
                    try:
                        jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])
                        check(True, "")
                    except Exception as e:  # noqa: BLE001
                        check(False, f"tool_choice {choice}: arguments {call.function.arguments!r}: {e}")
        st, _, js = srv.request("POST", "/v1/chat/completions", {
            "messages": msgs, "tool_choice": "required", "tools": [{"type": "function", "function": {
                "name": "f", "description": "x", "parameters": {"type": "object", "properties": {
                    "s": {"type": "string", "pattern": "^a+$"}}}}}]})
        check(st == 400 and "pattern" in js["error"]["message"], f"unenforceable tool parameter -> 400: {st} {js}")

    # the scripted adapter validates grammars (400s) but cannot enforce them
    with srvtest.Server(SCRIPT) as srv:
        st, _, js = srv.request("POST", "/completion", {"prompt": "x", "grammar": "root ::= [a-"})
        check(st == 400 and "line 1" in js["error"]["message"], f"scripted: bad grammar 400: {st} {js}")
        st, _, js = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "json please"}],
                                                                 "response_format": {"type": "json_object"}})
        check(st != 200 or js.get("choices", [{}])[0].get("finish_reason") != "stop",
              f"scripted: an unenforceable grammar is not reported as a normal answer: {st} {js}")
    report(__file__)


if __name__ == "__main__":
    main()
