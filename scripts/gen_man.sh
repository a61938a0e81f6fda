#!/bin/sh
# Write the man page muse.1 (troff) on stdout from the CLI's own --help texts, so the page never
# drifts from the binary: NAME and SYNOPSIS from `muse --help`, then one section per subcommand
# with its `muse SUB --help` verbatim. Usage: sh scripts/gen_man.sh build/muse > build/muse.1
set -eu
MUSE="$1"
esc() { sed -e 's/\\/\\e/g' -e 's/^\([.'"'"']\)/\\\&\1/'; }
version=$("$MUSE" --version | head -n 1 | awk '{print $2}')
echo ".TH MUSE 1 \"\" \"muse $version\" \"User Commands\""
echo ".SH NAME"
echo "muse \\- inference engine for Muse-Glimmer GGUF models"
echo ".SH SYNOPSIS"
echo ".B muse"
echo ".I SUBCOMMAND"
echo "[options]"
echo ".SH DESCRIPTION"
echo ".nf"
"$MUSE" --help | esc
echo ".fi"
for sub in $("$MUSE" --help | awk '/^  [a-z]/ {print $1}'); do
    echo ".SH \"muse $sub\""
    echo ".nf"
    "$MUSE" "$sub" --help | esc
    echo ".fi"
done
echo ".SH ENVIRONMENT"
echo ".TP"
echo ".B MUSE_HISTORY"
echo "file of muse chat's line history (default ~/.muse_history; empty: no history file)"
echo ".TP"
echo ".B MUSE_CPU"
echo "force a SIMD level: scalar, avx2 or avx512"
echo ".TP"
echo ".B NO_COLOR"
echo "no colours in muse chat"
echo ".SH SEE ALSO"
echo "README.md and docs/ in the muse sources."
