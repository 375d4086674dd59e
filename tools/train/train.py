"""Stage 3, train: a Qwen3.5 hybrid model on the corpus plus synthetic chat
tasks, with a length curriculum.

  python3 tools/train/train.py --preset target --data data/ --tok tok/ --out run/target \\
      (--steps N | --time-budget SECONDS) [--seed 1]

Every training row is either a random window of the tokenized train split
(files joined by <|endoftext|>) or a pack of chat samples (tasks.py); a chat
sample's completion tokens weigh COMPLETION_WEIGHT, its prompt tokens
PROMPT_WEIGHT, code tokens 1. Rows per step shrink as the length grows (fixed
tokens per step). A model with an MTP head also learns to predict token t+2
(weight MTP_WEIGHT).

--time-budget times a few steps at every curriculum length on a scratch copy
of the model, picks the step count that fits, logs it, and then trains
exactly as --steps with that count would (same seed, same data order).
Writes OUT/ckpt.pt (config, fp32 weights, the step count) and OUT/train.log."""
import argparse
import copy
import json
import math
import multiprocessing as mp
import os
import pickle
import queue
import random
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

import bpe
import chat
import tasks as T
from qwen35 import Config, Qwen35ForCausalLM

PRESETS = {
    # ~22M parameters with MTP; 8 layers (6 Gated DeltaNet, 2 gated attention)
    "target": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
                   num_key_value_heads=2, head_dim=64, linear_num_key_heads=3, linear_num_value_heads=6,
                   linear_key_head_dim=64, linear_value_head_dim=64, mtp_num_hidden_layers=1,
                   max_position_embeddings=16384),
    # ~5M parameters, same tokenizer: the speculative draft
    "draft": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=3,
                  num_key_value_heads=1, head_dim=64, linear_num_key_heads=3, linear_num_value_heads=3,
                  linear_key_head_dim=64, linear_value_head_dim=64, mtp_num_hidden_layers=0,
                  max_position_embeddings=16384),
    # CPU smoke / CI case: every feature of the target (GQA, H_v = 2 H_k, MTP) at toy size
    "micro": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=16, linear_value_head_dim=16, mtp_num_hidden_layers=1,
                  max_position_embeddings=2048),
}
# (length, share of the steps): short first, up to 16K tokens
CURRICULUM = {
    "target": [(1024, 0.35), (2048, 0.25), (4096, 0.20), (8192, 0.10), (16384, 0.10)],
    "draft": [(1024, 0.30), (2048, 0.20), (4096, 0.20), (8192, 0.15), (16384, 0.15)],
    "micro": [(128, 0.5), (256, 0.3), (512, 0.2)],
}
POOL_SAMPLES = {"target": 3000, "draft": 3000, "micro": 200}   # chat samples per curriculum length
# the target's 131K-token steps of the first run left it 179 optimizer steps in 6 minutes: too few
TOKENS_PER_STEP = {"target": 65536, "draft": 65536, "micro": 2048}
LR = {"target": 2e-3, "draft": 3e-3, "micro": 3e-3}
CHAT_SHARE = 0.35            # fraction of rows that are packed chat samples
COMPLETION_WEIGHT = 2.0
PROMPT_WEIGHT = 0.5
MTP_WEIGHT = 0.3
WARMUP_STEPS = 50


def log_to(path):
    f = open(path, "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        f.write(line + "\n")
        f.flush()
    return log


# ---- data ------------------------------------------------------------------------------

def read_split(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def encode_texts(tok, fast, texts):
    """Plain-text encoding of many strings; Hugging Face tokenizers when
    available (texts holding added-token text go through bpe.py, which never
    matches them, as wick's plain mode)."""
    if fast is None:
        return [tok.encode(t) for t in texts]
    plain = [i for i, t in enumerate(texts) if not any(a in t for a, _ in bpe.ADDED_TOKENS)]
    out = [None] * len(texts)
    for i, ids in zip(plain, fast.encode_batch([texts[i] for i in plain])):
        out[i] = ids
    for i, t in enumerate(texts):
        if out[i] is None:
            out[i] = tok.encode(t)
    return out


def token_stream(tok, fast, files):
    """All files encoded and joined, each followed by <|endoftext|> (uint16 ids)."""
    assert tok.n_vocab <= 1 << 16
    eot = tok.id_of("<|endoftext|>")
    parts = []
    for ids in encode_texts(tok, fast, [f["text"] for f in files]):
        parts.append(np.asarray(ids, dtype=np.uint16))
        parts.append(np.asarray([eot], dtype=np.uint16))
    return np.concatenate(parts)


SHORT_TASKS = ["explain", "implement", "docstring", "signature", "tool"]
LONG_TASKS = ["find", "needle", "keyvalue", "vartrack"]


_FILES = []   # (path, text) of the train split, set before the worker pool forks


def _gen_worker(args):
    """Renders n chat samples as Parts item lists (picklable); reads _FILES."""
    seed, n, length, thinking_share = args
    rng = random.Random(seed)
    tk = T.Tasks([T.Source(p, t) for p, t in _FILES], rng)
    out = []
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        long = length >= 256 and rng.random() < 0.5
        kind = rng.choice(LONG_TASKS if long else SHORT_TASKS)
        try:
            r = getattr(tk, kind)(int(length * rng.uniform(0.25, 0.85))) if long else getattr(tk, kind)()
        except (RecursionError, ValueError, IndexError):
            r = None
        if not r:
            continue
        msgs, answer, tools, calls = r
        thinking = rng.random() < thinking_share
        p = chat.render_prompt(msgs, tools, thinking).items
        c = chat.render_completion(answer, calls, thinking).items
        out.append((kind, p, c))
    return out


def gen_chat_samples(tok, fast, files, n, length, seed, workers, log):
    """n samples for rows of `length` tokens: (ids, weights) as numpy arrays."""
    _FILES[:] = [(f["path"], f["text"]) for f in files]
    per = max(1, n // max(workers, 1))
    jobs = [(seed * 1000003 + i, per, length, 0.5) for i in range((n + per - 1) // per)]
    t0 = time.time()
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            rendered = [s for part in pool.map(_gen_worker, jobs) for s in part]
    else:
        rendered = [s for j in jobs for s in _gen_worker(j)]
    runs = [v for _, p, c in rendered for kind, v in p + c if kind == "t"]
    enc = iter(encode_texts(tok, fast, runs))
    samples, kinds = [], {}
    for kind, p, c in rendered:
        ids, w = [], []
        for items, weight in ((p, PROMPT_WEIGHT), (c, COMPLETION_WEIGHT)):
            for k, v in items:
                x = [tok.id_of(v)] if k == "s" else next(enc)
                ids.extend(x)
                w.extend([weight] * len(x))
        if len(ids) > length + 1:
            continue                       # longer than a row: dropped, not cut
        samples.append((np.asarray(ids, np.uint16), np.asarray(w, np.float32)))
        kinds[kind] = kinds.get(kind, 0) + 1
    log(f"chat samples for length {length}: {len(samples)} in {time.time() - t0:.0f} s, kinds {kinds}, "
        f"mean {np.mean([len(s[0]) for s in samples]) if samples else 0:.0f} tokens")
    return samples


def load_or_make_prep(a, tok, fast, log):
    """Tokenized train/held-out streams and the chat pools, cached in --prep
    (shared by the runs of one data + tokenizer: the target and the draft)."""
    if a.prep and os.path.exists(a.prep):
        with open(a.prep, "rb") as f:
            prep = pickle.load(f)
        log(f"prep: loaded {a.prep}: {len(prep['stream'])} train tokens, lengths {sorted(prep['pools'])}")
        return prep
    train_files = read_split(os.path.join(a.data, "train.jsonl"))
    held_files = read_split(os.path.join(a.data, "heldout.jsonl"))
    if fast is not None:   # the fast encoder must agree with bpe.py (and so with wick) on real files
        sample = [f["text"] for f in train_files[:50]]
        bad = sum(x != tok.encode(t) for x, t in zip(encode_texts(tok, fast, sample), sample))
        log(f"encoder check: tokenizers and bpe.py differ on {bad} of {len(sample)} files")
    t0 = time.time()
    stream = token_stream(tok, fast, train_files)
    held = token_stream(tok, fast, held_files)
    nbytes = sum(len(f["text"].encode()) for f in train_files)
    log(f"tokenized {len(train_files)} files: {len(stream)} tokens ({nbytes / len(stream):.2f} bytes/token) "
        f"in {time.time() - t0:.0f} s; held out {len(held)} tokens")
    pools = {}
    for i, (length, _) in enumerate(CURRICULUM[a.preset]):
        pools[length] = gen_chat_samples(tok, fast, train_files, POOL_SAMPLES[a.preset], length,
                                         a.seed + 17 * i, a.workers, log)
    prep = {"stream": stream, "held": held, "pools": pools}
    if a.prep:
        with open(a.prep + ".tmp", "wb") as f:
            pickle.dump(prep, f, protocol=4)
        os.replace(a.prep + ".tmp", a.prep)
    return prep


class Batcher:
    """Rows of length+1 tokens and their loss weights, from the stream and the chat pools."""

    def __init__(self, stream, pools, eot, seed):
        self.stream, self.pools, self.eot = stream, pools, eot
        self.rng = np.random.default_rng(seed)

    def chat_row(self, length):
        n = length + 1
        if True:
            pool = self.pools[length]
            ids, w = [], []
            used = 0
            while used < n:
                s_ids, s_w = pool[self.rng.integers(len(pool))]
                if used and used + len(s_ids) + 1 > n:
                    break
                ids.append(s_ids)
                w.append(s_w)
                ids.append(np.asarray([self.eot], np.uint16))
                w.append(np.asarray([0.0], np.float32))
                used += len(s_ids) + 1
            ids, w = np.concatenate(ids)[:n], np.concatenate(w)[:n]
            if len(ids) < n:   # fill with code
                k = n - len(ids)
                o = self.rng.integers(len(self.stream) - k)
                ids = np.concatenate([ids, self.stream[o:o + k]])
                w = np.concatenate([w, np.ones(k, np.float32)])
            return ids, w

    def batch_np(self, length, rows):
        n = length + 1
        n_chat = int((self.rng.random(rows) < CHAT_SHARE).sum()) if self.pools.get(length) else 0
        o = self.rng.integers(0, len(self.stream) - n, rows - n_chat)
        ids = [self.stream[o[:, None] + np.arange(n)]]
        w = [np.ones((rows - n_chat, n), np.float32)]
        for _ in range(n_chat):
            x, y = self.chat_row(length)
            ids.append(x[None])
            w.append(y[None])
        return np.concatenate(ids).astype(np.int64), np.concatenate(w)

    def batch(self, length, rows, device):
        ids, w = self.batch_np(length, rows)
        return torch.from_numpy(ids).to(device), torch.from_numpy(w).to(device)

    def prefetch(self, lengths, rows_of, device, depth=3):
        """Batches for the given step lengths, built on a background thread."""
        q = queue.Queue(maxsize=depth)

        def work():
            for length in lengths:
                q.put(self.batch_np(length, rows_of(length)))
            q.put(None)
        threading.Thread(target=work, daemon=True).start()
        while True:
            item = q.get()
            if item is None:
                return
            ids, w = item
            yield (torch.from_numpy(ids).to(device, non_blocking=True),
                   torch.from_numpy(w).to(device, non_blocking=True))


# ---- training -----------------------------------------------------------------------------

def step_loss(model, ids, w, amp):
    """Weighted next-token loss (+ MTP t+2 loss); weight of a target = weight of its position."""
    inp, tgt, wt = ids[:, :-1], ids[:, 1:], w[:, 1:]
    with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16, enabled=amp):
        h = model.hidden(inp)
        logits = model.head(h)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
        lm = (ce * wt.reshape(-1)).sum() / wt.sum().clamp(min=1e-6)
        loss, mtp = lm, None
        if hasattr(model, "mtp"):
            mh = model.mtp_hidden(inp, h)                      # row t predicts ids[t + 2]
            ml = model.head(mh)
            mt, mw = ids[:, 2:], w[:, 2:]
            mce = F.cross_entropy(ml.float().reshape(-1, ml.shape[-1]), mt.reshape(-1), reduction="none")
            mtp = (mce * mw.reshape(-1)).sum() / mw.sum().clamp(min=1e-6)
            loss = lm + MTP_WEIGHT * mtp
    return loss, lm, mtp


def schedule(curriculum, steps):
    """Step -> length, from the curriculum shares."""
    out, acc = [], 0.0
    for i, (length, share) in enumerate(curriculum):
        acc += share
        end = steps if i == len(curriculum) - 1 else int(round(acc * steps))
        out.extend([length] * (end - len(out)))
    return out


def lr_at(step, steps, peak):
    if step < WARMUP_STEPS:
        return peak * (step + 1) / WARMUP_STEPS
    p = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


def make_model(cfg, seed, device):
    torch.manual_seed(seed)
    return Qwen35ForCausalLM(cfg).to(device)


def make_opt(model, lr):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    kw = {"fused": True} if torch.cuda.is_available() and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def probe_seconds_per_step(cfg, preset, batcher, device, amp, log):
    """Times a few steps per curriculum length on a scratch model: mean seconds per step over the curriculum."""
    model = make_model(cfg, 12345, device)
    opt = make_opt(model, 1e-4)
    tps = TOKENS_PER_STEP[preset]
    per_len = {}
    for length, _ in CURRICULUM[preset]:
        rows = max(1, tps // length)
        ts = []
        for i in range(3):
            ids, w = batcher.batch(length, rows, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            loss, _, _ = step_loss(model, ids, w, amp)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            ts.append(time.time() - t0)
        per_len[length] = min(ts[1:])
    mean = sum(per_len[length] * share for length, share in CURRICULUM[preset])
    log(f"probe: seconds per step by length {per_len}, {mean:.3f} s on average")
    del model, opt
    return mean


def held_out_loss(model, stream, length, n_rows, device, amp):
    rng = np.random.default_rng(7)
    model.eval()
    with torch.no_grad():
        rows = [stream[o:o + length + 1] for o in rng.integers(0, len(stream) - length - 1, n_rows)]
        ids = torch.from_numpy(np.stack(rows).astype(np.int64)).to(device)
        _, lm, mtp = step_loss(model, ids, torch.ones_like(ids, dtype=torch.float32), amp)
    model.train()
    return lm.item(), (mtp.item() if mtp is not None else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tok", required=True, help="folder with tokenizer.json")
    ap.add_argument("--out", required=True)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int)
    g.add_argument("--time-budget", type=float, help="seconds of training (probe picks --steps)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prep", help="cache of the tokenized data and chat pools (made if missing)")
    ap.add_argument("--prep-only", action="store_true", help="make --prep and stop")
    ap.add_argument("--stop-at", type=float, default=0,
                    help="safety valve: wall-clock time (epoch seconds) at which training stops early")
    ap.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2) - 1)))
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    a = ap.parse_args(argv)
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    log = log_to(os.path.join(a.out, "train.log"))
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    amp = device.type == "cuda"
    if amp:   # TF32 for the float32 parts (the DeltaNet scan); weights train in bf16 autocast
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    random.seed(a.seed)
    np.random.seed(a.seed)
    tok = bpe.Tokenizer.load(os.path.join(a.tok, "tokenizer.json"))
    fast = bpe.FastEncoder.open(os.path.join(a.tok, "tokenizer.json"))
    cfg = Config(vocab_size=tok.n_vocab, eos_token_id=tok.id_of("<|im_end|>"),
                 pad_token_id=tok.id_of("<|endoftext|>"), **PRESETS[a.preset])
    log(f"train {a.preset}: torch {torch.__version__} on {device}, encoder "
        f"{'tokenizers' if fast else 'bpe.py'}, config {json.dumps(cfg.to_hf())}")

    prep = load_or_make_prep(a, tok, fast, log)
    if a.prep_only:
        return
    if a.steps is None and a.time_budget is None:
        sys.exit("train: give --steps or --time-budget")
    stream, held, pools = prep["stream"], prep["held"], prep["pools"]
    steps = a.steps
    if steps is None:
        t_probe = time.time()
        per_step = probe_seconds_per_step(cfg, a.preset, Batcher(stream, pools, tok.id_of("<|endoftext|>"), 99),
                                          device, amp, log)
        left = a.time_budget - (time.time() - t_start) - 10     # 10 s: final evaluation and save
        steps = max(WARMUP_STEPS + 10, int(left / per_step))
        log(f"probe took {time.time() - t_probe:.0f} s; {steps} steps fit the {left:.0f} s left; "
            f"reproduce with --steps {steps}")
    tps = TOKENS_PER_STEP[a.preset]
    batcher = Batcher(stream, pools, tok.id_of("<|endoftext|>"), a.seed * 7919)
    model = make_model(cfg, a.seed, device)
    log(f"parameters: {model.n_params() / 1e6:.2f} M ({model.n_params(False) / 1e6:.2f} M without MTP)")
    opt = make_opt(model, LR[a.preset])
    lengths = schedule(CURRICULUM[a.preset], steps)
    t_train = time.time()
    seen = done_steps = 0
    batches = batcher.prefetch(lengths, lambda n: max(1, tps // n), device)
    for step, (ids, w) in enumerate(batches):
        length = lengths[step]
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, steps, LR[a.preset])
        loss, lm, mtp = step_loss(model, ids, w, amp)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seen += ids.numel()
        done_steps = step + 1
        if step % 25 == 0 or step == steps - 1:
            el = time.time() - t_train
            log(f"step {step}/{steps} len {length} loss {loss.item():.3f} lm {lm.item():.3f}"
                + (f" mtp {mtp.item():.3f}" if mtp is not None else "")
                + f" gnorm {gn.item():.2f} lr {lr_at(step, steps, LR[a.preset]):.2e} tokens {seen / 1e6:.1f}M "
                f"{seen / max(el, 1e-9) / 1e3:.0f}K tok/s {el:.0f} s")
            if not math.isfinite(loss.item()):
                sys.exit(f"train: loss is {loss.item()} at step {step}")
        if a.stop_at and time.time() > a.stop_at:
            log(f"stopped by --stop-at after step {step} of {steps}")
            break
    hl = held_out_loss(model, held, min(1024, CURRICULUM[a.preset][0][0]), 16, device, amp)
    log(f"done: {done_steps} of {steps} steps, {seen / 1e6:.1f}M tokens in {time.time() - t_train:.0f} s; held-out loss "
        f"{hl[0]:.3f}" + (f", MTP {hl[1]:.3f}" if hl[1] is not None else ""))
    torch.save({"config": cfg.to_hf(), "state_dict": {k: v.detach().cpu().float() for k, v in
                                                      model.state_dict().items()},
                "steps": done_steps, "planned_steps": steps, "seed": a.seed, "tokens": seen}, os.path.join(a.out, "ckpt.pt"))


if __name__ == "__main__":
    main()
