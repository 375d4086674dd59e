/* `wick quantize IN OUT TYPE`: requantize a GGUF model (quant/requant.h)
 * with the one mix rule of quant/quant_mix.h. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "quant/qtypes.h"
#include "quant/requant.h"
#include "util/progress.h"
#include "util/timeutil.h"
#include "util/units.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick quantize IN.gguf OUT.gguf TYPE [options]\n\n"
            "Requantizes a model: from F32/F16/BF16 (or any supported type: dequantized to F32\n"
            "first) to TYPE, tensor by tensor with llama-quantize's rules. Tensors already of\n"
            "their target type are copied unchanged; norms, routers and other 1-D tensors keep\n"
            "their type. OUT is written under a temporary name and renamed when complete.\n\n"
            "TYPE: q4_k_m, q5_k_m (mixes: more bits for attn_v and ffn_down on about half the\n"
            "      layers, Q6_K output), q6_k, q8_0 (file types, as llama-quantize), q4_k_e8\n"
            "      (q4_k_m with expert down projections at Q8_0), or any weight type (f32 f16\n"
            "      bf16 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k iq4_nl iq4_xs)\n\n"
            "options:\n"
            "  --expert-type T  MoE expert stacks (*_exps) get type T, the rest follows TYPE:\n"
            "                   q4_k_m --expert-type q8_0 = 8-bit experts, 4-bit attention;\n"
            "                   q8_0 --expert-type q4_k = the reverse\n"
            "  --pure           every quantizable tensor gets TYPE (llama-quantize --pure)\n"
            "  -t, --threads N  threads (default: physical cores)\n"
            "  -q, --quiet      no progress on stderr\n"
            "  -h, --help       this text\n\n"
            "Exit status: 0 written, 1 failed (nothing left under OUT), 2 bad usage.\n");
}

static int on_progress(void *user, uint64_t done, uint64_t total)
{
    (void)total;
    wk_progress_update(user, done);
    return 0;
}

static int has_expert_stacks(const char *path)
{
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open(&f, path, &err)) return -1;
    int found = 0;
    for (size_t i = 0; i < gguf_tensor_count(f) && !found; i++) found = strstr(gguf_tensor_at(f, i)->name_z, "_exps.") != NULL;
    gguf_close(f);
    return found;
}

int cmd_quantize(int argc, char **argv)
{
    enum { O_EXPERT = 1000, O_PURE };
    static const struct option opts[] = {{"expert-type", required_argument, 0, O_EXPERT},
                                         {"pure", no_argument, 0, O_PURE},
                                         {"threads", required_argument, 0, 't'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *expert = NULL;
    int pure = 0, quiet = 0, threads = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:qh", opts, NULL)) != -1) {
        switch (c) {
        case O_EXPERT: expert = optarg; break;
        case O_PURE: pure = 1; break;
        case 't': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 1024) {
                fprintf(stderr, "wick quantize: --threads must be an integer in [0, 1024], got '%s'\n", optarg);
                return 2;
            }
            threads = (int)v;
            break;
        }
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3) {
        fprintf(stderr, "wick quantize: expected IN OUT TYPE, got %d argument%s (see wick quantize --help)\n",
                argc - optind, argc - optind == 1 ? "" : "s");
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1], *type = argv[optind + 2];
    qt_mix_spec spec;
    wk_error err = {0};
    if ((pure ? qt_mix_parse(type, &spec, &err) : qt_mix_parse_ftype(type, &spec, &err))) {
        fprintf(stderr, "wick quantize: %s\n", err.msg);
        return 2;
    }
    if (pure && spec.mix != QT_MIX_PURE) {
        fprintf(stderr, "wick quantize: --pure takes a weight type, not the mix '%s'\n", type);
        return 2;
    }
    if (expert) {
        qt_mix_spec e;
        if (qt_mix_parse(expert, &e, &err) || e.mix != QT_MIX_PURE) {
            fprintf(stderr, "wick quantize: --expert-type: %s\n",
                    e.mix != QT_MIX_PURE ? "a weight type, not a mix" : err.msg);
            return 2;
        }
        spec.expert_type = (int32_t)e.type;
        if (has_expert_stacks(in) == 0)
            fprintf(stderr, "wick quantize: note: %s has no expert stacks (*_exps): --expert-type changes nothing\n", in);
    }
    char name[64];
    qt_mix_name(&spec, name, sizeof name);
    wk_progress p;
    wk_progress_begin(&p, quiet ? NULL : stderr, out, 0, 0);
    qt_requant_stats st;
    double t0 = wk_now_ms();
    int rc = qt_requantize_file(in, out, &spec, threads, on_progress, &p, &st, &err);
    if (rc) {
        if (!quiet && p.drawn) fputc('\n', stderr);
        fprintf(stderr, "wick quantize: %s\n", err.msg);
        return 1;
    }
    p.total = st.in_bytes;
    wk_progress_end(&p, "done");
    char b1[32], b2[32];
    printf("wrote %s: %s, %s -> %s (%.2f bits/weight), %u tensors converted, %u copied, %.1f s\n", out, name,
           wk_format_bytes(b1, sizeof b1, st.in_bytes), wk_format_bytes(b2, sizeof b2, st.out_bytes),
           st.n_elements_in ? 8.0 * (double)st.out_bytes / (double)st.n_elements_in : 0.0, st.n_quantized,
           st.n_copied, (wk_now_ms() - t0) / 1e3);
    if (st.n_upcast)
        fprintf(stderr,
                "wick quantize: note: %u tensors were quantized in IN and now use more bits: that costs bytes "
                "but restores no precision (quantize from the F16/BF16/F32 original for that)\n",
                st.n_upcast);
    return 0;
}
