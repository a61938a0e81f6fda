#!/usr/bin/env bash
# Seeds for fuzz_gguf: small GGUF files (or the first 64 KB of the larger golden ones, which
# hold their whole metadata) into OUTDIR. Every seed stays under 1 MB.
set -euo pipefail
out="${1:?usage: seed_gguf.sh OUTDIR}"
mkdir -p "$out"
shared="${MUSE_SHARED:-$(cd "$(dirname "$0")/../../.." && pwd)/shared}"
[ -d "$shared/golden" ] || exit 0
i=0
while IFS= read -r f; do
    i=$((i + 1))
    name="golden-$i-$(basename "$f" .gguf)"
    size=$(stat -c %s "$f")
    if [ "$size" -lt 1000000 ]; then
        cp "$f" "$out/$name.gguf"
    else
        head -c 65536 "$f" >"$out/$name.head64k"
    fi
    # the header + the first few records only: short seeds mutate fastest
    head -c 2048 "$f" >"$out/$name.head2k"
done < <(find "$shared/golden" -name '*.gguf' | sort)
chmod u+w "$out"/* 2>/dev/null || true
