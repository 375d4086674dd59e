/* wick eval: scripted evaluations (against a running server, or a model file
 * for the long-context ones). One subcommand
 * per file (cmd_eval_<name>.c), listed in the table below. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const cli_command k_evals[] = {
    {"cache", cmd_eval_cache, "prefix cache: reuse after follow-ups, tool results, edits, cancel, restart"},
    {"needle", cmd_eval_needle, "codes hidden at token depths of a long document, all asked for at once"},
    {"vt", cmd_eval_vt, "RULER-style variable tracking through chains of assignments"},
    {"longbench", cmd_eval_longbench, "a LongBench v2-format JSON file: published prompt, answer letters"},
    {"paired", cmd_eval_paired, "the same prompts under dense and approximate attention, compared"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: wick eval <name> [options]   (wick eval <name> --help for details)\n\nevaluations:\n");
    for (size_t i = 0; i < sizeof k_evals / sizeof k_evals[0]; i++)
        fprintf(out, "  %-8s %s\n", k_evals[i].name, k_evals[i].summary);
}

int cmd_eval(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_evals / sizeof k_evals[0]; i++)
        if (!strcmp(argv[1], k_evals[i].name)) return k_evals[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "wick eval: unknown evaluation '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
