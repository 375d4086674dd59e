/* Internal helpers shared by the GGUF reader, printer and writer. Not part of
 * the public API. */
#ifndef WICK_GGUF_GGUF_INTERNAL_H
#define WICK_GGUF_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

#define GGUF_MAGIC_LE 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
/* llama.cpp's caps (GGUF_MAX_STRING_LENGTH / array count): far above any real
 * value, low enough that a hostile length cannot drive huge allocations. */
#define GGUF_MAX_STRING_LEN (1ull << 30)
#define GGUF_MAX_ARRAY_COUNT (1ull << 30)
#define GGUF_MAX_NAME 64 /* GGML_MAX_NAME: names are stored NUL-terminated in 64 bytes */

static inline uint16_t gguf_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t gguf_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t gguf_rd64(const uint8_t *p)
{
    return (uint64_t)gguf_rd32(p) | ((uint64_t)gguf_rd32(p + 4) << 32);
}

/* "u32", "string", ...; "type<N>" style "invalid" for unknown ids. */
const char *gguf_value_type_name(uint32_t t);
/* Writes a printable, escaped, length-limited copy of (p, len) into out
 * (always NUL-terminated) so that hostile names can go into messages. */
void gguf_fmt_name(char *out, size_t cap, const char *p, uint64_t len);

#endif
