"""Stage 1, data: collect permissively licensed Python source from local
directories (a Python standard library, site-packages), deduplicate, hold out
files, and write the corpus with a manifest listing every file, its size and
licence.

  python3 tools/train/corpus.py --root stdlib=/usr/lib/python3.12 \\
      --root site=/usr/lib/python3/dist-packages --out data/ [--max-mb 400] [--seed 1]

Roots named "stdlib*" are the Python standard library (PSF-2.0, from its
LICENSE.txt). In other roots each file's licence comes from the installed
distribution that owns it (*.dist-info/METADATA: License-Expression, License,
or the "License ::" classifiers); files of distributions without a permissive
licence, or owned by none, are left out and counted by reason.

Output: train.jsonl and heldout.jsonl ({"path", "licence", "text"} per line)
and manifest.json (per file: root, path, package, licence, bytes, sha256,
split; totals by licence; exclusions by reason)."""
import argparse
import hashlib
import json
import os
import random
import re
import sys

PERMISSIVE = [  # SPDX ids or classifier words, matched case-insensitively as whole words
    ("MIT", r"\bMIT\b|Expat"), ("BSD", r"\bBSD\b|0BSD"), ("Apache-2.0", r"Apache"), ("PSF-2.0", r"\bPSF\b|Python Software Foundation"),
    ("ISC", r"\bISC\b"), ("Unlicense", r"Unlicense"), ("HPND", r"\bHPND\b|Historical Permission"),
    ("Zlib", r"\bzlib\b"), ("CC0-1.0", r"\bCC0\b"),
]
COPYLEFT = r"\bGPL|LGPL|AGPL|MPL|Mozilla|EUPL|CDDL|EPL\b|Eclipse"
MAX_FILE_BYTES = 1 << 20      # larger .py files are generated tables, not code to learn from
MAX_LINE = 1000               # a line this long marks minified / generated data


def classify(meta_text):
    """Licence name from a METADATA file, or None if not clearly permissive."""
    fields = []
    for line in meta_text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        k, _, v = line.partition(":")
        if k in ("License-Expression", "License") or (k == "Classifier" and "License ::" in v):
            fields.append(v.strip())
    text = " ".join(fields)
    if not text or re.search(COPYLEFT, text, re.I):
        return None
    for name, pat in PERMISSIVE:
        if re.search(pat, text, re.I):
            return name
    return None


def owners(site):
    """Maps files under a site-packages dir to (distribution, licence)."""
    own = {}
    for d in sorted(os.listdir(site)):
        if not d.endswith(".dist-info"):
            continue
        dist = d[: -len(".dist-info")]
        meta = os.path.join(site, d, "METADATA")
        rec = os.path.join(site, d, "RECORD")
        try:
            with open(meta, encoding="utf-8", errors="replace") as f:
                lic = classify(f.read())
            with open(rec, encoding="utf-8", errors="replace") as f:
                for line in f:
                    path = line.split(",", 1)[0]
                    if path.endswith(".py"):
                        own[os.path.normpath(os.path.join(site, path))] = (dist, lic)
        except OSError:
            continue
    return own


def usable(text):
    if not text.strip():
        return "empty"
    if max(map(len, text.splitlines()), default=0) > MAX_LINE:
        return "long lines"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-mb", type=float, default=0, help="cap on kept bytes (0 = all), seeded choice")
    ap.add_argument("--heldout", type=float, default=0.01, help="fraction of files held out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    seen, files, excluded = set(), [], {}
    for spec in a.root:
        name, _, root = spec.partition("=")
        root = os.path.realpath(root)
        if not os.path.isdir(root):
            sys.exit(f"corpus: --root {spec}: not a directory")
        own = None if name.startswith("stdlib") else owners(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            if name.startswith("stdlib") and os.path.basename(dirpath) in ("site-packages", "dist-packages"):
                dirnames[:] = []
                continue
            for fn in sorted(filenames):
                if not fn.endswith(".py"):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                if own is None:
                    dist, lic = "python-stdlib", "PSF-2.0"
                else:
                    dist, lic = own.get(os.path.normpath(path), (None, None))
                    if dist is None:
                        excluded["no owning distribution"] = excluded.get("no owning distribution", 0) + 1
                        continue
                    if lic is None:
                        excluded["licence not permissive or unknown"] = \
                            excluded.get("licence not permissive or unknown", 0) + 1
                        continue
                try:
                    raw = open(path, "rb").read(MAX_FILE_BYTES + 1)
                except OSError:
                    continue
                if len(raw) > MAX_FILE_BYTES:
                    excluded["over 1 MiB"] = excluded.get("over 1 MiB", 0) + 1
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    excluded["not UTF-8"] = excluded.get("not UTF-8", 0) + 1
                    continue
                why = usable(text)
                if why:
                    excluded[why] = excluded.get(why, 0) + 1
                    continue
                h = hashlib.sha256(text.strip().encode()).hexdigest()
                if h in seen:
                    excluded["duplicate"] = excluded.get("duplicate", 0) + 1
                    continue
                seen.add(h)
                files.append({"root": name, "path": rel, "package": dist, "licence": lic,
                              "bytes": len(raw), "sha256": h, "text": text})
    rng = random.Random(a.seed)
    rng.shuffle(files)
    if a.max_mb:
        kept, total = [], 0
        for f in files:
            if total >= a.max_mb * 1e6:
                excluded["over the --max-mb cap"] = excluded.get("over the --max-mb cap", 0) + 1
                continue
            kept.append(f)
            total += f["bytes"]
        files = kept
    n_hold = max(1, int(len(files) * a.heldout))
    for i, f in enumerate(files):
        f["split"] = "heldout" if i < n_hold else "train"
    by_lic = {}
    with open(os.path.join(a.out, "train.jsonl"), "w") as tr, open(os.path.join(a.out, "heldout.jsonl"), "w") as ho:
        for f in sorted(files, key=lambda f: (f["root"], f["path"])):
            out = ho if f["split"] == "heldout" else tr
            out.write(json.dumps({"path": f"{f['root']}/{f['path']}", "licence": f["licence"], "text": f["text"]}) + "\n")
            b = by_lic.setdefault(f["licence"], {"files": 0, "bytes": 0})
            b["files"] += 1
            b["bytes"] += f["bytes"]
    manifest = {
        "roots": a.root, "seed": a.seed, "max_mb": a.max_mb, "heldout_fraction": a.heldout,
        "files": [{k: f[k] for k in ("root", "path", "package", "licence", "bytes", "sha256", "split")}
                  for f in sorted(files, key=lambda f: (f["root"], f["path"]))],
        "by_licence": by_lic, "excluded": excluded,
        "train_bytes": sum(f["bytes"] for f in files if f["split"] == "train"),
        "heldout_bytes": sum(f["bytes"] for f in files if f["split"] == "heldout"),
    }
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=0)
    print(f"corpus: {len(files)} files ({manifest['train_bytes'] / 1e6:.1f} MB train, "
          f"{manifest['heldout_bytes'] / 1e6:.2f} MB held out); by licence: "
          + ", ".join(f"{k} {v['files']}" for k, v in sorted(by_lic.items())) + f"; excluded: {excluded}")


if __name__ == "__main__":
    main()
