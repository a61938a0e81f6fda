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

# Temporary: the server's helpers, renamed on another branch. Removed when the server rename lands.
allow=" srv_api_chat srv_api_completion srv_api_completions srv_api_detokenize srv_api_tokenize
 srv_client_gone srv_completion_job srv_completion_prompt srv_make_id srv_parse_body
 srv_parse_common srv_piece_json srv_reply_buf srv_reply_error srv_reply_json srv_run_job
 srv_tokenize_prompt srv_utf8_clean"
allow=" $(echo $allow) " # one space between names, and around them

# "member name" for every defined global (text, data, bss, rodata, weak ...): nm -A prints
# "archive:member:value type name"
syms=$(nm -g --defined-only -A "$LIB" 2> /dev/null | awk 'NF == 3 { n = split($1, p, ":"); print p[n - 1], $3 }') || true
n=$(printf '%s\n' "$syms" | grep -c . || true)
if [ "$n" -lt 50 ]; then # libmuse exports hundreds: a short list means nm read nothing useful
    echo "FAIL: nm listed only $n exported symbols in $LIB"
    exit 1
fi
fail=0
allowed=0
while read -r where name; do
    case "$name" in muse_*) continue ;; esac
    if [[ "$allow" == *" $name "* ]]; then
        allowed=$((allowed + 1))
        continue
    fi
    echo "FAIL: exported without the muse_ prefix: $name (in $where: make it static or prefix it)"
    fail=1
done <<< "$syms"
for name in $allow; do
    printf '%s\n' "$syms" | awk -v s="$name" '$2 == s { f = 1 } END { exit !f }' ||
        echo "note: allowlisted $name is no longer exported: drop it from the allowlist"
done
echo "checked $n exported symbols of $LIB ($allowed allowlisted)"
[ $fail -eq 0 ] && echo "ok: every exported symbol carries the muse_ prefix"
exit $fail
