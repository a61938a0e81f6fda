#!/usr/bin/env bash
# `muse image` (the vision parity interface) end to end: --json geometry and resized-RGB hashes of
# golden images at caps 4096 and 64, --resized writes a PNG that decodes to the golden pixels,
# --embd writes a float32 .npy [n_tokens, n_embd_out] equal to the golden projected rows within the
# README's tolerance, --dump-stages writes the golden stage files, cpu (exact mode) and ref give the same bytes;
# `muse synth --mmproj` (tiny, custom dimensions, --from conversion) and `muse info` on projectors;
# bad images, a text model as --mmproj and an mmproj as a text model fail with exactly one line.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
G="$SHARED/golden/vision"
MM="$G/models/vis-mmproj.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
# one_line_error DESCRIPTION COMMAND...: fails with status 1 and exactly one line on stderr
one_line_error() {
    local what="$1"; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; local st=$?
    local n; n=$(wc -l <"$tmp/err")
    if [ "$st" -eq 1 ] && [ "$n" -eq 1 ]; then echo "ok   $what: $(cat "$tmp/err")"
    else echo "FAIL $what: status $st, $n lines: $(cat "$tmp/err")"; fails=$((fails + 1)); fi
}

# JSON fields against the goldens' preprocess.json, default cap and cap 64
python3 - "$MUSE" "$G" "$MM" <<'EOF' || fails=$((fails + 1))
import json, subprocess, sys
muse, g, mm = sys.argv[1:4]
pre = json.load(open(g + "/preprocess/preprocess.json"))
bad = 0
for e in pre["images"]:
    for want in [e] + [x for x in e["extra_caps"] if x["cap"] == 64]:
        cmd = [muse, "image", "--mmproj", mm, "--image", g + "/images/" + e["file"], "--json"]
        if want["cap"] != 4096:
            cmd += ["--image-max-tokens", str(want["cap"])]
        got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        for k in ("target_w", "target_h", "grid_tok_cols", "grid_tok_rows", "n_tokens", "patches_w", "patches_h",
                  "resampled", "resized_rgb_sha256"):
            if got[k] != want[k]:
                print("FAIL %s cap %d: %s = %r, golden %r" % (e["file"], want["cap"], k, got[k], want[k]))
                bad += 1
        if got["src_w"] != e["src_w"] or got["src_channels_in_file"] != e["src_channels_in_file"]:
            print("FAIL %s: source fields" % e["file"]); bad += 1
print("%s json geometry of %d images x 2 caps" % ("ok  " if not bad else "FAIL", len(pre["images"])))
sys.exit(1 if bad else 0)
EOF

# --resized: the PNG decodes to the golden resized pixels (muse decodes it: its hash is the golden's)
img="$G/images/img_700x300_text.png"
"$MUSE" image --mmproj "$MM" --image "$img" --resized "$tmp/r.png" >/dev/null
want=$(python3 -c "import json; print([e['resized_rgb_sha256'] for e in json.load(open('$G/preprocess/preprocess.json'))['images'] if e['file'] == 'img_700x300_text.png'][0])")
got=$("$MUSE" image --mmproj "$MM" --image "$tmp/r.png" --json | python3 -c "import json, sys; d = json.load(sys.stdin); print(d['resized_rgb_sha256'] if not d['resampled'] else 'resampled')")
check "--resized writes the golden pixels" [ "$got" = "$want" ]

# --embd and --dump-stages: the golden rows and stages within the README's tolerance
# (cpu: the default fast kernels, whose batched matmuls sum in another order, checked against the
# goldens below; exact: MUSE_CPU=exact, the bit-exact tables, which write the reference's bytes)
for be in cpu exact ref; do
    cpu_env="MUSE_CPU=${MUSE_CPU:-}"
    [ "$be" = exact ] && cpu_env="MUSE_CPU=${MUSE_CPU:+$MUSE_CPU,}exact"
    env "$cpu_env" "$MUSE" image --mmproj "$MM" --image "$img" --image-max-tokens 64 --embd "$tmp/$be.npy" \
        --dump-stages "$tmp/st-$be" --backend "${be/exact/cpu}" --threads 2 >/dev/null || fails=$((fails + 1))
done
check "--embd: cpu (exact) and ref write the same bytes" cmp -s "$tmp/exact.npy" "$tmp/ref.npy"
check "--dump-stages: cpu (exact) and ref the same bytes" diff -r -q "$tmp/st-exact" "$tmp/st-ref"
MUSE_VISION_DUMP="$tmp/st-env" "$MUSE" image --mmproj "$MM" --image "$img" --image-max-tokens 64 >/dev/null
check "MUSE_VISION_DUMP dumps the stages" cmp -s "$tmp/st-env/projected.npy" "$tmp/cpu.npy"
python3 - "$tmp" "$G/encoder" <<'EOF' || fails=$((fails + 1))
import array, struct, sys
tmp, enc = sys.argv[1:3]
def npy(p):
    b = open(p, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    h = eval(b[10:10 + n].decode())
    a = array.array("f"); a.frombytes(b[10 + n:])
    assert h["descr"] == "<f4" and not h["fortran_order"] and len(a) == h["shape"][0] * h["shape"][1]
    return h["shape"], a
bad = 0
pairs = [(tmp + "/cpu.npy", enc + "/enc_700x300_cap64.projected.npy")]
for st in ("after_posemb", "layer0_out_window_order", "layer3_out_window_order", "after_inv_perm", "pixel_shuffle"):
    pairs.append((tmp + "/st-cpu/" + st + ".npy", enc + "/enc_700x300_cap64." + st + ".npy"))
for mine, gold in pairs:
    (s1, a), (s2, b) = npy(mine), npy(gold)
    mx = max(abs(x - y) for x, y in zip(a, b))
    if s1 != s2 or mx > 1.5e-3:
        print("FAIL %s: shape %s vs %s, max abs %.3g" % (mine, s1, s2, mx)); bad += 1
print("%s --embd / --dump-stages against the goldens (%d arrays)" % ("ok  " if not bad else "FAIL", len(pairs)))
sys.exit(1 if bad else 0)
EOF

# muse synth --mmproj: tiny, custom odd dimensions, a Q8_0 conversion; each one runs
check "synth --mmproj tiny" "$MUSE" synth --mmproj -q -o "$tmp/tiny.gguf"
check "synth --mmproj custom" "$MUSE" synth --mmproj -q --layers 3 --embd 48 --heads 3 --ff 40 --patch 7 --pos-side 3 \
    --mm0 32 --mm1 24 --out 40 --type f16 -o "$tmp/odd.gguf"
check "synth --mmproj --from q8_0" "$MUSE" synth --mmproj -q --from "$MM" --type q8_0 -o "$tmp/q8.gguf"
out=$("$MUSE" image --mmproj "$tmp/odd.gguf" --image "$G/images/img_96x64_small.png" --embd "$tmp/odd.npy" --json)
check "custom projector encodes (40-wide rows)" python3 -c "
import json, sys; d = json.loads(sys.argv[1]); assert d['n_embd_out'] == 40 and d['n_tokens'] == 24, d  # 96 x 64 in cells of 14 px
b = open('$tmp/odd.npy', 'rb').read(); assert b\"'shape': (24, 40)\" in b" "$out"
check "q8_0 copy encodes" bash -c "'$MUSE' image --mmproj '$tmp/q8.gguf' --image '$img' --encode --threads 2 >/dev/null"
check "info: q8_0 matrices" bash -c "'$MUSE' info '$tmp/q8.gguf' | grep -q 'tower q8_0, adapter q8_0'"
check "info: derived window and tokens" bash -c "'$MUSE' info '$MM' | grep -q 'window .*4 x 4 patches' && '$MUSE' info '$MM' | grep -q '1036 x 1036 px, 37 x 37 = 1369 tokens'"
check "info --json: vision object" bash -c "'$MUSE' info --json '$tmp/tiny.gguf' | python3 -c \"import json, sys; v = json.load(sys.stdin)['vision']; assert v['window_side'] == 4 and v['n_tokens_1024x1024'] == 1369\""
one_line_error "synth --mmproj: bad dims" "$MUSE" synth --mmproj -q --embd 50 --heads 4 -o "$tmp/x.gguf"

# errors: one line each
printf 'not an image at all' >"$tmp/bad.png"
one_line_error "not an image" "$MUSE" image --mmproj "$MM" --image "$tmp/bad.png"
head -c 3000 "$img" >"$tmp/trunc.png"
one_line_error "truncated PNG" "$MUSE" image --mmproj "$MM" --image "$tmp/trunc.png"
: >"$tmp/empty.png"
one_line_error "empty file" "$MUSE" image --mmproj "$MM" --image "$tmp/empty.png"
one_line_error "missing image" "$MUSE" image --mmproj "$MM" --image "$tmp/missing.png"
one_line_error "pixel limit" "$MUSE" image --mmproj "$MM" --image "$img" --max-pixels 1000
one_line_error "text model as --mmproj" "$MUSE" image --mmproj "$G/models/vis-text-4l-256.gguf" --image "$img"
one_line_error "mmproj as the model" "$MUSE" run -m "$MM" -p hi -n 1
one_line_error "bad backend" "$MUSE" image --mmproj "$MM" --image "$img" --backend gpu
"$MUSE" image --image "$img" >/dev/null 2>&1; st=$?
check "missing --mmproj: usage (2)" [ "$st" -eq 2 ]

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
