#!/usr/bin/env bash
# README command (a): install, build, then run the trained tiny model shipped in models/ (real
# English: a 6M-parameter Muse-Glimmer trained on Shakespeare, models/README.md) as plain text and
# as a chat through the model's chat template; then the synthetic generator, which writes models
# of any size (up to the real 30B dimensions) and every quant type, with random weights.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
make -j"$(nproc 2>/dev/null || echo 2)" build/muse
model=models/glimmer-tiny-f16.gguf
./build/muse info "$model" | sed -n '/hyperparameters/,$p'
echo
echo "== muse run: the trained model continues a line (sampled, --seed 1) =="
./build/muse run -m "$model" -p "To be, or not to be" -n 64 --temp 0.7 --seed 1
echo
echo
echo "== muse chat: one turn through the Muse-Glimmer chat template (greedy) =="
echo "user: Good morrow, my lord. How fares your father?"
./build/muse chat -m "$model" -p "Good morrow, my lord. How fares your father?" --temp 0 -n 64
echo
echo "== muse synth: a synthetic model (random weights: the text is gibberish by design) =="
echo "(muse synth --preset 30b writes the real 30B dimensions, 9.7 GB; --types picks any quant type)"
mkdir -p demo
[ -f demo/muse-demo.gguf ] || ./build/muse synth --preset demo -o demo/muse-demo.gguf
./build/muse info demo/muse-demo.gguf | sed -n '/hyperparameters/,$p' | head -20
./build/muse run -m demo/muse-demo.gguf -p "Once upon a time" --max-tokens 24 --temp 0
