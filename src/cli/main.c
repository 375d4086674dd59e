/* wick: local LLM inference engine and server. Dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "util/cpu.h"

/* One line per subcommand; keep sorted by how often people need them. */
static const cli_command k_commands[] = {
    {"serve", cmd_serve, "serve an OpenAI-compatible API, monitor page and metrics (default: demo model)"},
    {"run", cmd_run, "generate text from a prompt with a GGUF model (also: --dump-logits for numerics)"},
    {"pull", cmd_pull, "download model files from a Hugging Face hub: pinned, resumable, SHA-256 verified"},
    {"sheet", cmd_sheet, "evaluation sheet of packs: bytes, bpw, speed vs context, quality; Markdown, JSON, HTML"},
    {"check", cmd_check, "is a model or serve config ready? files, SHA-256, tokenizer, memory fit, port, CPU/GPU"},
    {"version", cmd_version, "print version and CPU kernel level"},
    {"bench", cmd_bench, "measure prefill and decode speed at context depths (like llama-bench)"},
    {"synth", cmd_synth, "write a random-weight GGUF with real model dimensions (benchmarks, tests)"},
    {"convert", cmd_convert, "convert a Hugging Face Qwen3.5 folder (safetensors + tokenizer.json) to GGUF"},
    {"quantize", cmd_quantize, "requantize a GGUF to a type or a llama.cpp-style mix (experts at their own type)"},
    {"sha256", cmd_sha256, "SHA-256 of files in sha256sum's format (a SHA256SUMS manifest), at disk speed"},
    {"info", cmd_info, "show what a GGUF model file holds (types, bits per weight, shape, KV size)"},
    {"tokenizer", cmd_tokenizer, "encode, decode or inspect with a GGUF vocabulary; import a HF tokenizer.json"},
    {"eval", cmd_eval, "scripted checks against a running server (eval cache: prefix cache reuse + correctness)"},
    {"measure", cmd_measure, "stream a file as a prompt to a server; report cache use, prefill, TTFT, speed"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "wick %s - local LLM inference engine and server\n\n"
            "usage: wick <command> [options]   (wick <command> --help for details)\n\ncommands:\n",
            WICK_VERSION);
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(out, "  %-10s %s\n", k_commands[i].name, k_commands[i].summary);
}

int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("wick %s (cpu kernels: %s)\n", WICK_VERSION, wk_cpu_level_name());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "wick: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
