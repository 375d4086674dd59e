/* Config files for commands with many options (`wick serve`): a JSON object
 * whose keys are the command's long option names ("ctx", "kv-type",
 * "attn-policy", "cache-dir", ...; '_' may stand for '-'). Values: a string
 * or number (the option's argument), true (a flag given; false and null:
 * not given), or an array (the option repeated). The keys become options in
 * front of the command line, so the one getopt parser handles both, every
 * option is supported, and the command line wins (a later option overrides
 * an earlier one). Unknown keys, nested objects and flags with values are
 * errors naming the file and key.
 *
 * Usage, before getopt:
 *   cli_config cfg;
 *   if (cli_config_expand(&cfg, "wick serve", opts, argc, argv)) return 2;
 *   argc = cfg.argc; argv = cfg.argv;
 * cfg holds the new argv and the values' text (no heap: it lives on the
 * caller's stack as long as argv is used). */
#ifndef WICK_CLI_CLI_CONFIG_H
#define WICK_CLI_CLI_CONFIG_H

#include <getopt.h>
#include <limits.h>
#include <stdio.h>

#define CLI_CONFIG_MAX_ARGS 512
#define CLI_CONFIG_STORE (64 * 1024)

typedef struct cli_config {
    int argc;
    char *argv[CLI_CONFIG_MAX_ARGS + 1];
    char store[CLI_CONFIG_STORE];
    size_t used;
    char path[PATH_MAX]; /* the --config file, "" if none */
} cli_config;

/* Finds --config FILE (or --config=FILE) in argv, loads it and builds
 * argv[0], the file's options, then the command line without --config.
 * Without --config the argv is copied as is. Returns 0, or -1 with a
 * one-line message on stderr prefixed by cmd. */
int cli_config_expand(cli_config *c, const char *cmd, const struct option *opts, int argc, char **argv);

/* Prints the options in argv (as expanded) as one JSON config object:
 * each option under its long name, the last value winning, repeated
 * options as arrays, flags as true; values of options named in `secret`
 * (NULL-terminated list, e.g. "api-key") shown as "<hidden>". Returns 0,
 * or -1 on an option the table does not know (message on stderr). */
int cli_config_print(FILE *out, const char *cmd, const struct option *opts, const char *short_opts,
                     const char *const *repeatable, const char *const *secret, int argc, char **argv);

#endif
