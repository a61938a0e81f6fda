#!/usr/bin/env bash
# Install what muse needs to build and test on Debian 12 (idempotent, non-interactive).
# Skips apt-get entirely when everything is already installed.
set -euo pipefail
PKGS="build-essential clang pkg-config libpcre2-dev libcjson-dev libmicrohttpd-dev libedit-dev libstb-dev libwebp-dev libjs-marked curl python3 python3-venv python3-pip"
# --test adds the Vulkan device's build (libvulkan-dev, glslc) and what its tests run on: Mesa's
# lavapipe (mesa-vulkan-drivers), spirv-val (spirv-tools), the Khronos validation layer
# (vulkan-validationlayers); without them the Vulkan tests fail rather than pass (tests/vulkan/).
# And the tensor-parallel build and tests: OpenMPI (the build uses it when mpicc is there) and
# iproute2 (ip netns, the two-host test).
[ "${1:-}" = "--test" ] && PKGS="$PKGS libclang-rt-14-dev libsimde-dev chromium chromium-driver libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers libopenmpi-dev openmpi-bin iproute2"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "installing:$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi
# Python packages for the server tests (tests/server/*.py): the official `openai` and `ollama`
# clients, `selenium` (drives chromium-driver) and `jsonschema` (validates grammar-constrained
# output) in a venv under build/, because Debian 12's system pip refuses installs outside a venv.
# Idempotent: skipped when all already import.
if [ "${1:-}" = "--test" ]; then
    VENV="$(cd "$(dirname "$0")/.." && pwd)/build/venv"
    if ! "$VENV/bin/python" -c "import openai, ollama, selenium, jsonschema" >/dev/null 2>&1; then
        echo "installing openai + ollama + selenium + jsonschema into $VENV"
        python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check openai ollama selenium jsonschema
    fi
fi
