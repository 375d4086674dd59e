#!/usr/bin/env node
// Side-by-side benchmark: wick vs llama.cpp (node-llama-cpp's prebuilt CPU
// build) on the same GGUF file with the same thread count, interleaved.
//
// For every context depth and every round, both engines run the same tests
// (pp<N> and tg<N> at that depth, R repetitions each) one after the other;
// the engine that goes first alternates between rounds so slow drifts in
// machine load hit both. wick runs as `wick bench --json` (one process per
// depth and round); llama.cpp runs in this process with the model loaded once.
// The table reports the median over rounds of each engine's per-round median
// and the ratio wick / llama.cpp.
//
// usage:
//   node bench/peer/peer.mjs -m FILE [-p 512] [-n 128] [-d 0,4096] [-r 3] [-t 2] [--rounds 2]
//                            [--wick PATH] [--json-out FILE] [--fa auto|on|off]
//   node bench/peer/peer.mjs --preset qwen3-0.6b --type q8_0 ...   (synthesizes /tmp/wick-peer-<preset>-<type>.gguf first)
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

import {closeModel, llamaVersion, measure, openModel, randomTokens} from "./llamacpp.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

function parseArgs(argv) {
    const o = {m: null, preset: null, type: "q8_0", p: [512], n: [128], d: [0], r: 3, t: 2, rounds: 2,
               wick: null, jsonOut: null, fa: "auto", quiet: false};
    const list = (s) => String(s).split(",").filter((x) => x !== "").map((x) => parseInt(x, 10));
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => argv[++i];
        if (a === "-m") o.m = v();
        else if (a === "--preset") o.preset = v();
        else if (a === "--type") o.type = v();
        else if (a === "-p") o.p = list(v());
        else if (a === "-n") o.n = list(v());
        else if (a === "-d") o.d = list(v());
        else if (a === "-r") o.r = parseInt(v(), 10);
        else if (a === "-t") o.t = parseInt(v(), 10);
        else if (a === "--rounds") o.rounds = parseInt(v(), 10);
        else if (a === "--wick") o.wick = v();
        else if (a === "--json-out") o.jsonOut = v();
        else if (a === "--fa") o.fa = v();
        else if (a === "-q") o.quiet = true;
        else if (a === "-h" || a === "--help") {
            console.log(fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").filter((l) => l.startsWith("//")).map((l) => l.slice(3)).join("\n"));
            process.exit(0);
        } else throw new Error(`unknown option ${a}`);
    }
    return o;
}

function findWick(explicit) {
    const candidates = explicit ? [explicit] : [process.env.WICK_BIN, `${root}/build-bench-rel/wick`, `${root}/build/wick`,
                                                `${root}/build-release/wick`].filter(Boolean);
    for (const c of candidates) if (fs.existsSync(c)) return c;
    throw new Error(`wick binary not found (tried ${candidates.join(", ")}); pass --wick PATH`);
}

function log(o, msg) {
    if (!o.quiet) process.stderr.write(`peer: ${msg}\n`);
}

function runWick(o, wick, file, depth) {
    const args = ["bench", "-m", file, "-p", o.p.join(","), "-n", o.n.join(","), "-d", String(depth),
                  "-r", String(o.r), "-t", String(o.t), "--json", "-q"];
    const res = spawnSync(wick, args, {encoding: "utf8", maxBuffer: 1 << 24});
    if (res.status !== 0) throw new Error(`wick bench failed (${res.status}): ${res.stderr}`);
    return res.stdout.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}

function median(v) {
    const s = [...v].sort((a, b) => a - b), m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function machine() {
    const cpus = os.cpus();
    let model = cpus[0]?.model ?? "?";
    try {
        const l = spawnSync("lscpu", [], {encoding: "utf8"}).stdout;
        const g = (k) => (l.match(new RegExp(`^${k}:\\s*(.*)$`, "m")) ?? [])[1];
        model = `${g("Model name") ?? model}, ${g("CPU\\(s\\)")} CPUs, ${g("Thread\\(s\\) per core")} thread(s)/core`;
    } catch { /* keep os.cpus() */ }
    return `${model}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, ${os.type()} ${os.release()}`;
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const wick = findWick(o.wick);
    if (!o.m && o.preset) {
        o.m = path.join(os.tmpdir(), `wick-peer-${o.preset}-${o.type}.gguf`);
        if (!fs.existsSync(o.m)) {
            log(o, `synthesizing ${o.m}`);
            const r = spawnSync(wick, ["synth", "-q", "--preset", o.preset, "--type", o.type, "-o", o.m, "-t", String(o.t)],
                                {stdio: "inherit"});
            if (r.status !== 0) throw new Error("wick synth failed");
        }
    }
    if (!o.m) throw new Error("need -m FILE or --preset NAME");
    const version = await llamaVersion();
    const maxDepth = Math.max(...o.d), maxN = Math.max(...o.p, ...o.n);
    const fa = o.fa === "on" ? true : o.fa === "off" ? false : "auto";
    const h = await openModel(o.m, {threads: o.t, ctx: maxDepth + maxN + 16, flashAttention: fa});
    // warm-up: page the weights in and let llama.cpp set up its graphs
    await h.seq.evaluateWithoutGeneratingNewTokens(randomTokens(16, 256, 1)); // ids < 256 exist in every vocab
    await h.seq.clearHistory();

    const results = new Map(); // key test@depth -> {wick: [..records], llama: [..]}
    const key = (t, d) => `${t}@${d}`;
    const tests = [...o.p.filter((x) => x > 0).map((n) => ["pp", n]), ...o.n.filter((x) => x > 0).map((n) => ["tg", n])];
    let order = 0;
    for (const depth of o.d) {
        for (let round = 0; round < o.rounds; round++, order++) {
            const engines = order % 2 === 0 ? ["wick", "llama"] : ["llama", "wick"];
            for (const eng of engines) {
                if (eng === "wick") {
                    log(o, `round ${round + 1}/${o.rounds} depth ${depth}: wick`);
                    for (const rec of runWick(o, wick, o.m, depth)) {
                        const k = key(rec.test, rec.depth);
                        if (!results.has(k)) results.set(k, {wick: [], llama: []});
                        results.get(k).wick.push(rec);
                    }
                } else {
                    log(o, `round ${round + 1}/${o.rounds} depth ${depth}: llama.cpp`);
                    for (const [kind, n] of tests) {
                        const rec = await measure(h, {kind, n, depth}, o.r, o.t);
                        const k = key(rec.test, depth);
                        if (!results.has(k)) results.set(k, {wick: [], llama: []});
                        results.get(k).llama.push(rec);
                    }
                }
            }
        }
    }
    await closeModel(h);

    const bytes = fs.statSync(o.m).size;
    const rows = [];
    for (const depth of o.d) {
        for (const [kind, n] of tests) {
            const r = results.get(key(`${kind}${n}`, depth));
            const w = median(r.wick.map((x) => x.tok_per_s_median));
            const l = median(r.llama.map((x) => x.tok_per_s_median));
            const rate = kind === "tg" ? `${median(r.wick.map((x) => x.gbytes_per_s)).toFixed(1)} GB/s`
                                       : `${median(r.wick.map((x) => x.gflop_per_s)).toFixed(0)} GFLOP/s`;
            rows.push({test: `${kind}${n}`, depth, wick: w, llama: l, ratio: w / l, rate,
                       wick_min: Math.min(...r.wick.map((x) => x.tok_per_s_min)), wick_max: Math.max(...r.wick.map((x) => x.tok_per_s_max)),
                       llama_min: Math.min(...r.llama.map((x) => x.tok_per_s_min)), llama_max: Math.max(...r.llama.map((x) => x.tok_per_s_max)),
                       peak_rss_bytes: Math.max(...r.wick.map((x) => x.peak_rss_bytes ?? 0)),
                       bpw: r.wick[0].bpw});
        }
    }
    console.log(`model: ${path.basename(o.m)} (${(bytes / 2 ** 20).toFixed(1)} MiB, ${rows[0].bpw.toFixed(3)} bits/weight)`);
    console.log(`threads: ${o.t}, repetitions: ${o.r} x ${o.rounds} interleaved rounds, llama.cpp flash attention: ${o.fa}`);
    console.log(`peer: ${version}`);
    console.log(`machine: ${machine()}`);
    console.log("");
    console.log("| test | depth | wick t/s | llama.cpp t/s | wick / llama.cpp | wick range | llama.cpp range | wick rate |");
    console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of rows)
        console.log(`| ${r.test} | ${r.depth} | ${r.wick.toFixed(2)} | ${r.llama.toFixed(2)} | **${r.ratio.toFixed(2)}** | ` +
                    `${r.wick_min.toFixed(1)}–${r.wick_max.toFixed(1)} | ${r.llama_min.toFixed(1)}–${r.llama_max.toFixed(1)} | ${r.rate} |`);
    if (o.jsonOut) fs.writeFileSync(o.jsonOut, JSON.stringify({model: o.m, threads: o.t, reps: o.r, rounds: o.rounds, peer: version,
                                                               machine: machine(), rows, raw: Object.fromEntries(results)}, null, 1));
}

main().catch((e) => {
    console.error(`peer: ${e.stack ?? e}`);
    process.exit(1);
});
