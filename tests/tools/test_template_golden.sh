#!/usr/bin/env bash
# Render every (template, conversation) pair of the chat golden corpus with `muse template` and
# compare byte for byte with expected/*.txt, or require a failure where an .error is expected
# (raise_exception messages, class TemplateError, must appear verbatim on stderr).
# Pairs come from golden/chat/index.json, bos/eos from tokens.json (so held-out templates drop in).
#   MUSE (path of the CLI), MUSE_SHARED (the shared dir); GOLDEN_VERBOSE=1 lists every failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
MUSE="${MUSE:-$PWD/build/muse}"
MUSE_SHARED="${MUSE_SHARED:-$(cd .. && pwd)/shared}"
exec python3 - "$MUSE" "$MUSE_SHARED/golden/chat" <<'PY'
import concurrent.futures, json, os, subprocess, sys
muse, root = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(root, 'index.json')))
tokens = json.load(open(os.path.join(root, 'tokens.json')))
verbose = os.environ.get('GOLDEN_VERBOSE') == '1'
def check(row):
    t, conv = row['template'], row['conversation']
    tok = tokens['templates'].get(t, tokens['default'])
    cmd = [muse, 'template', '--template', os.path.join(root, 'templates', t),
           '--conversation', os.path.join(root, 'conversations', conv),
           '--bos', tok['bos_token'], '--eos', tok['eos_token'], '--now', '2026-11-29']
    for k, v in (row.get('added_kwargs') or {}).items():
        cmd += ['--var', '%s=%s' % (k, json.dumps(v, ensure_ascii=False))]
    p = subprocess.run(cmd, capture_output=True)
    expected_path = os.path.join(root, row['file'])
    if row['status'] == 'ok':
        want = open(expected_path, 'rb').read()
        if p.returncode != 0:
            return 'failed: ' + p.stderr.decode('utf-8', 'replace').strip()[:300]
        if p.stdout != want:
            got = p.stdout
            i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            return 'differs at byte %d: got %r want %r' % (i, got[max(0, i-40):i+40], want[max(0, i-40):i+40])
        return None
    if p.returncode != 1:
        return 'expected an error (%s: %s), got status %d' % (row.get('exception'), row.get('message'), p.returncode)
    if row.get('exception') == 'TemplateError' and row['message'].encode() not in p.stderr:
        return 'error message differs: got %r want %r' % (p.stderr.decode('utf-8', 'replace')[:300], row['message'])
    return None

ok = bad = 0
fails = {}
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    for row, why in zip(index, pool.map(check, index)):
        if why:
            bad += 1
            fails.setdefault(row['template'], []).append((row['conversation'], why))
        else:
            ok += 1
for t, lst in sorted(fails.items()):
    print('FAIL %s: %d pair(s)' % (t, len(lst)))
    for conv, why in (lst if verbose else lst[:2]):
        print('   %s: %s' % (conv, why))
print('%d pairs match, %d differ' % (ok, bad))
sys.exit(1 if bad else 0)
PY
