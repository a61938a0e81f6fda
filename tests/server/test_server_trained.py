"""test_server_trained.py - real replies through the chat output parser: the trained tiny model
(models/glimmer-tiny-f16.gguf, taught the Muse chat format) answers a few user turns greedily.
For each prompt, the raw continuation of the rendered chat (`muse chat --dump-prompt` ids fed to
`muse run --tokens --ids`) must be a real assistant message: the header ` to=user<|message|>`,
English text, then <|eot|> (the run stops at end of turn). `muse chat` must print exactly that
text as the reply (the parser took the channel header off and stopped at the end of turn), and
`muse serve`'s OpenAI chat endpoint must return the same content with finish_reason "stop" and no
reasoning. A synthetic model never ends its turn and never writes a header, so none of this is
exercised by the random-weight tests."""
import json
import os
import subprocess
import sys

from srvtest import MUSE, check, ensure_venv, report
from test_server_real import RealServer

ensure_venv(["openai"])
import openai  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "glimmer-tiny-f16.gguf")
PROMPTS = ["Good morrow, my lord. How fares your father?", "What news from the court?",
           "Wilt thou fight for the crown?"]
MESSAGE, EOT = 4090, 4087  # <|message|>, <|eot|> in the trained vocabulary (models/README.md)


def cli(*args):
    return subprocess.run([MUSE, *args], capture_output=True, text=True)


def detok(ids, special=False):
    r = cli("tokenize", "-m", MODEL, "--detokenize", "--ids", ",".join(map(str, ids)),
            *(["--special"] if special else []))
    return r.stdout


def main():
    replies = {}
    for p in PROMPTS:
        dump = cli("chat", "-m", MODEL, "-p", p, "--dump-prompt").stdout
        ids = dump.rsplit("tokens (", 1)[1].split(":", 1)[1].strip()
        raw = cli("run", "-m", MODEL, "--tokens", ids, "--ids", "-n", "64", "--temp", "0")
        gen = [int(t) for t in raw.stdout.strip().split(",") if t]
        check("stop: end of turn" in raw.stderr, f"{p!r}: the raw run ends its turn: {raw.stderr.strip()[-80:]}")
        check(MESSAGE in gen, f"{p!r}: the model writes a message header: {gen[:8]}")
        if MESSAGE not in gen:
            continue
        k = gen.index(MESSAGE)
        header = detok(gen[:k + 1], special=True)
        check(header == " to=user<|message|>", f"{p!r}: header {header!r} addresses the user")
        text = detok(gen[k + 1:])
        check(len(text.split()) >= 3 and text.isascii(), f"{p!r}: an English reply {text!r}")
        chat = cli("chat", "-m", MODEL, "-p", p, "--temp", "0", "-n", "64")
        check(chat.returncode == 0 and "stop: end of turn" in chat.stderr,
              f"{p!r}: muse chat ends the turn: {chat.stderr.strip()[-80:]}")
        check(chat.stdout.strip() == text.strip(),
              f"{p!r}: muse chat prints the parsed reply {chat.stdout.strip()!r} == {text.strip()!r}")
        replies[p] = text.strip()
    with RealServer(MODEL, "--parallel", "1", "--ctx-size", "1024") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
        for p, want in replies.items():
            r = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": p}],
                                           max_tokens=64, temperature=0)
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "stop", f"{p!r}: server finish_reason {r.choices[0].finish_reason}")
            check((m.content or "").strip() == want, f"{p!r}: server content {m.content!r} == {want!r}")
            rc = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content")
            check(not rc, f"{p!r}: no reasoning in a to=user reply ({rc!r})")
    check(len(replies) == len(PROMPTS), f"{len(replies)}/{len(PROMPTS)} prompts gave a reply")
    report("test_server_trained")


if __name__ == "__main__":
    main()
