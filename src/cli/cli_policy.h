/* Attention-policy flags shared by run, bench, serve and eval:
 *   --attn-policy dense|approx  (also approx:G,W,T[,C])
 *   --attn-global N --attn-window N --attn-dense-tail N --attn-dense-tail-continue N
 * Defaults are the design's (engine eng_policy_approx_default); the numbers
 * only matter with approx. Add CLI_POLICY_LONG_OPTIONS to a getopt_long
 * table and hand unknown option codes to cli_policy_option. */
#ifndef WICK_CLI_CLI_POLICY_H
#define WICK_CLI_CLI_POLICY_H

#include <stddef.h>

#include "backend/backend.h"
#include "engine/context.h"

enum {
    CLI_OPT_ATTN_POLICY = 0x4100,
    CLI_OPT_ATTN_GLOBAL,
    CLI_OPT_ATTN_WINDOW,
    CLI_OPT_ATTN_DENSE_TAIL,
    CLI_OPT_ATTN_DENSE_TAIL_CONTINUE,
    CLI_OPT_KV_TYPE,
    CLI_OPT_DEVICE,
    CLI_OPT_SPLIT,
    CLI_OPT_GPU_MEM,
};

/* --device cpu|cuda|cuda:N|cuda:N,M,..., --split layer|tensor, --gpu-mem SIZE: where the
 * engine runs (engine/ eng_options.device, .gpu, .split). */
#define CLI_DEVICE_OPTION                                                                     \
    {"device", required_argument, 0, CLI_OPT_DEVICE}, {"split", required_argument, 0, CLI_OPT_SPLIT}, \
        {"gpu-mem", required_argument, 0, CLI_OPT_GPU_MEM}
#define CLI_DEVICE_HELP                                                                         \
    "  --device D           cpu (default), cuda (GPU 0), cuda:N, or cuda:N,M,... to split the\n" \
    "                       layers over several GPUs; cuda needs a build with CUDA (cmake\n"     \
    "                       -DWICK_CUDA=ON) and an NVIDIA GPU (sm_90). A GPU may be listed\n"   \
    "                       twice (cuda:0,0): a test aid that runs the hand-over on one card\n"  \
    "  --split S            layer (default: consecutive layers per GPU, balanced by bytes) or\n" \
    "                       tensor (needs NCCL; not implemented yet: refused)\n"                 \
    "  --gpu-mem SIZE       cap on what wick allocates on each GPU (20G, 512M): weights, KV,\n"  \
    "                       state and scratch that do not fit are refused up front, naming them\n"

/* Handles CLI_OPT_DEVICE, CLI_OPT_SPLIT and CLI_OPT_GPU_MEM (1), other codes (0), a bad
 * value or no CUDA in this build (-1, printed with cmd). */
int cli_device_option(int opt, const char *arg, int32_t *device, int32_t *gpu, eng_split_opts *split, const char *cmd);
/* After parsing: the device options agree (--gpu-mem and a split need CUDA; a tensor
 * split needs a build with NCCL and is not implemented). 0, or -1 printed with cmd. */
int cli_device_finish(int32_t device, const eng_split_opts *split, const char *cmd);

/* --kv-type f16|q8_0: the KV cache element type (engine/ eng_options.kv_type). */
#define CLI_KV_TYPE_OPTION {"kv-type", required_argument, 0, CLI_OPT_KV_TYPE}
#define CLI_KV_TYPE_HELP "  --kv-type T          KV cache type: f16 (default) or q8_0 (about half the memory)\n"

/* Handles CLI_OPT_KV_TYPE (1), other codes (0), bad value (-1, printed). */
int cli_kv_type_option(int opt, const char *arg, int32_t *kv_type, const char *cmd);
const char *cli_kv_type_name(int32_t kv_type);

#define CLI_POLICY_LONG_OPTIONS                                                  \
    {"attn-policy", required_argument, 0, CLI_OPT_ATTN_POLICY},                  \
        {"attn-global", required_argument, 0, CLI_OPT_ATTN_GLOBAL},              \
        {"attn-window", required_argument, 0, CLI_OPT_ATTN_WINDOW},              \
        {"attn-dense-tail", required_argument, 0, CLI_OPT_ATTN_DENSE_TAIL},      \
        {"attn-dense-tail-continue", required_argument, 0, CLI_OPT_ATTN_DENSE_TAIL_CONTINUE}

#define CLI_POLICY_HELP                                                                        \
    "  --attn-policy P      dense (default) or approx: prompt tokens attend only to the first\n" \
    "                       GLOBAL keys and the last WINDOW keys, except the last DENSE_TAIL\n"  \
    "                       prompt tokens; decode is always dense (also approx:G,W,T[,C])\n"     \
    "  --attn-global N      approx: keys at the start always attended (default 8192)\n"          \
    "  --attn-window N      approx: recent keys always attended (default 8192, >= 1)\n"          \
    "  --attn-dense-tail N  approx: last prompt tokens of a cold request attend densely (2048)\n" \
    "  --attn-dense-tail-continue N  same when continuing cached state (default 128)\n"

/* Dense, with the approximate numbers at their defaults. */
void cli_policy_init(be_attn_policy *p);

/* Handles one option code of CLI_POLICY_LONG_OPTIONS. Returns 1 when handled,
 * 0 when the code is not a policy option, -1 on a bad value (message on
 * stderr, prefixed with cmd). */
int cli_policy_option(int opt, const char *arg, be_attn_policy *p, const char *cmd);

/* Same for parsers without getopt: name is the option as typed
 * ("--attn-window"), value its argument. 1 handled, 0 not a policy
 * option, -1 bad value (printed). */
int cli_policy_arg(const char *name, const char *value, be_attn_policy *p, const char *cmd);

/* "dense" or "approx(global=…,window=…,dense_tail=…,continue=…)". */
void cli_policy_describe(const be_attn_policy *p, char *buf, size_t cap);

#endif
