/* GGUF → GGUF requantization (requant.h). */
#include "quant/requant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/qtypes.h"
#include "util/threadpool.h"

#define SLAB_BYTES ((size_t)32 << 20) /* output written 32 MiB at a time: bounded memory, few writes */

/* The model facts the mix rule needs, from the file's metadata and tensor names. */
static int mix_model_of(const gguf_file *f, qt_mix_model *m, wk_error *err)
{
    memset(m, 0, sizeof *m);
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    if (arch && arch->type == GGUF_T_STRING) {
        char key[96];
        uint64_t v = 0;
        snprintf(key, sizeof key, "%.*s.block_count", (int)(arch->v.str.len < 64 ? arch->v.str.len : 64),
                 arch->v.str.ptr);
        if (gguf_get_u64_or(f, key, 0, &v, err)) return WK_EFORMAT;
        m->n_layer = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        snprintf(key, sizeof key, "%.*s.expert_count", (int)(arch->v.str.len < 64 ? arch->v.str.len : 64),
                 arch->v.str.ptr);
        if (gguf_get_u64_or(f, key, 0, &v, err)) return WK_EFORMAT;
        m->n_expert = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    }
    m->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    for (size_t i = 0; i < gguf_tensor_count(f); i++)
        if (qt_mix_is_attn_v_like(gguf_tensor_at(f, i)->name_z)) m->n_attention_wv++;
    return WK_OK;
}

static double bits_per_weight(const qt_traits *t) { return 8.0 * t->block_bytes / t->block_elems; }

/* One slab of rows of one tensor, split over the pool's workers. */
typedef struct slab_job {
    const uint8_t *src;    /* first row of the slab */
    uint8_t *dst;
    uint32_t src_type, dst_type;
    int64_t ne0, n_rows;
    size_t src_row, dst_row;
    float **row_f32;       /* [worker] one F32 row each */
    int failed;
} slab_job;

static void slab_body(void *ctx, int worker, int n_workers)
{
    slab_job *j = ctx;
    long b, e;
    wk_split((long)j->n_rows, worker, n_workers, &b, &e);
    float *row = j->row_f32[worker];
    for (long r = b; r < e; r++) {
        if (qt_dequantize_row(j->src_type, j->src + (size_t)r * j->src_row, row, j->ne0) ||
            qt_quantize_row(j->dst_type, row, j->dst + (size_t)r * j->dst_row, j->ne0)) {
            j->failed = 1;
            return;
        }
    }
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int qt_requantize_file(const char *in_path, const char *out_path, const qt_mix_spec *spec, int n_threads,
                       qt_requant_progress_fn progress, void *user, qt_requant_stats *stats, wk_error *err)
{
    qt_requant_stats st = {0};
    if (same_file(in_path, out_path))
        return wk_fail(err, WK_EINVAL, "%s: the output would replace the input it is read from", out_path);
    gguf_file *f = NULL;
    int rc = gguf_open(&f, in_path, err);
    if (rc) return rc;
    qt_mix_model mm;
    if ((rc = mix_model_of(f, &mm, err))) {
        wk_fail_prefix(err, "%s", in_path);
        gguf_close(f);
        return rc;
    }
    const size_t n = gguf_tensor_count(f);
    uint32_t *types = calloc(n ? n : 1, sizeof *types);
    gguf_writer *w = NULL;
    wk_pool *pool = NULL;
    uint8_t *slab = NULL;
    float **rows = NULL;
    int n_workers = 0;
    if (!types) {
        rc = wk_fail(err, WK_ENOMEM, "requantize: out of memory");
        goto done;
    }
    /* pass 1: every tensor's target type, checked before anything is written */
    qt_mix_state ms = {0};
    int64_t max_ne0 = 1;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        uint32_t ty = qt_mix_choose(spec, &mm, &ms, t->name_z, t->n_dims, t->ne[0]);
        if (ty == QT_MIX_KEEP) ty = t->type;
        const qt_traits *dt = qt_traits_of(ty), *stt = qt_traits_of(t->type);
        if (!dt || !dt->weight_ok || t->ne[0] % dt->block_elems) {
            rc = wk_fail(err, WK_EINVAL, "tensor %s: rows of %lld elements cannot be stored as %s", t->name_z,
                         (long long)t->ne[0], qt_type_name(ty));
            goto done;
        }
        if (ty != t->type && stt->is_quantized && bits_per_weight(stt) < bits_per_weight(dt)) st.n_upcast++;
        types[i] = ty;
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }
    if ((rc = gguf_writer_new(&w, out_path, gguf_alignment(f), err))) goto done;
    for (size_t i = 0; i < gguf_kv_count(f); i++) gguf_writer_copy_kv(w, gguf_kv_at(f, i));
    gguf_writer_set_u32(w, "general.file_type", qt_mix_file_type(spec));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        gguf_writer_add_tensor(w, t->name_z, types[i], t->n_dims, t->ne);
    }
    if ((rc = gguf_writer_begin_data(w, err))) goto done;
    pool = wk_pool_new(n_threads);
    if (!pool) {
        rc = wk_fail(err, WK_ENOMEM, "requantize: cannot start the thread pool");
        goto done;
    }
    n_workers = wk_pool_size(pool);
    rows = calloc((size_t)n_workers, sizeof *rows);
    slab = malloc(SLAB_BYTES);
    if (!rows || !slab) {
        rc = wk_fail(err, WK_ENOMEM, "requantize: out of memory");
        goto done;
    }
    for (int k = 0; k < n_workers; k++)
        if (!(rows[k] = malloc((size_t)max_ne0 * sizeof(float)))) {
            rc = wk_fail(err, WK_ENOMEM, "requantize: out of memory for rows of %lld", (long long)max_ne0);
            goto done;
        }
    uint64_t total = 0, done_bytes = 0;
    for (size_t i = 0; i < n; i++) total += gguf_tensor_at(f, i)->n_bytes;
    /* pass 2: the data, tensor by tensor in file order */
    for (size_t i = 0; i < n && rc == 0; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        st.n_tensors++;
        st.n_elements_in += t->n_elements;
        st.in_bytes += t->n_bytes;
        if (types[i] == t->type) {
            st.n_copied++;
            st.out_bytes += t->n_bytes;
            rc = gguf_writer_write_data(w, t->data, (size_t)t->n_bytes, err);
            done_bytes += t->n_bytes;
            if (rc == 0 && progress && progress(user, done_bytes, total))
                rc = wk_fail(err, WK_ECANCELLED, "requantize: cancelled");
            continue;
        }
        st.n_quantized++;
        slab_job j = {.src_type = t->type, .dst_type = types[i], .ne0 = t->ne[0], .row_f32 = rows};
        j.src_row = qt_row_bytes(qt_traits_of(t->type), t->ne[0]);
        j.dst_row = qt_row_bytes(qt_traits_of(types[i]), t->ne[0]);
        const int64_t n_rows = (int64_t)(t->n_elements / (uint64_t)t->ne[0]);
        const int64_t per_slab = SLAB_BYTES / j.dst_row > 0 ? (int64_t)(SLAB_BYTES / j.dst_row) : 1;
        for (int64_t r0 = 0; r0 < n_rows && rc == 0; r0 += per_slab) {
            j.n_rows = n_rows - r0 < per_slab ? n_rows - r0 : per_slab;
            j.src = (const uint8_t *)t->data + (size_t)r0 * j.src_row;
            j.dst = slab;
            wk_pool_run(pool, slab_body, &j);
            if (j.failed) {
                rc = wk_fail(err, WK_EINVAL, "tensor %s: converting %s to %s failed", t->name_z,
                             qt_type_name(t->type), qt_type_name(types[i]));
                break;
            }
            rc = gguf_writer_write_data(w, slab, (size_t)j.n_rows * j.dst_row, err);
            st.out_bytes += (uint64_t)j.n_rows * j.dst_row;
            done_bytes += (uint64_t)j.n_rows * j.src_row;
            if (rc == 0 && progress && progress(user, done_bytes, total))
                rc = wk_fail(err, WK_ECANCELLED, "requantize: cancelled");
        }
    }
    if (rc == 0) {
        rc = gguf_writer_finish(w, err);
        w = NULL;
    }
done:
    if (w) gguf_writer_abort(w);
    if (rows)
        for (int k = 0; k < n_workers; k++) free(rows[k]);
    free(rows);
    free(slab);
    wk_pool_free(pool);
    free(types);
    gguf_close(f);
    if (stats) *stats = st;
    return rc;
}
