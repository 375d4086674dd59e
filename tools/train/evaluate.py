"""Quality numbers and reference checks for exported models.

  python3 tools/train/evaluate.py --model hf/target [--draft hf/draft] --data data/ [--window 4096]
      [--max-files N] [--hf-check] [--json out.json]
  python3 tools/train/evaluate.py --model hf/micro --dump-tokens T.bin --dump-logits L.bin --n 64 --data data/

Bits per byte: every held-out file is encoded, cut into windows of --window
tokens, each window preceded by <|endoftext|> (the separator the model saw
between files) and scored from a fresh state; total nats / (ln 2 * bytes).
Draft agreement: over the same positions, how often the draft's argmax equals
the target's. MTP: how often the MTP head's argmax at t equals the true token
t+2, and equals the target's own argmax at t+1 (the draft a speculative
decoder would accept).

--hf-check loads the folder into Hugging Face transformers' Qwen3_5ForCausalLM
(when that class exists) and reports the largest logit difference against
this module, in float32, on held-out tokens: an independent implementation of
the same architecture.

--dump-*: the first --n tokens of the first held-out file (uint32) and this
module's float32 logits [n][n_vocab], for the cross-check against
`wick run --tokens ... --dump-logits`."""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

import bpe
from export import read_model_dir
from qwen35 import Config, Qwen35ForCausalLM


def load(d, device):
    cfg = Config.from_hf(json.load(open(os.path.join(d, "config.json"))))
    m = Qwen35ForCausalLM(cfg)
    sd = read_model_dir(d)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if missing or unexpected:
        sys.exit(f"evaluate: {d}: missing {missing}, unexpected {unexpected}")
    return m.to(device).eval(), cfg


def windows(tok, data, window, max_files):
    eot = tok.id_of("<|endoftext|>")
    with open(os.path.join(data, "heldout.jsonl")) as f:
        files = [json.loads(line) for line in f][: max_files or None]
    for fl in files:
        ids = tok.encode(fl["text"])
        for s in range(0, len(ids), window):
            yield [eot] + ids[s:s + window], len(tok.decode(ids[s:s + window]).encode())


@torch.no_grad()
def quality(model, draft, tok, data, window, max_files, device):
    r = {"nats": 0.0, "bytes": 0, "tokens": 0, "draft_nats": 0.0, "agree": 0, "mtp_true": 0,
         "mtp_agree": 0, "mtp_n": 0}
    for ids, nbytes in windows(tok, data, window, max_files):
        x = torch.tensor([ids], device=device)
        h = model.hidden(x[:, :-1])
        lg = model.head(h).float()
        tgt = x[:, 1:]
        r["nats"] += torch.nn.functional.cross_entropy(lg[0], tgt[0], reduction="sum").item()
        r["bytes"] += nbytes
        r["tokens"] += tgt.shape[1]
        am = lg.argmax(-1)
        if draft is not None:
            dl = draft(x[:, :-1]).float()
            r["draft_nats"] += torch.nn.functional.cross_entropy(dl[0], tgt[0], reduction="sum").item()
            r["agree"] += (dl.argmax(-1) == am).sum().item()
        if hasattr(model, "mtp") and tgt.shape[1] > 2:
            mh = model.mtp_hidden(x[:, :-1], h)          # row t: predicts x[t + 2]
            mp = model.head(mh).float().argmax(-1)[0]
            r["mtp_true"] += (mp == x[0, 2:]).sum().item()
            r["mtp_agree"] += (mp == am[0, 1:]).sum().item()
            r["mtp_n"] += mp.shape[0]
    out = {"held_out_bytes": r["bytes"], "held_out_tokens": r["tokens"],
           "bits_per_byte": r["nats"] / math.log(2) / r["bytes"],
           "bytes_per_token": r["bytes"] / r["tokens"]}
    if draft is not None:
        out["draft_bits_per_byte"] = r["draft_nats"] / math.log(2) / r["bytes"]
        out["draft_greedy_agreement"] = r["agree"] / r["tokens"]
    if r["mtp_n"]:
        out["mtp_top1_accuracy"] = r["mtp_true"] / r["mtp_n"]
        out["mtp_agreement_with_target"] = r["mtp_agree"] / r["mtp_n"]
    return out


@torch.no_grad()
def hf_check(d, model, tok, data, device):
    try:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except ImportError as e:
        return {"hf_check": f"not run: {e}"}
    cfg = json.load(open(os.path.join(d, "config.json")))
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype",
                                                      "full_attention_interval", "mtp_num_hidden_layers")}
    hc = Qwen3_5TextConfig(**keep)
    hm = Qwen3_5ForCausalLM(hc).float().to(device).eval()
    sd = {k: v for k, v in read_model_dir(d).items() if not k.startswith("mtp.")}
    missing, unexpected = hm.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    ids = next(windows(tok, data, 1024, 1))[0]
    x = torch.tensor([ids], device=device)
    ours = model.float()(x).float()
    theirs = hm(input_ids=x).logits.float()
    diff = (ours - theirs).abs().max().item()
    return {"hf_check": "run", "hf_missing": missing, "hf_unexpected": unexpected, "hf_tokens": len(ids),
            "hf_max_abs_logit_diff": diff, "hf_logit_std": ours.std().item(),
            "hf_argmax_agreement": (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--data", required=True)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--max-files", type=int, default=0)
    ap.add_argument("--hf-check", action="store_true")
    ap.add_argument("--dump-tokens")
    ap.add_argument("--dump-logits")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = bpe.Tokenizer.load(os.path.join(a.model, "tokenizer.json"))
    model, cfg = load(a.model, device)
    if a.dump_tokens:
        with open(os.path.join(a.data, "heldout.jsonl")) as f:
            ids = tok.encode(json.loads(f.readline())["text"])[: a.n]
        if len(ids) < a.n:
            sys.exit(f"evaluate: first held-out file has only {len(ids)} tokens")
        with torch.no_grad():
            lg = model.float()(torch.tensor([ids], device=device))[0].float().cpu().numpy()
        np.asarray(ids, np.uint32).tofile(a.dump_tokens)
        lg.astype(np.float32).tofile(a.dump_logits)
        print(f"evaluate: {len(ids)} tokens and logits [{lg.shape[0]}][{lg.shape[1]}] written")
        return
    res = {"model": a.model, "params": model.n_params(), "params_without_mtp": model.n_params(False)}
    draft = load(a.draft, device)[0] if a.draft else None
    if draft is not None:
        res["draft"], res["draft_params"] = a.draft, draft.n_params()
    res.update(quality(model, draft, tok, a.data, a.window, a.max_files, device))
    if a.hf_check:
        try:
            res.update(hf_check(a.model, model, tok, a.data, device))
        except Exception as e:   # report, do not lose the other numbers
            res["hf_check"] = f"failed: {type(e).__name__}: {e}"
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
