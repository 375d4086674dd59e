#!/usr/bin/env bash
# Golden models whose integer hyper-parameters lie (issue 24): a copy of the
# file with one integer patched, as a hostile file would carry it.
#  1. Regression cases: block_count 2^31-1 (wick run used to hang),
#     qwen35moe.feed_forward_length 2^32-1 / 2^31-1 (a 24 GiB allocation) and
#     rope.dimension_sections[0] 2^31-1 (signed overflow in the RoPE op):
#     `wick run`, `wick info` and `wick serve` exit non-zero with one stderr
#     line naming the key and its value, run and info at once (22-38 ms
#     alone; the bound, 5 s, only tells a refusal from the old hang).
#  2. Table: every integer key of the architecture (each array entry too) of
#     tiny-qwen3-F32, tiny-qwen35-Q4_K_M and tiny-qwen35moe-Q8_0 set to 0, 1,
#     2^31-1, 2^32-1 and twice its value (larger than the tensors): `wick run`
#     either runs (exit 0, generates) or exits 1 with one line, within
#     `timeout 10`, never crashes; when it refuses, `wick info` refuses with the
#     same message (one validation for both).
#  A file of an architecture wick does not run still gets `wick info` (saying
#  so), and `wick run` refuses it in one line.
# Values are written into the stored integer type modulo its width, as a
# hostile file's bytes would be (2^32-1 in an int32 slot reads as -1).
set -u
WICK=${WICK_BIN:-build/wick}
GOLDEN=${WICK_GOLDEN:-$(dirname "$0")/../../../shared/golden}
MODELS=$GOLDEN/models
if [ ! -d "$MODELS" ]; then
    if [ "${CI:-}" = true ]; then echo "golden models missing at $MODELS" >&2; exit 1; fi
    echo "skip: golden models missing at $MODELS"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-hostile.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

python3 - "$WICK" "$MODELS" "$tmp" <<'PY'
import os, struct, subprocess, sys, time

wick, models, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
INT = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 7: 'B', 10: 'Q', 11: 'q'}
SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def int_slots(buf):
    """(key, index or None, type, offset, value) of every integer value in the header."""
    p = 24
    n_kv = struct.unpack_from('<Q', buf, 16)[0]
    out = []
    for _ in range(n_kv):
        n = struct.unpack_from('<Q', buf, p)[0]
        key = buf[p + 8:p + 8 + n].decode()
        p += 8 + n
        t = struct.unpack_from('<I', buf, p)[0]
        p += 4
        if t == 8:
            p += 8 + struct.unpack_from('<Q', buf, p)[0]
        elif t == 9:
            et, cnt = struct.unpack_from('<IQ', buf, p)
            p += 12
            for i in range(cnt):
                if et == 8:
                    p += 8 + struct.unpack_from('<Q', buf, p)[0]
                    continue
                if et in INT:
                    out.append((key, i, et, p, struct.unpack_from('<' + INT[et], buf, p)[0]))
                p += SIZE[et]
        else:
            if t in INT:
                out.append((key, None, t, p, struct.unpack_from('<' + INT[t], buf, p)[0]))
            p += SIZE[t]
    return out


def patched(buf, slot, value):
    _, _, t, off, _ = slot
    bits = 8 * SIZE[t]
    b = bytearray(buf)
    struct.pack_into('<' + {1: 'B', 2: 'H', 4: 'I', 8: 'Q'}[SIZE[t]], b, off, value % (1 << bits))
    return bytes(b)


def run(args, limit=10):
    t0 = time.monotonic()
    try:
        r = subprocess.run(['timeout', str(limit)] + args, capture_output=True, text=True, errors='replace')
    except OSError as e:
        return 127, '', str(e), 0.0
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def name(slot):
    key, i = slot[0], slot[1]
    return key if i is None else f'{key}[{i}]'


fails = 0
RUN = ['--tokens', '1,2,3,4', '-n', '2', '-c', '64', '--temp', '0', '-t', '1']


def fail(msg):
    global fails
    fails += 1
    print('FAIL ' + msg)


def one_line_error(what, cmd, rc, err, secs, prefix, must_name=None, max_secs=None):
    lines = err.splitlines()
    if rc == 0 or rc >= 124:
        return fail(f'{what}: {cmd} rc={rc} ({"hang or crash" if rc >= 124 else "accepted"}), stderr: {err[-600:]}')
    if len(lines) != 1 or not lines[0].startswith(prefix):
        return fail(f'{what}: {cmd} rc={rc}, {len(lines)} stderr lines: {err[-600:]}')
    if must_name and must_name not in lines[0]:
        return fail(f'{what}: {cmd} message does not name "{must_name}": {lines[0]}')
    if max_secs and secs > max_secs:
        return fail(f'{what}: {cmd} took {secs:.2f} s')
    return lines[0][len(prefix):]


REFUSE_SECS = 5.0

# ---- 1. the three regression cases -------------------------------------------------
REGRESSIONS = [
    ('tiny-qwen3-F32', 'qwen3.block_count', None, 2**31 - 1),
    ('tiny-qwen35-Q4_K_M', 'qwen35.block_count', None, 2**31 - 1),
    ('tiny-qwen35moe-Q8_0', 'qwen35moe.block_count', None, 2**32 - 1),
    ('tiny-qwen35moe-Q8_0', 'qwen35moe.feed_forward_length', None, 2**32 - 1),
    ('tiny-qwen35moe-Q8_0', 'qwen35moe.feed_forward_length', None, 2**31 - 1),
    ('tiny-qwen35-Q4_K_M', 'qwen35.rope.dimension_sections', 0, 2**31 - 1),
    ('tiny-qwen35moe-Q8_0', 'qwen35moe.rope.dimension_sections', 0, 2**31 - 1),
]
for model, key, idx, value in REGRESSIONS:
    buf = open(f'{models}/{model}.gguf', 'rb').read()
    slot = next(s for s in int_slots(buf) if s[0] == key and s[1] == idx)
    path = f'{tmp}/regression.gguf'
    open(path, 'wb').write(patched(buf, slot, value))
    what = f'{model} {name(slot)}={value}'
    rc, _, err, secs = run([wick, 'run', '-m', path] + RUN)
    # alone they take 22-38 ms (sanitized build); the bound only has to tell a refusal from the
    # old hang (no output for 60 s) on a loaded machine, so it is generous
    msg = one_line_error(what, 'run', rc, err, secs, 'wick run: ', key, REFUSE_SECS)
    rc, out, err2, secs2 = run([wick, 'info', path])
    one_line_error(what, 'info', rc, err2, secs2, 'wick info: ', key, REFUSE_SECS)
    # serve prints its readiness report (wick check's) first, then one line with the reason
    rc, _, err3, _ = run([wick, 'serve', '-m', path, '--port', '0', '-t', '1'])
    logs = [l for l in err3.splitlines() if l.startswith('wick serve: ')]
    one_line_error(what, 'serve', rc, '\n'.join(logs) + '\n', 0, 'wick serve: ', key)
    if msg:
        print(f'ok   {what}: run {secs * 1000:.0f} ms, info {secs2 * 1000:.0f} ms: {msg}')

# ---- an architecture wick does not run: info still shows the file and says so ----------
buf = bytearray(open(f'{models}/tiny-qwen3-F32.gguf', 'rb').read())
i = buf.find(b'qwen3', 0, 256)
buf[i + 4:i + 5] = b'X'
path = f'{tmp}/other-arch.gguf'
open(path, 'wb').write(bytes(buf))
rc, out, err, _ = run([wick, 'info', path])
if rc != 0 or "wick runs it:   no: architecture 'qwenX' is not supported" not in out:
    fail(f'info on an unsupported architecture: rc={rc}, stdout: {out[-400:]} stderr: {err[-400:]}')
rc, _, err, secs = run([wick, 'run', '-m', path] + RUN)
one_line_error('unsupported architecture', 'run', rc, err, secs, 'wick run: ', "architecture 'qwenX'")

# ---- 2. every integer key, hostile values --------------------------------------------
n_runs = n_refused = 0
t_start = time.monotonic()
for model in ('tiny-qwen3-F32', 'tiny-qwen35-Q4_K_M', 'tiny-qwen35moe-Q8_0'):
    buf = open(f'{models}/{model}.gguf', 'rb').read()
    arch = model.split('-')[1]
    slots = [s for s in int_slots(buf) if s[0].startswith(arch + '.')]
    if not slots:
        fail(f'{model}: no integer keys found')
    for slot in slots:
        for value in sorted({0, 1, 2**31 - 1, 2**32 - 1, 2 * slot[4] if slot[4] else 2}):
            path = f'{tmp}/variant.gguf'
            open(path, 'wb').write(patched(buf, slot, value))
            what = f'{model} {name(slot)}={value}'
            rc, out, err, secs = run([wick, 'run', '-m', path] + RUN)
            n_runs += 1
            if rc == 0:
                if os.environ.get('VERBOSE'): print(f'ran {what}')
                if 'generated:' not in err:
                    fail(f'{what}: exit 0 without generating: {err[-400:]}')
                continue
            msg = one_line_error(what, 'run', rc, err, secs, 'wick run: ')
            if not msg:
                continue
            n_refused += 1
            if os.environ.get('VERBOSE'): print(f'refused {what}: {msg}')
            rc, _, err2, secs2 = run([wick, 'info', path])
            imsg = one_line_error(what, 'info', rc, err2, secs2, 'wick info: ')
            if imsg is not None and imsg != msg:
                fail(f'{what}: run and info disagree:\n  run:  {msg}\n  info: {imsg}')
print(f'{n_runs} variants in {time.monotonic() - t_start:.1f} s: {n_refused} refused with one line, '
      f'{n_runs - n_refused} ran')
print(f'{fails} failure(s)')
sys.exit(1 if fails else 0)
PY
