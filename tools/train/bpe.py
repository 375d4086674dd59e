"""Byte-level BPE: trainer, encoder, and the Hugging Face tokenizer.json format.

The pre-tokenizer is Qwen3.5's split regex (what wick calls pre "qwen35"), then
GPT-2's byte-to-unicode mapping; merges are learnt by pair frequency over the
pre-tokenized words. The written tokenizer.json has the layout Hugging Face
`tokenizers` reads (Sequence[Split(regex), ByteLevel(use_regex=false)], a BPE
model, ByteLevel decoder), so `wick tokenizer import` / `wick convert` and
`tokenizers.Tokenizer.from_file` both load it.

Special tokens are never parsed out of text here: the chat renderer (chat.py)
inserts their ids directly, as wick does for template markers."""
import heapq
import json
from collections import Counter, defaultdict

import regex

QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PAT = regex.compile(QWEN35_SPLIT)

# (text, special): special ones are control tokens (CONTROL in GGUF), the
# others user-defined text tokens that decode as text (<think>, <tool_call>).
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<think>", False), ("</think>", False), ("<tool_call>", False), ("</tool_call>", False),
    ("<tool_response>", False), ("</tool_response>", False),
]


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHARS = bytes_to_unicode()
CHAR_BYTES = {c: b for b, c in BYTE_CHARS.items()}


def to_byte_chars(s):
    return "".join(BYTE_CHARS[b] for b in s.encode("utf-8"))


def train(texts, vocab_size, log=print):
    """Learns merges until the BPE vocabulary plus ADDED_TOKENS has vocab_size
    entries. texts: iterable of str. Deterministic: ties go to the pair whose
    strings sort first. Returns (tokens, merges): tokens[i] is the byte-level
    string of id i (ids 0..255 are the single bytes in byte order)."""
    counts = Counter()
    for t in texts:
        counts.update(PAT.findall(t))
    tokens = [BYTE_CHARS[b] for b in range(256)]
    ids = {s: i for i, s in enumerate(tokens)}
    words, freqs = [], []
    for w, f in counts.items():
        words.append([ids[c] for c in to_byte_chars(w)])
        freqs.append(f)
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[a, b] += freqs[wi]
            where[a, b].add(wi)
    heap = [(-c, tokens[p[0]], tokens[p[1]], p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    target = vocab_size - len(ADDED_TOKENS)
    while len(tokens) < target and heap:
        negc, _, _, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue                                  # stale heap entry
        a, b = pair
        new = len(tokens)
        tokens.append(tokens[a] + tokens[b])
        merges.append((tokens[a], tokens[b]))
        changed = set()
        for wi in where.pop(pair, ()):
            w, f = words[wi], freqs[wi]
            if len(w) < 2:
                continue
            out, i, hit = [], 0, False
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                    hit = True
                else:
                    out.append(w[i])
                    i += 1
            if not hit:
                continue
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                changed.add(p)
            for p in zip(out, out[1:]):
                pair_count[p] += f
                where[p].add(wi)
                changed.add(p)
            words[wi] = out
        pair_count.pop(pair, None)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, tokens[p[0]], tokens[p[1]], p))
            elif p in pair_count:
                del pair_count[p]
        if len(merges) % 2000 == 0:
            log(f"bpe: {len(merges)} merges, vocabulary {len(tokens)}")
    return tokens, merges


class Tokenizer:
    """Encoder/decoder over a BPE vocabulary plus added tokens."""

    def __init__(self, tokens, merges, added):
        self.tokens = tokens                     # id -> byte-level string (BPE part)
        self.ids = {s: i for i, s in enumerate(tokens)}
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.merges = [tuple(m) for m in merges]
        self.added = added                       # [(text, special)] with ids len(tokens) + i
        self.special = {t: len(tokens) + i for i, (t, _) in enumerate(added)}
        self.cache = {}

    @property
    def n_vocab(self):
        return len(self.tokens) + len(self.added)

    def id_of(self, text):
        return self.special[text]

    def _word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        sym = list(to_byte_chars(w))
        while len(sym) > 1:
            best, bi = None, -1
            for i in range(len(sym) - 1):
                r = self.ranks.get((sym[i], sym[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = sym[bi], sym[bi + 1]
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == a and sym[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            sym = out
        ids = [self.ids[s] for s in sym]
        if len(self.cache) < 1 << 20:
            self.cache[w] = ids
        return ids

    def encode(self, text):
        """Plain text (no special-token parsing) to ids."""
        out = []
        for w in PAT.findall(text):
            out.extend(self._word(w))
        return out

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            if i < len(self.tokens):
                bs.extend(CHAR_BYTES[c] for c in self.tokens[i])
            else:
                bs.extend(self.added[i - len(self.tokens)][0].encode())
        return bs.decode("utf-8", errors="replace")

    def token_bytes(self, i):
        """Bytes of one id (added tokens: their UTF-8 text)."""
        if i < len(self.tokens):
            return bytes(CHAR_BYTES[c] for c in self.tokens[i])
        return self.added[i - len(self.tokens)][0].encode()

    def to_json(self):
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        return {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": len(self.tokens) + i, "content": t, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": sp}
                             for i, (t, sp) in enumerate(self.added)],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN35_SPLIT}, "behavior": "Isolated", "invert": False},
                byte_level]},
            "post_processor": byte_level,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {s: i for i, s in enumerate(self.tokens)},
                      "merges": [list(m) for m in self.merges]},
        }

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, ensure_ascii=False)

    @staticmethod
    def load(path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        vocab = j["model"]["vocab"]
        tokens = [None] * len(vocab)
        for s, i in vocab.items():
            tokens[i] = s
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]
        added = [(a["content"], a["special"]) for a in sorted(j["added_tokens"], key=lambda a: a["id"])]
        if [a["id"] for a in sorted(j["added_tokens"], key=lambda a: a["id"])] != \
                list(range(len(tokens), len(tokens) + len(added))):
            raise ValueError(f"{path}: added tokens must follow the BPE vocabulary")
        return Tokenizer(tokens, merges, added)


class FastEncoder:
    """Hugging Face `tokenizers` over the same tokenizer.json when installed
    (much faster, multi-threaded); None otherwise."""

    @staticmethod
    def open(path):
        try:
            import tokenizers
            tk = tokenizers.Tokenizer.from_file(path)
        except Exception as e:   # missing, or cannot read this file: the caller falls back to bpe.py
            print(f"bpe: Hugging Face tokenizers not used: {type(e).__name__}: {e}", flush=True)
            return None
        enc = FastEncoder()
        enc.tk = tk
        return enc

    def encode_batch(self, texts):
        return [e.ids for e in self.tk.encode_batch(texts, add_special_tokens=False)]
