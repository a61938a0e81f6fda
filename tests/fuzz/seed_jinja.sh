#!/usr/bin/env bash
# Seed the fuzz_jinja corpus (OUTDIR) with every golden chat template (held-out ones included
# when they are added to shared/golden/chat/templates).
set -euo pipefail
out="${1:?usage: seed_jinja.sh OUTDIR}"
shared="${MUSE_SHARED:-$(cd "$(dirname "$0")/../../.." && pwd)/shared}"
mkdir -p "$out"
for f in "$shared"/golden/chat/templates/*.jinja; do
    [ -f "$f" ] && cp "$f" "$out/golden-$(basename "$f")"
done
exit 0
