/* Long-context evaluation material: filler, needles, variable tracking,
 * LongBench v2 items, scoring (see eval_text.h). */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_text.h"

const double ev_needle_default_depths[5] = {0.015, 0.25, 0.50, 0.75, 0.985};

uint64_t ev_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A generator state from a user seed: hashed, so seeds s and s + 1 give
 * unrelated streams (splitmix64 states one increment apart would not). */
static uint64_t seed_state(uint64_t seed, uint64_t salt)
{
    uint64_t st = seed ^ (salt << 32);
    ev_rand(&st);
    return ev_rand(&st);
}

/* ---- growable text ------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}

/* ---- filler ---------------------------------------------------------------------- */

/* Bland sentences from word lists: nothing in them looks like a code, a
 * number or a variable, so they never compete with what is hidden. */
static const char *const k_subj[] = {"The old harbour", "A quiet village", "The morning train", "Our garden",
                                     "The river valley", "A small bakery", "The mountain path", "The library",
                                     "An autumn market", "The lighthouse keeper", "A travelling painter",
                                     "The country road"};
static const char *const k_verb[] = {"looked calm", "was busy", "felt warm", "seemed unchanged", "grew louder",
                                     "stayed peaceful", "became crowded", "remained open", "smelled of rain",
                                     "was bathed in light"};
static const char *const k_when[] = {"in the early morning", "after the long winter", "during the festival",
                                     "before the storm", "on a slow afternoon", "as the sun went down",
                                     "once the fog lifted", "at the end of the season"};
static const char *const k_tail[] = {"and people walked slowly past", "while birds circled overhead",
                                     "as visitors came and went", "and nobody was in a hurry",
                                     "while the wind moved the trees", "and the day went on as usual"};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Filler split in sentence units: pointers into one owned text. */
typedef struct filler {
    char *text;
    size_t *start, *len; /* unit i = text[start[i] .. start[i] + len[i]) */
    int32_t *tokens;     /* tokens of each unit (counted once) */
    size_t n, cap;
    size_t next_src;     /* for user filler: where the next unit comes from */
    const char *src;
    size_t src_len;
    uint64_t rng;
    sbuf buf;
} filler;

static int filler_push(filler *f, const char *s, size_t n)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 256;
        size_t *st = realloc(f->start, cap * sizeof *st);
        if (st) f->start = st;
        size_t *ln = realloc(f->len, cap * sizeof *ln);
        if (ln) f->len = ln;
        int32_t *tk = realloc(f->tokens, cap * sizeof *tk);
        if (tk) f->tokens = tk;
        if (!st || !ln || !tk) return WK_ENOMEM;
        f->cap = cap;
    }
    f->start[f->n] = f->buf.len;
    f->len[f->n] = n;
    sb_add(&f->buf, s, n);
    if (f->buf.oom) return WK_ENOMEM;
    f->n++;
    return 0;
}

/* Next unit: a generated sentence, or the user's text cut after '.', '!',
 * '?' or a newline (wrapping around; a file without such marks is cut every
 * 200 bytes at a space). Units begin with a space or newline so they
 * concatenate as prose. */
static int filler_next(filler *f)
{
    if (!f->src) {
        char s[256];
        int n = snprintf(s, sizeof s, " %s %s %s, %s.", k_subj[ev_rand(&f->rng) % NELEM(k_subj)],
                         k_verb[ev_rand(&f->rng) % NELEM(k_verb)], k_when[ev_rand(&f->rng) % NELEM(k_when)],
                         k_tail[ev_rand(&f->rng) % NELEM(k_tail)]);
        return filler_push(f, s, (size_t)n);
    }
    size_t b = f->next_src, e = b, lim = b + 200 < f->src_len ? b + 200 : f->src_len;
    while (e < lim && !strchr(".!?\n", f->src[e])) e++;
    if (e < lim) e++;
    else if (e < f->src_len) /* no sentence mark within 200 bytes: cut at the last space */
        while (e > b + 1 && f->src[e - 1] != ' ') e--;
    if (e <= b) e = lim;
    int rc;
    if (b == 0 && f->n > 0) { /* wrapped: keep a separator */
        char *tmp = malloc(e - b + 2);
        if (!tmp) return WK_ENOMEM;
        tmp[0] = '\n';
        memcpy(tmp + 1, f->src + b, e - b);
        rc = filler_push(f, tmp, e - b + 1);
        free(tmp);
    } else {
        rc = filler_push(f, f->src + b, e - b);
    }
    f->next_src = e >= f->src_len ? 0 : e;
    return rc;
}

/* Grows the filler until its units hold at least `tokens` tokens. */
static int filler_fill(filler *f, int32_t tokens, ev_count_fn count, void *user, int64_t *total, wk_error *err)
{
    int empty_run = 0;
    while (*total < tokens) {
        int rc = filler_next(f);
        if (rc) return wk_fail(err, rc, "filler: out of memory");
        size_t i = f->n - 1;
        int32_t nt = 0;
        if ((rc = count(user, f->buf.p + f->start[i], f->len[i], &nt, err))) return rc;
        f->tokens[i] = nt;
        *total += nt;
        empty_run = nt > 0 ? 0 : empty_run + 1;
        if (empty_run > 1000) return wk_fail(err, WK_EINVAL, "filler: the text gives no tokens");
    }
    return 0;
}

static void filler_free(filler *f)
{
    free(f->buf.p);
    free(f->start);
    free(f->len);
    free(f->tokens);
    memset(f, 0, sizeof *f);
}

/* Unit index whose start is nearest to token position `at` (0..n). */
static size_t unit_at_tokens(const filler *f, int64_t at)
{
    int64_t acc = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (acc + f->tokens[i] / 2 >= at) return i;
        acc += f->tokens[i];
    }
    return f->n;
}

/* ---- needle ---------------------------------------------------------------------- */

static void make_code(uint64_t *rng, char out[16])
{
    static const char letters[] = "ABCDEFGHJKLMNPQRSTUVWXYZ"; /* no I, O: not mistaken for digits */
    for (int i = 0; i < 3; i++) out[i] = letters[ev_rand(rng) % (sizeof letters - 1)];
    out[3] = '-';
    unsigned v = 1000 + (unsigned)(ev_rand(rng) % 9000);
    snprintf(out + 4, 12, "%u", v);
}

typedef struct insertion {
    size_t unit;   /* inserted before filler unit `unit` */
    int index;     /* which needle / statement */
} insertion;

static int cmp_insertion(const void *a, const void *b)
{
    const insertion *x = a, *y = b;
    if (x->unit != y->unit) return x->unit < y->unit ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int ev_needle_build(const ev_needle_spec *spec, ev_count_fn count, void *user, ev_needle_doc *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    if (spec->n_codes < 1 || spec->n_codes > 256) return wk_fail(err, WK_EINVAL, "needle: %d codes (1..256)", spec->n_codes);
    if (spec->n_depths < 1) return wk_fail(err, WK_EINVAL, "needle: no depths");
    for (int i = 0; i < spec->n_depths; i++)
        if (!(spec->depths[i] >= 0.0 && spec->depths[i] <= 1.0))
            return wk_fail(err, WK_EINVAL, "needle: depth %g outside 0..1", spec->depths[i]);
    if (spec->doc_tokens < 64) return wk_fail(err, WK_EINVAL, "needle: document of %d tokens (at least 64)", spec->doc_tokens);
    if (spec->filler && spec->filler_len == 0) return wk_fail(err, WK_EINVAL, "needle: empty filler text");

    uint64_t rng = seed_state(spec->seed, 0x6e656564);
    out->codes = calloc((size_t)spec->n_codes, sizeof *out->codes);
    insertion *ins = calloc((size_t)spec->n_codes, sizeof *ins);
    filler f = {0};
    int rc = 0;
    if (!out->codes || !ins) {
        rc = wk_fail(err, WK_ENOMEM, "needle: out of memory");
        goto done;
    }
    out->n_codes = spec->n_codes;
    char sentence[128];
    int64_t needle_tokens = 0;
    for (int i = 0; i < spec->n_codes; i++) {
        ev_needle_code *c = &out->codes[i];
        for (bool unique = false; !unique;) { /* distinct codes: one found never stands for another */
            make_code(&rng, c->code);
            unique = true;
            for (int k = 0; k < i; k++) unique = unique && strcmp(out->codes[k].code, c->code) != 0;
        }
        c->depth_requested = spec->depths[i % spec->n_depths];
        int n = snprintf(sentence, sizeof sentence, " One of the secret codes is %s.", c->code);
        int32_t nt = 0;
        if ((rc = count(user, sentence, (size_t)n, &nt, err))) goto done;
        needle_tokens += nt;
    }
    f.rng = rng;
    f.src = spec->filler;
    f.src_len = spec->filler_len;
    int64_t total = 0, target = spec->doc_tokens - needle_tokens;
    if (target < 16) target = 16;
    if ((rc = filler_fill(&f, (int32_t)target, count, user, &total, err))) goto done;
    for (int i = 0; i < spec->n_codes; i++) {
        ins[i].unit = unit_at_tokens(&f, (int64_t)(out->codes[i].depth_requested * (double)total + 0.5));
        ins[i].index = i;
    }
    qsort(ins, (size_t)spec->n_codes, sizeof *ins, cmp_insertion);
    sbuf doc = {0};
    int k = 0;
    for (size_t u = 0; u <= f.n; u++) {
        while (k < spec->n_codes && ins[k].unit == u) {
            ev_needle_code *c = &out->codes[ins[k].index];
            c->byte_offset = doc.len;
            sb_fmt(&doc, " One of the secret codes is %s.", c->code);
            k++;
        }
        if (u < f.n) sb_add(&doc, f.buf.p + f.start[u], f.len[u]);
    }
    if (doc.oom) {
        free(doc.p);
        rc = wk_fail(err, WK_ENOMEM, "needle: out of memory");
        goto done;
    }
    out->text = doc.p;
    out->len = doc.len;
    /* Depths as the model sees them: tokens of the finished text before each needle. */
    if ((rc = count(user, out->text, out->len, &out->doc_tokens, err))) goto done;
    for (int i = 0; i < spec->n_codes; i++) {
        ev_needle_code *c = &out->codes[i];
        if ((rc = count(user, out->text, c->byte_offset, &c->token_offset, err))) goto done;
        c->depth_tokens = out->doc_tokens > 0 ? (double)c->token_offset / out->doc_tokens : 0.0;
    }
done:
    free(ins);
    filler_free(&f);
    if (rc) ev_needle_doc_free(out);
    return rc;
}

void ev_needle_doc_free(ev_needle_doc *d)
{
    free(d->text);
    free(d->codes);
    memset(d, 0, sizeof *d);
}

char *ev_needle_prompt(const ev_needle_doc *d)
{
    sbuf b = {0};
    sb_str(&b, "Below is a document. Hidden in it are secret codes of the form ABC-1234 (three capital letters, "
               "a dash, four digits).\n\n<document>\n");
    sb_add(&b, d->text, d->len);
    sb_fmt(&b, "\n</document>\n\nThe document contains %d secret codes. List every secret code that appears in the "
               "document, one per line, and nothing else.",
           d->n_codes);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int ev_needle_score(const ev_needle_doc *d, const char *answer, bool *found)
{
    int n = 0;
    for (int i = 0; i < d->n_codes; i++) {
        bool hit = answer && strstr(answer, d->codes[i].code) != NULL;
        if (found) found[i] = hit;
        n += hit;
    }
    return n;
}

/* ---- variable tracking --------------------------------------------------------------- */

int ev_vt_build(const ev_vt_spec *spec, ev_count_fn count, void *user, ev_vt_doc *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    if (spec->n_chains < 1 || spec->n_chains > 8) return wk_fail(err, WK_EINVAL, "vt: %d chains (1..8)", spec->n_chains);
    if (spec->n_hops < 1 || spec->n_hops > 16) return wk_fail(err, WK_EINVAL, "vt: %d hops (1..16)", spec->n_hops);
    if (spec->doc_tokens < 64) return wk_fail(err, WK_EINVAL, "vt: document of %d tokens (at least 64)", spec->doc_tokens);
    if (spec->filler && spec->filler_len == 0) return wk_fail(err, WK_EINVAL, "vt: empty filler text");
    const int per = spec->n_hops + 1, n_st = spec->n_chains * per;
    uint64_t rng = seed_state(spec->seed, 0x7674);
    char (*names)[8] = calloc((size_t)n_st, sizeof *names);
    char (*values)[8] = calloc((size_t)spec->n_chains, sizeof *values);
    char (*stmts)[48] = calloc((size_t)n_st, sizeof *stmts);
    int *order = calloc((size_t)n_st, sizeof *order); /* statement id (chain * per + hop) in document order */
    insertion *ins = calloc((size_t)n_st, sizeof *ins);
    size_t *offs = calloc((size_t)n_st, sizeof *offs);
    filler f = {0};
    sbuf doc = {0};
    int rc = 0;
    out->expected = calloc((size_t)per, sizeof *out->expected);
    out->token_offsets = calloc((size_t)per, sizeof *out->token_offsets);
    if (!names || !values || !stmts || !order || !ins || !offs || !out->expected || !out->token_offsets) {
        rc = wk_fail(err, WK_ENOMEM, "vt: out of memory");
        goto done;
    }
    for (int i = 0; i < n_st; i++) /* distinct 5-letter names */
        for (bool unique = false; !unique;) {
            for (int c = 0; c < 5; c++) names[i][c] = (char)('A' + ev_rand(&rng) % 26);
            names[i][5] = '\0';
            unique = true;
            for (int k = 0; k < i; k++) unique = unique && strcmp(names[k], names[i]) != 0;
        }
    for (int c = 0; c < spec->n_chains; c++)
        for (bool unique = false; !unique;) {
            snprintf(values[c], sizeof values[c], "%05u", (unsigned)(10000 + ev_rand(&rng) % 90000));
            unique = true;
            for (int k = 0; k < c; k++) unique = unique && strcmp(values[k], values[c]) != 0;
        }
    int64_t st_tokens = 0;
    for (int c = 0; c < spec->n_chains; c++)
        for (int h = 0; h < per; h++) {
            int id = c * per + h;
            if (h == 0) snprintf(stmts[id], sizeof stmts[id], " VAR %s = %s.", names[id], values[c]);
            else snprintf(stmts[id], sizeof stmts[id], " VAR %s = VAR %s.", names[id], names[id - 1]);
            int32_t nt = 0;
            if ((rc = count(user, stmts[id], strlen(stmts[id]), &nt, err))) goto done;
            st_tokens += nt;
        }
    /* Document order: hop by hop, the chains in a random order within each hop. */
    for (int h = 0, k = 0; h < per; h++) {
        int *slot = order + k;
        for (int c = 0; c < spec->n_chains; c++) slot[c] = c * per + h;
        for (int c = spec->n_chains - 1; c > 0; c--) {
            int r = (int)(ev_rand(&rng) % (uint64_t)(c + 1)), t = slot[c];
            slot[c] = slot[r];
            slot[r] = t;
        }
        k += spec->n_chains;
    }
    f.rng = rng;
    f.src = spec->filler;
    f.src_len = spec->filler_len;
    int64_t total = 0, target = spec->doc_tokens - st_tokens;
    if (target < 16) target = 16;
    if ((rc = filler_fill(&f, (int32_t)target, count, user, &total, err))) goto done;
    /* Statements spread evenly: statement k at depth (k + 0.5) / n_st. */
    for (int k = 0; k < n_st; k++) {
        ins[k].unit = unit_at_tokens(&f, (int64_t)((k + 0.5) / n_st * (double)total));
        ins[k].index = k;
    }
    qsort(ins, (size_t)n_st, sizeof *ins, cmp_insertion);
    int k = 0;
    for (size_t u = 0; u <= f.n; u++) {
        while (k < n_st && ins[k].unit == u) {
            int id = order[ins[k].index];
            offs[id] = doc.len;
            sb_str(&doc, stmts[id]);
            k++;
        }
        if (u < f.n) sb_add(&doc, f.buf.p + f.start[u], f.len[u]);
    }
    if (doc.oom) {
        rc = wk_fail(err, WK_ENOMEM, "vt: out of memory");
        goto done;
    }
    out->text = doc.p;
    out->len = doc.len;
    doc.p = NULL;
    snprintf(out->value, sizeof out->value, "%s", values[0]);
    out->n_expected = per;
    for (int h = 0; h < per; h++) {
        memcpy(out->expected[h], names[h], sizeof out->expected[h]);
        if ((rc = count(user, out->text, offs[h], &out->token_offsets[h], err))) goto done;
    }
    rc = count(user, out->text, out->len, &out->doc_tokens, err);
done:
    free(names);
    free(values);
    free(stmts);
    free(order);
    free(ins);
    free(offs);
    free(doc.p);
    filler_free(&f);
    if (rc) ev_vt_doc_free(out);
    return rc;
}

void ev_vt_doc_free(ev_vt_doc *d)
{
    free(d->text);
    free(d->expected);
    free(d->token_offsets);
    memset(d, 0, sizeof *d);
}

char *ev_vt_prompt(const ev_vt_doc *d)
{
    sbuf b = {0};
    sb_str(&b, "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n");
    sb_add(&b, d->text, d->len);
    sb_fmt(&b, "\nQuestion: Find all variables that are assigned the value %s in the text above. Answer with the "
               "variable names only, separated by commas.",
           d->value);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Case-insensitive substring search. */
static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    if (!n) return true;
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return false;
}

double ev_vt_score(const ev_vt_doc *d, const char *answer)
{
    if (d->n_expected == 0) return 0.0;
    int hit = 0;
    for (int i = 0; i < d->n_expected; i++) hit += answer && contains_ci(answer, d->expected[i]);
    return (double)hit / d->n_expected;
}

/* ---- LongBench v2 -------------------------------------------------------------------- */

static char *dup_field(const json_t *o, const char *key, bool required, size_t idx, int *rc, wk_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) *rc = wk_fail(err, WK_EFORMAT, "longbench item %zu: missing '%s'", idx, key);
        return strdup("");
    }
    if (!json_is_string(v)) {
        *rc = wk_fail(err, WK_EFORMAT, "longbench item %zu: '%s' is not a string", idx, key);
        return strdup("");
    }
    return strdup(json_string_value(v));
}

int ev_lb_load(const char *path, ev_lb_item **items, size_t *n, wk_error *err)
{
    *items = NULL;
    *n = 0;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return wk_fail(err, WK_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return wk_fail(err, WK_EFORMAT, "%s: expected a JSON array of LongBench v2 items", path);
    }
    size_t cnt = json_array_size(root);
    ev_lb_item *it = calloc(cnt ? cnt : 1, sizeof *it);
    if (!it) {
        json_decref(root);
        return wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    }
    int rc = 0;
    size_t i;
    for (i = 0; i < cnt && rc == 0; i++) {
        const json_t *o = json_array_get(root, i);
        if (!json_is_object(o)) {
            rc = wk_fail(err, WK_EFORMAT, "%s: item %zu is not an object", path, i);
            break;
        }
        ev_lb_item *x = &it[i];
        static const char *const ck[4] = {"choice_A", "choice_B", "choice_C", "choice_D"};
        x->id = dup_field(o, "_id", false, i, &rc, err);
        x->domain = dup_field(o, "domain", false, i, &rc, err);
        x->difficulty = dup_field(o, "difficulty", false, i, &rc, err);
        x->length = dup_field(o, "length", false, i, &rc, err);
        x->question = dup_field(o, "question", true, i, &rc, err);
        for (int c = 0; c < 4; c++) x->choice[c] = dup_field(o, ck[c], true, i, &rc, err);
        x->context = dup_field(o, "context", true, i, &rc, err);
        char *ans = dup_field(o, "answer", true, i, &rc, err);
        if (rc == 0 && (!ans || strlen(ans) != 1 || ans[0] < 'A' || ans[0] > 'D'))
            rc = wk_fail(err, WK_EFORMAT, "%s: item %zu: answer '%s' is not one of A, B, C, D", path, i, ans ? ans : "");
        if (ans) x->answer = ans[0];
        free(ans);
        if (rc == 0 && (!x->id || !x->domain || !x->difficulty || !x->length || !x->question || !x->context ||
                        !x->choice[0] || !x->choice[1] || !x->choice[2] || !x->choice[3]))
            rc = wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    }
    json_decref(root);
    if (rc) {
        ev_lb_free(it, cnt);
        return rc;
    }
    *items = it;
    *n = cnt;
    return 0;
}

void ev_lb_free(ev_lb_item *items, size_t n)
{
    if (!items) return;
    for (size_t i = 0; i < n; i++) {
        ev_lb_item *x = &items[i];
        free(x->id);
        free(x->domain);
        free(x->difficulty);
        free(x->length);
        free(x->question);
        for (int c = 0; c < 4; c++) free(x->choice[c]);
        free(x->context);
    }
    free(items);
}

char *ev_lb_prompt(const ev_lb_item *it, const char *context, bool brief)
{
    sbuf b = {0};
    sb_str(&b, "Please read the following text and answer the question below.\n\n<text>\n");
    sb_str(&b, context ? context : it->context);
    sb_str(&b, "\n</text>\n\nWhat is the correct answer to this question: ");
    sb_str(&b, it->question);
    sb_str(&b, "\nChoices:\n");
    for (int c = 0; c < 4; c++) {
        sb_fmt(&b, "(%c) ", 'A' + c);
        sb_str(&b, it->choice[c]);
        sb_str(&b, "\n");
    }
    sb_str(&b, "\nFormat your response as follows: \"The correct answer is (insert answer here)\".");
    if (brief) sb_str(&b, " Reply with that sentence only, without any explanation.");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char ev_lb_extract(const char *response)
{
    if (!response) return 0;
    size_t n = strlen(response);
    char *s = malloc(n + 1), *w = s;
    if (!s) return 0;
    for (size_t i = 0; i < n; i++)
        if (response[i] != '*') *w++ = response[i];
    *w = '\0';
    static const char key[] = "The correct answer is ";
    char found = 0;
    /* First pass "(X)", second pass bare "X", each at the first occurrence that fits. */
    for (int pass = 0; pass < 2 && !found; pass++)
        for (const char *p = strstr(s, key); p && !found; p = strstr(p + 1, key)) {
            const char *q = p + sizeof key - 1;
            if (pass == 0 && q[0] == '(' && q[1] >= 'A' && q[1] <= 'D' && q[2] == ')') found = q[1];
            if (pass == 1 && q[0] >= 'A' && q[0] <= 'D') found = q[0];
        }
    free(s);
    return found;
}
