#!/usr/bin/env bash
# The chat page compiled into `muse serve` (src/server/page_data.c) matches src/server/page/index.html,
# and the running binary serves exactly those bytes at /.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 src/server/page/embed.py --check
MUSE="${MUSE:-build/muse}"
tmp=$(mktemp -d); trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
echo '{}' > "$tmp/script.json"
"$MUSE" serve --test-script "$tmp/script.json" --port 0 --port-file "$tmp/port" 2>"$tmp/log" & pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$(cat "$tmp/port")/" -o "$tmp/page.html"
cmp "$tmp/page.html" src/server/page/index.html
echo "page served byte for byte: 1 passed, 0 failed"
