/* JSON config files as command-line options (cli_config.h). */
#include "cli/cli_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const struct option *find_long(const struct option *opts, const char *name, size_t len)
{
    for (const struct option *o = opts; o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) return o;
    /* getopt_long takes an unambiguous prefix too */
    const struct option *hit = NULL;
    for (const struct option *o = opts; o->name; o++)
        if (!strncmp(o->name, name, len)) {
            if (hit) return NULL;
            hit = o;
        }
    return hit;
}

static char *keep(cli_config *c, const char *s)
{
    size_t n = strlen(s) + 1;
    if (c->used + n > sizeof c->store) return NULL;
    char *p = c->store + c->used;
    memcpy(p, s, n);
    c->used += n;
    return p;
}

static int push(cli_config *c, const char *cmd, const char *s)
{
    char *p = keep(c, s);
    if (!p || c->argc >= CLI_CONFIG_MAX_ARGS) {
        fprintf(stderr, "%s: config %s: too many options or values (over %d, %d bytes)\n", cmd, c->path,
                CLI_CONFIG_MAX_ARGS, CLI_CONFIG_STORE);
        return -1;
    }
    c->argv[c->argc++] = p;
    return 0;
}

/* One value of an option that takes an argument, as text. */
static int value_text(const json_t *v, char *buf, size_t cap)
{
    if (json_is_string(v)) snprintf(buf, cap, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, cap, "%.17g", json_real_value(v));
    else return -1;
    return 0;
}

static int add_key(cli_config *c, const char *cmd, const struct option *opts, const char *key, const json_t *v)
{
    char name[128];
    snprintf(name, sizeof name, "%s", key);
    for (char *p = name; *p; p++)
        if (*p == '_') *p = '-';
    const struct option *o = find_long(opts, name, strlen(name));
    if (!o || strlen(o->name) != strlen(name) || !strcmp(name, "config") || !strcmp(name, "help")) {
        fprintf(stderr, "%s: config %s: unknown key '%s' (keys are the long options of %s --help)\n", cmd, c->path,
                key, cmd);
        return -1;
    }
    char opt[160], val[4096];
    snprintf(opt, sizeof opt, "--%s", o->name);
    if (json_is_null(v)) return 0;
    if (o->has_arg == no_argument) {
        if (!json_is_boolean(v)) {
            fprintf(stderr, "%s: config %s: '%s' is a flag: give true or false\n", cmd, c->path, key);
            return -1;
        }
        return json_is_true(v) ? push(c, cmd, opt) : 0;
    }
    const json_t *one = v;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (!n) return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (json_is_array(v)) one = json_array_get(v, i);
        if (value_text(one, val, sizeof val)) {
            fprintf(stderr, "%s: config %s: '%s' takes a value (string or number)%s\n", cmd, c->path, key,
                    json_is_array(one) || json_is_object(one) ? ", not a nested array or object" : "");
            return -1;
        }
        if (o->has_arg == optional_argument) {
            char both[4300];
            snprintf(both, sizeof both, "%s=%s", opt, val);
            if (push(c, cmd, both)) return -1;
        } else if (push(c, cmd, opt) || push(c, cmd, val)) {
            return -1;
        }
    }
    return 0;
}

int cli_config_expand(cli_config *c, const char *cmd, const struct option *opts, int argc, char **argv)
{
    c->argc = 0;
    c->used = 0;
    c->path[0] = '\0';
    int at = -1;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --config needs a FILE\n", cmd);
                return -1;
            }
            snprintf(c->path, sizeof c->path, "%s", argv[i + 1]);
            at = i;
        } else if (!strncmp(argv[i], "--config=", 9)) {
            snprintf(c->path, sizeof c->path, "%s", argv[i] + 9);
            at = i;
        }
        if (at == i) break;
    }
    if (argc > CLI_CONFIG_MAX_ARGS) {
        fprintf(stderr, "%s: too many arguments (%d)\n", cmd, argc);
        return -1;
    }
    c->argv[c->argc++] = argv[0];
    if (at >= 0) {
        json_error_t je;
        json_t *root = json_load_file(c->path, JSON_REJECT_DUPLICATES, &je);
        if (!root) {
            if (je.line > 0)
                fprintf(stderr, "%s: config %s:%d:%d: %s\n", cmd, c->path, je.line, je.column, je.text);
            else fprintf(stderr, "%s: config %s: %s\n", cmd, c->path, je.text);
            return -1;
        }
        if (!json_is_object(root)) {
            fprintf(stderr, "%s: config %s: must be a JSON object of option names to values\n", cmd, c->path);
            json_decref(root);
            return -1;
        }
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v) {
            if (add_key(c, cmd, opts, key, v)) {
                json_decref(root);
                return -1;
            }
        }
        json_decref(root);
    }
    int skip = at >= 0 && !strcmp(argv[at], "--config") ? 2 : 1;
    for (int i = 1; i < argc; i++) {
        if (i == at) {
            i += skip - 1;
            continue;
        }
        if (c->argc >= CLI_CONFIG_MAX_ARGS) {
            fprintf(stderr, "%s: too many options with config %s\n", cmd, c->path);
            return -1;
        }
        c->argv[c->argc++] = argv[i];
    }
    c->argv[c->argc] = NULL;
    return 0;
}

static bool listed(const char *const *names, const char *name)
{
    for (; names && *names; names++)
        if (!strcmp(*names, name)) return true;
    return false;
}

/* JSON for an option's argument: an integer when it is one, else the text. */
static json_t *arg_json(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s && !*end && !errno && (s[0] != '0' || !s[1]) && s[0] != '+') return json_integer(v);
    return json_string(s);
}

static void set(json_t *o, const struct option *opt, const char *val, const char *const *repeatable,
                const char *const *secret)
{
    json_t *v = !val ? json_true() : listed(secret, opt->name) ? json_string("<hidden>") : arg_json(val);
    if (!listed(repeatable, opt->name)) {
        json_object_set_new(o, opt->name, v);
        return;
    }
    json_t *arr = json_object_get(o, opt->name);
    if (!arr) json_object_set_new(o, opt->name, arr = json_array());
    json_array_append_new(arr, v);
}

int cli_config_print(FILE *out, const char *cmd, const struct option *opts, const char *short_opts,
                     const char *const *repeatable, const char *const *secret, int argc, char **argv)
{
    json_t *o = json_object();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct option *opt = NULL;
        const char *val = NULL;
        if (!strncmp(a, "--", 2) && a[2]) {
            const char *eq = strchr(a + 2, '=');
            opt = find_long(opts, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
            if (opt && opt->has_arg != no_argument) val = eq ? eq + 1 : opt->has_arg == required_argument && i + 1 < argc ? argv[++i] : NULL;
        } else if (a[0] == '-' && a[1] && a[1] != '-') {
            const char *s = strchr(short_opts, a[1]);
            for (const struct option *p = opts; s && p->name; p++)
                if (p->val == a[1]) opt = p;
            if (opt && s[1] == ':') val = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : NULL;
        }
        if (!opt) {
            fprintf(stderr, "%s: --print-config: cannot read option '%s'\n", cmd, a);
            json_decref(o);
            return -1;
        }
        if (!strcmp(opt->name, "print-config")) continue;
        set(o, opt, val, repeatable, secret);
    }
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fprintf(out, "%s\n", text ? text : "{}");
    free(text);
    json_decref(o);
    return 0;
}
