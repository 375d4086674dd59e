#!/usr/bin/env python3
"""Writes small valid GGUF seeds for the fuzzer from (large) golden model files.

Each seed keeps every metadata key and tensor-info record of its source, but
cuts arrays to a few elements and shrinks every tensor to one or two rows of
one block, so the whole file is a few KB and still passes validation: the
fuzzer then starts from inputs that reach every part of the reader.
usage: make_seeds.py OUT_DIR GGUF[.gz]...
"""
import gzip
import os
import struct
import sys

SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q', 12: 'd'}
# ggml type id -> (elements per block, bytes per block), the types golden files use
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
         8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 20: (32, 18), 23: (256, 136)}
MAX_ARRAY = 6


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        if len(v) != n:
            raise ValueError('truncated')
        self.p += n
        return v

    def u32(self):
        return struct.unpack('<I', self.take(4))[0]

    def u64(self):
        return struct.unpack('<Q', self.take(8))[0]

    def string(self):
        return self.take(self.u64())


def enc_str(s):
    return struct.pack('<Q', len(s)) + s


def read_value(r, t):
    """Returns the re-encoded value (without its type), arrays cut short."""
    if t == 8:
        return enc_str(r.string())
    if t == 9:
        et, n = r.u32(), r.u64()
        keep = min(n, MAX_ARRAY)
        out = b''
        for i in range(n):
            v = read_value(r, et)
            if i < keep:
                out += v
        return struct.pack('<IQ', et, keep) + out
    fmt = SCALAR[t]
    return r.take(struct.calcsize('<' + fmt))


def shrink(path):
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as fh:
        buf = fh.read(16 << 20)  # headers of the golden files are far smaller
    r = Reader(buf)
    if r.take(4) != b'GGUF':
        raise ValueError('not GGUF')
    version, n_tensors, n_kv = r.u32(), r.u64(), r.u64()
    kvs = b''
    align = 32
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        start = r.p
        val = read_value(r, t)
        if key == b'general.alignment':
            align = struct.unpack('<I', buf[start:start + 4])[0]
        kvs += enc_str(key) + struct.pack('<I', t) + val
    infos, sizes = [], []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.u32()
        ne = [r.u64() for _ in range(nd)]
        t = r.u32()
        r.u64()
        be, bb = BLOCK[t]
        ne = [be] + [min(d, 2) for d in ne[1:]]
        rows = 1
        for d in ne[1:]:
            rows *= d
        infos.append((name, ne, t))
        sizes.append(rows * bb)
    out = b'GGUF' + struct.pack('<IQQ', version, n_tensors, n_kv) + kvs
    off = 0
    for (name, ne, t), size in zip(infos, sizes):
        out += enc_str(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', d) for d in ne)
        out += struct.pack('<IQ', t, off)
        off += (size + align - 1) // align * align
    if n_tensors:
        out += b'\0' * (-len(out) % align)
    for size in sizes:
        out += bytes((i * 37 + 11) & 0xff for i in range(size)) + b'\0' * (-size % align)
    return out


def main():
    out_dir = sys.argv[1]
    for path in sys.argv[2:]:
        seed = shrink(path)
        base = os.path.basename(path).replace('.gz', '').replace('.gguf', '')
        with open(os.path.join(out_dir, base + '.seed.gguf'), 'wb') as fh:
            fh.write(seed)


if __name__ == '__main__':
    main()
