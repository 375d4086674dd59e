/* AVX2 + F16C: one Q8_0 KV row to F32 (the scalar version is in
 * attention_kv_q8.c; called only after the CPU check). */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

void cpu_kv_row_q8_0_to_f32_avx2(float *dst, const uint16_t *src, int32_t d)
{
    const uint8_t *b = (const uint8_t *)src;
    for (int32_t i = 0; i < d; i += 32, b += 34) {
        uint16_t h;
        memcpy(&h, b, 2);
        const __m256 s = _mm256_set1_ps(_cvtsh_ss(h));
        for (int j = 0; j < 32; j += 8) {
            const __m128i q8 = _mm_loadl_epi64((const __m128i *)(b + 2 + j));
            const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
            _mm256_storeu_ps(dst + i + j, _mm256_mul_ps(s, f));
        }
    }
}
