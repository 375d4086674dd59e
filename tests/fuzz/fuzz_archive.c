/* libFuzzer harness for the prefix cache's disk archive: any file must scan
 * cleanly or fail with a one-line message, and a file that scans must load
 * into a sequence of the model (hashes checked) or be refused with a
 * message; never crash, hang, leak or read out of bounds.
 * Env: WICK_FUZZ_MODEL (default $WICK_GOLDEN/models/tiny-qwen35-F32.gguf);
 * WICK_FUZZ_SEEDS=DIR writes real archive files of that model into DIR at
 * start (a first write and an appended one), the seeds the run uses. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/archive.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "model/model.h"

static model *g_m;
static eng_ctx *g_ctx;
static eng_seq *g_seq;
static char g_dir[64];
static char g_path[128];

static void die(const char *what, const wk_error *err)
{
    fprintf(stderr, "fuzz_archive: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

/* Real archives of the model: 12 tokens with a checkpoint, then 6 more appended
 * (small, so that mutations reach the payload checks). */
static void write_seeds(const char *dir)
{
    wk_error err = {0};
    int32_t t[18];
    uint32_t s = 7;
    for (int i = 0; i < 18; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((s >> 8) % 200);
    }
    eng_seq_clear(g_seq);
    if (eng_prefill(g_ctx, g_seq, t, 12, NULL, &err)) die("prefill", &err);
    ckpt k1 = {0}, k2 = {0};
    if (ckpt_take(&k1, g_seq, CKPT_PROMPT_END, &err)) die("checkpoint", &err);
    k1.complete = true;
    const ckpt *one[1] = {&k1};
    if (ckpt_archive_write(dir, 1, g_ctx, g_seq, 0, 0, one, 1, &err)) die("write", &err);
    char path[4200];
    ckpt_archive_path(path, sizeof path, dir, 1);
    ckpt_archive_info info;
    if (ckpt_archive_scan(path, &info, &err)) die("scan", &err);
    size_t bytes = info.file_bytes;
    ckpt_archive_info_free(&info);
    /* a second conversation: the first one's state, then an appended record */
    if (ckpt_archive_write(dir, 2, g_ctx, g_seq, 0, 0, one, 1, &err)) die("write", &err);
    if (eng_prefill(g_ctx, g_seq, t + 12, 6, NULL, &err)) die("prefill", &err);
    if (ckpt_take(&k2, g_seq, CKPT_GEN_END, &err)) die("checkpoint", &err);
    k2.complete = true;
    const ckpt *two[1] = {&k2};
    if (ckpt_archive_write(dir, 2, g_ctx, g_seq, 12, bytes, two, 1, &err)) die("append", &err);
    ckpt_free(&k1);
    ckpt_free(&k2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char def[4096];
    const char *path = getenv("WICK_FUZZ_MODEL");
    if (!path) {
        const char *g = getenv("WICK_GOLDEN");
        snprintf(def, sizeof def, "%s/models/tiny-qwen35-F32.gguf", g ? g : "../shared/golden");
        path = def;
    }
    wk_error err = {0};
    if (model_load(&g_m, path, &err)) die(path, &err);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 128;
    if (eng_ctx_new(&g_ctx, g_m, &o, &err) || eng_seq_new(&g_seq, g_ctx, 128, &err)) die("context", &err);
    snprintf(g_dir, sizeof g_dir, "/tmp/wick-fuzz-archive-XXXXXX");
    if (!mkdtemp(g_dir)) die("mkdtemp", NULL);
    snprintf(g_path, sizeof g_path, "%s/input%s", g_dir, CKPT_ARCHIVE_EXT);
    const char *seeds = getenv("WICK_FUZZ_SEEDS");
    if (seeds) write_seeds(seeds);
    return 0;
}

static bool one_line(const wk_error *err) { return err->msg[0] && !strchr(err->msg, '\n'); }

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes the checksums a mutation broke (file header, each record's
 * meta, payload and header hash, as far as the sizes it claims fit), so the
 * fuzzer reaches the structural checks behind them. Layout: archive.h. */
static void repair_hashes(uint8_t *b, size_t size)
{
    if (size < 72) return;
    wr64(b + 64, XXH3_64bits(b, 64));
    size_t off = 72;
    while (off + 56 <= size && !memcmp(b + off, "WKRECORD", 8)) {
        uint64_t n_tok = rd32(b + off + 12), n_ck = rd32(b + off + 16), body = rd64(b + off + 24);
        uint64_t meta = 4 * n_tok + 16 * n_ck;
        if (body > size - off - 56 || meta > body) break;
        wr64(b + off + 32, XXH3_64bits(b + off + 56, (size_t)meta));
        wr64(b + off + 40, XXH3_64bits(b + off + 56 + meta, (size_t)(body - meta)));
        wr64(b + off + 48, XXH3_64bits(b + off, 48));
        off += 56 + (size_t)body;
    }
}

static void check_file(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_file(data, size);
    uint8_t *fixed = malloc(size + 1);
    if (fixed) {
        memcpy(fixed, data, size);
        repair_hashes(fixed, size);
        check_file(fixed, size);
        free(fixed);
    }
    return 0;
}

/* One file: scans cleanly or fails in one line; loads or is refused in one line. */
static void check_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(g_path, "wb");
    if (!f) return;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return;
    }
    fclose(f);
    ckpt_archive_info info;
    wk_error err = {0};
    if (ckpt_archive_scan(g_path, &info, &err)) {
        if (!one_line(&err)) __builtin_trap();
        return;
    }
    if (info.n_tokens < 0 || info.file_bytes + info.torn_bytes != size) __builtin_trap();
    ckpt *cks = calloc((size_t)info.n_ckpt + 1, sizeof *cks);
    if (cks) {
        wk_error lerr = {0};
        int rc = ckpt_archive_load(&info, g_ctx, g_seq, cks, &lerr);
        if (rc == 0) {
            if (eng_seq_pos(g_seq) != info.n_tokens) __builtin_trap();
            for (int32_t i = 0; i < info.n_ckpt; i++) ckpt_free(&cks[i]);
        } else if (!one_line(&lerr) || eng_seq_pos(g_seq) != 0) {
            __builtin_trap(); /* refused: said why, and left the sequence empty */
        }
        free(cks);
    }
    ckpt_archive_info_free(&info);
}
