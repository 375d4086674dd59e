/* Attention-policy flags shared by run, bench, serve and eval. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_policy.h"

#include "engine/context.h"
#include "util/units.h"

void cli_policy_init(be_attn_policy *p)
{
    eng_policy_approx_default(p);
    p->approx = false;
}

static int parse_count(const char *arg, long lo, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > (1L << 30)) return -1;
    *out = (int32_t)v;
    return 0;
}

int cli_policy_option(int opt, const char *arg, be_attn_policy *p, const char *cmd)
{
    int32_t v = 0;
    switch (opt) {
    case CLI_OPT_ATTN_POLICY:
        if (!strcmp(arg, "dense")) {
            p->approx = false;
            return 1;
        }
        if (!strncmp(arg, "approx", 6) && (arg[6] == '\0' || arg[6] == ':')) {
            p->approx = true;
            if (arg[6] == '\0') return 1;
            int g, w, t, c = p->dense_tail_continue, n = sscanf(arg + 7, "%d,%d,%d,%d", &g, &w, &t, &c);
            if ((n == 3 || n == 4) && g >= 0 && w >= 1 && t >= 0 && c >= 0) {
                p->global = g;
                p->window = w;
                p->dense_tail = t;
                p->dense_tail_continue = c;
                return 1;
            }
        }
        fprintf(stderr, "%s: --attn-policy '%s': expected dense, approx or approx:GLOBAL,WINDOW,DENSE_TAIL[,CONTINUE]\n",
                cmd, arg);
        return -1;
    case CLI_OPT_ATTN_GLOBAL:
    case CLI_OPT_ATTN_DENSE_TAIL:
    case CLI_OPT_ATTN_DENSE_TAIL_CONTINUE:
    case CLI_OPT_ATTN_WINDOW:
        if (parse_count(arg, opt == CLI_OPT_ATTN_WINDOW ? 1 : 0, &v)) {
            fprintf(stderr, "%s: bad value '%s' for an --attn-* option (a token count%s)\n", cmd, arg,
                    opt == CLI_OPT_ATTN_WINDOW ? " >= 1" : " >= 0");
            return -1;
        }
        if (opt == CLI_OPT_ATTN_GLOBAL) p->global = v;
        else if (opt == CLI_OPT_ATTN_WINDOW) p->window = v;
        else if (opt == CLI_OPT_ATTN_DENSE_TAIL) p->dense_tail = v;
        else p->dense_tail_continue = v;
        return 1;
    default: return 0;
    }
}

void cli_policy_describe(const be_attn_policy *p, char *buf, size_t cap)
{
    if (!p || !p->approx) snprintf(buf, cap, "dense");
    else
        snprintf(buf, cap, "approx(global=%d,window=%d,dense_tail=%d,continue=%d)", p->global, p->window, p->dense_tail,
                 p->dense_tail_continue);
}

int cli_policy_arg(const char *name, const char *value, be_attn_policy *p, const char *cmd)
{
    static const struct {
        const char *name;
        int opt;
    } k[] = {{"--attn-policy", CLI_OPT_ATTN_POLICY},
             {"--attn-global", CLI_OPT_ATTN_GLOBAL},
             {"--attn-window", CLI_OPT_ATTN_WINDOW},
             {"--attn-dense-tail", CLI_OPT_ATTN_DENSE_TAIL},
             {"--attn-dense-tail-continue", CLI_OPT_ATTN_DENSE_TAIL_CONTINUE}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(name, k[i].name)) {
            if (!value) {
                fprintf(stderr, "%s: option %s needs a value\n", cmd, name);
                return -1;
            }
            return cli_policy_option(k[i].opt, value, p, cmd);
        }
    return 0;
}

int cli_kv_type_option(int opt, const char *arg, int32_t *kv_type, const char *cmd)
{
    if (opt != CLI_OPT_KV_TYPE) return 0;
    if (!strcmp(arg, "f16") || !strcmp(arg, "F16")) *kv_type = BE_KV_F16;
    else if (!strcmp(arg, "q8_0") || !strcmp(arg, "Q8_0")) *kv_type = BE_KV_Q8_0;
    else {
        fprintf(stderr, "%s: --kv-type '%s': expected f16 or q8_0\n", cmd, arg);
        return -1;
    }
    return 1;
}

int cli_device_option(int opt, const char *arg, int32_t *device, int32_t *gpu, eng_split_opts *split, const char *cmd)
{
    wk_error err = {0};
    int rc;
    switch (opt) {
    case CLI_OPT_DEVICE: rc = eng_device_parse(arg, device, gpu, split, &err); break;
    case CLI_OPT_SPLIT: rc = eng_split_parse(arg, split, &err); break;
    case CLI_OPT_GPU_MEM:
        rc = wk_parse_size(arg, &split->gpu_mem, &err);
        if (rc) wk_fail_prefix(&err, "--gpu-mem");
        break;
    default: return 0;
    }
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return -1;
    }
    return 1;
}

int cli_device_finish(int32_t device, const eng_split_opts *split, const char *cmd)
{
    wk_error err = {0};
    if (device != ENG_DEVICE_CUDA && split->gpu_mem) {
        fprintf(stderr, "%s: --gpu-mem caps GPU memory: it needs --device cuda (--mem budgets RAM)\n", cmd);
        return -1;
    }
    if (eng_split_check(device, split, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

const char *cli_kv_type_name(int32_t kv_type) { return kv_type == BE_KV_Q8_0 ? "q8_0" : "f16"; }
