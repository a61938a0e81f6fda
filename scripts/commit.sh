#!/bin/sh
# Print the commit muse is built from, for `muse --version` and `muse bench` (the Makefile embeds
# it): git's HEAD as 12 hex digits (+ "-dirty" when tracked files differ from it); outside a git
# checkout, the COMMIT file, which `git archive` fills in (.gitattributes: export-subst);
# "unknown" when neither says.
cd "$(dirname "$0")/.." || exit 1
top=$(git rev-parse --show-toplevel 2>/dev/null)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ] && c=$(git rev-parse HEAD 2>/dev/null); then
    c=$(echo "$c" | cut -c1-12)
    git diff --quiet HEAD -- 2>/dev/null || c="$c-dirty"
    echo "$c"
    exit 0
fi
c=$(head -c 40 COMMIT 2>/dev/null)
case "$c" in
    *Format*|"") echo unknown ;;
    *) echo "$c" | cut -c1-12 ;;
esac
