#!/usr/bin/env python3
"""End-to-end `muse info` test (standard library only).

1. `$MUSE info FILE` and `$MUSE info --json FILE` succeed on every golden GGUF; the JSON parses and
   agrees with an independent Python walk of the file (counts, tensor table, sizes, the kind of
   file, the per-layer sliding-window flags).
2. The scalar form of `sliding_window_pattern` (a period P) gives llama.cpp's flags
   (layer il is SWA iff P == 0 or il % P < P - 1), checked on rebuilt copies of a golden file.
3. Hostile variants of golden files (truncations; patched counts, lengths, value types, tensor
   types, offsets, dims; duplicate keys and tensor names; unknown architecture; broken
   hyperparameters) each make `muse info` exit with status exactly 1, print exactly one line on
   stderr starting with "muse info: ", and finish in under a second.

Environment: MUSE (path of the CLI), MUSE_SHARED (the shared directory).
"""
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time

MUSE = os.environ.get("MUSE", "build/muse")
SHARED = os.environ.get("MUSE_SHARED", "../shared")
GOLDEN = os.path.join(SHARED, "golden")
TIME_LIMIT = 1.0    # CPU seconds per `muse info` run
WALL_LIMIT = 10.0   # wall seconds (the test machine is shared and may be loaded)

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what, file=sys.stderr)


# ---- an independent GGUF walker that records where every field is ----------------------------

FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
UNPACK = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
         16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
         22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
         29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18)}


class Walk:
    def __init__(self, data):
        self.d = data
        self.p = 0
        self.kv = []        # dicts: key, start, end, key_len_at, type_at, type, value, value_at, count_at, elem_at
        self.tensors = []   # dicts: name, name_len_at, ndims_at, ne_at[], type_at, offset_at, ne, type, offset
        self.run()

    def u32(self):
        v = struct.unpack_from("<I", self.d, self.p)[0]
        self.p += 4
        return v

    def u64(self):
        v = struct.unpack_from("<Q", self.d, self.p)[0]
        self.p += 8
        return v

    def s(self):
        n = self.u64()
        v = self.d[self.p:self.p + n]
        self.p += n
        return v

    def value(self, t, rec):
        if t == 8:
            rec["strlen_at"] = self.p
            return self.s().decode("utf-8", "replace")
        if t == 9:
            rec["elem_at"] = self.p
            et = self.u32()
            rec["count_at"] = self.p
            n = self.u64()
            rec["elem_type"] = et
            if et == 8:
                return [self.s() for _ in range(n)]
            vals = list(struct.unpack_from("<%d%s" % (n, UNPACK[et][1]), self.d, self.p))
            self.p += n * FIXED[et]
            return vals
        v = struct.unpack_from(UNPACK[t], self.d, self.p)[0]
        self.p += FIXED[t]
        return v

    def run(self):
        assert self.d[:4] == b"GGUF"
        self.p = 8
        n_t = self.u64()
        n_kv = self.u64()
        for _ in range(n_kv):
            rec = {"start": self.p, "key_len_at": self.p}
            rec["key"] = self.s().decode()
            rec["type_at"] = self.p
            rec["type"] = self.u32()
            rec["value_at"] = self.p
            rec["value"] = self.value(rec["type"], rec)
            rec["end"] = self.p
            self.kv.append(rec)
        self.infos_start = self.p
        for _ in range(n_t):
            t = {"name_len_at": self.p}
            t["name"] = self.s().decode()
            t["ndims_at"] = self.p
            nd = self.u32()
            t["ne_at"] = []
            t["ne"] = []
            for _ in range(nd):
                t["ne_at"].append(self.p)
                t["ne"].append(self.u64())
            t["type_at"] = self.p
            t["type"] = self.u32()
            t["offset_at"] = self.p
            t["offset"] = self.u64()
            bs, ts = BLOCK[t["type"]]
            n = 1
            for x in t["ne"]:
                n *= x
            t["nbytes"] = n // bs * ts
            t["n_elements"] = n
            self.tensors.append(t)
        self.meta_end = self.p
        self.alignment = self.get("general.alignment", 32)
        self.data_start = (self.p + self.alignment - 1) // self.alignment * self.alignment

    def get(self, key, default=None):
        for r in self.kv:
            if r["key"] == key:
                return r["value"]
        return default

    def rec(self, key):
        for r in self.kv:
            if r["key"] == key:
                return r
        return None


def encode_kv(key, t, value):
    out = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", t)
    if t == 8:
        b = value.encode()
        return out + struct.pack("<Q", len(b)) + b
    return out + struct.pack(UNPACK[t], value)


def rebuild(data, w, replace):
    """A copy of the file with kv records replaced: replace = {key: encoded record bytes or None}."""
    out = bytearray(data[:24])
    kept = 0
    for r in w.kv:
        if r["key"] in replace:
            if replace[r["key"]] is None:
                continue
            out += replace[r["key"]]
        else:
            out += data[r["start"]:r["end"]]
        kept += 1
    struct.pack_into("<Q", out, 16, kept)
    out += data[w.infos_start:w.meta_end]
    while len(out) % w.alignment:
        out += b"\0"
    out += data[w.data_start:]
    return bytes(out)


# ---- running the CLI --------------------------------------------------------------------------

def run(args):
    """rc, stdout, stderr, seconds: the child's CPU time (user + sys), which a busy machine does
    not inflate; the wall clock is bounded separately by WALL_LIMIT."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([MUSE, "info"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    check(wall < WALL_LIMIT, "muse info %s: wall %.2fs" % (" ".join(args), wall))
    return p.returncode, p.stdout, p.stderr, cpu


def expect_error(path, what, needle=None):
    rc, out, err, dt = run([path])
    lines = err.decode("utf-8", "replace").splitlines()
    ok = rc == 1 and len(lines) == 1 and lines[0].startswith("muse info: ") and dt < TIME_LIMIT
    if needle is not None:
        ok = ok and needle in lines[0]
    check(ok, "%s: rc %d, %d stderr lines, %.3fs: %r" % (what, rc, len(lines), dt, err[:300]))
    return ok


def golden_files():
    found = []
    for root, _, files in os.walk(GOLDEN):
        for f in files:
            if f.endswith(".gguf"):
                found.append(os.path.join(root, f))
    return sorted(found)


KINDS = {"muse-glimmer": "text-model", "clip": "mmproj", "dflash": "drafter"}


def test_golden():
    files = golden_files()
    check(len(files) >= 10, "found %d golden files" % len(files))
    for path in files:
        data = open(path, "rb").read()
        w = Walk(data)
        rc, out, err, dt = run([path])
        check(rc == 0 and not err and out.startswith(b"file: "), "%s: text rc %d err %r" % (path, rc, err[:200]))
        check(dt < TIME_LIMIT * 2, "%s: text took %.3fs" % (path, dt))
        rc, out, err, dt = run(["--json", path])
        check(rc == 0 and not err, "%s: json rc %d err %r" % (path, rc, err[:200]))
        try:
            j = json.loads(out)
        except ValueError as e:
            check(False, "%s: --json is not JSON: %s" % (path, e))
            continue
        arch = w.get("general.architecture")
        kind = KINDS[arch] if not (arch == "muse-glimmer" and not w.tensors) else "vocab-only"
        check(j["architecture"] == arch and j["kind"] == kind, "%s: arch/kind %s/%s" % (path, j["architecture"], j["kind"]))
        check(j["gguf"]["n_kv"] == len(w.kv) and j["gguf"]["n_tensors"] == len(w.tensors), "%s: counts" % path)
        check(j["gguf"]["data_offset"] == w.data_start and j["gguf"]["metadata_end"] == w.meta_end,
              "%s: data offset %s/%s meta end %s/%s" % (path, j["gguf"]["data_offset"], w.data_start,
                                                        j["gguf"]["metadata_end"], w.meta_end))
        check(j["size"] == len(data), "%s: size" % path)
        check(list(j["metadata"].keys()) == [r["key"] for r in w.kv], "%s: metadata keys in file order" % path)
        for r in w.kv:
            m = j["metadata"][r["key"]]
            if r["type"] == 9:
                check(m["count"] == len(r["value"]) and len(m["head"]) == min(8, len(r["value"])),
                      "%s: array %s summarized" % (path, r["key"]))
                check(m["truncated"] == (len(r["value"]) > 8), "%s: %s truncated flag" % (path, r["key"]))
            elif r["type"] == 8:
                check(m["value"] == r["value"], "%s: string %s" % (path, r["key"]))
            elif r["type"] == 6:
                check(struct.pack("<f", m["value"]) == struct.pack("<f", r["value"]), "%s: float %s" % (path, r["key"]))
            else:
                check(m["value"] == r["value"], "%s: value %s" % (path, r["key"]))
        tt = j["tensors"]
        check(len(tt) == len(w.tensors), "%s: tensor table length" % path)
        for a, b in zip(tt, w.tensors):
            check(a["name"] == b["name"] and a["ne"] == b["ne"] and a["type_id"] == b["type"] and
                  a["bytes"] == b["nbytes"] and a["offset"] == b["offset"], "%s: tensor %s" % (path, b["name"]))
        n_params = sum(t["n_elements"] for t in w.tensors)
        n_bytes = sum(t["nbytes"] for t in w.tensors)
        check(j["totals"]["parameters"] == n_params and j["totals"]["bytes"] == n_bytes, "%s: totals" % path)
        if n_params:
            check(abs(j["totals"]["bits_per_weight"] - 8.0 * n_bytes / n_params) < 1e-9, "%s: bpw" % path)
        if kind in ("text-model", "drafter"):
            hp = j["hparams"]
            pat = w.get(arch + ".attention.sliding_window_pattern")
            check(hp["n_layer"] == w.get(arch + ".block_count"), "%s: n_layer" % path)
            check(hp["is_swa"] == [bool(x) for x in pat], "%s: is_swa %s vs %s" % (path, hp["is_swa"], pat))
            check(hp["full_attention_layers"] == [i for i, x in enumerate(pat) if not x], "%s: full layers" % path)
            check(hp["n_head"][0] == w.get(arch + ".attention.head_count"), "%s: n_head" % path)
            check(hp["n_vocab"] == len(w.get("tokenizer.ggml.tokens", [])), "%s: n_vocab" % path)
            check(hp["n_swa"] == w.get(arch + ".attention.sliding_window"), "%s: n_swa" % path)
            if arch == "muse-glimmer":
                check(struct.pack("<f", hp["f_logit_scale"]) == struct.pack("<f", w.get("muse-glimmer.logit_scale")),
                      "%s: logit_scale" % path)
                check(hp["rope_freq_base_swa"] == hp["rope_freq_base"], "%s: freq_base_swa defaults" % path)
        if kind == "drafter":
            check(j["drafter"]["target_layers"] == w.get("dflash.target_layers"), "%s: target_layers" % path)


def test_period_form(tmp):
    path = os.path.join(GOLDEN, "text", "tiny-f32.gguf")
    data = open(path, "rb").read()
    w = Walk(data)
    n = w.get("muse-glimmer.block_count")
    key = "muse-glimmer.attention.sliding_window_pattern"
    out = os.path.join(tmp, "period.gguf")
    for p in (4, 2, 1, 0, 3, 7):
        open(out, "wb").write(rebuild(data, w, {key: encode_kv(key, 4, p)}))
        rc, o, err, _ = run(["--json", out])
        check(rc == 0, "period %d: rc %d %r" % (p, rc, err))
        if rc:
            continue
        hp = json.loads(o)["hparams"]
        want = [p == 0 or il % p < p - 1 for il in range(n)]
        check(hp["is_swa"] == want, "period %d: is_swa %s want %s" % (p, hp["is_swa"], want))
        check(hp["sliding_window_pattern"] == {"form": "period", "period": p}, "period %d: form" % p)
        rc, o, err, _ = run([out])
        check(rc == 0 and b"period %d (scalar form)" % p in o, "period %d: text output" % p)
    # per-layer INT32 array form
    arr = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<IIQ", 9, 5, n) + struct.pack("<%di" % n, *([1, 0] * n)[:n])
    open(out, "wb").write(rebuild(data, w, {key: arr}))
    rc, o, err, _ = run(["--json", out])
    check(rc == 0 and json.loads(o)["hparams"]["is_swa"] == [bool(x) for x in ([1, 0] * n)[:n]], "int array form")
    # an array of the wrong length, a missing pattern, a missing required key, and an unknown arch fail cleanly
    bad = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<IIQ", 9, 7, n + 1) + b"\1" * (n + 1)
    open(out, "wb").write(rebuild(data, w, {key: bad}))
    expect_error(out, "pattern array of n_layer+1", "sliding_window_pattern")
    open(out, "wb").write(rebuild(data, w, {key: None}))
    expect_error(out, "pattern missing", "sliding_window_pattern")
    open(out, "wb").write(rebuild(data, w, {"muse-glimmer.logit_scale": None}))
    expect_error(out, "logit_scale missing", "logit_scale")
    open(out, "wb").write(rebuild(data, w, {"muse-glimmer.block_count": encode_kv("muse-glimmer.block_count", 4, 0)}))
    expect_error(out, "block_count 0", "block_count")
    open(out, "wb").write(rebuild(data, w, {"muse-glimmer.block_count": encode_kv("muse-glimmer.block_count", 4, 10**6)}))
    expect_error(out, "block_count 10^6", "block_count")
    open(out, "wb").write(rebuild(data, w, {"muse-glimmer.block_count": encode_kv("muse-glimmer.block_count", 6, 4.0)}))
    expect_error(out, "block_count as FLOAT32", "block_count")
    open(out, "wb").write(rebuild(data, w, {"general.architecture": encode_kv("general.architecture", 8, "llama")}))
    expect_error(out, "unknown architecture llama", "unknown architecture 'llama'")
    open(out, "wb").write(rebuild(data, w, {"general.architecture": None}))
    expect_error(out, "no architecture", "general.architecture")
    open(out, "wb").write(rebuild(data, w, {"general.architecture": encode_kv("general.architecture", 4, 1)}))
    expect_error(out, "architecture as UINT32", "general.architecture")


def hostile_variants(data, w, full):
    """Yield (description, edit, expected substring or None); an edit is ("cut", length) or
    ("patch", offset, bytes) applied to the file in place (and undone afterwards)."""
    def patch(at, fmt, v):
        return ("patch", at, struct.pack(fmt, v))

    size = len(data)
    # truncations: up to ~150 points in the metadata, its last bytes, and points in the data
    step = max(61 if full else 397, w.meta_end // (150 if full else 40))
    cuts = set(range(0, w.meta_end, step)) | {w.meta_end - 1}
    if w.tensors:
        last_end = max(w.data_start + t["offset"] + t["nbytes"] for t in w.tensors)
        cuts |= set(range(w.data_start, last_end, max(1, (last_end - w.data_start) // (25 if full else 5))))
        cuts |= {last_end - 1, w.data_start - 1}
    for c in sorted(cuts):
        if 0 <= c < size:
            yield "truncated at %d" % c, ("cut", c), None
    yield "bad magic", ("patch", 0, b"GGUX"), "magic"
    yield "version 1", patch(4, "<I", 1), "version"
    yield "big-endian", patch(4, "<I", 0x03000000), "big-endian"
    for v in (1 << 63, 1 << 40, 2**64 - 1, len(w.tensors) + 1):
        yield "n_tensors %d" % v, patch(8, "<Q", v), None
    for v in (1 << 63, 1 << 40, len(w.kv) + 1):
        yield "n_kv %d" % v, patch(16, "<Q", v), None
    kvs = w.kv if full else w.kv[:2] + [r for r in w.kv if r["type"] == 9][:2]
    for r in kvs:
        k = r["key"]
        yield "key %s length 2^40" % k, patch(r["key_len_at"], "<Q", 1 << 40), None
        yield "key %s length 2^63" % k, patch(r["key_len_at"], "<Q", 1 << 63), None
        yield "key %s value type 13" % k, patch(r["type_at"], "<I", 13), "value type"
        yield "key %s value type 0xffffffff" % k, patch(r["type_at"], "<I", 0xFFFFFFFF), "value type"
        if r["type"] == 8:
            yield "key %s string length 2^63" % k, patch(r["strlen_at"], "<Q", 1 << 63), None
            yield "key %s string length 2^40" % k, patch(r["strlen_at"], "<Q", 1 << 40), None
        if r["type"] == 9:
            yield "key %s nested array" % k, patch(r["elem_at"], "<I", 9), "nested"
            yield "key %s element type 13" % k, patch(r["elem_at"], "<I", 13), "element type"
            for v in (1 << 62, 1 << 61, 1 << 40, 2**64 - 1):
                yield "key %s count %d" % (k, v), patch(r["count_at"], "<Q", v), None
    # duplicate key: rename a key to an earlier key of the same length
    seen = {}
    for r in w.kv:
        other = seen.get(len(r["key"]))
        if other is not None:
            yield "duplicate key %s" % other, ("patch", r["key_len_at"] + 8, other.encode()), "duplicate key"
            break
        seen[len(r["key"])] = r["key"]
    # unknown architecture of the same length
    arch = w.rec("general.architecture")
    if arch:
        yield "unknown architecture", ("patch", arch["strlen_at"] + 8, b"x"), "unknown architecture"
    ts = w.tensors[:6] + w.tensors[-2:] if full else w.tensors[:2]
    for t in ts:
        n = t["name"]
        for tid in (4, 5, 31, 36, 42, 100, 0xFFFFFFFF):
            yield "tensor %s type %d" % (n, tid), patch(t["type_at"], "<I", tid), "tensor '%s'" % n
        yield "tensor %s n_dims 5" % n, patch(t["ndims_at"], "<I", 5), "n_dims"
        yield "tensor %s n_dims 0" % n, patch(t["ndims_at"], "<I", 0), "n_dims"
        yield "tensor %s ne0 2^63" % n, patch(t["ne_at"][0], "<Q", 1 << 63), "negative"
        yield "tensor %s ne0 2^62" % n, patch(t["ne_at"][0], "<Q", 1 << 62), None
        if len(t["ne_at"]) > 1:
            yield "tensor %s ne1 2^62" % n, patch(t["ne_at"][1], "<Q", 1 << 62), None
        yield "tensor %s offset +1" % n, patch(t["offset_at"], "<Q", t["offset"] + 1), "alignment"
        yield "tensor %s offset past end" % n, patch(t["offset_at"], "<Q", size), "past the end"
        yield "tensor %s offset 2^64-32" % n, patch(t["offset_at"], "<Q", 2**64 - 32), "past the end"
        yield "tensor %s name length 2^40" % n, patch(t["name_len_at"], "<Q", 1 << 40), None
    if len(w.tensors) > 1:
        t1 = w.tensors[1]
        yield "tensor 1 overlaps tensor 0", patch(t1["offset_at"], "<Q", w.tensors[0]["offset"]), "overlaps"
    # duplicate tensor name: rename a tensor to an earlier one of the same length
    seen = {}
    for t in w.tensors:
        other = seen.get(len(t["name"]))
        if other is not None:
            yield "duplicate tensor %s" % other, ("patch", t["name_len_at"] + 8, other.encode()), "duplicate tensor name"
            break
        seen[len(t["name"])] = t["name"]


def test_hostile(tmp):
    out = os.path.join(tmp, "hostile.gguf")
    plan = [("vision/models/vis-mmproj.gguf", True), ("dflash/df-drafter.gguf", False),
            ("text/chaotic-q8_0.gguf", False), ("tokenizer/o200k-muse-vocab.gguf", False)]
    total = 0
    for rel, full in plan:
        path = os.path.join(GOLDEN, rel)
        data = open(path, "rb").read()
        w = Walk(data)
        base_written = False
        for what, edit, needle in hostile_variants(data, w, full):
            if edit[0] == "cut":
                with open(out, "wb") as f:
                    f.write(data[:edit[1]])
                base_written = False
                expect_error(out, "%s: %s" % (rel, what), needle)
            else:
                _, at, patch = edit
                if not base_written:
                    with open(out, "wb") as f:
                        f.write(data)
                    base_written = True
                with open(out, "r+b") as f:
                    f.seek(at)
                    f.write(patch)
                expect_error(out, "%s: %s" % (rel, what), needle)
                with open(out, "r+b") as f:
                    f.seek(at)
                    f.write(data[at:at + len(patch)])
            total += 1
    check(total > 250, "ran %d hostile variants" % total)
    print("%d hostile variants" % total)
    # a directory, a missing file, an empty file
    expect_error(tmp, "a directory")
    expect_error(os.path.join(tmp, "missing.gguf"), "a missing file", "cannot open")
    open(out, "wb").close()
    expect_error(out, "an empty file", "24-byte")


def tiny_gguf(tensors):
    """A GGUF v3 with general.architecture = 'x' and F32 tensors given as (name, ne, offset): the
    data section holds zeros up to the furthest tensor end (padded to 32)."""
    def gstr(t):
        b = t.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    out += gstr("general.architecture") + struct.pack("<I", 8) + gstr("x")
    end = 0
    for name, ne, off in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", 0, off)
        n = 1
        for d in ne:
            n *= d
        end = max(end, off + 4 * n)
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * ((end + 31) // 32 * 32)


def test_packed_layout(tmp):
    """llama.cpp's gguf_init_from_file refuses a file whose tensor offsets are not the packed
    sequence ggml writes ("tensor 'b' has offset 32, expected 0"): muse info refuses it too."""
    out = os.path.join(tmp, "packed.gguf")
    open(out, "wb").write(tiny_gguf([("a", [0], 0), ("b", [8], 32)]))
    expect_error(out, "zero-sized tensor followed by a gap", "offset 32, expected 0")
    open(out, "wb").write(tiny_gguf([("a", [8], 0), ("b", [8], 64)]))
    expect_error(out, "a gap of one alignment between tensors", "offset 64, expected 32")
    open(out, "wb").write(tiny_gguf([("a", [8], 32), ("b", [8], 0)]))
    expect_error(out, "tensors out of order", "offset 32, expected 0")
    open(out, "wb").write(tiny_gguf([("a", [0], 0), ("b", [8], 0)]))
    rc, _, err, _ = run([out])
    check(rc == 1 and b"unknown architecture" in err, "packed layout with a zero-sized tensor parses: %r" % err[:200])


def main():
    if not os.path.exists(MUSE):
        print("no CLI at %s" % MUSE, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="muse-info-") as tmp:
        test_golden()
        test_period_form(tmp)
        test_hostile(tmp)
        test_packed_layout(tmp)
    print("%s: %d passed, %d failed" % (os.path.basename(__file__), checks - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
