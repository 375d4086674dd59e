/* `wick convert`: a Hugging Face model folder (config.json, *.safetensors,
 * tokenizer.json, tokenizer_config.json) to one GGUF file, written by wick's
 * own GGUF writer, then loaded back as a check. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/hf_convert.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick convert DIR -o OUT.gguf [--type TYPE] [--name NAME]\n\n"
            "Converts a Hugging Face Qwen3.5 checkpoint folder (config.json, model.safetensors or\n"
            "model-*.safetensors with model.safetensors.index.json, tokenizer.json and\n"
            "tokenizer_config.json; weights in F32, F16 or BF16) into a GGUF file with the\n"
            "tokenizer, the chat template and the MTP block when the checkpoint has one.\n\n"
            "  --type TYPE   f32, f16, bf16, q8_0, q6_k, q5_k, q4_k, ... (every tensor that can\n"
            "                be quantized), or a llama.cpp mix: q4_k_m, q5_k_m (default f16)\n"
            "  --name NAME   general.name (default: the folder's name)\n");
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"type", required_argument, 0, 'T'}, {"name", required_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *out_path = NULL, *type = "f16", *name = NULL;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'T': type = optarg; break;
        case 'N': name = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1 || !out_path) {
        fprintf(stderr, "wick convert: %s\n", !out_path ? "-o OUT.gguf is required" : "give one model folder");
        usage(stderr);
        return 2;
    }
    const char *dir = argv[optind];
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "wick convert: %s: not a folder (give the Hugging Face model folder)\n", dir);
        return 1;
    }
    char tok_json[1100], tok_cfg[1100];
    snprintf(tok_json, sizeof tok_json, "%s/tokenizer.json", dir);
    snprintf(tok_cfg, sizeof tok_cfg, "%s/tokenizer_config.json", dir);
    if (!file_exists(tok_json)) {
        fprintf(stderr, "wick convert: %s: missing (the GGUF needs the tokenizer)\n", tok_json);
        return 1;
    }

    wk_error err = {0};
    hf_convert *cv = NULL;
    if (hf_convert_open(&cv, dir, type, &err)) {
        fprintf(stderr, "wick convert: %s\n", err.msg);
        return 1;
    }
    gguf_writer *w = NULL;
    int rc = gguf_writer_new(&w, out_path, 32, &err);
    if (!rc) {
        hf_convert_write_meta(cv, w, name);
        rc = tok_import_hf_kvs(w, tok_json, file_exists(tok_cfg) ? tok_cfg : NULL, NULL, &err);
    }
    if (!rc) hf_convert_add_tensors(cv, w);
    if (!rc) rc = gguf_writer_begin_data(w, &err);
    if (!rc) rc = hf_convert_write_data(cv, w, &err);
    if (rc) {
        if (w) gguf_writer_abort(w);
        hf_convert_free(cv);
        fprintf(stderr, "wick convert: %s\n", err.msg);
        return 1;
    }
    rc = gguf_writer_finish(w, &err);
    hf_convert_info info;
    hf_convert_get_info(cv, &info);
    hf_convert_free(cv);
    if (rc) {
        fprintf(stderr, "wick convert: %s\n", err.msg);
        return 1;
    }
    /* the file must load as wick loads any model */
    model *m = NULL;
    if (model_load(&m, out_path, &err)) {
        fprintf(stderr, "wick convert: wrote %s but it does not load: %s\n", out_path, err.msg);
        return 1;
    }
    model_free(m);
    gguf_file *g = NULL;
    bool has_template = false;
    if (!gguf_open(&g, out_path, &err)) {
        has_template = gguf_find_kv(g, "tokenizer.chat_template") != NULL;
        gguf_close(g);
    }
    printf("wick convert: %s: qwen35, %u layers%s, %zu tensors, %.2f M parameters, %s, %.1f MiB%s\n", out_path,
           info.n_layer, info.has_mtp ? " + MTP block" : "", info.n_tensors, (double)info.n_params / 1e6,
           info.type_name, (double)info.data_bytes / (1 << 20),
           info.n_skipped ? " (vision tensors skipped)" : "");
    if (!has_template)
        fprintf(stderr, "wick convert: note: tokenizer_config.json has no chat_template; serving needs "
                        "--chat-template NAME\n");
    return 0;
}
