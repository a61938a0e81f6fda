"""`muse draft` end to end against an independent float64 reference of the DFlash drafter written
in plain Python from ../shared/spec/dflash.md section 3 (no numpy), on pairs muse has never seen
a golden for: synthetic targets and drafters from `muse synth` / `muse synth --dflash` with other
block sizes (16, 4), windows (shorter and longer than the prompt, the ring wrapping), target
layers (0 = the normed embedding, the last layer, unsorted), GQA and plain heads, and llama.cpp's
narrowed block (--n-max). For each: the features muse captured are checked against the target's
own layer trace (the residual ENTERING each listed layer, MUSE_LAYER_TRACE), then the reference
drafter runs on those features and its raw logits, drafts, both confidences and row 0 are
compared with muse's on the ref and cpu backends. Then the visible golden pair through the CLI
(JSON and .npy dumps against the golden files), and CLI errors.
Env: MUSE (the CLI), MUSE_SHARED."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

MUSE = os.environ.get('MUSE', 'build/muse')
SHARED = os.environ.get('MUSE_SHARED', '../shared')
fails = 0


def check(desc, cond):
    global fails
    print(('ok   ' if cond else 'FAIL ') + desc)
    if not cond:
        fails += 1


# ---- readers ------------------------------------------------------------------------------------

def read_gguf(path):
    """Metadata and the F32 tensors of a GGUF file: (kv, {name: (ne, list of floats)})."""
    d = open(path, 'rb').read()
    o = [0]

    def rd(f):
        v = struct.unpack_from('<' + f, d, o[0])
        o[0] += struct.calcsize('<' + f)
        return v[0]

    def rs():
        n = rd('Q')
        s = d[o[0]:o[0] + n]
        o[0] += n
        return s.decode('utf-8', 'replace')

    sz = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}

    def rv(t):
        if t == 8:
            return rs()
        if t == 9:
            et = rd('I')
            n = rd('Q')
            return [rv(et) for _ in range(n)]
        return rd(sz[t])

    assert d[:4] == b'GGUF'
    o[0] = 4
    rd('I')
    nt, nkv = rd('Q'), rd('Q')
    kv = {}
    for _ in range(nkv):
        k = rs()
        kv[k] = rv(rd('I'))
    infos = []
    for _ in range(nt):
        name = rs()
        nd = rd('I')
        ne = [rd('Q') for _ in range(nd)]
        infos.append((name, ne, rd('I'), rd('Q')))
    align = kv.get('general.alignment', 32)
    start = (o[0] + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        if typ != 0:
            continue
        n = 1
        for x in ne:
            n *= x
        tensors[name] = (ne, list(struct.unpack_from('<%df' % n, d, start + off)))
    return kv, tensors


def read_npy(path):
    d = open(path, 'rb').read()
    assert d[:6] == b'\x93NUMPY' and d[6] == 1
    hl = struct.unpack_from('<H', d, 8)[0]
    hdr = d[10:10 + hl].decode()
    assert "'<f4'" in hdr and 'True' not in hdr
    shape = tuple(int(x) for x in hdr.split("'shape': (")[1].split(')')[0].split(',') if x.strip())
    n = shape[0] * shape[1]
    flat = struct.unpack_from('<%df' % n, d, 10 + hl)
    return [list(flat[r * shape[1]:(r + 1) * shape[1]]) for r in range(shape[0])]


# ---- the reference drafter (float64, spec 3.2-3.6) ---------------------------------------------------

def rows_of(t):
    ne, v = t
    return [v[i * ne[0]:(i + 1) * ne[0]] for i in range(ne[1] if len(ne) > 1 else 1)]


def matvec(w_rows, x):
    return [math.fsum(a * b for a, b in zip(r, x)) for r in w_rows]


def rms(x, w, eps):
    s = 1.0 / math.sqrt(math.fsum(v * v for v in x) / len(x) + eps)
    return [v * s * (w[i] if w else 1.0) for i, v in enumerate(x)]


def rope_neox(x, p, n_rot, base):
    half = n_rot // 2
    y = list(x)
    for i in range(half):
        a = p * base ** (-2.0 * i / n_rot)
        c, s = math.cos(a), math.sin(a)
        y[i] = x[i] * c - x[i + half] * s
        y[i + half] = x[i] * s + x[i + half] * c
    return y


def heads(x, n, hd):
    return [x[h * hd:(h + 1) * hd] for h in range(n)]


class Drafter:
    def __init__(self, path, target_path):
        kv, t = read_gguf(path)
        tkv, tt = read_gguf(target_path)
        a = 'dflash.'
        self.L = kv[a + 'block_count']
        self.H = kv[a + 'embedding_length']
        self.nh = kv[a + 'attention.head_count']
        self.nkv = kv[a + 'attention.head_count_kv']
        self.hd = kv[a + 'attention.key_length']
        self.n_rot = kv.get(a + 'rope.dimension_count', self.hd)
        self.base = kv[a + 'rope.freq_base']
        self.eps = kv[a + 'attention.layer_norm_rms_epsilon']
        self.B = kv[a + 'block_size']
        self.W = kv[a + 'attention.sliding_window']
        self.mask = kv['tokenizer.ggml.mask_token_id']
        self.layers = kv[a + 'target_layers']
        self.t = t
        self.embd = rows_of(tt['token_embd.weight'])
        self.out = rows_of(tt['output.weight'])
        self.w = {k: rows_of(v) for k, v in t.items() if len(v[0]) == 2}
        self.v = {k: v[1] for k, v in t.items() if len(v[0]) == 1}

    def kv_of(self, il, x, p):
        """k (normed, roped) and v heads of one row x at position p for layer il."""
        k = heads(matvec(self.w['blk.%d.attn_k.weight' % il], x), self.nkv, self.hd)
        v = heads(matvec(self.w['blk.%d.attn_v.weight' % il], x), self.nkv, self.hd)
        kn = self.v['blk.%d.attn_k_norm.weight' % il]
        k = [rope_neox(rms(h, kn, self.eps), p, self.n_rot, self.base) for h in k]
        return k, v

    def draft(self, feats, anchor, n_rows):
        P = len(feats)
        ring = {}  # (layer, position) -> (k heads, v heads): the positions a block can see
        for p in range(max(0, P - self.W), P):
            g = rms(matvec(self.w['fc.weight'], feats[p]), self.v['enc.output_norm.weight'], self.eps)
            for il in range(self.L):
                ring[(il, p)] = self.kv_of(il, g, p)
        ids = [anchor] + [self.mask] * (n_rows - 1)
        h = [list(self.embd[i]) for i in ids]
        g_size = self.nh // self.nkv
        for il in range(self.L):
            xs = [rms(r, self.v['blk.%d.attn_norm.weight' % il], self.eps) for r in h]
            qn = self.v['blk.%d.attn_q_norm.weight' % il]
            q = [[rope_neox(rms(hh, qn, self.eps), P + r, self.n_rot, self.base)
                  for hh in heads(matvec(self.w['blk.%d.attn_q.weight' % il], x), self.nh, self.hd)]
                 for r, x in enumerate(xs)]
            blk = [self.kv_of(il, x, P + r) for r, x in enumerate(xs)]
            att = []
            for r in range(n_rows):
                qp = P + r
                # a key at position pk is visible iff qp - pk < W: ring keys (pk < P) and, as llama.cpp's
                # KV mask applies the window to every key of the non-causal batch, block keys too (all
                # of them when block_size <= window, the shipped case)
                keys = [ring[(il, pk)] for pk in range(max(0, P - self.W), P) if qp - pk < self.W] + \
                    [blk[j] for j in range(n_rows) if r - j < self.W]
                row = []
                for hh in range(self.nh):
                    kvh = hh // g_size
                    s = [math.fsum(a * b for a, b in zip(q[r][hh], k[0][kvh])) / math.sqrt(self.hd) for k in keys]
                    m = max(s)
                    e = [math.exp(v - m) for v in s]
                    z = math.fsum(e)
                    row += [math.fsum(e[j] * keys[j][1][kvh][d] for j in range(len(keys))) / z for d in range(self.hd)]
                att.append(row)
            for r in range(n_rows):
                o = matvec(self.w['blk.%d.attn_output.weight' % il], att[r])
                h[r] = [a + b for a, b in zip(h[r], o)]
                x = rms(h[r], self.v['blk.%d.ffn_norm.weight' % il], self.eps)
                gt = matvec(self.w['blk.%d.ffn_gate.weight' % il], x)
                up = matvec(self.w['blk.%d.ffn_up.weight' % il], x)
                act = [gv / (1.0 + math.exp(-gv)) * u for gv, u in zip(gt, up)]
                h[r] = [a + b for a, b in zip(h[r], matvec(self.w['blk.%d.ffn_down.weight' % il], act))]
        return [matvec(self.out, rms(r, self.v['output_norm.weight'], self.eps)) for r in h]


def confidences(row):
    m = max(row)
    am = row.index(m)
    full = 1.0 / math.fsum(math.exp(v - m) for v in row)
    top = sorted(row, reverse=True)[:10]
    return am, full, 1.0 / math.fsum(math.exp(v - m) for v in top)


# ---- running muse ---------------------------------------------------------------------------------

def muse_draft(target, drafter, tokens, anchor, extra, tmp, tag, backend='ref', env=None):
    feat, logits = os.path.join(tmp, tag + '.f.npy'), os.path.join(tmp, tag + '.l.npy')
    args = [MUSE, 'draft', '-m', target, '--draft-model', drafter, '--tokens', ','.join(map(str, tokens)),
            '--anchor', str(anchor), '--kv', 'f32', '--json', '--backend', backend, '--dump-features', feat,
            '--dump-logits', logits] + extra
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(p.stderr)
        return None
    return json.loads(p.stdout), read_npy(feat), read_npy(logits), p.stderr


def check_pair(name, target, drafter, tokens, anchor, extra, tmp):
    P = len(tokens)
    env = dict(os.environ, MUSE_LAYER_TRACE='1', MUSE_LAYER_TRACE_POS=str(P))
    r = muse_draft(target, drafter, tokens, anchor, extra, tmp, name, 'ref', env)
    check(name + ': muse draft runs', r is not None)
    if r is None:
        return
    js, feats, logits, trace = r
    ref = Drafter(drafter, target)
    H = ref.H
    # the features are the residuals ENTERING the listed layers: the target's own layer trace
    tr = {}
    for line in trace.splitlines():
        if line.startswith('layer-trace '):
            f = dict(kv.split('=') for kv in line.split()[1:])
            tr[(int(f['pos']), int(f['layer']))] = (float(f['sum']), [float(x) for x in f['first'].split(',')])
    ok = len(feats) == P and all(len(row) == len(ref.layers) * H for row in feats)
    for p in range(P):
        for k, L in enumerate(ref.layers):
            s, first = tr.get((p, L), (None, None))
            sl = feats[p][k * H:(k + 1) * H] if ok else []
            ok = ok and s is not None and abs(math.fsum(sl) - s) <= 1e-6 * (1 + abs(s)) and \
                all(abs(a - b) <= 1e-6 * (1 + abs(b)) for a, b in zip(sl[:4], first))
    check('%s: features = the residuals entering target layers %s (layer trace)' % (name, ref.layers), ok)
    n_rows = js['n_rows']
    want = ref.draft(feats, anchor, n_rows)
    d = max(abs(a - b) for ra, rb in zip(logits, want) for a, b in zip(ra, rb))
    check('%s: %d raw logit rows within 1e-3 of the float64 reference (max %.2g)' % (name, n_rows, d),
          len(logits) == n_rows and d <= 1e-3)
    confs = [confidences(row) for row in want]
    top2 = [sorted(row, reverse=True)[:2] for row in want]
    check(name + ': row 0 argmax', js['row0_argmax'] == confs[0][0] or top2[0][0] - top2[0][1] < 1e-3)
    ok = len(js['draft_tokens']) == n_rows - 1
    for i in range(n_rows - 1):
        am, full, t10 = confs[i + 1]
        ok = ok and (js['draft_tokens'][i] == am or top2[i + 1][0] - top2[i + 1][1] < 1e-3)
        ok = ok and abs(js['confidences'][i] - full) <= 1e-4 and abs(js['confidences_top10'][i] - t10) <= 1e-4
    check(name + ': drafts and both confidences', ok)
    # the cpu backend's exact tables (MUSE_CPU=exact): the same bits
    cur = os.environ.get('MUSE_CPU', '')
    exact = dict(os.environ, MUSE_CPU=(cur + ',' if cur else '') + 'exact')
    c = muse_draft(target, drafter, tokens, anchor, extra + ['--threads', '2'], tmp, name + '-cpu', 'cpu', exact)
    check(name + ': cpu backend (exact) == ref (logits, drafts)', c is not None and c[2] == logits and
          c[0]['draft_tokens'] == js['draft_tokens'] and c[1] == feats)
    # the default cpu backend (the tile GEMM for batches of 32+ rows: another summation order):
    # the float64 reference's logits within the same 1e-3, the drafts unless a near tie
    c = muse_draft(target, drafter, tokens, anchor, extra + ['--threads', '2'], tmp, name + '-fast', 'cpu')
    ok = c is not None and len(c[2]) == n_rows
    d = max(abs(a - b) for ra, rb in zip(c[2], want) for a, b in zip(ra, rb)) if ok else float('inf')
    ok = ok and d <= 1e-3 and all(t == u or top2[i + 1][0] - top2[i + 1][1] < 1e-3
                                  for i, (t, u) in enumerate(zip(c[0]['draft_tokens'], js['draft_tokens'])))
    check('%s: cpu backend (default) within 1e-3 of the float64 reference (max %.2g), the same drafts' % (name, d), ok)


def main():
    tmp = tempfile.mkdtemp()
    try:
        def synth(args):
            return subprocess.run([MUSE, 'synth'] + args + ['-q'], capture_output=True, text=True).returncode == 0
        # pair A: 6-layer target (SSF, window 8); drafter block 16, window 8, layers [0, 2, 5], GQA 4/2 x 16
        ta, da = os.path.join(tmp, 'ta.gguf'), os.path.join(tmp, 'da.gguf')
        check('synth pair A', synth(['--layers', '6', '--embd', '64', '--heads', '2', '--kv-heads', '1', '--head-dim', '32',
                                     '--ff', '128', '--vocab', '300', '--ctx', '256', '--window', '8', '--pattern', 'SSF',
                                     '--seed', '5', '-o', ta]) and
              synth(['--dflash', '--target', ta, '--block-size', '16', '--window', '8', '--target-layers', '0,2,5',
                     '--heads', '4', '--kv-heads', '2', '--head-dim', '16', '--ff', '96', '--seed', '7', '-o', da]))
        toks = [(i * 53 + 17) % 280 + 3 for i in range(40)]
        check_pair('A P=40 block 16 (ring of 32 wraps)', ta, da, toks, 123, [], tmp)
        check_pair('A P=40 --n-max 3 (4 rows)', ta, da, toks, 9, ['--n-max', '3'], tmp)
        check_pair('A P=5 (window not full)', ta, da, toks[:5], 250, [], tmp)
        # pair B: 4-layer target; drafter 3 layers, block 4, window 64 > P, layers [3, 1], heads 2/2 x 32, mask given
        tb, db = os.path.join(tmp, 'tb.gguf'), os.path.join(tmp, 'db.gguf')
        check('synth pair B', synth(['--layers', '4', '--embd', '64', '--heads', '4', '--kv-heads', '2', '--head-dim', '16',
                                     '--ff', '64', '--vocab', '300', '--ctx', '256', '--window', '4', '-o', tb]) and
              synth(['--dflash', '--target', tb, '--layers', '3', '--block-size', '4', '--window', '64',
                     '--target-layers', '3,1', '--heads', '2', '--kv-heads', '2', '--head-dim', '32', '--mask-id', '17',
                     '-o', db]))
        check_pair('B P=12 block 4 window 64', tb, db, toks[:12], 77, [], tmp)

        # the visible golden pair through the CLI
        g = os.path.join(SHARED, 'golden', 'dflash')
        gj = json.load(open(os.path.join(g, 'dflash_vis.golden.json')))
        for case in gj['drafts']:
            P = case['n_committed']
            tokens = (gj['prompt'] + gj['plain_greedy'])[:P]
            for backend in ('ref', 'cpu'):
                r = muse_draft(os.path.join(g, gj['target']), os.path.join(g, gj['drafter']), tokens, case['anchor_token'],
                               ['--top', '10'], tmp, 'g%d%s' % (P, backend), backend)
                tag = 'golden P=%d %s' % (P, backend)
                check(tag + ': runs', r is not None)
                if r is None:
                    continue
                js, feats, logits, _ = r
                gf = read_npy(os.path.join(g, case['features_file']))
                gl = read_npy(os.path.join(g, 'dflash_vis.P%d.draft_logits.npy' % P))
                check(tag + ': features within 1e-3', max(abs(a - b) for x, y in zip(feats, gf) for a, b in zip(x, y)) <= 1e-3)
                check(tag + ': logits within 1e-3', max(abs(a - b) for x, y in zip(logits, gl) for a, b in zip(x, y)) <= 1e-3)
                check(tag + ': anchor_pos, drafts, row 0', js['anchor_pos'] == P and js['draft_tokens'] == case['draft_tokens']
                      and js['row0_argmax'] == case['row0_argmax_discarded'])
                check(tag + ': confidences within 1e-4', all(abs(a - b) <= 1e-4 for a, b in zip(js['confidences'], case['confidences'])))
                ok = len(js['top']) == len(case['top10_raw_logits_per_row'])
                for mine, want in zip(js['top'], case['top10_raw_logits_per_row']):
                    ok = ok and [i for i, _ in mine] == [i for i, _ in want] and \
                        all(abs(a[1] - b[1]) <= 1e-3 for a, b in zip(mine, want))
                check(tag + ': top-10 raw logits per row', ok)

        # CLI errors: one line on stderr, exit 1 (file problems) or 2 (usage)
        bad = subprocess.run([MUSE, 'draft', '-m', ta, '--draft-model', os.path.join(g, 'df-drafter.gguf'), '--tokens', '1,2',
                              '--anchor', '3'], capture_output=True, text=True)
        check('a drafter for another target: exit 1, one line naming the width',
              bad.returncode == 1 and bad.stderr.count('\n') == 1 and 'embedding_length' in bad.stderr)
        bad = subprocess.run([MUSE, 'draft', '-m', ta, '--draft-model', da, '--tokens', '1,2'], capture_output=True, text=True)
        check('no --anchor: usage error', bad.returncode == 2)
        bad = subprocess.run([MUSE, 'draft', '-m', ta, '--draft-model', da, '--tokens', '1,2', '--anchor', '3', '--rows', '17'],
                             capture_output=True, text=True)
        check('--rows above the block size: exit 1', bad.returncode == 1 and 'block_size' in bad.stderr)
        bad = subprocess.run([MUSE, 'synth', '--dflash', '--target', ta, '--target-layers', '6', '-o',
                              os.path.join(tmp, 'x.gguf')], capture_output=True, text=True)
        check('synth --dflash: a target layer outside the target', bad.returncode == 1 and 'outside' in bad.stderr)
        info = subprocess.run([MUSE, 'info', da], capture_output=True, text=True).stdout
        check('muse info shows the drafter as the loader reads it',
              'F = 3 x 64 = 192' in info and 'block_size 16' in info and '[0, 2, 5]' in info)
    finally:
        subprocess.run(['rm', '-rf', tmp])
    print('%d failed' % fails)
    sys.exit(1 if fails else 0)


main()
