/* NEON: one Q8_0 KV row to F32 (the scalar version is in attention_kv_q8.c;
 * called only after the CPU check). scale·code with one rounding, as there. */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

void cpu_kv_row_q8_0_to_f32_neon(float *dst, const uint16_t *src, int32_t d)
{
    const uint8_t *b = (const uint8_t *)src;
    for (int32_t i = 0; i < d; i += 32, b += 34) {
        __fp16 h;
        memcpy(&h, b, 2);
        const float32x4_t s = vdupq_n_f32((float)h);
        for (int j = 0; j < 32; j += 16) {
            const int8x16_t q = vld1q_s8((const int8_t *)(b + 2 + j));
            const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
            vst1q_f32(dst + i + j, vmulq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)))));
            vst1q_f32(dst + i + j + 4, vmulq_f32(s, vcvtq_f32_s32(vmovl_high_s16(lo))));
            vst1q_f32(dst + i + j + 8, vmulq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)))));
            vst1q_f32(dst + i + j + 12, vmulq_f32(s, vcvtq_f32_s32(vmovl_high_s16(hi))));
        }
    }
}
