#!/usr/bin/env bash
# README command (a): install, build, write the demo model with `muse synth`, show it and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
make -j"$(nproc 2>/dev/null || echo 2)" build/muse
mkdir -p demo
[ -f demo/muse-demo.gguf ] || ./build/muse synth --preset demo -o demo/muse-demo.gguf
./build/muse info demo/muse-demo.gguf
echo
echo "== muse run (a synthetic model: random weights, so the text is gibberish) =="
./build/muse run -m demo/muse-demo.gguf -p "Once upon a time" --max-tokens 48
