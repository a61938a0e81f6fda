#!/usr/bin/env bash
# README command (a): install, build, write the demo model with `muse synth`, and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
make -j"$(nproc 2>/dev/null || echo 2)" build/muse
mkdir -p demo
[ -f demo/muse-demo.gguf ] || ./build/muse synth --preset demo -o demo/muse-demo.gguf
./build/muse info demo/muse-demo.gguf
