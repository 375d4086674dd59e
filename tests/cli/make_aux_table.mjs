// Writes a small auxiliary GGUF table (general.type "aux", one F32 tensor of
// N x 256 values) for tests of tables read in place:
//   node tests/cli/make_aux_table.mjs OUT.gguf KIND ROWS
import fs from "node:fs";

const [out, kind = "ngram", rowsArg = "64"] = process.argv.slice(2);
const rows = Number(rowsArg), cols = 256;
const parts = [];
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
const str = (s) => { u64(Buffer.byteLength(s)); parts.push(Buffer.from(s)); };
parts.push(Buffer.from("GGUF"));
u32(3);       // version
u64(1);       // tensors
u64(2);       // metadata keys
str("general.type"); u32(8); str("aux");
str("aux.kind"); u32(8); str(kind);
str(`${kind}.table`); u32(2); u64(cols); u64(rows); u32(0 /* F32 */); u64(0);
let header = Buffer.concat(parts);
const pad = (32 - (header.length % 32)) % 32;
const data = Buffer.alloc(rows * cols * 4);
for (let i = 0; i < rows * cols; i++) data.writeFloatLE(i % 1000, i * 4);
fs.writeFileSync(out, Buffer.concat([header, Buffer.alloc(pad), data]));
