#!/usr/bin/env bash
# Images in the text model through the CLI (issue 11 phase 2): `muse logits --tokens ...,img,...`
# with --mmproj/--image reproduces llama.cpp's logits after the golden image rows (every logit of
# every position of both encoder cases within the README's 3e-2), n_batch 7 (chunks cutting
# through the image) gives the same numbers as one batch; `muse run --image` with the projector
# found beside the model (and said so), markers in the prompt, several images; the errors (no
# projector beside the model, two of them, marker/image count mismatch, --image with --tokens,
# --no-mmproj with --image, an img item without --image) are one line each.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
G="$SHARED/golden/vision"
MM="$G/models/vis-mmproj.gguf"
TM="$G/models/vis-text-4l-256.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
one_line_error() {  # fails with status 1 or 2 and exactly one line on stderr
    local what="$1"; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; local st=$?
    local n; n=$(wc -l <"$tmp/err")
    if { [ "$st" -eq 1 ] || [ "$st" -eq 2 ]; } && [ "$n" -eq 1 ]; then echo "ok   $what: $(cat "$tmp/err")"
    else echo "FAIL $what: status $st, $n lines: $(cat "$tmp/err")"; fails=$((fails + 1)); fi
}

SEQ="997,84,305,277,995,img,996,12,45,300,301"
for c in "enc_336x336_cap64 img_336x336_gradient.png" "enc_700x300_cap64 img_700x300_text.png"; do
    set -- $c
    # the default kernels in one batch (against llama.cpp), and the exact ones (--no-repack: no tile
    # GEMM, whose batched order differs by design) in batches of 512 and 7, which must agree bit for bit
    for b in 512 512x 7x; do
        "$MUSE" logits -m "$TM" --mmproj "$MM" --image "$G/images/$2" --image-max-tokens 64 --tokens "$SEQ" \
            --kv f32 -t 1 --top 1000 -b ${b%x} $([ "$b" != "${b%x}" ] && echo --no-repack) >"$tmp/$1.$b.json" 2>"$tmp/err" || { echo "FAIL logits $1: $(cat "$tmp/err")"; fails=$((fails + 1)); }
    done
    python3 - "$tmp/$1.512.json" "$tmp/$1.512x.json" "$tmp/$1.7x.json" "$G/encoder/$1.llm_logits.npy" "$1" <<'EOF' || fails=$((fails + 1))
import array, json, struct, sys
fast, one, seven, gold, name = sys.argv[1:6]
b = open(gold, "rb").read()
n = struct.unpack("<H", b[8:10])[0]
h = eval(b[10:10 + n].decode())
g = array.array("f"); g.frombytes(b[10 + n:])
rows, cols = h["shape"]
d1, d7, df = json.load(open(one)), json.load(open(seven)), json.load(open(fast))
mx = 0.0
for d in (df, d1):
    pos = d["positions"]
    assert len(pos) == rows, (len(pos), rows)
    for r, p in enumerate(pos):
        assert len(p["top"]) == cols
        for tid, v in p["top"]:
            mx = max(mx, abs(v - g[r * cols + tid]))
same = [p["top"] for p in d1["positions"]] == [p["top"] for p in d7["positions"]]
n_img = sum(1 for t in d1["prompt"] if t == -1)
ok = mx <= 3e-2 and same and n_img == rows - 10
print("%s logits %s: %d positions (%d image rows) vs llama.cpp max abs %.3g; --no-repack -b 7 == -b 512: %s" %
      ("ok  " if ok else "FAIL", name, rows, n_img, mx, same))
sys.exit(0 if ok else 1)
EOF
done

# run: the projector beside the model is found and named; markers; two images
mkdir -p "$tmp/m1" "$tmp/m2" "$tmp/m0"
ln -s "$(realpath "$TM")" "$tmp/m1/text.gguf"; ln -s "$(realpath "$MM")" "$tmp/m1/vis-mmproj-f32.gguf"
ln -s "$(realpath "$TM")" "$tmp/m2/text.gguf"; ln -s "$(realpath "$MM")" "$tmp/m2/a-mmproj.gguf"; ln -s "$(realpath "$MM")" "$tmp/m2/b-mmproj.gguf"
ln -s "$(realpath "$TM")" "$tmp/m0/text.gguf"
IMG="$G/images/img_96x64_small.png"
"$MUSE" run -m "$tmp/m1/text.gguf" --image "$IMG" -p "describe" -n 4 --ids >"$tmp/out" 2>"$tmp/err"
check "run --image: projector found beside the model and named" grep -q "using the vision projector $tmp/m1/vis-mmproj-f32.gguf" "$tmp/err"
check "run --image: 4 ids generated" grep -Eq '^[0-9]+,[0-9]+,[0-9]+,[0-9]+$' "$tmp/out"
"$MUSE" run -m "$tmp/m1/text.gguf" --mmproj "$MM" --image "$IMG" -p "<__media__>describe" -n 4 --ids >"$tmp/out2" 2>"$tmp/err"
check "run: an explicit leading marker == the implicit one" cmp -s "$tmp/out" "$tmp/out2"
# a drafter beside images: the image rows go through the loop (the ring restarts after them), the
# turn decodes plainly, the output is the plain one
"$MUSE" synth --dflash --target "$TM" --layers 1 --block-size 4 --mask-id 3 -q -o "$tmp/drafter.gguf" 2>"$tmp/err" || { echo "FAIL synth --dflash: $(cat "$tmp/err")"; fails=$((fails + 1)); }
"$MUSE" run -m "$tmp/m1/text.gguf" --mmproj "$MM" --image "$IMG" -p "<__media__>describe" -n 12 --ids >"$tmp/plain" 2>/dev/null
"$MUSE" run -m "$tmp/m1/text.gguf" --mmproj "$MM" --image "$IMG" -p "<__media__>describe" -n 12 --ids --draft-model "$tmp/drafter.gguf" >"$tmp/spec" 2>"$tmp/err"
check "run --image --draft-model: the plain output" cmp -s "$tmp/plain" "$tmp/spec"
check "run: two images (6 + 144 rows)" bash -c "'$MUSE' run -m '$TM' --mmproj '$MM' --image '$IMG' --image '$G/images/img_336x336_gradient.png' -p 'a <__media__> b <__media__> c' -n 2 2>&1 | grep -q 'images: 2, 150 rows'"
one_line_error "no projector beside the model" "$MUSE" run -m "$tmp/m0/text.gguf" --image "$IMG" -p x -n 1
one_line_error "two projectors beside the model" "$MUSE" run -m "$tmp/m2/text.gguf" --image "$IMG" -p x -n 1
one_line_error "2 markers, 1 image" "$MUSE" run -m "$TM" --mmproj "$MM" --image "$IMG" -p "<__media__> <__media__>" -n 1
one_line_error "--image with --tokens" "$MUSE" run -m "$TM" --mmproj "$MM" --image "$IMG" --tokens 1,2 -n 1
one_line_error "--no-mmproj with --image" "$MUSE" run -m "$TM" --no-mmproj --image "$IMG" -p x -n 1
one_line_error "logits: img item without --image" "$MUSE" logits -m "$TM" --tokens 1,img,2
one_line_error "a text model as --mmproj" "$MUSE" run -m "$TM" --mmproj "$TM" --image "$IMG" -p x -n 1
"$MUSE" synth --mmproj -q --out 40 -o "$tmp/w40-mmproj.gguf"
one_line_error "a projector of another width (run)" "$MUSE" run -m "$TM" --mmproj "$tmp/w40-mmproj.gguf" --image "$IMG" -p x -n 1
one_line_error "a projector of another width (logits)" "$MUSE" logits -m "$TM" --mmproj "$tmp/w40-mmproj.gguf" --image "$IMG" --tokens 1,img,2
one_line_error "not an image" "$MUSE" run -m "$TM" --mmproj "$MM" --image "$TM" -p x -n 1

# chat: --image goes with the first message; /image attaches to the next; turn 2 reuses turn 1's image
out=$("$MUSE" chat -m "$TM" --mmproj "$MM" --image "$IMG" -p "what is this" -n 3 --temp 0 2>&1)
check "chat --image: one turn" grep -q "turn 1: prompt" <<<"$out"
printf '/image %s\nwhat is it\n/image %s\nand this\n/image /nonexistent.png\nhello\n' "$IMG" "$G/images/img_336x336_gradient.png" |
    "$MUSE" chat -m "$TM" --mmproj "$MM" -n 3 --temp 0 --image-max-tokens 64 >"$tmp/chat.out" 2>&1
t1=$(sed -n 's/.*turn 1: prompt \([0-9]*\) tokens.*/\1/p' "$tmp/chat.out")
r2=$(sed -n 's/.*turn 2: prompt [0-9]* tokens, \([0-9]*\) reused.*/\1/p' "$tmp/chat.out")
check "chat /image: turn 2 reuses turn 1 with its image ($r2 of $t1)" test -n "$t1" -a "${r2:-0}" -ge "${t1:-1}"
check "chat /image: a missing file is an error, the chat goes on" bash -c "grep -q \"cannot open image '/nonexistent.png'\" '$tmp/chat.out' && grep -q 'turn 3: prompt' '$tmp/chat.out'"

# bench: the tower and the time to first token with an image, as records
"$MUSE" bench -m "$TM" --mmproj "$MM" --image "$IMG" -p 0 -n 0 -r 1 -o jsonl >"$tmp/bench.jsonl" 2>"$tmp/err"
check "bench --image: img and ttft records" python3 -c "
import json, sys
r = [json.loads(l) for l in open('$tmp/bench.jsonl')]
assert [x['test'] for x in r] == ['img 96x64 (6 tok)', 'ttft img+16 (30 pos)'], r
assert all(x['avg_ts'] > 0 and x['n_prompt'] in (6, 30) for x in r)"

[ "$fails" -eq 0 ] && echo "test_media_cli: all passed" || echo "test_media_cli: $fails failed"
exit $((fails > 0))
