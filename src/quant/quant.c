/* Public entry points of quant/: argument checks and kernel selection. */
#include "quant/quant.h"

#include "quant/quant_impl.h"
#include "util/cpu.h"
#include "util/err.h"

static const qt_traits *row_traits(enum qt_type type, int64_t n)
{
    const qt_traits *t = qt_traits_of((uint32_t)type);
    if (!t || n < 0 || n % t->block_elems != 0) return NULL;
    return t;
}

int qt_dequantize_row(enum qt_type type, const void *src, float *dst, int64_t n)
{
    if (!row_traits(type, n)) return WK_EINVAL;
    return qt_dequantize_blocks(type, src, dst, n) == 0 ? 0 : WK_EINVAL;
}

int qt_quantize_row(enum qt_type type, const float *src, void *dst, int64_t n)
{
    if (!row_traits(type, n)) return WK_EINVAL;
    return qt_quantize_blocks(type, src, dst, n) == 0 ? 0 : WK_EINVAL;
}

#if defined(__x86_64__)
static int has_avx2(const wk_cpu_features *f) { return f->avx2 && f->fma && f->f16c; }

static int has_avx512(const wk_cpu_features *f)
{
    return has_avx2(f) && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
}
#endif

qt_vec_dot_fn qt_vec_dot_isa(enum qt_type type, enum qt_isa isa)
{
    const qt_traits *t = qt_traits_of((uint32_t)type);
    if (!t || !t->weight_ok) return NULL;
    const wk_cpu_features *f = wk_cpu();
    (void)f;
    switch (isa) {
    case QT_ISA_SCALAR: return qt_dot_scalar(type);
#if defined(__x86_64__)
    case QT_ISA_AVX2: return has_avx2(f) ? qt_dot_avx2(type) : NULL;
    case QT_ISA_AVX512:
        if (!has_avx512(f)) return NULL;
        if (type == QT_BF16 && !f->avx512bf16) return NULL;
        return qt_dot_avx512(type);
#elif defined(__aarch64__)
    case QT_ISA_NEON: return f->neon ? qt_dot_neon(type) : NULL;
    case QT_ISA_DOTPROD: return f->neon && f->dotprod ? qt_dot_neon_dotprod(type) : NULL;
#endif
    default: return NULL;
    }
}

qt_vec_dot_fn qt_vec_dot(enum qt_type type)
{
    /* best first; levels of other architectures give NULL */
    static const enum qt_isa order[] = {QT_ISA_AVX512, QT_ISA_AVX2, QT_ISA_DOTPROD, QT_ISA_NEON, QT_ISA_SCALAR};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        qt_vec_dot_fn fn = qt_vec_dot_isa(type, order[i]);
        if (fn) return fn;
    }
    return NULL;
}

size_t qt_act_row_bytes(enum qt_type wtype, int64_t n)
{
    const qt_traits *w = qt_traits_of((uint32_t)wtype);
    if (!w) return 0;
    const qt_traits *a = qt_traits_of(w->vec_dot);
    return qt_row_bytes(a, n);
}

int qt_quantize_act(enum qt_type wtype, const float *src, void *dst, int64_t n)
{
    const qt_traits *w = row_traits(wtype, n);
    if (!w || !w->weight_ok) return WK_EINVAL;
    enum qt_type at = w->vec_dot;
    if (!row_traits(at, n)) return WK_EINVAL;
#if defined(__x86_64__)
    if (has_avx512(wk_cpu()) && qt_quantize_act_avx512(at, src, dst, n) == 0) return 0;
    if (has_avx2(wk_cpu()) && qt_quantize_act_avx2(at, src, dst, n) == 0) return 0;
#endif
    return qt_quantize_blocks(at, src, dst, n) == 0 ? 0 : WK_EINVAL;
}
