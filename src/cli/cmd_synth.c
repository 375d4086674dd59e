/* wick synth: write a random-weight GGUF with the dimensions of a preset or
 * custom dimensions (model/synth.h). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "model/synth.h"
#include "quant/qtypes.h"
#include "util/timeutil.h"

static void synth_usage(FILE *out)
{
    fprintf(out,
            "usage: wick synth --preset NAME [--type TYPE|MIX] -o FILE [options]\n"
            "       wick synth --list [--type TYPE|MIX]\n\n"
            "Writes a random-weight GGUF with the true dimensions of a model (speed does not\n"
            "depend on weight values). Streams to disk; memory stays flat for any size.\n\n"
            "  --preset NAME      model dimensions (see --list; default tiny)\n"
            "  --type T           weight type (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k\n"
            "                     q6_k iq4_nl iq4_xs) or llama.cpp-style mix (q4_k_m q5_k_m; q4_k_e8 =\n"
            "                     q4_k_m with expert gate/up Q4_K and expert down Q8_0). Default q8_0\n"
            "  --expert-type T    MoE expert stacks (*_exps) at weight type T, the rest by --type\n"
            "                     (e.g. q4_k_m --expert-type q8_0: 8-bit experts, 4-bit attention)\n"
            "  -o, --output FILE  where to write (replaced if it exists)\n"
            "  --seed N           weight seed (default 1); same options + seed = same bytes\n"
            "  -t, --threads N    generation threads (default: physical cores)\n"
            "  --list             print presets with parameter count and size at --type\n"
            "  --dry-run          print the tensor list (names, shapes, types) without writing\n"
            "  -q, --quiet        no progress output\n\n"
            "custom dimensions (override the preset):\n"
            "  --arch A (llama qwen3 qwen3moe qwen35 qwen35moe; alone it starts from tiny-<arch>)\n"
            "  --layers N --embd N --ff N --heads N --kv-heads N --head-dim N --rot N --vocab N\n"
            "  --ctx N --rope-base F --tied --untied\n"
            "  --experts N --experts-used N --expert-ff N --shexp-ff N                  (MoE)\n"
            "  --ssm-k-heads N --ssm-v-heads N --ssm-head-dim N --ssm-conv N\n"
            "  --full-attn-interval N                                                 (qwen35)\n"
            "  --mtp              add an MTP (nextn) block, as Qwen3.5 files have  (qwen35, qwen35moe)\n");
}

enum {
    OPT_PRESET = 256, OPT_TYPE, OPT_SEED, OPT_LIST, OPT_DRY, OPT_ARCH, OPT_LAYERS, OPT_EMBD, OPT_FF, OPT_HEADS,
    OPT_KV_HEADS, OPT_HEAD_DIM, OPT_ROT, OPT_VOCAB, OPT_CTX, OPT_ROPE_BASE, OPT_TIED, OPT_UNTIED, OPT_EXPERTS,
    OPT_EXPERTS_USED, OPT_EXPERT_FF, OPT_SHEXP_FF, OPT_SSM_K, OPT_SSM_V, OPT_SSM_HD, OPT_SSM_CONV, OPT_FAI,
    OPT_EXPERT_TYPE, OPT_MTP,
};

static int parse_u32(const char *opt, const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-') {
        fprintf(stderr, "wick synth: %s: '%s' is not a non-negative integer\n", opt, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static void human_bytes(uint64_t b, char *buf, size_t cap)
{
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", (double)b / (1ull << 20));
    else snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
}

static void human_count(uint64_t n, char *buf, size_t cap)
{
    if (n >= 1000000000ull) snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else snprintf(buf, cap, "%.1fK", (double)n / 1e3);
}

static int list_presets(const qt_mix_spec *q)
{
    char qname[48];
    qt_mix_name(q, qname, sizeof qname);
    printf("%-16s %-10s %8s %12s  %s\n", "preset", "arch", "params", qname, "dimensions");
    for (size_t i = 0; i < synth_preset_count(); i++) {
        const synth_preset *p = synth_preset_at(i);
        synth_options o;
        wk_error err = {0};
        synth_options_init(&o, p->name, &err);
        o.quant = *q;
        synth_plan *plan = NULL;
        if (synth_plan_new(&o, &plan, &err)) {
            fprintf(stderr, "wick synth: %s: %s\n", p->name, err.msg);
            return 1;
        }
        char params[32], bytes[32];
        human_count(plan->n_params, params, sizeof params);
        human_bytes(plan->data_bytes, bytes, sizeof bytes);
        const synth_dims *d = &p->dims;
        printf("%-16s %-10s %8s %12s  %uL embd %u ff %u heads %u/%u hd %u vocab %u", p->name,
               synth_arch_name(d->arch), params, bytes, d->n_layer, d->n_embd,
               d->n_expert ? d->n_ff_exp : d->n_ff, d->n_head, d->n_head_kv, d->head_dim, d->n_vocab);
        if (d->n_expert) printf(" experts %u/%u", d->n_expert_used, d->n_expert);
        printf("\n");
        synth_plan_free(plan);
    }
    return 0;
}

static int dry_run(const synth_options *o)
{
    synth_plan *plan = NULL;
    wk_error err = {0};
    if (synth_plan_new(o, &plan, &err)) {
        fprintf(stderr, "wick synth: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const synth_tensor *t = &plan->tensors[i];
        printf("%-36s %-7s [%" PRId64, t->name, qt_type_name(t->type), t->ne[0]);
        for (uint32_t k = 1; k < t->n_dims; k++) printf(", %" PRId64, t->ne[k]);
        printf("] %" PRIu64 " bytes\n", t->n_bytes);
    }
    char params[32], bytes[32];
    human_count(plan->n_params, params, sizeof params);
    human_bytes(plan->data_bytes, bytes, sizeof bytes);
    printf("%zu tensors, %s params, %s of tensor data, %.3f bits per weight\n", plan->n_tensors, params, bytes,
           8.0 * (double)plan->tensor_bytes / (double)plan->n_params);
    synth_plan_free(plan);
    return 0;
}

typedef struct progress_state {
    double t0, last;
    int tty;
} progress_state;

static int show_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress_state *p = ctx;
    double now = wk_now_ms();
    if (done < total && now - p->last < (p->tty ? 200.0 : 2000.0)) return 0;
    p->last = now;
    double s = (now - p->t0) / 1e3;
    fprintf(stderr, "%s%5.1f%%  %" PRIu64 " / %" PRIu64 " MiB  %.0f MiB/s%s", p->tty ? "\r" : "",
            total ? 100.0 * (double)done / (double)total : 100.0, done >> 20, total >> 20,
            s > 0 ? (double)done / (1 << 20) / s : 0.0, p->tty ? "" : "\n");
    fflush(stderr);
    return 0;
}

int cmd_synth(int argc, char **argv)
{
    static const struct option opts[] = {
        {"preset", required_argument, 0, OPT_PRESET}, {"type", required_argument, 0, OPT_TYPE},
        {"expert-type", required_argument, 0, OPT_EXPERT_TYPE},
        {"output", required_argument, 0, 'o'}, {"seed", required_argument, 0, OPT_SEED},
        {"threads", required_argument, 0, 't'}, {"list", no_argument, 0, OPT_LIST},
        {"dry-run", no_argument, 0, OPT_DRY}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {"arch", required_argument, 0, OPT_ARCH}, {"layers", required_argument, 0, OPT_LAYERS},
        {"embd", required_argument, 0, OPT_EMBD}, {"ff", required_argument, 0, OPT_FF},
        {"heads", required_argument, 0, OPT_HEADS}, {"kv-heads", required_argument, 0, OPT_KV_HEADS},
        {"head-dim", required_argument, 0, OPT_HEAD_DIM}, {"rot", required_argument, 0, OPT_ROT},
        {"vocab", required_argument, 0, OPT_VOCAB}, {"ctx", required_argument, 0, OPT_CTX},
        {"rope-base", required_argument, 0, OPT_ROPE_BASE}, {"tied", no_argument, 0, OPT_TIED},
        {"untied", no_argument, 0, OPT_UNTIED}, {"experts", required_argument, 0, OPT_EXPERTS},
        {"experts-used", required_argument, 0, OPT_EXPERTS_USED}, {"expert-ff", required_argument, 0, OPT_EXPERT_FF},
        {"shexp-ff", required_argument, 0, OPT_SHEXP_FF}, {"ssm-k-heads", required_argument, 0, OPT_SSM_K},
        {"ssm-v-heads", required_argument, 0, OPT_SSM_V}, {"ssm-head-dim", required_argument, 0, OPT_SSM_HD},
        {"ssm-conv", required_argument, 0, OPT_SSM_CONV}, {"full-attn-interval", required_argument, 0, OPT_FAI},
        {"mtp", no_argument, 0, OPT_MTP}, {0, 0, 0, 0},
    };
    const char *preset = NULL, *type = "q8_0", *out_path = NULL, *arch = NULL, *expert_type = NULL;
    int list = 0, dry = 0, quiet = 0, threads = 0;
    uint64_t seed = 1;
    /* Dimension overrides are applied after the preset is loaded; remember them in order. */
    typedef struct dim_override { int opt; const char *val; } dim_override;
    dim_override ovr[64];
    int n_ovr = 0;
    wk_error err = {0};

    optind = 1;
    opterr = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_PRESET: preset = optarg; break;
        case OPT_TYPE: type = optarg; break;
        case OPT_EXPERT_TYPE: expert_type = optarg; break;
        case 'o': out_path = optarg; break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end) {
                fprintf(stderr, "wick synth: --seed: '%s' is not an integer\n", optarg);
                return 2;
            }
            break;
        }
        case 't': threads = atoi(optarg); break;
        case OPT_LIST: list = 1; break;
        case OPT_DRY: dry = 1; break;
        case 'q': quiet = 1; break;
        case 'h': synth_usage(stdout); return 0;
        case OPT_ARCH: arch = optarg; break;
        case '?': synth_usage(stderr); return 2;
        default:
            if (n_ovr < (int)(sizeof ovr / sizeof ovr[0])) ovr[n_ovr++] = (dim_override){c, optarg};
            break;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "wick synth: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    synth_options o;
    if (qt_mix_parse(type, &o.quant, &err)) {
        fprintf(stderr, "wick synth: --type: %s\n", err.msg);
        return 2;
    }
    if (expert_type) {
        qt_mix_spec e;
        if (qt_mix_parse(expert_type, &e, &err) || e.mix != QT_MIX_PURE) {
            fprintf(stderr, "wick synth: --expert-type: %s\n", e.mix != QT_MIX_PURE ? "a weight type, not a mix" : err.msg);
            return 2;
        }
        o.quant.expert_type = (int32_t)e.type;
    }
    qt_mix_spec quant = o.quant;
    if (list) return list_presets(&quant);

    int arch_id = -1;
    if (arch && (arch_id = synth_arch_from_name(arch)) < 0) {
        fprintf(stderr, "wick synth: --arch '%s': expected llama, qwen3, qwen3moe, qwen35 or qwen35moe\n", arch);
        return 2;
    }
    char base[32] = "tiny";
    if (preset) snprintf(base, sizeof base, "%s", preset);
    else if (arch_id > 0 && arch_id != 1) snprintf(base, sizeof base, "tiny-%s", arch);
    else if (arch_id == 0) snprintf(base, sizeof base, "tiny-llama");
    if (synth_options_init(&o, base, &err)) {
        fprintf(stderr, "wick synth: %s\n", err.msg);
        return 2;
    }
    o.quant = quant;
    o.seed = seed;
    o.n_threads = threads;
    synth_dims *d = &o.dims;
    if (arch_id >= 0) d->arch = (enum synth_arch)arch_id;
    for (int i = 0; i < n_ovr; i++) {
        const char *v = ovr[i].val, *name = NULL;
        uint32_t *field = NULL;
        switch (ovr[i].opt) {
        case OPT_LAYERS: field = &d->n_layer; name = "--layers"; break;
        case OPT_EMBD: field = &d->n_embd; name = "--embd"; break;
        case OPT_FF: field = &d->n_ff; name = "--ff"; break;
        case OPT_HEADS: field = &d->n_head; name = "--heads"; break;
        case OPT_KV_HEADS: field = &d->n_head_kv; name = "--kv-heads"; break;
        case OPT_HEAD_DIM: field = &d->head_dim; name = "--head-dim"; break;
        case OPT_ROT: field = &d->n_rot; name = "--rot"; break;
        case OPT_VOCAB: field = &d->n_vocab; name = "--vocab"; break;
        case OPT_CTX: field = &d->n_ctx_train; name = "--ctx"; break;
        case OPT_EXPERTS: field = &d->n_expert; name = "--experts"; break;
        case OPT_EXPERTS_USED: field = &d->n_expert_used; name = "--experts-used"; break;
        case OPT_EXPERT_FF: field = &d->n_ff_exp; name = "--expert-ff"; break;
        case OPT_SHEXP_FF: field = &d->n_ff_shexp; name = "--shexp-ff"; break;
        case OPT_SSM_K: field = &d->ssm_n_k_heads; name = "--ssm-k-heads"; break;
        case OPT_SSM_V: field = &d->ssm_n_v_heads; name = "--ssm-v-heads"; break;
        case OPT_SSM_HD: field = &d->ssm_head_dim; name = "--ssm-head-dim"; break;
        case OPT_SSM_CONV: field = &d->ssm_conv_kernel; name = "--ssm-conv"; break;
        case OPT_FAI: field = &d->full_attn_interval; name = "--full-attn-interval"; break;
        case OPT_TIED: d->tied_embeddings = true; break;
        case OPT_UNTIED: d->tied_embeddings = false; break;
        case OPT_MTP: d->n_mtp = 1; break;
        case OPT_ROPE_BASE: {
            char *end;
            d->rope_base = strtof(v, &end);
            if (end == v || *end) {
                fprintf(stderr, "wick synth: --rope-base: '%s' is not a number\n", v);
                return 2;
            }
            break;
        }
        }
        if (field && parse_u32(name, v, field)) return 2;
    }
    if (n_ovr > 0 || (arch_id >= 0 && preset)) snprintf(o.name, sizeof o.name, "%s-custom", base);
    if (dry) return dry_run(&o);
    if (!out_path) {
        fprintf(stderr, "wick synth: -o FILE is required\n\n");
        synth_usage(stderr);
        return 2;
    }
    synth_plan *plan = NULL;
    if (synth_plan_new(&o, &plan, &err)) {
        fprintf(stderr, "wick synth: %s\n", err.msg);
        return 2;
    }
    char params[32], bytes[32], qname[48];
    human_count(plan->n_params, params, sizeof params);
    human_bytes(plan->data_bytes, bytes, sizeof bytes);
    qt_mix_name(&o.quant, qname, sizeof qname);
    synth_plan_free(plan);
    if (!quiet)
        fprintf(stderr, "wick synth: %s (%s) %s, %s params, %s -> %s\n", o.name, synth_arch_name(d->arch), qname,
                params, bytes, out_path);
    progress_state ps = {.t0 = wk_now_ms(), .last = 0, .tty = isatty(2)};
    int rc = synth_write(&o, out_path, quiet ? NULL : show_progress, &ps, &err);
    if (!quiet && ps.tty) fprintf(stderr, "\n");
    if (rc) {
        fprintf(stderr, "wick synth: %s\n", err.msg);
        return 1;
    }
    if (!quiet) fprintf(stderr, "wick synth: wrote %s in %.1f s\n", out_path, (wk_now_ms() - ps.t0) / 1e3);
    return 0;
}
