"""test_grammar_sample.py - property test of constrained decoding through `muse run`: for schemas
with nested objects, arrays, enums, $refs, patterns and bounds, text sampled at temperature 1 from
the trained tiny model (models/glimmer-tiny-f16.gguf; a synthetic one when it is absent) under
--json-schema is valid JSON that Python's `jsonschema` accepts, for several seeds each. GBNF
grammars given with --grammar / --grammar-file are checked against Python regexes of the same
language. Bad grammars and schemas fail with the position or keyword."""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "server"))
from srvtest import MUSE, check, ensure_venv, report  # noqa: E402

ensure_venv(["jsonschema"])
import jsonschema  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 99}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                               "maxItems": 3}},
     "required": ["color", "ok"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"anyOf": [{"$ref": "#/$defs/pt"},
                                                                                    {"type": "null"}]}},
     "required": ["a", "b"]},
    {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                      "when": {"type": "string", "format": "date"},
                                      "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 1000}},
     "required": ["id", "when", "n"]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "integer"}},
                "required": ["kind", "v"]},
               {"type": "object", "properties": {"kind": {"const": "b"}, "w": {"type": "string", "maxLength": 4}},
                "required": ["kind", "w"]}]},
    {"type": "object", "properties": {"inner": {"type": "object", "properties": {
        "list": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "boolean"}],
                 "items": False}}, "required": ["list"]}}, "required": ["inner"]},
]
SEEDS = [1, 2, 3]


def muse_run(model, *args, n=300):
    p = subprocess.run([MUSE, "run", "-m", model, "--no-display-prompt", "-n", str(n), *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout.rstrip("\n"), p.stderr


def main():
    tmp = tempfile.TemporaryDirectory(prefix="muse-grammar-")
    model = str(REPO / "models" / "glimmer-tiny-f16.gguf")
    if not os.path.exists(model):
        model = os.path.join(tmp.name, "tiny.gguf")
        subprocess.run([MUSE, "synth", "--preset", "tiny", "-q", "-o", model], check=True)
    done = 0
    for i, schema in enumerate(SCHEMAS):
        for seed in SEEDS:
            rc, out, err = muse_run(model, "-p", "Data:", "--temp", "1", "-s", str(seed), "-j", json.dumps(schema))
            check(rc == 0, f"schema {i} seed {seed}: muse run ok ({err.strip()[-200:]})")
            if rc != 0:
                continue
            if "max-tokens" in err:  # cut off: every prefix must still be allowed, but it cannot validate
                check(len(out) > 0, f"schema {i} seed {seed}: output before the token limit")
                continue
            done += 1
            try:
                doc = json.loads(out)
                jsonschema.validate(doc, schema)
                check(True, "")
            except Exception as e:  # noqa: BLE001 - any failure is the test's
                check(False, f"schema {i} seed {seed}: {out!r} does not validate: {e}")
    check(done >= len(SCHEMAS) * len(SEEDS) * 2 // 3, f"most samples complete within the token limit ({done})")

    # muse chat: reasoning stays free, the answer (content) follows the schema
    chat_done = 0
    for seed in SEEDS:
        p = subprocess.run([MUSE, "chat", "-m", model, "-p", "Describe a person as JSON.", "-n", "300", "--temp", "1",
                            "-s", str(seed), "--hide-reasoning", "-j", json.dumps(SCHEMAS[0])],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"chat seed {seed}: {p.stderr.strip()[-200:]}")
        if "stop: end of turn" not in p.stderr:
            continue
        chat_done += 1
        try:
            jsonschema.validate(json.loads(p.stdout), SCHEMAS[0])
            check(True, "")
        except Exception as e:  # noqa: BLE001
            check(False, f"chat seed {seed}: {p.stdout!r} does not validate: {e}")
    check(chat_done >= 1, f"some chat answer completes ({chat_done})")

    # GBNF: the output is in the language (Python regex of the same grammar)
    grammars = [
        ('root ::= ("yes" | "no") ", " [a-z]{1,8} "."', r'(yes|no), [a-z]{1,8}\.'),
        ('root ::= item ("," item){0,3}\nitem ::= [0-9]{1,3} | "\\"" [a-c]{0,5} "\\""',
         r'([0-9]{1,3}|"[a-c]{0,5}")(,([0-9]{1,3}|"[a-c]{0,5}")){0,3}'),
    ]
    gfile = os.path.join(tmp.name, "g.gbnf")
    for g, rx in grammars:
        for seed in SEEDS:
            rc, out, err = muse_run(model, "-p", "Once", "--temp", "1", "-s", str(seed), "--grammar", g, n=60)
            check(rc == 0 and "max-tokens" not in err and re.fullmatch(rx, out) is not None,
                  f"--grammar {g!r} seed {seed}: {out!r} {err.strip()[-120:]}")
        pathlib.Path(gfile).write_text(g)
        rc, out, err = muse_run(model, "-p", "Once", "--grammar-file", gfile, n=60)
        check(rc == 0 and re.fullmatch(rx, out) is not None, f"--grammar-file greedy: {out!r}")
    # greedy under a grammar = the argmax over the allowed tokens: deterministic
    a = muse_run(model, "-p", "Data:", "-j", json.dumps(SCHEMAS[0]))[1]
    b = muse_run(model, "-p", "Data:", "-j", json.dumps(SCHEMAS[0]))[1]
    check(a == b and a.startswith("{"), f"greedy is deterministic: {a!r}")
    # with a drafter: the loop samples through the grammar and drafts nothing, so the output is the
    # plain one (greedy and sampled)
    drafter = str(REPO / "models" / "glimmer-tiny-dflash.gguf")
    if model.endswith("glimmer-tiny-f16.gguf") and os.path.exists(drafter):
        for extra in ([], ["--temp", "1", "-s", "2"]):
            plain = muse_run(model, "-p", "Data:", "-j", json.dumps(SCHEMAS[0]), *extra)
            spec = muse_run(model, "-p", "Data:", "-j", json.dumps(SCHEMAS[0]), "--draft-model", drafter, *extra)
            check(spec[0] == 0 and spec[1] == plain[1], f"--draft-model with a grammar {extra}: {spec[1]!r} vs {plain[1]!r}")

    # llama.cpp's sample grammars (not in this repository): each compiles and constrains a short
    # greedy run, where a llama.cpp checkout is at hand ($LLAMA_GRAMMARS, or the local oracle's)
    gdir = pathlib.Path(os.environ.get("LLAMA_GRAMMARS", "/work/oracle/src/grammars"))
    samples = sorted(gdir.glob("*.gbnf")) if gdir.is_dir() else []
    if not samples:
        print(f"SKIP (not counted): llama.cpp sample grammars, none under {gdir}")
    for g in samples:
        rc, out, err = muse_run(model, "-p", "Once", "-n", "8", "--grammar-file", str(g), n=8)
        check(rc == 0 and "grammar:" in err, f"llama.cpp's {g.name} compiles and runs: {err.strip()[-200:]}")

    # errors: one line each, naming the position / keyword
    rc, out, err = muse_run(model, "-p", "x", "--grammar", 'root ::= "a"\nb ::= [a-')
    check(rc != 0 and "line 2, column" in err, f"bad grammar: {err.strip()}")
    rc, out, err = muse_run(model, "-p", "x", "-j", '{"type": "array", "uniqueItems": true}')
    check(rc != 0 and "uniqueItems" in err, f"unsupported keyword: {err.strip()}")
    rc, out, err = muse_run(model, "-p", "x", "-j", '{"type": ')
    check(rc != 0 and "line 1" in err, f"bad JSON: {err.strip()}")
    rc, out, err = muse_run(model, "-p", "x", "--grammar", "root ::= \"a\"", "-j", "{}")
    check(rc != 0, "two grammars refused")
    report(__file__)


if __name__ == "__main__":
    main()
