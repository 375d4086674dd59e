/* The request pipeline with its prefix cache on golden tiny models, driven
 * directly (no service thread): a failed decode step is never confirmed or
 * archived, an archive of another format version is left alone, a corrupt
 * one is removed, and a write killed at any point leaves the file at its
 * old state or its new one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/archive.h"
#include "chat/chat_conv.h"
#include "pipeline/pipeline.h"
#include "testutil.h"

#define TOL 1e-4f

static char *make_tmpdir(void)
{
    char *d = strdup("/tmp/wick-test-pipeline-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_dir(char *d)
{
    DIR *dd = opendir(d);
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        if (e->d_name[0] == '.') continue;
        unlink(path_join(d, e->d_name));
    }
    if (dd) closedir(dd);
    rmdir(d);
    free(d);
}

/* Files in d ending in CKPT_ARCHIVE_EXT; the last one's path in out. */
static int archive_files(const char *d, char *out, size_t cap)
{
    DIR *dd = opendir(d);
    struct dirent *e;
    int n = 0;
    while (dd && (e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, CKPT_ARCHIVE_EXT)) continue;
        snprintf(out, cap, "%s/%s", d, e->d_name);
        n++;
    }
    if (dd) closedir(dd);
    return n;
}

static pl_engine *open_engine(const char *golden, const char *file, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = path;
    cfg.need_template = false;
    cfg.eng.n_threads = 1;
    cfg.eng.n_ctx = 512;
    cfg.cache.max_slots = 2;
    cfg.cache.dir = dir;
    pl_engine *pe = NULL;
    wk_error err = {0};
    if (pl_engine_open(&pe, &cfg, &err)) fail_msg("%s", err.msg);
    return pe;
}

static void make_tokens(int32_t *t, int n, uint32_t seed)
{
    uint32_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((s >> 8) % 257);
    }
}

/* What a run left: the generated ids and the logits after its prompt. */
typedef struct seen {
    int32_t ids[64];
    int n;
    float *logits;
    int32_t n_vocab;
} seen;

static void on_token(void *user, int32_t id)
{
    seen *s = user;
    if (s->n < 64) s->ids[s->n++] = id;
}

static void on_prefilled(void *user, eng_ctx *ctx)
{
    seen *s = user;
    s->n_vocab = eng_n_vocab(ctx);
    free(s->logits);
    s->logits = malloc(sizeof(float) * (size_t)s->n_vocab);
    memcpy(s->logits, eng_logits(ctx), sizeof(float) * (size_t)s->n_vocab);
}

/* A greedy completion of ids; returns pl_run's status. */
static int run_ids(pl_engine *pe, const int32_t *ids, int n, int max_tokens, bool fresh, seen *out)
{
    eng_request req = {0};
    req.kind = ENG_REQ_COMPLETION;
    req.prompt_ids = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(req.prompt_ids);
    memcpy(req.prompt_ids, ids, sizeof(int32_t) * (size_t)n);
    req.n_prompt_ids = n;
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.fresh = fresh;
    req.sampling.temperature = 0;
    req.sampling.top_p = 1;
    req.sampling.repeat_penalty = 1;
    req.sampling.has_seed = true;
    pl_sink sink = {.user = out, .token = on_token, .prefilled = on_prefilled};
    out->n = 0;
    eng_event final = {0};
    int rc = pl_run(pe, &req, &sink, &final);
    eng_request_clear(&req);
    return rc;
}

/* No archive file holds the failed request's prompt (ids[0..50)) followed
 * by its first generated token. */
static void check_no_failed_state(const char *dir, const int32_t *ids, int32_t g0)
{
    char path[4096];
    assert_true(archive_files(dir, path, sizeof path) >= 1);
    DIR *dd = opendir(dir);
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (!strstr(e->d_name, CKPT_ARCHIVE_EXT)) continue;
        ckpt_archive_info info;
        wk_error err = {0};
        assert_int_equal(ckpt_archive_scan(path_join(dir, e->d_name), &info, &err), 0);
        bool failed = info.n_tokens > 50 && !memcmp(info.tokens, ids, sizeof(int32_t) * 50) && info.tokens[50] == g0;
        assert_false(failed);
        ckpt_archive_info_free(&info);
    }
    closedir(dd);
}

/* A decode step fails after the prefill confirmed its checkpoints and one
 * token was decoded. The state the failed step half-wrote must not be
 * reused (a prompt extending it gives the logits of a cold run) nor reach
 * the archive. */
static void check_failed_decode(const char *file)
{
    GOLDEN_OR_SKIP(golden);
    char *dir = make_tmpdir();
    pl_engine *pe = open_engine(golden, file, dir);
    int32_t ids[128];
    make_tokens(ids, 40, 11);
    seen a = {0}, b = {0}, c = {0}, cold = {0};
    assert_int_equal(run_ids(pe, ids, 40, 6, false, &a), 0);
    make_tokens(ids + 40, 10, 12);
    /* forward calls: the prefill (one chunk), decode 1, decode 2 fails */
    eng_ctx_fail_after(pl_engine_ctx(pe), 3);
    assert_int_equal(run_ids(pe, ids, 50, 6, false, &b), 500);
    assert_int_equal(b.n, 2); /* the first token (from the prefill) and the one whose step failed */
    /* the cache fell back to the end of B's prompt (its last confirmed state) ... */
    json_t *cj = ckpt_cache_json(pl_engine_cache(pe));
    bool at_prompt_end = false;
    size_t i;
    json_t *slot;
    json_array_foreach(json_object_get(cj, "slots"), i, slot) {
        int32_t tok = (int32_t)json_integer_value(json_object_get(slot, "tokens"));
        assert_true(tok <= 50);
        at_prompt_end |= tok == 50;
    }
    assert_true(at_prompt_end);
    json_decref(cj);
    /* ... and an idle moment archives no trace of the failed step */
    ckpt_cache_archive_flush(pl_engine_cache(pe));
    check_no_failed_state(dir, ids, b.ids[0]);
    /* a prompt that extends exactly what the failed request had fed: B, its first token, more */
    ids[50] = b.ids[0];
    make_tokens(ids + 51, 9, 13);
    assert_int_equal(run_ids(pe, ids, 60, 4, false, &c), 0);
    assert_int_equal(run_ids(pe, ids, 60, 4, true, &cold), 0);
    float diff = 0;
    for (int32_t i = 0; i < c.n_vocab; i++) diff = fmaxf(diff, fabsf(c.logits[i] - cold.logits[i]));
    if (diff > TOL) fail_msg("%s: logits %g away from a cold run after a failed decode", file, diff);
    assert_memory_equal(c.ids, cold.ids, sizeof(int32_t) * 4);

    free(a.logits);
    free(b.logits);
    free(c.logits);
    free(cold.logits);
    pl_engine_close(pe);
    rm_dir(dir);
}

static void test_failed_decode_is_not_confirmed_qwen35(void **state)
{
    (void)state;
    check_failed_decode("tiny-qwen35-F32.gguf");
}

static void test_failed_decode_is_not_confirmed_qwen3(void **state)
{
    (void)state;
    check_failed_decode("tiny-qwen3-F32.gguf");
}

static void write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* Two builds may share a cache folder: a file of another format version
 * is skipped and kept; a damaged one of this version is deleted. */
static void test_archive_of_another_version_is_skipped_not_deleted(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    char *dir = make_tmpdir();
    uint8_t other[256] = "WKCACHE";
    other[8] = 7; /* version 7, little-endian */
    uint8_t damaged[256] = "WKCACHE";
    damaged[8] = (uint8_t)CKPT_ARCHIVE_VERSION;
    damaged[12] = 72; /* header bytes; the header hash is wrong */
    char p_other[4200], p_damaged[4200];
    snprintf(p_other, sizeof p_other, "%s/00000000000000aa%s", dir, CKPT_ARCHIVE_EXT);
    snprintf(p_damaged, sizeof p_damaged, "%s/00000000000000bb%s", dir, CKPT_ARCHIVE_EXT);
    write_file(p_other, other, sizeof other);
    write_file(p_damaged, damaged, sizeof damaged);
    pl_engine *pe = open_engine(golden, "tiny-qwen35-F32.gguf", dir);
    ckpt_cache_stats st;
    ckpt_cache_get_stats(pl_engine_cache(pe), &st);
    assert_int_equal(st.n_disk, 0);
    assert_int_equal(st.disk_corrupt, 1);
    struct stat sb;
    assert_int_equal(stat(p_other, &sb), 0);      /* kept */
    assert_int_not_equal(stat(p_damaged, &sb), 0); /* gone */
    pl_engine_close(pe);
    rm_dir(dir);
}

/* ---- kill -9 mid-write --------------------------------------------------------- */

typedef struct model_run {
    model *m;
    eng_ctx *ctx;
    eng_seq *seq;
} model_run;

static void open_run(model_run *r, const char *golden, const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    wk_error err = {0};
    if (model_load(&r->m, path, &err)) fail_msg("%s", err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 256;
    assert_int_equal(eng_ctx_new(&r->ctx, r->m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&r->seq, r->ctx, 256, &err), 0);
}

static void close_run(model_run *r)
{
    eng_seq_free(r->seq);
    eng_ctx_free(r->ctx);
    model_free(r->m);
}

/* In a child: the write of seq's positions [from, end) (with ck), one
 * small step at a time, a byte on fd after each; exits when done. */
static void child_write(model_run *r, const char *dir, int32_t from, size_t file_bytes, const ckpt *ck, int fd)
{
    ckpt_archive_writer *w = NULL;
    wk_error err = {0};
    const ckpt *cks[1] = {ck};
    if (ckpt_archive_writer_start(&w, dir, 0x77, r->ctx, r->seq, from, file_bytes, cks, 1, &err)) _exit(2);
    int rc;
    while ((rc = ckpt_archive_writer_step(w, 1, &err)) > 0)
        if (write(fd, "s", 1) != 1) _exit(3);
    _exit(rc == 0 ? 0 : 4);
}

/* Kills the writer after `steps` steps (or lets it finish when steps < 0). */
static void write_and_kill(model_run *r, const char *dir, int32_t from, size_t file_bytes, const ckpt *ck, int steps)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        child_write(r, dir, from, file_bytes, ck, pfd[1]);
    }
    close(pfd[1]);
    char b;
    for (int i = 0; steps >= 0 && i < steps && read(pfd[0], &b, 1) == 1; i++) {}
    if (steps >= 0) kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    close(pfd[0]);
    if (steps < 0) assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The file is whole at n_old or n_new tokens; its payload loads (hashes
 * checked) and its tokens are the sequence's. Returns the token count. */
static int32_t check_whole(model_run *r, const char *path, int32_t n_old, int32_t n_new, const int32_t *tokens)
{
    ckpt_archive_info info;
    wk_error err = {0};
    assert_int_equal(ckpt_archive_scan(path, &info, &err), 0);
    if (info.n_tokens != n_old && info.n_tokens != n_new)
        fail_msg("archive holds %d tokens: neither the old %d nor the new %d", info.n_tokens, n_old, n_new);
    assert_memory_equal(info.tokens, tokens, sizeof(int32_t) * (size_t)info.n_tokens);
    eng_seq *s;
    assert_int_equal(eng_seq_new(&s, r->ctx, 256, &err), 0);
    ckpt cks[8] = {0};
    assert_true(info.n_ckpt <= 8);
    if (ckpt_archive_load(&info, r->ctx, s, cks, &err)) fail_msg("load: %s", err.msg);
    for (int32_t i = 0; i < info.n_ckpt; i++) ckpt_free(&cks[i]);
    eng_seq_free(s);
    int32_t n = info.n_tokens;
    ckpt_archive_info_free(&info);
    return n;
}

static void test_killed_write_leaves_the_old_or_the_new_state(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    model_run r = {0};
    open_run(&r, golden, "tiny-qwen35-F32.gguf");
    char *dir = make_tmpdir();
    char path[4200];
    ckpt_archive_path(path, sizeof path, dir, 0x77);
    int32_t t[100];
    make_tokens(t, 100, 31);
    wk_error err = {0};
    assert_int_equal(eng_prefill(r.ctx, r.seq, t, 60, NULL, &err), 0);
    ckpt k1 = {0}, k2 = {0};
    assert_int_equal(ckpt_take(&k1, r.seq, CKPT_PROMPT_END, &err), 0);
    k1.complete = true;

    /* a first write killed at every step: no file, or the whole new one */
    int seen_new = 0;
    for (int steps = 0; steps < 12; steps++) {
        unlink(path);
        write_and_kill(&r, dir, 0, 0, &k1, steps);
        struct stat sb;
        if (stat(path, &sb) == 0 && check_whole(&r, path, -1, 60, t) == 60) seen_new++;
    }
    assert_true(seen_new > 0);
    write_and_kill(&r, dir, 0, 0, &k1, -1);
    ckpt_archive_info info;
    assert_int_equal(ckpt_archive_scan(path, &info, &err), 0);
    size_t old_bytes = info.file_bytes;
    ckpt_archive_info_free(&info);

    /* an append killed at every step: the old 60 tokens or the new 100 */
    assert_int_equal(eng_prefill(r.ctx, r.seq, t + 60, 40, NULL, &err), 0);
    assert_int_equal(ckpt_take(&k2, r.seq, CKPT_GEN_END, &err), 0);
    k2.complete = true;
    int olds = 0, news = 0;
    for (int steps = 0; steps < 12; steps++) {
        /* the file as it was before each attempt: the torn tail of the last kill is cut by the next append */
        assert_int_equal(ckpt_archive_scan(path, &info, &err), 0);
        int32_t n = info.n_tokens;
        size_t bytes = info.file_bytes;
        ckpt_archive_info_free(&info);
        if (n == 100) { /* done already: back to the old state for the next attempt */
            assert_int_equal(truncate(path, (off_t)old_bytes), 0);
            continue;
        }
        write_and_kill(&r, dir, 60, bytes, &k2, steps);
        if (check_whole(&r, path, 60, 100, t) == 60) olds++;
        else news++;
    }
    assert_true(olds > 0 && news > 0);
    ckpt_free(&k1);
    ckpt_free(&k2);
    rm_dir(dir);
    close_run(&r);
}

/* ---- constrained output ---------------------------------------------------------- */

typedef struct text_out {
    char buf[8192];
    size_t n;
} text_out;

static void on_content(void *user, eng_event *ev)
{
    text_out *t = user;
    if (ev->type == ENG_EV_DELTA && ev->delta_kind == ENG_DELTA_CONTENT && ev->text) {
        size_t k = strlen(ev->text);
        if (t->n + k < sizeof t->buf) {
            memcpy(t->buf + t->n, ev->text, k);
            t->n += k;
            t->buf[t->n] = '\0';
        }
    }
    eng_event_clear(ev);
}

/* A JSON answer on a random-weight model, whatever it would rather say:
 * complete and valid against the schema even when the budget is tight (the
 * loop closes it along the grammar's shortest completion). */
static void test_json_schema_answers_are_complete_within_a_tight_budget(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-qwen3-F32.gguf", golden);
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = path;
    cfg.chat_template = "qwen3";
    cfg.eng.n_threads = 1;
    cfg.eng.n_ctx = 1024;
    pl_engine *pe = NULL;
    wk_error err = {0};
    if (pl_engine_open(&pe, &cfg, &err)) fail_msg("%s", err.msg);
    const char *schema_text = "{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\"},"
                              "\"n\":{\"type\":\"integer\"}},\"required\":[\"answer\",\"n\"],"
                              "\"additionalProperties\":false}";
    for (int budget = 40; budget <= 120; budget += 40) {
        for (int seed = 1; seed <= 3; seed++) {
            eng_request req = {0};
            req.kind = ENG_REQ_CHAT;
            req.chat = malloc(sizeof *req.chat);
            assert_non_null(req.chat);
            chat_conv_init(req.chat);
            assert_int_equal(chat_conv_add(req.chat, CHAT_ROLE_USER, "Reply in JSON.", 14, &err), 0);
            assert_int_equal(chat_conv_finish(req.chat, "messages", &err), 0);
            req.response_format = ENG_FORMAT_JSON_SCHEMA;
            req.json_schema = json_loads(schema_text, 0, NULL);
            req.max_tokens = budget;
            eng_sampling_default(&req.sampling); /* sampled, at temperature 0.8 */
            req.sampling.seed = (uint64_t)seed;
            req.sampling.has_seed = true;
            req.fresh = true;
            text_out t = {0};
            pl_sink sink = {.user = &t, .event = on_content};
            eng_event final = {0};
            assert_int_equal(pl_run(pe, &req, &sink, &final), 0);
            json_error_t je;
            json_t *j = json_loads(t.buf, 0, &je);
            if (!j) fail_msg("budget %d seed %d: not JSON (%s): %s", budget, seed, je.text, t.buf);
            assert_true(json_is_string(json_object_get(j, "answer")));
            assert_true(json_is_integer(json_object_get(j, "n")));
            assert_int_equal(json_object_size(j), 2);
            json_decref(j);
            eng_request_clear(&req);
        }
    }
    pl_engine_close(pe);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_decode_is_not_confirmed_qwen35),
        cmocka_unit_test(test_failed_decode_is_not_confirmed_qwen3),
        cmocka_unit_test(test_archive_of_another_version_is_skipped_not_deleted),
        cmocka_unit_test(test_killed_write_leaves_the_old_or_the_new_state),
        cmocka_unit_test(test_json_schema_answers_are_complete_within_a_tight_budget),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
