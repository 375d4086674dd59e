/* libFuzzer harness for model loading: the GGUF reader, hyper-parameter
 * validation, tensor binding, weight preparation and one forward pass (a
 * batch of 3 tokens, then one decode step) on the CPU backend. Any input must
 * either be refused with a one-line message or run; never crash, hang, leak,
 * allocate without bound or trip a sanitizer.
 *
 * Seeds are golden models (hundreds of KB each): random byte flips would
 * nearly always land in tensor data, so the custom mutator below mostly
 * rewrites header values in place (an integer key or array entry, a tensor's
 * dims, type or offset) with hostile values, and otherwise lets libFuzzer
 * mutate the header bytes or, rarely, the whole file. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/checked.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

enum { FUZZ_N_CTX = 8, FUZZ_PROMPT = 3 };

/* A file can describe a huge recurrent state within every cap (state_size
 * and inner_size up to 2^20 give terabytes): the real programs refuse it by
 * their RAM check; here a state beyond this is not run, since libFuzzer's
 * malloc limit would report it and its scan could outlast the 5 s timeout. */
#define FUZZ_STATE_BYTES_MAX (64u << 20)

static be_backend *g_be; /* one for the whole run: a thread pool per input would dominate */

static void one_line_or_trap(const wk_error *err)
{
    if (err->msg[0] == '\0' || strchr(err->msg, '\n')) __builtin_trap();
}

typedef struct fuzz_state {
    model_state st;
    void *mem;
} fuzz_state;

/* Host-memory state for FUZZ_N_CTX positions in the layout of engine/sequence.c
 * (F16 KV rows of max(d_k, d_v); conv then ssm per recurrent layer). */
static int state_new(fuzz_state *fs, const model *m)
{
    const model_hparams *hp = &m->hp;
    const uint64_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    const uint64_t head = wk_sat_mul(FUZZ_N_CTX, d), per_cache = wk_sat_mul(head, hp->n_head_kv);
    const uint64_t rec = wk_sat_add(model_conv_elems(m), model_ssm_elems(m));
    const uint64_t bytes = wk_sat_add(wk_sat_mul3(per_cache, 2 * sizeof(uint16_t), hp->n_attn_layers),
                                      wk_sat_mul3(rec, sizeof(float), hp->n_rec_layers));
    if (bytes > FUZZ_STATE_BYTES_MAX) return -1;
    fs->mem = calloc(1, bytes ? bytes : 1);
    fs->st.layers = calloc(hp->n_layer, sizeof *fs->st.layers);
    if (!fs->mem || !fs->st.layers) return -1;
    uint16_t *kv = fs->mem;
    float *rs = (float *)(kv + 2 * per_cache * hp->n_attn_layers);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const model_layer *ly = &m->layers[il];
        model_layer_state *ls = &fs->st.layers[il];
        if (ly->attn_slot >= 0) {
            ls->k = kv + 2 * per_cache * (size_t)ly->attn_slot;
            ls->v = ls->k + per_cache;
            ls->kv_head_stride = head;
            ls->kv_type = BE_KV_F16;
        }
        if (ly->rec_slot >= 0) {
            ls->conv = rs + rec * (size_t)ly->rec_slot;
            ls->ssm = ls->conv + model_conv_elems(m);
        }
    }
    fs->st.n_ctx = FUZZ_N_CTX;
    fs->st.n_past = 0;
    return 0;
}

static void state_free(fuzz_state *fs)
{
    free(fs->mem);
    free(fs->st.layers);
}

static void forward_steps(const model *m)
{
    wk_error err = {0};
    model prep;
    if (model_prepare(&prep, m, &g_be, (uint32_t[]){0, m->hp.n_layer}, 1, &err)) {
        one_line_or_trap(&err);
        return;
    }
    model_scratch *s = NULL;
    fuzz_state fs = {0};
    float *logits = NULL;
    if (model_scratch_new(&s, &prep, g_be, FUZZ_PROMPT, &err)) {
        one_line_or_trap(&err);
    } else if (state_new(&fs, &prep) == 0 && (logits = malloc(sizeof(float) * m->hp.n_vocab))) {
        const int32_t V = (int32_t)m->hp.n_vocab;
        const int32_t prompt[FUZZ_PROMPT] = {1 % V, 7 % V, (V - 1) / 2};
        const int32_t next = 3 % V;
        int rc = model_forward(&prep, g_be, s, &fs.st, prompt, FUZZ_PROMPT, MODEL_LOGITS_LAST, logits, NULL, &err);
        if (!rc) rc = model_forward(&prep, g_be, s, &fs.st, &next, 1, MODEL_LOGITS_ARGMAX, logits, NULL, &err);
        if (rc) one_line_or_trap(&err);
        else if (fs.st.n_past != FUZZ_PROMPT + 1) __builtin_trap();
    }
    free(logits);
    state_free(&fs);
    model_scratch_free(s);
    model_release_prepared(&prep, &g_be, (uint32_t[]){0, m->hp.n_layer}, 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    wk_error err = {0};
    if (be_cpu_new(&g_be, 1, &err)) __builtin_trap();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model *m = NULL;
    wk_error err = {0};
    if (model_load_buffer(&m, data, size, &err)) {
        one_line_or_trap(&err);
        return 0;
    }
    forward_steps(m);
    model_free(m);
    return 0;
}

/* ---- custom mutator -------------------------------------------------------- */

typedef struct slot {
    size_t off;   /* byte offset of a little-endian integer in the header */
    size_t width; /* 1, 2, 4 or 8 */
} slot;

/* Bytes of an integer value of type t, 0 for any other type. */
static size_t int_width(enum gguf_value_type t) { return gguf_type_is_integer(t) ? gguf_scalar_size(t) : 0; }

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

/* Integer slots of a parseable image: scalar and array-entry values of
 * integer keys, and each tensor's n_dims, dims, type and offset (the reader's
 * views point into the image, so offsets follow from them). */
static size_t collect_slots(const gguf_file *f, const uint8_t *base, slot *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < gguf_kv_count(f) && n < cap; i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        size_t key_end = (size_t)((const uint8_t *)kv->key.ptr - base) + kv->key.len;
        if (kv->type != GGUF_T_ARRAY) {
            size_t w = int_width(kv->type);
            if (w) out[n++] = (slot){key_end + 4, w};
            continue;
        }
        size_t w = int_width(kv->arr_type);
        out[n++] = (slot){key_end + 8, 8}; /* the element count */
        for (uint64_t j = 0; w && j < kv->arr_count && j < 8 && n < cap; j++)
            out[n++] = (slot){(size_t)(kv->arr_data - base) + j * w, w};
    }
    for (size_t i = 0; i < gguf_tensor_count(f) && n + 7 <= cap; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        size_t p = (size_t)((const uint8_t *)t->name.ptr - base) + t->name.len;
        out[n++] = (slot){p, 4};
        for (uint32_t d = 0; d < t->n_dims; d++) out[n++] = (slot){p + 4 + 8 * d, 8};
        out[n++] = (slot){p + 4 + 8 * t->n_dims, 4};
        out[n++] = (slot){p + 8 + 8 * t->n_dims, 8};
    }
    return n;
}

static uint64_t hostile_value(uint64_t old, uint64_t *s)
{
    switch (rnd(s) % 12) {
    case 0: return 0;
    case 1: return 1;
    case 2: return old + 1;
    case 3: return old - 1;
    case 4: return old * 2;
    case 5: return old / 2;
    case 6: return 0x7fffffffull;
    case 7: return 0xffffffffull;
    case 8: return 0x80000000ull;
    case 9: return UINT64_MAX;
    case 10: return rnd(s) % 1024;
    default: return rnd(s);
    }
}

static size_t mutate_header_value(uint8_t *data, size_t size, uint64_t *s)
{
    gguf_file *f = NULL;
    wk_error err;
    if (gguf_open_buffer(&f, data, size, &err)) return 0;
    static slot slots[4096];
    size_t n = collect_slots(f, data, slots, sizeof slots / sizeof slots[0]);
    gguf_close(f);
    if (!n) return 0;
    const slot *sl = &slots[rnd(s) % n];
    uint64_t old = 0;
    for (size_t i = 0; i < sl->width; i++) old |= (uint64_t)data[sl->off + i] << (8 * i);
    uint64_t v = hostile_value(old, s);
    for (size_t i = 0; i < sl->width; i++) data[sl->off + i] = (uint8_t)(v >> (8 * i));
    return size;
}

/* libFuzzer's byte mutations on the header only (the data section is kept). */
static size_t mutate_header_bytes(uint8_t *data, size_t size, size_t max_size)
{
    gguf_file *f = NULL;
    wk_error err;
    if (gguf_open_buffer(&f, data, size, &err)) return 0;
    size_t hdr = gguf_data_offset(f);
    gguf_close(f);
    if (hdr == 0 || hdr > size) return 0;
    const size_t room = 64;
    uint8_t *h = malloc(hdr + room);
    if (!h) return 0;
    memcpy(h, data, hdr);
    size_t nh = LLVMFuzzerMutate(h, hdr, hdr + room);
    size_t tail = size - hdr;
    if (nh + tail > max_size) {
        free(h);
        return 0;
    }
    memmove(data + nh, data + hdr, tail);
    memcpy(data, h, nh);
    free(h);
    return nh + tail;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t r = 0;
    switch (rnd(&s) % 8) {
    case 0: break; /* anywhere in the file */
    case 1: case 2: r = mutate_header_bytes(data, size, max_size); break;
    default: r = mutate_header_value(data, size, &s); break;
    }
    return r ? r : LLVMFuzzerMutate(data, size, max_size);
}
