#!/usr/bin/env bash
# `make install PREFIX=...` into a temporary prefix: the CLI, libmuse.a and libmuse.so, muse.h,
# muse.pc and the man page; a small program built with `pkg-config --cflags --libs muse` against
# the shared library (and one against the static one) loads a model and agrees with the CLI;
# `make uninstall` removes everything. Then the commit a `git archive` tarball reports (no .git).
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
P="$tmp/prefix"

make -s install PREFIX="$P" > "$tmp/install.log" 2>&1
check "make install" '[ $? -eq 0 ]' || cat "$tmp/install.log"
for f in bin/muse lib/libmuse.a lib/libmuse.so lib/libmuse.so.0 include/muse.h lib/pkgconfig/muse.pc share/man/man1/muse.1; do
    check "installed $f" '[ -e "$P/$f" ]'
done
check "the man page has every subcommand's options" 'grep -q "^\.TH MUSE 1" "$P/share/man/man1/muse.1" && grep -q "muse run -m MODEL" "$P/share/man/man1/muse.1" && grep -q -- "--ctx-size" "$P/share/man/man1/muse.1"'
check "the installed CLI runs" '"$P/bin/muse" --version | grep -q "^muse "'

cat > "$tmp/prog.c" <<'C'
/* a libmuse user: load a model, evaluate three tokens, print the greedy next token */
#include <muse.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    struct muse_model *m;
    struct muse_context *c;
    struct muse_error err;
    if (argc < 2 || muse_model_load(argv[1], muse_model_default_params(), &m, &err)) return 1;
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 64;
    if (muse_context_create(m, cp, &c, &err)) return 1;
    int32_t toks[3] = {5, 6, 7}, n = muse_model_n_vocab(m), best = 0;
    float *logits = malloc(sizeof(float) * (size_t)n);
    if (!logits || muse_eval(c, toks, 3, logits, 0, &err)) return 1;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    printf("%s %d\n", muse_version(), best);
    free(logits);
    muse_context_free(c);
    muse_model_free(m);
    return 0;
}
C
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
flags=$(pkg-config --cflags --libs muse)
check "pkg-config knows muse" '[ $? -eq 0 ] && [[ "$flags" == *"-lmuse"* ]] && [ "$(pkg-config --modversion muse)" = "$("$P/bin/muse" --version | cut -d" " -f2)" ]'
cc -std=c11 -o "$tmp/prog" "$tmp/prog.c" $flags 2> "$tmp/cc.log"
check "a program builds with pkg-config --cflags --libs muse" '[ $? -eq 0 ]' || cat "$tmp/cc.log"
check "it links the shared library" 'readelf -d "$tmp/prog" | grep -q "NEEDED.*libmuse.so.0"'
"$P/bin/muse" synth --preset tiny -o "$tmp/m.gguf" -q
want=$("$P/bin/muse" run -m "$tmp/m.gguf" --tokens 5,6,7 -n 1 --ids 2>/dev/null)
got=$(LD_LIBRARY_PATH="$P/lib" "$tmp/prog" "$tmp/m.gguf")
check "it runs and agrees with the CLI ($got vs $want)" '[ -n "$want" ] && [ "$got" = "$(pkg-config --modversion muse) $want" ]'
# static: the archive, then the shared libraries it needs (its Requires.private and Libs.private:
# -lpthread -lm, and MPI's when the build has tensor parallelism)
cc -std=c11 -o "$tmp/prog_static" "$tmp/prog.c" $(pkg-config --cflags muse) "$(pkg-config --variable=libdir muse)/libmuse.a" \
    $(pkg-config --libs $(pkg-config --print-requires-private muse)) $(pkg-config --variable=libs_private muse) 2> "$tmp/cc2.log"
check "and statically against libmuse.a" '[ $? -eq 0 ] && [ "$("$tmp/prog_static" "$tmp/m.gguf")" = "$got" ]' || cat "$tmp/cc2.log"

make -s uninstall PREFIX="$P" > /dev/null 2>&1
check "make uninstall removes every file" '[ -z "$(find "$P" -type f -o -type l)" ]'

# the commit of a tarball: `git archive` fills COMMIT in (export-subst); scripts/commit.sh reads it
if git rev-parse --show-toplevel > /dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
    git archive --format=tar --prefix=src/ HEAD | tar -x -C "$tmp"
    check "no .git in the tarball" '[ ! -e "$tmp/src/.git" ]'
    check "a tarball knows its commit" '[ "$(sh "$tmp/src/scripts/commit.sh")" = "$(git rev-parse HEAD | cut -c1-12)" ]'
    check "make print-commit in the tarball" '[ "$(make -s -C "$tmp/src" print-commit)" = "$(git rev-parse HEAD | cut -c1-12)" ]'
else # this tree is itself a tarball: the binary carries its COMMIT
    check "the CLI reports the tarball's commit" 'build/muse --version | grep -q "commit $(head -c 12 COMMIT))"'
fi
exit $fail
