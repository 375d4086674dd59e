"""Stage 4, export: a training checkpoint to a Hugging Face model folder
(config.json, model*.safetensors, tokenizer.json, tokenizer_config.json),
which `wick convert` turns into a GGUF.

  python3 tools/train/export.py --ckpt run/target/ckpt.pt --tok tok/ --out hf/target [--dtype bf16|f32]
      [--shard-mb 15]

The safetensors files are written here (no safetensors package needed):
8-byte little-endian header length, JSON header (dtype, shape, data_offsets
per tensor), the tensors' bytes. Over --shard-mb the weights are split into
model-0000i-of-0000n.safetensors with a model.safetensors.index.json."""
import argparse
import json
import os
import shutil
import struct

import torch

DTYPES = {"bf16": (torch.bfloat16, "BF16"), "f16": (torch.float16, "F16"), "f32": (torch.float32, "F32")}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, st_dtype):
    """tensors: ordered dict name -> CPU tensor (already in the target dtype)."""
    header, off = {}, 0
    blobs = []
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """name -> float32 tensor (for checks; BF16/F16/F32 files)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(data[b:e])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        elif info["dtype"] == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        elif info["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {info['dtype']}")
        out[name] = t.reshape(info["shape"]).float()
    return out


def read_model_dir(d):
    """All tensors of a Hugging Face folder (single file or index + shards)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        out.update(read_safetensors(os.path.join(d, fn)))
    return out


def export(ckpt_path, tok_dir, out, dtype="bf16", shard_mb=15.0):
    try:
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    except TypeError:          # torch without weights_only
        ck = torch.load(ckpt_path, map_location="cpu")
    tdt, st = DTYPES[dtype]
    os.makedirs(out, exist_ok=True)
    cfg = dict(ck["config"])
    cfg["torch_dtype"] = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"]}, f, indent=1)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(out, fn))
    tensors = {k: v.to(tdt) for k, v in ck["state_dict"].items()}
    limit = int(shard_mb * 1e6)
    shards, cur, size = [], {}, 0
    for k, v in tensors.items():
        nb = v.numel() * v.element_size()
        if cur and size + nb > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += nb
    shards.append(cur)
    for fn in os.listdir(out):
        if fn.startswith("model") and fn.endswith((".safetensors", ".safetensors.index.json")):
            os.remove(os.path.join(out, fn))
    if len(shards) == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), shards[0], st)
    else:
        wmap = {}
        for i, sh in enumerate(shards):
            fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(out, fn), sh, st)
            wmap.update({k: fn for k in sh})
        total = sum(v.numel() * v.element_size() for v in tensors.values())
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=1)
    return len(shards)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--shard-mb", type=float, default=15.0)
    a = ap.parse_args(argv)
    n = export(a.ckpt, a.tok, a.out, a.dtype, a.shard_mb)
    print(f"export: {a.out} ({n} safetensors file{'s' if n > 1 else ''}, {a.dtype})")


if __name__ == "__main__":
    main()
