/* Q6_K's 6-bit codes from one half of a block (64 ql bytes, 32 qh bytes), 32 bytes
 * at a time in 256-bit registers: u[c] holds elements 32c .. 32c + 31 of the half
 * (0..63, the −32 offset left to the caller). Shared by the x86 dot products
 * (quant/dot_avx2.c, dot_avx512.c) and the CPU decode tiles (backend/cpu). */
#ifndef WICK_QUANT_Q6K_X86_H
#define WICK_QUANT_Q6K_X86_H

#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline)) void q6k_codes_256(const uint8_t *ql, const uint8_t *qh, __m256i u[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

#endif
