/* `wick info FILE [--ctx N] [-v]`: what a GGUF model file holds, with
 * precision reported from the actual tensor bytes. Only prints; the numbers
 * come from gguf/gguf_stats.c, and a model of an architecture wick runs is
 * first validated as model_load does (model/model_validate.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stats.h"
#include "gguf/gguf_aux.h"
#include "model/model.h"
#include "quant/qtypes.h"
#include "util/units.h"

/* Arrays longer than this are cut in -v dumps (vocabularies have 150k+ entries). */
#define INFO_MAX_ARRAY_ITEMS 16
#define INFO_MAX_AUX 16 /* auxiliary tables per model: a pack has one or two */

static void info_usage(FILE *out)
{
    fprintf(out,
            "usage: wick info FILE [--ctx N] [--aux TABLE]... [-v]\n\n"
            "Shows what a GGUF model file holds: architecture, name, parameter count, file size,\n"
            "tensor types (count and bytes per type), bits per weight computed from the actual\n"
            "tensor bytes (overall and per class: embeddings, output, attention, ffn, norms/other),\n"
            "context length, layers, heads, head dims, experts, tokenizer and chat template.\n\n"
            "options:\n"
            "  --ctx N   also show KV-cache bytes per token and for N tokens at F16 and Q8_0\n"
            "            (full-attention layers only), and the recurrent state per sequence of\n"
            "            hybrid models (F32)\n"
            "  --aux TABLE  an auxiliary GGUF (n-gram or embedding table) that goes with the\n"
            "            model: mapped in place, its bytes shown apart from the weights\n"
            "  -v        also dump all metadata (long arrays cut) and every tensor\n"
            "  -h, --help  this text\n\n"
            "A model of an architecture wick runs is checked as `wick run` checks it (every\n"
            "hyper-parameter against the tensors and the other keys); a file that contradicts\n"
            "itself is refused.\n\n"
            "Exit status: 0 on success, 1 if the file cannot be read, is not valid GGUF or\n"
            "contradicts itself, 2 on bad usage.\n");
}

/* "1.50 MiB" style; buf must hold 32 bytes. */
static const char *human_bytes(char *buf, uint64_t n) { return wk_format_bytes(buf, 32, n); }

/* "1.23 B" / "456.79 M" / "12.35 K" parameter counts; buf must hold 32 bytes. */
static const char *human_count(char *buf, uint64_t n)
{
    if (n >= 1000000000ull) snprintf(buf, 32, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, 32, "%.2f M", (double)n / 1e6);
    else if (n >= 1000ull) snprintf(buf, 32, "%.2f K", (double)n / 1e3);
    else snprintf(buf, 32, "%" PRIu64, n);
    return buf;
}

static void print_str_kv(const gguf_file *f, const char *label, const char *key)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->type == GGUF_T_STRING)
        printf("%-15s %.*s\n", label, (int)(kv->v.str.len > 200 ? 200 : kv->v.str.len), kv->v.str.ptr);
}

static void print_precision(const gguf_weight_stats *ws)
{
    char b1[32], b2[32];
    printf("%-15s %.3f overall (%s in %s weights)\n", "bits/weight:", gguf_bits_per_weight(&ws->total),
           human_bytes(b1, ws->total.n_bytes), human_count(b2, ws->total.n_elements));
    for (int c = 0; c < GGUF_CLASS_COUNT; c++) {
        const gguf_bytes_stat *s = &ws->by_class[c];
        if (!s->n_tensors) continue;
        printf("  %-13s %7.3f bpw  %4" PRIu64 " tensors  %12s params  %12s\n",
               gguf_tensor_class_name((enum gguf_tensor_class)c), gguf_bits_per_weight(s), s->n_tensors,
               human_count(b1, s->n_elements), human_bytes(b2, s->n_bytes));
    }
    printf("tensor types:%s\n", ws->total.n_tensors ? "" : "   (no tensors)");
    for (size_t t = 0; t < sizeof ws->by_type / sizeof ws->by_type[0]; t++) {
        const gguf_bytes_stat *s = &ws->by_type[t];
        if (!s->n_tensors) continue;
        double pct = ws->total.n_bytes ? 100.0 * (double)s->n_bytes / (double)ws->total.n_bytes : 0.0;
        printf("  %-13s %4" PRIu64 " tensors  %12s  %5.1f%% of bytes  %12s params\n", qt_type_name((uint32_t)t),
               s->n_tensors, human_bytes(b1, s->n_bytes), pct, human_count(b2, s->n_elements));
    }
}

static void print_shape(const gguf_model_summary *s)
{
    if (!s->arch[0]) {
        printf("%-15s (no general.architecture: not a model file)\n", "architecture:");
        return;
    }
    if (s->n_ctx_train) printf("%-15s %" PRIu64 " tokens (trained)\n", "context:", s->n_ctx_train);
    printf("%-15s %u", "layers:", s->n_layer);
    if (s->n_recurrent) printf(" (%u full attention, %u linear attention)", s->n_full_attn, s->n_recurrent);
    if (s->n_nextn) printf(" + %u MTP", s->n_nextn);
    printf("\n");
    if (s->n_embd) printf("%-15s %" PRIu64 "\n", "embedding:", s->n_embd);
    if (s->n_head)
        printf("%-15s %u query, %u kv; head dim k %u, v %u\n", "heads:", s->n_head, s->n_head_kv, s->head_dim_k,
               s->head_dim_v);
    if (s->n_ff && !s->n_expert) printf("%-15s %" PRIu64 "\n", "ffn:", s->n_ff);
    if (s->n_expert) {
        printf("%-15s %u (%u used per token), expert ffn %" PRIu64, "experts:", s->n_expert, s->n_expert_used,
               s->n_ff_exp);
        if (s->n_ff_shexp) printf(", shared expert ffn %" PRIu64, s->n_ff_shexp);
        printf("\n");
    }
    if (s->n_vocab) printf("%-15s %" PRIu64 "\n", "vocab:", s->n_vocab);
}

static void print_tokenizer(const gguf_model_summary *s)
{
    if (s->tok_model[0] || s->tok_vocab) {
        printf("%-15s %s", "tokenizer:", s->tok_model[0] ? s->tok_model : "?");
        if (s->tok_pre[0]) printf(" (pre: %s)", s->tok_pre);
        printf(", %" PRIu64 " tokens\n", s->tok_vocab);
    } else {
        printf("%-15s none\n", "tokenizer:");
    }
    if (s->has_chat_template) printf("%-15s yes (%" PRIu64 " bytes)\n", "chat template:", s->chat_template_len);
    else printf("%-15s none\n", "chat template:");
}

static void print_cache(const gguf_file *f, const gguf_model_summary *s, uint64_t n_ctx)
{
    char b1[32], b2[32], b3[32];
    if (!s->arch[0]) return;
    printf("KV cache:       %u of %u layers have one (full attention)%s\n", s->n_full_attn, s->n_layer,
           s->n_nextn ? "; MTP layers not counted" : "");
    const uint32_t types[2] = {QT_F16, QT_Q8_0};
    for (int i = 0; i < 2; i++) {
        uint64_t per_tok = gguf_kv_bytes_per_token(f, s, types[i]);
        printf("  %-5s %12s/token  %12s for %" PRIu64 " tokens\n", qt_type_name(types[i]), human_bytes(b1, per_tok),
               human_bytes(b2, per_tok * n_ctx), n_ctx);
    }
    if (s->n_recurrent)
        printf("recurrent state: %s per sequence (F32; %u layers x (conv %s + ssm %s))\n",
               human_bytes(b1, s->recurrent_bytes_per_seq), s->n_recurrent,
               human_bytes(b2, s->conv_state_bytes_per_layer), human_bytes(b3, s->ssm_state_bytes_per_layer));
}

/* The file itself when it is a table, then the --aux tables: bytes apart
 * from the weights. 1 when a table cannot be opened (message printed). */
static int print_aux(const gguf_file *f, const char *const *paths, int n)
{
    char b1[32];
    const gguf_kv *type = gguf_find_kv(f, "general.type");
    if (type && type->type == GGUF_T_STRING && type->v.str.len == 3 && !memcmp(type->v.str.ptr, "aux", 3))
        printf("%-15s auxiliary table: read in place beside a model, not a model itself\n", "kind:");
    if (!n) return 0;
    uint64_t total = 0;
    gguf_aux a[INFO_MAX_AUX];
    for (int i = 0; i < n; i++) {
        wk_error err = {0};
        if (gguf_aux_open(&a[i], paths[i], &err)) {
            fprintf(stderr, "wick info: --aux %s\n", err.msg);
            for (int j = 0; j < i; j++) gguf_aux_close(&a[j]);
            return 1;
        }
        total += a[i].tensor_bytes;
    }
    printf("%-15s %d table%s, %s mapped in place (not in the weights above)\n", "auxiliary:", n, n == 1 ? "" : "s",
           human_bytes(b1, total));
    for (int i = 0; i < n; i++) {
        printf("  %-13s %12s  %zu tensors  %s\n", a[i].kind, human_bytes(b1, a[i].tensor_bytes),
               gguf_tensor_count(a[i].file), paths[i]);
        gguf_aux_close(&a[i]);
    }
    return 0;
}

static void print_verbose(const gguf_file *f)
{
    printf("\nmetadata (%zu keys):\n", gguf_kv_count(f));
    for (size_t i = 0; i < gguf_kv_count(f); i++) {
        printf("  ");
        gguf_kv_print(stdout, gguf_kv_at(f, i), INFO_MAX_ARRAY_ITEMS);
    }
    printf("\ntensors (%zu):\n", gguf_tensor_count(f));
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) n += snprintf(shape + n, sizeof shape - (size_t)n, ", %" PRId64, t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-40s %-7s %-24s %12" PRIu64 " bytes  @0x%" PRIx64 "\n", t->name_z, qt_type_name(t->type), shape,
               t->n_bytes, t->offset);
    }
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    uint64_t n_ctx = 0;
    int verbose = 0, want_ctx = 0, n_aux = 0;
    const char *aux_paths[INFO_MAX_AUX];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            info_usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = 1;
        } else if (strcmp(a, "--ctx") == 0 || strncmp(a, "--ctx=", 6) == 0) {
            const char *val = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            errno = 0;
            unsigned long long v = val ? strtoull(val, &end, 10) : 0;
            if (!val || !*val || *end || errno || val[0] == '-' || v == 0 || v > (1ull << 40)) {
                fprintf(stderr, "wick info: --ctx needs a positive token count, got '%s'\n", val ? val : "");
                return 2;
            }
            n_ctx = v;
            want_ctx = 1;
        } else if (strcmp(a, "--aux") == 0) {
            if (i + 1 >= argc || n_aux == INFO_MAX_AUX) {
                fprintf(stderr, "wick info: --aux needs a FILE (at most %d)\n", INFO_MAX_AUX);
                return 2;
            }
            aux_paths[n_aux++] = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "wick info: unknown option '%s' (see wick info --help)\n", a);
            return 2;
        } else if (path) {
            fprintf(stderr, "wick info: more than one FILE given ('%s' and '%s')\n", path, a);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        fprintf(stderr, "wick info: missing FILE (usage: wick info FILE [--ctx N] [-v])\n");
        return 2;
    }

    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open(&f, path, &err) != 0) {
        fprintf(stderr, "wick info: %s\n", err.msg);
        return 1;
    }
    /* a model of an architecture wick runs gets the checks `wick run` makes:
     * a file that contradicts itself is refused the same way by both */
    char not_runnable[WK_ERROR_MSG_CAP] = "";
    if (gguf_find_kv(f, "general.architecture")) {
        int rc = model_check_file(f, &err);
        if (rc == WK_EUNSUPPORTED) {
            snprintf(not_runnable, sizeof not_runnable, "%s", err.msg);
        } else if (rc) {
            fprintf(stderr, "wick info: %s: %s\n", path, err.msg);
            gguf_close(f);
            return 1;
        }
    }
    gguf_model_summary s;
    if (gguf_model_summary_compute(f, &s, &err) != 0) {
        fprintf(stderr, "wick info: %s: %s\n", path, err.msg);
        gguf_close(f);
        return 1;
    }
    gguf_weight_stats ws;
    gguf_weight_stats_compute(f, &ws);
    char b1[32], b2[32];

    printf("%-15s %s\n", "file:", path);
    printf("%-15s %s (GGUF v%u, %zu keys, %zu tensors, alignment %u)\n", "file size:",
           human_bytes(b1, gguf_file_size(f)), gguf_version(f), gguf_kv_count(f), gguf_tensor_count(f),
           gguf_alignment(f));
    if (s.arch[0]) printf("%-15s %s\n", "architecture:", s.arch);
    print_str_kv(f, "name:", "general.name");
    print_str_kv(f, "size label:", "general.size_label");
    printf("%-15s %s (%" PRIu64 ")\n", "parameters:", human_count(b1, ws.total.n_elements), ws.total.n_elements);
    uint64_t ftype;
    wk_error ignored;
    if (gguf_get_u64(f, "general.file_type", &ftype, &ignored) == 0) {
        const char *ftn = ftype <= UINT32_MAX ? gguf_file_type_name((uint32_t)ftype) : NULL;
        printf("%-15s %s (general.file_type %" PRIu64 ", a label; see bits/weight)\n", "file type:",
               ftn ? ftn : "unknown", ftype);
    }
    print_precision(&ws);
    print_shape(&s);
    if (not_runnable[0]) printf("%-15s no: %s\n", "wick runs it:", not_runnable);
    print_tokenizer(&s);
    if (want_ctx) print_cache(f, &s, n_ctx);
    int rc = print_aux(f, aux_paths, n_aux);
    if (verbose) print_verbose(f);
    (void)b2;
    gguf_close(f);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "wick info: writing output failed: %s\n", strerror(errno));
        return 1;
    }
    return rc;
}
