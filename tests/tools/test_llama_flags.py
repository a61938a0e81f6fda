#!/usr/bin/env python3
"""llama.cpp flags that scripts pass to `muse run` and `muse chat` (issue 32 item 6):
-r/--reverse-prompt (stop strings: run prints the text and stops, chat ends the answer before
it; a stop string split over tokens, escapes in it, the prompt never matched), --ignore-eos (run
goes on past EOS; chat shows what comes after the end of the turn instead of hiding it),
-e/--escape as llama.cpp's default and --no-escape, and --no-warmup accepted everywhere.

The text comes from a planted-cycle model (`muse synth --cycle 8 --stop-in-cycle --noise 0`):
its greedy text walks fixed cycles on any CPU, and the cycle through tokens 0..6 ends with EOS,
so what is generated is the test's own, not a random model's rounding. Needs $MUSE."""
import os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
import srvtest  # noqa: E402  (check / report; no server here)

MUSE = os.environ.get("MUSE", "build/muse")


def check(what, cond, detail=""):
    srvtest.check(cond, what + ("" if cond else "  " + repr(detail)[-600:]))


def muse(*args):
    r = subprocess.run([MUSE] + [a if isinstance(a, bytes) else str(a) for a in args], capture_output=True)
    return r.returncode, r.stdout, r.stderr


def stop_of(err):
    m = re.search(rb"stop: (reverse prompt \"[^\"]*\"|[a-z -]+)", err)
    return m.group(1).decode().strip() if m else "?"


with tempfile.TemporaryDirectory() as tmp:
    cyc, tiny = os.path.join(tmp, "cyc.gguf"), os.path.join(tmp, "tiny.gguf")
    subprocess.run([MUSE, "synth", "--preset", "tiny", "--cycle", "8", "--stop-in-cycle", "--noise", "0", "-o", cyc, "-q"],
                   check=True)
    subprocess.run([MUSE, "synth", "--preset", "tiny", "-o", tiny, "-q"], check=True)
    raw = os.path.join(tmp, "raw.jinja")  # the message as the whole prompt: the answer continues it
    open(raw, "w").write("{% for m in messages %}{{ m.content }}{% endfor %}")
    gen = ["-n", "30", "--temp", "0"]

    # ---- -r / --reverse-prompt ----
    rc, full, _ = muse("run", "-m", cyc, "-p", "Once upon a time", "--no-display-prompt", *gen)
    cut = full.find(b"ove Be")  # "ove" and " Be" are two tokens: the match spans them
    check("the cycle text has the stop string (%r)" % full[:40], rc == 0 and cut > 0, full)
    rc, out, err = muse("run", "-m", cyc, "-p", "Once upon a time", "--no-display-prompt", "-r", "ove Be", *gen)
    check("run -r: the text through the stop string, then stop", rc == 0 and out == full[:cut + 6] + b"\n", out)
    check("run -r: the stop is named", stop_of(err) == 'reverse prompt "ove Be"', err)
    rc, out, err = muse("run", "-m", cyc, "-p", "Once upon a time", "-r", "time", "-r", "nowhere", *gen)
    check("run -r: the prompt is never matched; the first of several -r that occurs stops",
          rc == 0 and out == b"Once upon a time" + full[:full.find(b"time") + 4] + b"\n" and
          stop_of(err) == 'reverse prompt "time"', (out, err))
    rc, out, err = muse("run", "-m", cyc, "-p", "Once upon a time", "--no-display-prompt", "-r", r"ove\x20Be", *gen)
    check("run -r with an escape (\\x20)", rc == 0 and out == full[:cut + 6] + b"\n", out)
    rc, out, err = muse("run", "-m", cyc, "-p", "Once upon a time", "--no-display-prompt", "-r", r"ove\x20Be",
                        "--no-escape", *gen)
    check("run -r --no-escape: the backslash is literal, no stop", rc == 0 and out == full and stop_of(err) == "max-tokens",
          (out, err))
    rc, out, err = muse("chat", "-m", cyc, "--chat-template-file", raw, "-p", "Once upon a time", *gen)
    ccut = out.find(b"ove Be")
    rc2, out2, err2 = muse("chat", "-m", cyc, "--chat-template-file", raw, "-p", "Once upon a time", "-r", "ove Be", *gen)
    check("chat -r: the answer ends before the stop string",
          rc == 0 and rc2 == 0 and ccut > 0 and out2 == out[:ccut] + b"\n" and
          stop_of(err2) == 'reverse prompt "ove Be"', (out, out2, err2))
    rc, _, err = muse("run", "-m", tiny, "-p", "x", "-r", "")
    check("run -r '': a usage error (2)", rc == 2 and b"bad value for -r" in err, err)

    # ---- --ignore-eos ----
    rc, out, err = muse("run", "-m", cyc, "--tokens", "100,0", "--ids", "-n", "20", "--temp", "0")
    check("run: the first cycle ends at EOS", rc == 0 and out.strip() == b"1,2,3,4,5,6" and stop_of(err) == "end of turn",
          (out, err))
    rc, out, err = muse("run", "-m", cyc, "--tokens", "100,0", "--ids", "-n", "20", "--temp", "0", "--ignore-eos")
    check("run --ignore-eos: goes on past EOS to -n, the EOS left out",
          rc == 0 and out.strip() == b"1,2,3,4,5,6,0,1,2,3,4,5,6,0,1,2,3,4" and stop_of(err) == "max-tokens", (out, err))
    rc, out, err = muse("chat", "-m", cyc, "--chat-template-file", raw, "-p", b"\x03", "-n", "20", "--temp", "0")
    check("chat: the answer ends at the end of turn", rc == 0 and out == b"\x04\x05\x06\n" and stop_of(err) == "end of turn",
          (out, err))
    rc, out, err = muse("chat", "-m", cyc, "--chat-template-file", raw, "-p", b"\x03", "-n", "20", "--temp", "0",
                        "--ignore-eos")
    check("chat --ignore-eos: what comes after the end of turn is shown, not hidden",
          rc == 0 and out == b"\x04\x05\x06" + b"\x00\x01\x02\x03\x04\x05\x06" * 2 + b"\n", (out, err))

    # ---- -e / --escape (the default, as llama.cpp) and --no-escape ----
    prompt = r"a\tb\x41\\c\q\"d\'e\nf\x4"
    rc, out, _ = muse("run", "-m", tiny, "-p", prompt, "-n", "0")
    check("run -p: escapes processed by default (\\t \\x41 \\\\ \\\" \\' \\n; \\q and a short \\x kept)",
          rc == 0 and b"a\tbA\\c\\q\"d'e\nf\\x4" in out, out)
    rc, out2, _ = muse("run", "-m", tiny, "-p", prompt, "-n", "0", "-e")
    check("run -e: the same", rc == 0 and out2 == out, out2)
    rc, out, _ = muse("run", "-m", tiny, "-p", prompt, "-n", "0", "--no-escape")
    check("run --no-escape: the prompt as written", rc == 0 and prompt.encode() in out, out)
    rc, out, _ = muse("chat", "-m", tiny, "-p", r"one\ntwo", "--dump-prompt")
    check("chat -p: escapes processed", rc == 0 and b"one\ntwo" in out and b"one\\ntwo" not in out, out)
    f = os.path.join(tmp, "p.txt")
    open(f, "w").write(r"file\n")
    rc, out, _ = muse("run", "-m", tiny, "-f", f, "-n", "0")
    check("run -f: a prompt file is used as it is", rc == 0 and b"file\\n" in out, out)

    # ---- --no-warmup: accepted (bench skips its warm-up runs; the others have none) ----
    for args in (["run", "-m", tiny, "-p", "x", "-n", "1"], ["chat", "-m", tiny, "-p", "x", "--dump-prompt"],
                 ["bench", "-m", tiny, "-p", "8", "-n", "2", "-r", "1"], ["logits", "-m", tiny, "--tokens", "1,2"],
                 ["perplexity", "-m", tiny, "-f", f, "-c", "8"]):
        rc, _, err = muse(*args, "--no-warmup")
        check("%s --no-warmup accepted" % args[0], b"unknown option" not in err and rc in (0, 1), (rc, err))
    rc, _, err = muse("serve", "-m", os.path.join(tmp, "none.gguf"), "--port", "0", "--no-warmup")
    check("serve --no-warmup accepted (then the missing model fails)", rc == 1 and b"unknown option" not in err, err)

srvtest.report("test_llama_flags")
