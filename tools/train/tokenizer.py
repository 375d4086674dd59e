"""Stage 2, tokenizer: learn a byte-level BPE vocabulary on a corpus's train
split and write tokenizer.json + tokenizer_config.json (ChatML specials, the
qwen35 chat template).

  python3 tools/train/tokenizer.py --data data/ --vocab 16384 --out tok/ [--max-mb 24]

--max-mb caps how much text is read (the first files in the train split's
order, which corpus.py sorted by path): merges are learnt from word counts, so
a sample of tens of MB gives the same vocabulary shape as the whole corpus."""
import argparse
import json
import os
import time

import bpe
import chat


def read_texts(path, max_bytes):
    n = 0
    with open(path) as f:
        for line in f:
            t = json.loads(line)["text"]
            yield t
            n += len(t)
            if max_bytes and n >= max_bytes:
                return


def tokenizer_config(max_len):
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False, "add_eos_token": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "model_max_length": max_len, "clean_up_tokenization_spaces": False,
        "chat_template": chat.CHAT_TEMPLATE,
    }


def write(tok, out, max_len):
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(max_len), f, indent=1, ensure_ascii=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="corpus.py output folder")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--max-mb", type=float, default=24)
    ap.add_argument("--max-len", type=int, default=16384, help="model_max_length written to the config")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    t0 = time.time()
    tokens, merges = bpe.train(read_texts(os.path.join(a.data, "train.jsonl"), int(a.max_mb * 1e6)), a.vocab)
    tok = bpe.Tokenizer(tokens, merges, bpe.ADDED_TOKENS)
    write(tok, a.out, a.max_len)
    held = list(read_texts(os.path.join(a.data, "heldout.jsonl"), 0))
    nb = sum(len(t.encode()) for t in held)
    nt = sum(len(tok.encode(t)) for t in held)
    print(f"tokenizer: {tok.n_vocab} tokens ({len(merges)} merges) in {time.time() - t0:.0f} s; "
          f"held out: {nb / max(nt, 1):.2f} bytes per token")


if __name__ == "__main__":
    main()
