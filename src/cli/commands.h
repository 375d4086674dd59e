/* Subcommands of the `wick` binary. Each lives in its own cmd_<name>.c and is
 * listed once in the table in main.c. Only cli/ prints to the user and exits. */
#ifndef WICK_CLI_COMMANDS_H
#define WICK_CLI_COMMANDS_H

#define WICK_VERSION "0.1.0"

typedef int (*cli_cmd_fn)(int argc, char **argv); /* argv[0] is the subcommand name */

typedef struct cli_command {
    const char *name;
    cli_cmd_fn fn;
    const char *summary;
} cli_command;

int cmd_version(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_measure(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_quantize(int argc, char **argv);   /* cmd_quantize.c */
int cmd_check(int argc, char **argv);      /* cmd_check.c: wick serve --check */
int cmd_sha256(int argc, char **argv);     /* cmd_sha256.c */
int cmd_pull(int argc, char **argv);       /* cmd_pull.c */
int cmd_sheet(int argc, char **argv);      /* cmd_sheet.c */
int cmd_eval(int argc, char **argv);       /* dispatcher: wick eval <name> (cmd_eval.c) */
int cmd_eval_cache(int argc, char **argv); /* wick eval cache (cmd_eval_cache.c) */
int cmd_eval_needle(int argc, char **argv);    /* long context: cmd_eval_needle.c */
int cmd_eval_vt(int argc, char **argv);        /* cmd_eval_vt.c */
int cmd_eval_longbench(int argc, char **argv); /* cmd_eval_longbench.c */
int cmd_eval_paired(int argc, char **argv);    /* cmd_eval_paired.c */

#endif
