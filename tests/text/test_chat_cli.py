#!/usr/bin/env python3
"""muse chat as a user tries it, through a pseudo-terminal, on a synthetic model:
the REPL prompt, two turns where the second reuses the first turn's KV cache (only the new
tokens are evaluated), /system, /reset (the next turn re-processes from scratch), /exit;
--dump-prompt (rendered prompt + special tokens parsed to single ids); muse run --chat equals
muse chat -p; a bad --reasoning value is refused.   Env: MUSE (the CLI)."""
import os, pty, re, select, subprocess, sys, tempfile, time

MUSE = os.environ.get('MUSE', 'build/muse')
failures = 0


def check(what, cond, detail=''):
    global failures
    print(('ok: ' if cond else 'FAIL: ') + what + ('' if cond else '  ' + detail))
    if not cond:
        failures += 1


tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'm.gguf')
subprocess.run([MUSE, 'synth', '--preset', 'tiny', '-o', model, '-q'], check=True)

# --- --dump-prompt: no inference, the prompt and its ids ---
p = subprocess.run([MUSE, 'chat', '-m', model, '-p', 'Hello there', '--reasoning', 'low', '--dump-prompt'],
                   capture_output=True, text=True)
check('dump-prompt exits 0', p.returncode == 0, p.stderr)
out = p.stdout
check('dump-prompt shows the rendered prompt',
      out.startswith('<|begin_of_text|><|start|>system<|message|>You are a helpful AI assistant.\n') and
      'Reasoning strength: low.' in out and out.split('\n\ntokens')[0].endswith(
          '<|start|>user<|message|>Hello there<|eot|><|start|>assistant'), out[:300])
m = re.search(r'tokens \((\d+)\): ([\d,]+)', out)
check('dump-prompt lists token ids', m is not None, out[-300:])
info = subprocess.run([MUSE, 'info', model], capture_output=True, text=True).stdout
bos = int(re.search(r'tokenizer.ggml.bos_token_id\s+UINT32\s+(\d+)', info).group(1))
eot = int(re.search(r'tokenizer.ggml.eot_token_id\s+UINT32\s+(\d+)', info).group(1))
if m:
    ids = [int(x) for x in m.group(2).split(',')]
    check('id count matches', len(ids) == int(m.group(1)))
    check('BOS text became the BOS id, once', ids[0] == bos and ids.count(bos) == 1, str(ids[:5]))
    check('<|eot|> parsed as a special token (system and user turns)', ids.count(eot) == 2, str(ids))

# --- muse template: the file's template, the built-in one, errors ---
shared = os.environ.get('MUSE_SHARED', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'shared'))
conv = os.path.join(shared, 'golden', 'chat', 'conversations', '28_muse_public_tool_round_trip.json')
want = open(os.path.join(shared, 'golden', 'chat', 'expected', 'muse-glimmer__28_muse_public_tool_round_trip.txt'), 'rb').read()
for args, what in (([ '--model', model], 'template from the GGUF'), ([], 'built-in template')):
    p = subprocess.run([MUSE, 'template'] + args + ['--conversation', conv, '--bos', '<|begin_of_text|>', '--now', '2026-11-29'],
                       capture_output=True)
    check('muse template with the %s matches the golden' % what, p.returncode == 0 and p.stdout == want, p.stderr.decode())
bad = os.path.join(tmp, 'bad.jinja')
open(bad, 'w').write('ok\n{{ messages[0].content ~ }}')
p = subprocess.run([MUSE, 'template', '--template', bad, '--conversation', conv], capture_output=True, text=True)
check('a template syntax error: status 1, line and column on stderr', p.returncode == 1 and 'line 2, column' in p.stderr and p.stdout == '', p.stderr)

# --- a bad reasoning strength is refused ---
p = subprocess.run([MUSE, 'chat', '-m', model, '-p', 'x', '--reasoning', 'off'], capture_output=True, text=True)
check('--reasoning off refused', p.returncode == 2 and 'low' in p.stderr, p.stderr)

# --- muse run --chat == muse chat -p (greedy) ---
a = subprocess.run([MUSE, 'run', '--chat', '-m', model, '-p', 'Hi', '-n', '8', '--temperature', '0'], capture_output=True)
b = subprocess.run([MUSE, 'chat', '-m', model, '-p', 'Hi', '-n', '8', '--temperature', '0'], capture_output=True)
check('run --chat works', a.returncode == 0 and len(a.stdout) > 0, a.stderr.decode(errors='replace'))
check('run --chat equals chat -p', a.stdout == b.stdout)
check('one-shot turn statistics', b'[turn 1: prompt' in b.stderr and b'generated 8 tokens' in b.stderr,
      b.stderr.decode(errors='replace'))

# --- the REPL through a pseudo-terminal ---
errpath = os.path.join(tmp, 'err.txt')
pid, fd = pty.fork()
if pid == 0:
    os.execvp('sh', ['sh', '-c', 'exec "$0" chat -m "$1" --temperature 0 -n 12 2>"$2"', MUSE, model, errpath])
buf = b''


def read_until(pattern, timeout=60):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        if re.search(pattern, buf):
            return True
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return bool(re.search(pattern, buf))
            if not chunk:
                break
            buf += chunk
    return bool(re.search(pattern, buf))


def send(line):
    global buf
    buf = b''
    os.write(fd, line.encode() + b'\r')


check('REPL shows a prompt', read_until(rb'> $'))
send('Hello, who are you?')
check('turn 1 answered, prompt again', read_until(rb'\n> $'))
send('And what can you do?')
check('turn 2 answered', read_until(rb'\n> $'))
send('/system Be brief.')
check('/system acknowledged', read_until(rb'system prompt set\)\r?\n> $'))
send('/reset')
check('/reset acknowledged', read_until(rb'conversation reset\)\r?\n> $'))
send('Fresh start')
check('turn after reset answered', read_until(rb'\n> $'))
send('/exit')
_, status = os.waitpid(pid, 0)
os.close(fd)
check('/exit ends with status 0', os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, str(status))

err = open(errpath).read()
turns = re.findall(r'\[turn (\d+): prompt (\d+) tokens, (\d+) reused from the cache, (\d+) evaluated', err)
check('three turns reported', len(turns) == 3, err)
if len(turns) == 3:
    (_, p1, r1, e1), (_, p2, r2, e2), (_, p3, r3, e3) = [tuple(map(int, t)) for t in turns]
    check('turn 1 evaluates its whole prompt', r1 == 0 and e1 == p1)
    check('turn 2 reuses all of turn 1\'s prompt from the KV cache', r2 >= p1, 'turn1 %d, reused %d' % (p1, r2))
    check('turn 2 evaluates only the new tokens', e2 == p2 - r2 and e2 < p2 - p1 + 64, 'prompt %d evaluated %d' % (p2, e2))
    check('after /reset the prompt is processed from scratch', r3 == 0 and e3 == p3)
    check('/system replaced the (longer) default system turn', p3 < p1 - 20, 'p1 %d p3 %d' % (p1, p3))
sys.exit(1 if failures else 0)
