// llama.cpp side of the peer benchmark, through node-llama-cpp's prebuilt CPU
// binaries (offline: getLlama({gpu: false, build: "never"})).
//
// Measurements mirror `wick bench` / llama-bench:
//   pp<N> at depth D: D tokens are already in the context (evaluated once,
//     untimed); each repetition truncates the context back to D tokens, then
//     times one evaluation of N new tokens with logits for the last one.
//   tg<N> at depth D: same start, then N single-token decode steps, each
//     computing logits and picking the next token (greedy).
// Tokens are random ids drawn like the golden token sequences (LCG), so no
// tokenizer work is timed.
//
// As a CLI:
//   node bench/peer/llamacpp.mjs --check FILE...        load, evaluate a few tokens, check logits are finite
//   node bench/peer/llamacpp.mjs --bench -m FILE -p 512 -n 128 -d 0,4096 -r 3 -t 2 [--json]
import fs from "node:fs";
import {performance} from "node:perf_hooks";

let llamaPromise = null;

/** Loads the prebuilt CPU backend once (never builds, never downloads). */
export async function loadLlama(threads) {
    if (!llamaPromise) {
        const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");
        llamaPromise = getLlama({
            gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
            logLevel: LlamaLogLevel.error, maxThreads: threads ?? 0, progressLogs: false,
        });
    }
    return llamaPromise;
}

/** Version string of the llama.cpp that node-llama-cpp runs. */
export async function llamaVersion() {
    const llama = await loadLlama();
    const pkg = JSON.parse(fs.readFileSync(new URL("../../node_modules/node-llama-cpp/package.json", import.meta.url)));
    const rel = llama.llamaCppRelease ?? {};
    return `llama.cpp ${rel.repo ?? "?"} release ${rel.release ?? "?"} via node-llama-cpp ${pkg.version} (CPU, build type ${llama.buildType})`;
}

/** Random token ids in [3, nVocab) from the golden files' LCG. */
export function randomTokens(count, nVocab, seed = 12345) {
    const out = new Array(count);
    let s = seed >>> 0;
    for (let i = 0; i < count; i++) {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        out[i] = 3 + ((s >>> 8) % (nVocab - 3));
    }
    return out;
}

function stats(values) {
    const v = [...values].sort((a, b) => a - b);
    const mid = v.length >> 1;
    const median = v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
    return {median, min: v[0], max: v[v.length - 1]};
}

/** Opens a model + context sized for the largest depth + test. */
export async function openModel(path, {threads = 2, ctx = 4096, batch = 512, flashAttention = "auto"} = {}) {
    const llama = await loadLlama(threads);
    const model = await llama.loadModel({modelPath: path, gpuLayers: 0, useMmap: true});
    const context = await model.createContext({
        contextSize: ctx, batchSize: batch, threads: {ideal: threads, min: threads}, flashAttention,
        sequences: 1,
    });
    const seq = context.getSequence();
    return {llama, model, context, seq, path};
}

function vocabSize(model) {
    const md = model.fileInfo?.metadata;
    const arch = md?.general?.architecture;
    const tokens = md?.tokenizer?.ggml?.tokens;
    if (Array.isArray(tokens)) return tokens.length;
    const v = arch && md?.[arch]?.vocab_size;
    if (v) return Number(v);
    throw new Error("cannot determine vocabulary size");
}

/** Brings the sequence to exactly `depthTokens` (evaluating them if needed, untimed). */
async function toDepth(seq, depthTokens) {
    const d = depthTokens.length;
    if (seq.nextTokenIndex > d) {
        try {
            await seq.eraseContextTokenRanges([{start: d, end: seq.nextTokenIndex}]);
        } catch {
            await seq.clearHistory();
        }
    }
    if (seq.nextTokenIndex !== d || seq.compareContextTokens(depthTokens).firstDifferentIndex !== d) {
        await seq.clearHistory();
        if (d > 0) await seq.evaluateWithoutGeneratingNewTokens(depthTokens);
    }
}

/** Times one prefill of `tokens` (logits for the last one); returns seconds. */
async function timePrefill(seq, tokens) {
    const input = tokens.slice(0, -1);
    input.push([tokens[tokens.length - 1], {generateNext: {token: true}}]);
    const t0 = performance.now();
    await seq.controlledEvaluate(input);
    return (performance.now() - t0) / 1e3;
}

/** Times n decode steps (one token each, logits + greedy pick); returns seconds. */
async function timeDecode(seq, firstToken, n) {
    let token = firstToken;
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
        const res = await seq.controlledEvaluate([[token, {generateNext: {token: true}}]]);
        const next = res[0]?.next?.token;
        token = next ?? firstToken;
    }
    return (performance.now() - t0) / 1e3;
}

/**
 * Runs one measurement and returns a wick-bench-shaped record.
 * test: {kind: "pp"|"tg", n, depth}, reps.
 */
export async function measure(handle, {kind, n, depth}, reps, threads) {
    const nVocab = vocabSize(handle.model);
    const depthTokens = randomTokens(depth, nVocab, 12345);
    const newTokens = randomTokens(Math.max(n, 1), nVocab, 777);
    const tps = [];
    for (let r = 0; r < reps; r++) {
        await toDepth(handle.seq, depthTokens);
        const secs = kind === "pp" ? await timePrefill(handle.seq, newTokens.slice(0, n))
                                   : await timeDecode(handle.seq, newTokens[0], n);
        tps.push(n / secs);
    }
    const s = stats(tps);
    const bytes = fs.statSync(handle.path).size;
    return {
        test: `${kind}${n}`, depth, n, reps, tok_per_s_median: s.median, tok_per_s_min: s.min, tok_per_s_max: s.max,
        threads, model_bytes: bytes, engine: "llama.cpp",
    };
}

/** Decode steps of one bs repetition, as in `wick bench --seqs`. */
export const BS_STEPS = 32;

/**
 * bs<N> at depth 0, as `wick bench --seqs N`: N sequences of one context each decode one token
 * per step, their evaluations issued together so that llama.cpp runs them as one batch (as
 * llama-server -np N does); BS_STEPS steps per repetition. A wick-bench-shaped record.
 */
export async function measureSeqs(handle, n, reps, threads) {
    const nVocab = vocabSize(handle.model);
    const context = await handle.model.createContext({
        contextSize: 512 * n, batchSize: 512, threads: {ideal: threads, min: threads}, sequences: n,
    });
    const seqs = [...Array(n).keys()].map(() => context.getSequence());
    const start = randomTokens(n, nVocab, 777);
    const tps = [];
    for (let r = 0; r <= reps; r++) { /* repetition 0 warms up */
        await Promise.all(seqs.map((q) => q.clearHistory()));
        let tokens = [...start];
        const t0 = performance.now();
        for (let i = 0; i < BS_STEPS; i++) {
            const res = await Promise.all(seqs.map((q, j) => q.controlledEvaluate([[tokens[j], {generateNext: {token: true}}]])));
            tokens = res.map((x, j) => x[0]?.next?.token ?? start[j]);
        }
        if (r > 0) tps.push((n * BS_STEPS) / ((performance.now() - t0) / 1e3));
    }
    await context.dispose();
    const s = stats(tps);
    return {
        test: `bs${n}`, depth: 0, n, reps, tok_per_s_median: s.median, tok_per_s_min: s.min, tok_per_s_max: s.max,
        threads, model_bytes: fs.statSync(handle.path).size, engine: "llama.cpp",
    };
}

export async function closeModel(handle) {
    await handle.context.dispose();
    await handle.model.dispose();
}

/** Loads each file, evaluates a short prompt and checks the last logits are finite. */
export async function checkFiles(files, threads = 2) {
    const llama = await loadLlama(threads);
    let ok = true;
    for (const f of files) {
        try {
            const model = await llama.loadModel({modelPath: f, gpuLayers: 0});
            const context = await model.createContext({contextSize: 256, batchSize: 64, threads});
            const seq = context.getSequence();
            const text = "<|im_start|>user\nHello, how are you today?<|im_end|>\n<|im_start|>assistant\n";
            const tokens = model.tokenize(text, true);
            const input = tokens.slice(0, -1);
            input.push([tokens[tokens.length - 1], {generateNext: {token: true, logits: true}}]);
            const res = await seq.controlledEvaluate(input);
            const out = res[tokens.length - 1];
            const logits = out?.next?.logits;
            let n = 0, bad = 0;
            for (const [, v] of logits ?? []) {
                n++;
                if (!Number.isFinite(v)) bad++;
            }
            if (!logits || n === 0 || bad > 0) throw new Error(`logits: ${n} values, ${bad} not finite`);
            // a few decode steps on top
            let tok = out.next.token;
            for (let i = 0; i < 4; i++) {
                const r = await seq.controlledEvaluate([[tok, {generateNext: {token: true}}]]);
                tok = r[0].next.token;
            }
            console.log(`ok   ${f}: ${tokens.length} prompt tokens, ${n} finite logits, arch ${model.fileInfo.metadata.general.architecture}`);
            await context.dispose();
            await model.dispose();
        } catch (e) {
            ok = false;
            console.log(`FAIL ${f}: ${e.message}`);
        }
    }
    return ok;
}

function parseList(s) {
    return String(s).split(",").filter((x) => x !== "").map((x) => parseInt(x, 10));
}

async function main(argv) {
    if (argv[0] === "--check") {
        const ok = await checkFiles(argv.slice(1));
        process.exit(ok ? 0 : 1);
    }
    if (argv[0] === "--version") {
        console.log(await llamaVersion());
        return;
    }
    if (argv[0] !== "--bench") {
        console.error("usage: llamacpp.mjs --check FILE... | --version | --bench -m FILE [-p 512] [-n 128] [-d 0] [-r 3] [-t 2] [--seqs 1,8] [--json]");
        process.exit(2);
    }
    const o = {m: null, p: [512], n: [128], d: [0], r: 3, t: 2, json: false, fa: "auto", seqs: []};
    for (let i = 1; i < argv.length; i++) {
        const a = argv[i];
        if (a === "-m") o.m = argv[++i];
        else if (a === "-p") o.p = parseList(argv[++i]);
        else if (a === "-n") o.n = parseList(argv[++i]);
        else if (a === "-d") o.d = parseList(argv[++i]);
        else if (a === "-r") o.r = parseInt(argv[++i], 10);
        else if (a === "-t") o.t = parseInt(argv[++i], 10);
        else if (a === "--fa") o.fa = argv[++i] === "on" ? true : argv[i] === "off" ? false : "auto";
        else if (a === "--seqs") o.seqs = parseList(argv[++i]);
        else if (a === "--json") o.json = true;
        else throw new Error(`unknown option ${a}`);
    }
    const maxDepth = Math.max(...o.d), maxN = Math.max(...o.p, ...o.n);
    const h = await openModel(o.m, {threads: o.t, ctx: maxDepth + maxN + 16, flashAttention: o.fa});
    for (const depth of o.d) {
        for (const n of o.p) if (n > 0) print(await measure(h, {kind: "pp", n, depth}, o.r, o.t), o.json);
        for (const n of o.n) if (n > 0) print(await measure(h, {kind: "tg", n, depth}, o.r, o.t), o.json);
    }
    for (const n of o.seqs) if (n > 0) print(await measureSeqs(h, n, o.r, o.t), o.json);
    await closeModel(h);
}

function print(rec, json) {
    if (json) console.log(JSON.stringify(rec));
    else console.log(`${rec.test} @ d${rec.depth}: ${rec.tok_per_s_median.toFixed(2)} tok/s (min ${rec.tok_per_s_min.toFixed(2)}, max ${rec.tok_per_s_max.toFixed(2)})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
    main(process.argv.slice(2)).catch((e) => {
        console.error(`llamacpp.mjs: ${e.stack ?? e}`);
        process.exit(1);
    });
}
