#!/usr/bin/env bash
# Install what muse needs to build and test on Debian 12 (idempotent, non-interactive).
# Skips apt-get entirely when everything is already installed.
set -euo pipefail
PKGS="build-essential clang pkg-config libpcre2-dev libcjson-dev libmicrohttpd-dev curl python3 python3-venv python3-pip"
[ "${1:-}" = "--test" ] && PKGS="$PKGS libclang-rt-14-dev chromium chromium-driver"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "installing:$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi
