#!/usr/bin/env python3
"""muse perplexity end to end on a synthetic model (F32 weights, F32 KV cache):

  * the method against an independent computation: the text tokenized by `muse tokenize`, cut
    into chunks here, each chunk's first token replaced by BOS, its logits taken from
    `muse logits` (every id), -log p of the second half computed here in float64; the running
    values, the final PPL and its uncertainty must agree;
  * output format (the running "[i]x.xxxx," line, "Final estimate: PPL = X +/- Y"), --chunks,
    all chunks by default, batch < ctx equal to batch = ctx;
  * the base file: its layout parsed here (header, tokens, rows decoding to the log-softmax);
    KL of the model against itself = 0 with 100 % same top token; a Q8_0 copy has KL > 0;
  * bad inputs (text shorter than 2*ctx tokens, missing files, a foreign or damaged base file,
    a base made with another vocabulary or context): exit 1 with one clear line;
  * a long chunk's progress line on a terminal (a pty), none when piped.
Env: MUSE (the CLI)."""
import json, math, os, random, re, struct, subprocess, sys, tempfile

MUSE = os.environ.get('MUSE', 'build/muse')
failures = 0
CTX = 64


def check(what, cond, detail=''):
    global failures
    print(('ok: ' if cond else 'FAIL: ') + what + ('' if cond else '  ' + str(detail)[:600]))
    if not cond:
        failures += 1


def run(*args):
    return subprocess.run([MUSE] + [str(a) for a in args], capture_output=True, text=True)


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b))


tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'm.gguf')
subprocess.run([MUSE, 'synth', '--preset', 'tiny', '-o', model, '-q'], check=True)
rng = random.Random(7)
words = ('the of and to in a is that for it as was with be by on not he this are or his from at which but have an '
         'they you were her she there been one all we their has would when if so no will more what out up into time '
         'about then them can only other new some could these two may first any like now my such make over our even '
         'most me state after also made many did must before back see through way where get much go well your know').split()
lines = []
for _ in range(120):
    lines.append(' '.join(rng.choice(words) for _ in range(rng.randint(6, 14))).capitalize() + '.')
text_path = os.path.join(tmp, 'text.txt')
open(text_path, 'w').write('\n'.join(lines) + '\n')  # the trailing newline is dropped, as llama.cpp's -f does

# the token stream as llama-perplexity makes it
strip_path = os.path.join(tmp, 'strip.txt')
open(strip_path, 'w').write('\n'.join(lines))
ids = json.loads(run('tokenize', '-m', model, '--file', strip_path, '--json').stdout)['ids']
info = run('info', model).stdout
bos = int(re.search(r'tokenizer.ggml.bos_token_id\s+UINT32\s+(\d+)', info).group(1))
n_vocab = len(json.loads(run('logits', '-m', model, '--tokens', '1', '--top', '100000').stdout)['positions'][0]['top'])
check('text starts with BOS and is long enough', ids[0] == bos and len(ids) >= 4 * CTX, (ids[:3], len(ids)))


def chunk_logprobs(c):
    """log-softmax rows (float64) of chunk c's positions first..CTX-1, from `muse logits`."""
    chunk = ids[c * CTX:(c + 1) * CTX]
    chunk[0] = bos
    p = run('logits', '-m', model, '--tokens', ','.join(map(str, chunk)), '--top', n_vocab, '--ctx-size', CTX,
            '--kv', 'f32', '--batch', CTX)
    rows = []
    for pos in json.loads(p.stdout)['positions'][CTX // 2:]:
        row = [0.0] * n_vocab
        for i, v in pos['top']:
            row[i] = v
        mx = max(row)
        lse = mx + math.log(sum(math.exp(v - mx) for v in row))
        rows.append([v - lse for v in row])
    return rows


# --- the method against the independent computation ---
N_CHUNK = 4
want_running, nll, nll2, n = [], 0.0, 0.0, 0
logprobs = []
for c in range(N_CHUNK):
    rows = chunk_logprobs(c)
    logprobs.append(rows)
    for r in range(CTX // 2, CTX - 1):  # row of position r predicts token r + 1
        v = -rows[r - CTX // 2][ids[c * CTX + r + 1]]
        nll += v; nll2 += v * v; n += 1
    want_running.append(math.exp(nll / n))
mean = nll / n
want_ppl, want_unc = math.exp(mean), math.exp(mean) * math.sqrt((nll2 / n - mean * mean) / (n - 1))

base_path = os.path.join(tmp, 'base.bin')
p = run('perplexity', '-m', model, '-f', text_path, '-c', CTX, '--chunks', N_CHUNK, '--kv', 'f32',
        '--kl-divergence-base', base_path)
check('perplexity exits 0', p.returncode == 0, p.stderr)
out = p.stdout.splitlines()
check('two stdout lines', len(out) == 2, p.stdout)
check('running line format', len(out) > 0 and re.fullmatch(r'(\[\d+\]\d+\.\d{4},)+', out[0]) is not None, out[:1])
m = re.fullmatch(r'Final estimate: PPL = (\d+\.\d{4}) \+/- (\d+\.\d{5})', out[1] if len(out) > 1 else '')
check('final line format', m is not None, out[1:])
running = [float(x) for x in re.findall(r'\[\d+\]([\d.]+),', out[0] if out else '')]
check('--chunks 4: four running values', len(running) == N_CHUNK, running)
check('running values = independent computation',
      len(running) == N_CHUNK and all(close(a, b, 2e-6) for a, b in zip(running, want_running)), (running, want_running))
if m:
    check('final PPL = independent computation', close(float(m.group(1)), want_ppl, 2e-6), (m.group(1), want_ppl))
    check('uncertainty = independent computation', close(float(m.group(2)), want_unc, 1e-4), (m.group(2), want_unc))
check('timing on stderr', re.search(r'chunks of 64 tokens in [\d.]+ s', p.stderr) is not None, p.stderr)

# --- --chunks, all chunks, batch < ctx ---
p2 = run('perplexity', '-m', model, '-f', text_path, '-c', CTX, '--chunks', 2, '--kv', 'f32')
r2 = [float(x) for x in re.findall(r'\[\d+\]([\d.]+),', p2.stdout)]
check('--chunks 2 gives the first two values', len(r2) == 2 and all(close(a, b, 1e-6) for a, b in zip(r2, running)),
      (r2, running))
pa = run('perplexity', '-m', model, '-f', text_path, '-c', CTX, '--kv', 'f32')
ra = re.findall(r'\[(\d+)\]', pa.stdout)
check('all chunks by default: n_tokens // ctx', len(ra) == len(ids) // CTX and ra[-1] == str(len(ids) // CTX),
      (len(ra), len(ids)))
pb = run('perplexity', '-m', model, '-f', text_path, '-c', CTX, '--chunks', N_CHUNK, '--kv', 'f32', '--batch', 16)
rb = [float(x) for x in re.findall(r'\[\d+\]([\d.]+),', pb.stdout)]
# batches of 16 rows run the exact kernels, a batch of 64 the tile GEMM (another summation order,
# docs/cpu-backend.md): the NLL moves by ~1e-6 nats, which is the relative change of the PPL
check('batch 16 < ctx equals batch = ctx', len(rb) == N_CHUNK and all(close(a, b, 1e-5) for a, b in zip(rb, running)),
      (rb, running))
check('batch 16: four forwards per chunk reported', 'batch_size=16' in pb.stderr, pb.stderr)

# --- the base file, parsed here ---
data = open(base_path, 'rb').read()
magic, (fc, fv, fn) = data[:8], struct.unpack('<3i', data[8:20])
check('base header', magic == b'_logits_' and (fc, fv, fn) == (CTX, n_vocab, N_CHUNK), (magic, fc, fv, fn))
toks = list(struct.unpack('<%di' % (fn * fc), data[20:20 + 4 * fn * fc]))
check('base tokens = the text tokens (before the BOS substitution)', toks == ids[:fn * fc])
nv = 2 * ((n_vocab + 1) // 2) + 4
n_sc = CTX - 1 - CTX // 2
check('base size', len(data) == 20 + 4 * fn * fc + 2 * fn * n_sc * nv, len(data))
off = 20 + 4 * fn * fc
bad = 0
for c in range(fn):
    for r in range(n_sc):
        o = off + 2 * nv * (c * n_sc + r)
        scale, min_lp = struct.unpack('<2f', data[o:o + 8])
        vals = struct.unpack('<%dH' % n_vocab, data[o + 8:o + 8 + 2 * n_vocab])
        lp = logprobs[c][r]
        floor = max(lp) - 16
        bad += sum(1 for i in range(n_vocab) if abs(scale * vals[i] + min_lp - max(lp[i], floor)) > scale / 2 + 2e-5)
check('base rows decode to the log-softmax (floor max-16, half a step)', bad == 0, bad)

# --- KL divergence ---
pk = run('perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', base_path, '--kv', 'f32')
check('KL run exits 0', pk.returncode == 0, pk.stderr)
kld = re.search(r'Mean    KLD: +(-?[\d.]+) ± +([\d.]+)', pk.stdout)
top = re.search(r'Same top p: +([\d.]+) ± +([\d.]+) %', pk.stdout)
pq = re.search(r'Mean PPL\(Q\) +: +([\d.]+) ±', pk.stdout)
check('KL of the model against itself is 0', kld is not None and abs(float(kld.group(1))) < 1e-5, pk.stdout[-1500:])
check('same top token 100 %', top is not None and top.group(1) == '100.000', top and top.group(0))
check('PPL(Q) = the base run\'s PPL', pq is not None and m is not None and close(float(pq.group(1)), float(m.group(1)), 1e-6),
      (pq and pq.group(1), m and m.group(1)))
check('KL table: a row per chunk', len(re.findall(r'^ +\d+ +[\d.]+ ± ', pk.stdout, re.M)) == N_CHUNK, pk.stdout[:800])
for head in ('====== Perplexity statistics ======', '====== KL divergence statistics ======',
             '====== Token probability statistics ======', 'Mean PPL(Q)/PPL(base)', 'Mean PPL(Q)-PPL(base)', 'RMS Δp'):
    check('KL output has ' + head, head in pk.stdout)

# a genuine small perturbation: the same weights with an F16 KV cache against the F32-KV base
pk = run('perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', base_path, '--kv', 'f16')
kld = re.search(r'Mean    KLD: +(-?[\d.]+) ± +([\d.]+)', pk.stdout)
top = re.search(r'Same top p: +([\d.]+) ±', pk.stdout)
check('F16 KV against the F32-KV base: 0 < KL < 0.01, same top >= 90 %',
      pk.returncode == 0 and kld is not None and 0 < float(kld.group(1)) < 0.01 and top is not None and
      90 <= float(top.group(1)) <= 100, pk.stdout[-1500:] + pk.stderr)


# --- bad inputs: exit 1 (2 for usage), one clear line ---
def fails(what, args, pattern, rc=1):
    p = run(*args)
    first = p.stderr.splitlines()[0] if p.stderr else ''
    one = rc != 1 or len(p.stderr.splitlines()) == 1
    check(what, p.returncode == rc and re.search(pattern, first) is not None and one and p.stdout == '',
          (p.returncode, p.stderr, p.stdout[:200]))


short = os.path.join(tmp, 'short.txt')
open(short, 'w').write(' '.join(lines[:8]))
n_short = len(json.loads(run('tokenize', '-m', model, '--file', short, '--json').stdout)['ids'])
check('short text is between ctx and 2*ctx tokens', CTX <= n_short < 2 * CTX, n_short)
fails('text shorter than 2*ctx tokens', ['perplexity', '-m', model, '-f', short, '-c', CTX],
      r'you need at least 128 tokens to evaluate perplexity with a context of 64; .* tokenizes to only %d tokens' % n_short)
fails('missing text file', ['perplexity', '-m', model, '-f', os.path.join(tmp, 'nope.txt')], r'cannot read .*nope\.txt')
fails('missing model', ['perplexity', '-m', os.path.join(tmp, 'nope.gguf'), '-f', text_path, '-c', CTX], r'nope\.gguf')
fails('missing base file', ['perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', os.path.join(tmp, 'x.bin')],
      r'cannot open .*x\.bin')
fails('a text file as the base', ['perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', text_path],
      r'not a base file')
cut = os.path.join(tmp, 'cut.bin')
open(cut, 'wb').write(data[:-3])
fails('truncated base file', ['perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', cut], r'truncated')
other = os.path.join(tmp, 'v600.gguf')
subprocess.run([MUSE, 'synth', '--preset', 'tiny', '--vocab', '600', '-o', other, '-q'], check=True)
fails('base of another vocabulary', ['perplexity', '-m', other, '--kl-divergence', '--kl-divergence-base', base_path],
      r'inconsistent vocabulary')
fails('base with another context', ['perplexity', '-m', model, '--kl-divergence', '--kl-divergence-base', base_path,
                                     '-c', 128], r'computed with a context of 64, not 128')
fails('--kl-divergence without a base', ['perplexity', '-m', model, '--kl-divergence'], r'needs --kl-divergence-base', 2)
fails('no text', ['perplexity', '-m', model], r'-f TEXT is required', 2)
fails('context too small', ['perplexity', '-m', model, '-f', text_path, '-c', 2], r'at least 4', 2)
check('no partial base left after a failed run', not os.path.exists(os.path.join(tmp, 'fail.bin')) and
      run('perplexity', '-m', model, '-f', short, '-c', CTX, '--kl-divergence-base',
          os.path.join(tmp, 'fail.bin')).returncode == 1 and not os.path.exists(os.path.join(tmp, 'fail.bin')))

# on a terminal a chunk of several forwards shows its progress on stderr (erased after); piped: none
import pty
pid, fd = pty.fork()
if pid == 0:
    os.execv(MUSE, [MUSE, 'perplexity', '-m', model, '-f', text_path, '-c', str(CTX), '-b', '8', '--chunks', '2'])
out = b''
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
out = out.decode('utf-8', 'replace')
check('progress on a terminal', re.search(r'chunk 1/2: \d+/%d tokens' % CTX, out) and 'Final estimate' in out, out[-300:])
piped = run('perplexity', '-m', model, '-f', text_path, '-c', CTX, '-b', 8, '--chunks', 2)
check('no progress when piped', 'tokens (' not in piped.stderr and piped.returncode == 0, piped.stderr[-300:])

print('%d failures' % failures)
sys.exit(1 if failures else 0)
