// A local stand-in for the Hugging Face hub, serving one repository from a
// folder with the hub's URL layout (what `wick pull` reads):
//   GET /api/models/OWNER/NAME/revision/REV?blobs=true  → {"sha", "siblings": [{rfilename, size, blobId, lfs}]}
//   GET /OWNER/NAME/resolve/REV/FILE                     → LFS files: 302 to /cdn/SHA256; others: the bytes
//   GET /cdn/SHA256                                      → the bytes, with Range support (206)
// REV is "main" or the commit id. Faults for tests:
//   --cut FILE:N     the first N transfers of FILE stop after half its bytes (connection destroyed)
//   --wrong FILE     the listing pins a wrong SHA-256 for FILE
//   --missing FILE   FILE is listed but answers 404
//   --no-range FILE  FILE ignores Range requests (answers 200 with every byte)
// Prints the port on stdout once listening; --log FILE gets "METHOD URL RANGE" per request.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (name, many = false) => {
    const out = [];
    for (let i = 0; i < args.length; i++) if (args[i] === `--${name}`) out.push(args[i + 1]);
    return many ? out : out[0];
};
const repo = opt("repo"), dir = opt("dir"), logPath = opt("log");
if (!repo || !dir) {
    console.error("usage: hub_server.mjs --repo OWNER/NAME --dir DIR [--log FILE] [--cut FILE:N] [--wrong FILE] [--missing FILE]");
    process.exit(2);
}
const cuts = new Map(opt("cut", true).map((s) => [s.slice(0, s.lastIndexOf(":")), Number(s.slice(s.lastIndexOf(":") + 1))]));
const wrong = new Set(opt("wrong", true)), missing = new Set(opt("missing", true)), noRange = new Set(opt("no-range", true));

function walk(d, prefix = "") {
    return fs.readdirSync(d, {withFileTypes: true}).flatMap((e) =>
        e.isDirectory() ? walk(path.join(d, e.name), prefix + e.name + "/") : [prefix + e.name]);
}
const files = new Map();
for (const name of walk(dir).sort()) {
    const data = fs.readFileSync(path.join(dir, name));
    const lfs = name.endsWith(".gguf");
    const sha256 = crypto.createHash("sha256").update(data).digest("hex");
    const blobId = crypto.createHash("sha1").update(`blob ${data.length}\0`).update(data).digest("hex");
    files.set(name, {name, data, lfs, sha256, blobId});
}
for (const name of missing) files.set(name, {name, data: Buffer.alloc(100), lfs: true, missing: true,
    sha256: "0".repeat(64), blobId: "0".repeat(40)});
const commit = crypto.createHash("sha1").update([...files.values()].map((f) => f.name + f.sha256).join("\n")).digest("hex");

const log = (line) => logPath && fs.appendFileSync(logPath, line + "\n");
const json = (res, status, obj) => {
    res.writeHead(status, {"Content-Type": "application/json"});
    res.end(JSON.stringify(obj));
};

function sendBytes(req, res, f) {
    const total = f.data.length;
    let start = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range || "");
    if (m && !noRange.has(f.name)) {
        start = Number(m[1]);
        if (start >= total) {
            res.writeHead(416, {"Content-Range": `bytes */${total}`});
            return res.end();
        }
        res.writeHead(206, {"Content-Length": total - start, "Content-Range": `bytes ${start}-${total - 1}/${total}`,
            "Accept-Ranges": "bytes"});
    } else {
        res.writeHead(200, {"Content-Length": total, "Accept-Ranges": "bytes"});
    }
    const left = cuts.get(f.name) || 0;
    if (left > 0) {
        cuts.set(f.name, left - 1);
        const half = Math.floor((total - start) / 2);
        res.write(f.data.subarray(start, start + half), () => setTimeout(() => req.socket.destroy(), 50));
        return;
    }
    res.end(f.data.subarray(start));
}

const server = http.createServer((req, res) => {
    log(`${req.method} ${req.url} ${req.headers.range || "-"}`);
    const url = new URL(req.url, "http://x");
    const p = decodeURIComponent(url.pathname);
    const api = `/api/models/${repo}/revision/`;
    if (p.startsWith("/api/models/")) {
        if (!p.startsWith(api)) return json(res, 404, {error: "Repository not found"});
        const rev = p.slice(api.length);
        if (rev !== "main" && rev !== commit) return json(res, 404, {error: `Invalid rev id: ${rev}`});
        return json(res, 200, {id: repo, sha: commit, siblings: [...files.values()].map((f) => ({
            rfilename: f.name, size: f.data.length, blobId: f.blobId,
            ...(f.lfs ? {lfs: {sha256: wrong.has(f.name) ? "ab".repeat(32) : f.sha256, size: f.data.length,
                pointerSize: 134}} : {}),
        }))});
    }
    const resolve = `/${repo}/resolve/`;
    if (p.startsWith(resolve)) {
        const rest = p.slice(resolve.length), slash = rest.indexOf("/");
        const rev = rest.slice(0, slash), name = rest.slice(slash + 1);
        if (rev !== "main" && rev !== commit) return json(res, 404, {error: `Invalid rev id: ${rev}`});
        const f = files.get(name);
        if (!f || f.missing) return json(res, 404, {error: "Entry not found"});
        if (f.lfs) {
            res.writeHead(302, {Location: `/cdn/${f.sha256}?file=${encodeURIComponent(name)}`, "X-Repo-Commit": commit,
                "X-Linked-Etag": `"${f.sha256}"`, "X-Linked-Size": f.data.length});
            return res.end();
        }
        return sendBytes(req, res, f);
    }
    if (p.startsWith("/cdn/")) {
        const f = [...files.values()].find((x) => x.sha256 === p.slice(5) && !x.missing);
        if (!f) return json(res, 404, {error: "no such object"});
        return sendBytes(req, res, f);
    }
    json(res, 404, {error: "not found"});
});
server.listen(0, "127.0.0.1", () => {
    process.stdout.write(`${server.address().port} ${commit}\n`);
});
