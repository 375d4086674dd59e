/* Building the repacked weight layouts (layouts: matmul_packed.h). Portable
 * C: runs once per weight at load time. */
#include "backend/cpu/matmul_packed.h"

#include <stdlib.h>
#include <string.h>

#include "quant/blocks.h"
#include "util/cpu.h"
#include "util/f16.h"

static int repack_disabled(void)
{
    const char *v = getenv("WICK_NO_REPACK");
    return v && v[0] && v[0] != '0';
}

enum cpu_pack_layout cpu_pack_layout_for(enum qt_type type)
{
    const wk_cpu_features *f = wk_cpu();
    if (repack_disabled()) return CPU_PACK_NONE;
    if (!(f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->f16c)) return CPU_PACK_NONE;
    switch (type) {
    case QT_Q8_0: return CPU_PACK_R16_Q8_0;
    case QT_Q4_K: return CPU_PACK_R16_Q4_K;
    case QT_Q6_K: return CPU_PACK_R16_Q6_K;
    default: return CPU_PACK_NONE;
    }
}

/* Plain row r of group g, or NULL past the last row (packed as zeros). */
static const void *group_row(const cpu_weight *w, int64_t g, int r)
{
    int64_t row = g * CPU_PACK_ROWS + r;
    return row < w->rows ? (const uint8_t *)w->data + (size_t)row * w->row_bytes : NULL;
}

/* Group g of a Q8_0 weight: codes (+128) in VNNI order, then the scales. */
static void pack_group_q8_0(const cpu_weight *w, int64_t g, int64_t blocks, uint8_t *dst)
{
    uint8_t *codes = dst;
    uint16_t *scales = (uint16_t *)(dst + (size_t)blocks * 512);
    for (int r = 0; r < CPU_PACK_ROWS; r++) {
        const blk_q8_0 *src = group_row(w, g, r);
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *cb = codes + (size_t)b * 512 + 4 * r;
            for (int q = 0; q < 8; q++) { /* 4 codes at a time, +128 each */
                uint32_t v = 0;
                if (src) memcpy(&v, src[b].qs + 4 * q, 4);
                v ^= 0x80808080u;
                memcpy(cb + 64 * q, &v, 4);
            }
            scales[b * CPU_PACK_ROWS + r] = src ? src[b].d : 0;
        }
    }
}

/* Group g of a Q4_K weight (layout in matmul_packed.h). */
static void pack_group_q4_K(const cpu_weight *w, int64_t g, int64_t blocks, uint8_t *dst)
{
    for (int r = 0; r < CPU_PACK_ROWS; r++) {
        const blk_q4_K *src = group_row(w, g, r);
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *blk = dst + (size_t)b * CPU_PACK_Q4K_BLOCK;
            uint8_t *sc = blk + 2048, *mn = sc + 128;
            uint16_t *d = (uint16_t *)(mn + 128), *dmin = d + CPU_PACK_ROWS;
            for (int l = 0; l < 32; l++) { /* line l = 8·pair + quad: bytes 4l..4l+3 of qs */
                uint32_t v = 0;
                if (src) memcpy(&v, src[b].qs + 4 * l, 4);
                memcpy(blk + 64 * l + 4 * r, &v, 4);
            }
            for (int j = 0; j < 8; j++) {
                uint8_t s6 = 0, m6 = 0;
                if (src) k_scale_min(j, src[b].scales, &s6, &m6);
                sc[16 * j + r] = s6;
                mn[16 * j + r] = m6;
            }
            d[r] = src ? src[b].d : 0;
            dmin[r] = src ? src[b].dmin : 0;
        }
    }
}

/* Group g of a Q6_K weight (layout in matmul_packed.h). */
static void pack_group_q6_K(const cpu_weight *w, int64_t g, int64_t blocks, uint8_t *dst)
{
    for (int r = 0; r < CPU_PACK_ROWS; r++) {
        const blk_q6_K *src = group_row(w, g, r);
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *blk = dst + (size_t)b * CPU_PACK_Q6K_BLOCK;
            int8_t *sc = (int8_t *)(blk + 3072);
            uint16_t *d = (uint16_t *)(blk + 3072 + 256);
            for (int h = 0; h < 2; h++) {
                uint8_t *half = blk + (size_t)h * 24 * 64;
                for (int j = 0; j < 16; j++) {
                    uint32_t v = 0;
                    if (src) memcpy(&v, src[b].ql + 64 * h + 4 * j, 4);
                    memcpy(half + 64 * j + 4 * r, &v, 4);
                }
                for (int j = 0; j < 8; j++) {
                    uint32_t v = 0;
                    if (src) memcpy(&v, src[b].qh + 32 * h + 4 * j, 4);
                    memcpy(half + 64 * (16 + j) + 4 * r, &v, 4);
                }
            }
            for (int s6 = 0; s6 < 16; s6++) sc[16 * s6 + r] = src ? src[b].scales[s6] : 0;
            d[r] = src ? src[b].d : 0;
            memset(blk + 3072 + 256 + 32, 0, 32);
        }
    }
}

typedef struct {
    const cpu_weight *w;
    struct cpu_packed *p;
    size_t used; /* bytes of a group before its padding */
} pack_job;

static void pack_body(void *ctx, int worker, int n_workers)
{
    const pack_job *j = ctx;
    const struct cpu_packed *p = j->p;
    long g0, g1;
    wk_split((long)p->groups, worker, n_workers, &g0, &g1);
    for (long g = g0; g < g1; g++) {
        uint8_t *dst = p->data + (size_t)g * p->group_bytes;
        switch (p->layout) {
        case CPU_PACK_R16_Q4_K: pack_group_q4_K(j->w, g, p->blocks, dst); break;
        case CPU_PACK_R16_Q6_K: pack_group_q6_K(j->w, g, p->blocks, dst); break;
        default: pack_group_q8_0(j->w, g, p->blocks, dst); break;
        }
        memset(dst + j->used, 0, p->group_bytes - j->used);
    }
}

int cpu_pack_build(wk_pool *pool, const cpu_weight *w, struct cpu_packed **out, wk_error *err)
{
    *out = NULL;
    enum cpu_pack_layout layout = cpu_pack_layout_for(w->type);
    if (layout == CPU_PACK_NONE || w->rows <= 0) return 0;
    struct cpu_packed *p = calloc(1, sizeof *p);
    if (!p) return wk_fail(err, WK_ENOMEM, "matmul: out of memory repacking a weight");
    p->layout = layout;
    p->rows = w->rows;
    p->groups = (w->rows + CPU_PACK_ROWS - 1) / CPU_PACK_ROWS;
    const size_t block_bytes = layout == CPU_PACK_R16_Q4_K   ? CPU_PACK_Q4K_BLOCK
                               : layout == CPU_PACK_R16_Q6_K ? CPU_PACK_Q6K_BLOCK
                                                             : 512 + 2 * CPU_PACK_ROWS;
    p->blocks = w->cols / (layout == CPU_PACK_R16_Q8_0 ? 32 : 256);
    const size_t used = (size_t)p->blocks * block_bytes;
    p->group_bytes = (used + 63) & ~(size_t)63;
    p->data = aligned_alloc(64, p->group_bytes * (size_t)p->groups);
    if (!p->data) {
        size_t mib = p->group_bytes * (size_t)p->groups >> 20;
        free(p);
        return wk_fail(err, WK_ENOMEM, "matmul: out of memory repacking a %lld x %lld weight (%zu MiB)",
                       (long long)w->rows, (long long)w->cols, mib);
    }
    pack_job job = {w, p, used};
    wk_pool_run(pool, pack_body, &job);
    *out = p;
    return 0;
}

struct cpu_packed *cpu_pack_rows(const struct cpu_packed *p, int64_t row0, int64_t n, struct cpu_packed *view)
{
    if (!p || row0 % CPU_PACK_ROWS || row0 < 0 || n <= 0 || row0 + n > p->rows) return NULL;
    *view = *p;
    view->data = p->data + (size_t)(row0 / CPU_PACK_ROWS) * p->group_bytes;
    view->rows = n;
    view->groups = (n + CPU_PACK_ROWS - 1) / CPU_PACK_ROWS;
    return view;
}

void cpu_pack_free(struct cpu_packed *p)
{
    if (!p) return;
    free(p->data);
    free(p);
}

void cpu_pack_act_terms(const void *act_row, int64_t blocks, float *scale, int32_t *corr)
{
    const blk_q8_0 *a = act_row;
    for (int64_t b = 0; b < blocks; b++) {
        int s = 0;
        for (int e = 0; e < 32; e++) s += a[b].qs[e];
        scale[b] = wk_f16_to_f32(a[b].d);
        corr[b] = 128 * s;
    }
}
