#!/usr/bin/env bash
# Every symbol libmuse exports carries the `muse_` prefix (STYLE: `muse_` on every non-static
# symbol of the library, `static` for everything else): lists the defined global symbols of
# the library archive with nm and fails naming each one without the prefix.
#   MUSE_LIB  the archive to check (default: libmuse.a beside $MUSE, else build/libmuse.a)
set -uo pipefail
MUSE="${MUSE:-build/muse}"
LIB="${MUSE_LIB:-$(dirname "$MUSE")/libmuse.a}"
[ -f "$LIB" ] || LIB=build/libmuse.a
[ -f "$LIB" ] || { echo "FAIL: no library archive at $LIB (build it: make)"; exit 1; }
command -v nm > /dev/null || { echo "FAIL: nm not found (binutils)"; exit 1; }

# "member name" for every defined global (text, data, bss, rodata, weak ...): nm -A prints
# "archive:member:value type name"
syms=$(nm -g --defined-only -A "$LIB" 2> /dev/null | awk 'NF == 3 { n = split($1, p, ":"); print p[n - 1], $3 }') || true
n=$(printf '%s\n' "$syms" | grep -c . || true)
if [ "$n" -lt 50 ]; then # libmuse exports hundreds: a short list means nm read nothing useful
    echo "FAIL: nm listed only $n exported symbols in $LIB"
    exit 1
fi
fail=0
while read -r where name; do
    case "$name" in muse_*) continue ;; esac
    echo "FAIL: exported without the muse_ prefix: $name (in $where: make it static or prefix it)"
    fail=1
done <<< "$syms"
echo "checked $n exported symbols of $LIB"
[ $fail -eq 0 ] && echo "ok: every exported symbol carries the muse_ prefix"
exit $fail
