/* Static checks that keep the matcher finite and the output completable:
 *   - every rule reachable from root can complete (derives a finite
 *     string): otherwise the model could be led into a loop with no end;
 *   - no left recursion (a rule reaching itself through a nullable
 *     prefix): the matcher would push frames forever without reading;
 * and the byte classes (bytes no set tells apart) that size the DFA's rows.
 * Fixed points use work lists (linear in the grammar size, so that a huge
 * grammar costs time proportional to it, not its square). */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"

/* Least fixed point of "rule has an alternative whose elements all have
 * the property", where terminals have it iff terminal_value. */
static int fixed_point(const gram_grammar *g, bool terminal_value, uint8_t *flag)
{
    size_t n_r = g->n_rules, n_a = g->n_alts;
    uint32_t *pending = calloc(n_a ? n_a : 1, sizeof *pending);
    uint32_t *occ_count = calloc(n_r + 1, sizeof *occ_count);
    uint32_t *queue = malloc((n_r ? n_r : 1) * sizeof *queue);
    if (!pending || !occ_count || !queue) goto oom;
    memset(flag, 0, n_r);
    /* pending[a]: elements of a that lack the property until some rule gets
     * it; alts with a terminal lacking it can never have it */
    for (size_t a = 0; a < n_a; a++) {
        const gram_alt *al = &g->alts[a];
        for (uint32_t k = 0; k < al->n && !terminal_value; k++) {
            uint32_t kind = g->elems[al->first + k].kind;
            if (kind == GE_BYTES || kind == GE_SPECIAL) pending[a] = UINT32_MAX;
        }
        if (pending[a] == UINT32_MAX) continue;
        for (uint32_t k = 0; k < al->n; k++) {
            const gram_elem *e = &g->elems[al->first + k];
            if ((e->kind == GE_RULE || e->kind == GE_REPEAT) && !(e->kind == GE_REPEAT && e->min == 0)) {
                pending[a]++;
                occ_count[e->arg + 1]++;
            }
        }
    }
    for (size_t r = 0; r < n_r; r++) occ_count[r + 1] += occ_count[r];
    uint32_t *occ = malloc((occ_count[n_r] ? occ_count[n_r] : 1) * sizeof *occ);
    uint32_t *fill = malloc((n_r ? n_r : 1) * sizeof *fill);
    if (!occ || !fill) {
        free(occ);
        free(fill);
        goto oom;
    }
    memcpy(fill, occ_count, n_r * sizeof *fill);
    for (size_t a = 0; a < n_a; a++) {
        if (pending[a] == UINT32_MAX) continue;
        const gram_alt *al = &g->alts[a];
        for (uint32_t k = 0; k < al->n; k++) {
            const gram_elem *e = &g->elems[al->first + k];
            if ((e->kind == GE_RULE || e->kind == GE_REPEAT) && !(e->kind == GE_REPEAT && e->min == 0))
                occ[fill[e->arg]++] = (uint32_t)a;
        }
    }
    size_t qn = 0, qi = 0;
    for (size_t a = 0; a < n_a; a++) {
        uint32_t r = g->alts[a].rule;
        if (pending[a] == 0 && !flag[r]) {
            flag[r] = 1;
            queue[qn++] = r;
        }
    }
    while (qi < qn) {
        uint32_t r = queue[qi++];
        for (uint32_t k = occ_count[r]; k < occ_count[r + 1]; k++) {
            uint32_t a = occ[k];
            if (--pending[a] == 0) {
                uint32_t owner = g->alts[a].rule;
                if (!flag[owner]) {
                    flag[owner] = 1;
                    queue[qn++] = owner;
                }
            }
        }
    }
    free(occ);
    free(fill);
    free(pending);
    free(occ_count);
    free(queue);
    return 0;
oom:
    free(pending);
    free(occ_count);
    free(queue);
    return WK_ENOMEM;
}

/* Rules reachable from root must complete. */
static int check_productive(const gram_grammar *g, const uint8_t *productive, wk_error *err)
{
    uint8_t *seen = calloc(g->n_rules, 1);
    uint32_t *stack = malloc(g->n_rules * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return wk_fail(err, WK_ENOMEM, "grammar check: out of memory");
    }
    size_t sp = 0;
    int rc = 0;
    stack[sp++] = g->root;
    seen[g->root] = 1;
    while (sp && !rc) {
        uint32_t r = stack[--sp];
        if (!productive[r]) {
            rc = wk_fail(err, WK_EINVAL, "grammar rule '%s' can never complete (every alternative recurses without end)",
                         gram_rule_name(g, r));
            break;
        }
        const gram_rule *ru = &g->rules[r];
        for (uint32_t a = ru->first_alt; a < ru->first_alt + ru->n_alts; a++) {
            const gram_alt *al = &g->alts[a];
            for (uint32_t k = 0; k < al->n; k++) {
                const gram_elem *e = &g->elems[al->first + k];
                if ((e->kind == GE_RULE || e->kind == GE_REPEAT) && !seen[e->arg]) {
                    seen[e->arg] = 1;
                    stack[sp++] = e->arg;
                }
            }
        }
    }
    free(seen);
    free(stack);
    return rc;
}

/* Left corners: r → r' when r' can be entered before any byte is read.
 * A cycle is left recursion. Iterative DFS (grammars may have millions of
 * rules). */
static int check_left_recursion(const gram_grammar *g, const uint8_t *nullable, wk_error *err)
{
    size_t n_r = g->n_rules;
    uint8_t *color = calloc(n_r, 1); /* 0 new, 1 on the path, 2 done */
    uint32_t *st_rule = malloc(n_r * sizeof *st_rule);
    uint32_t *st_alt = malloc(n_r * sizeof *st_alt);
    uint32_t *st_pos = malloc(n_r * sizeof *st_pos);
    int rc = 0;
    if (!color || !st_rule || !st_alt || !st_pos) {
        rc = wk_fail(err, WK_ENOMEM, "grammar check: out of memory");
        goto done;
    }
    for (size_t start = 0; start < n_r && !rc; start++) {
        if (color[start]) continue;
        size_t sp = 0;
        st_rule[sp] = (uint32_t)start;
        st_alt[sp] = g->rules[start].first_alt;
        st_pos[sp] = 0;
        sp++;
        color[start] = 1;
        while (sp) {
            size_t t = sp - 1;
            uint32_t r = st_rule[t];
            const gram_rule *ru = &g->rules[r];
            if (st_alt[t] >= ru->first_alt + ru->n_alts) {
                color[r] = 2;
                sp--;
                continue;
            }
            const gram_alt *al = &g->alts[st_alt[t]];
            uint32_t k = st_pos[t];
            if (k >= al->n) {
                st_alt[t]++;
                st_pos[t] = 0;
                continue;
            }
            const gram_elem *e = &g->elems[al->first + k];
            if (e->kind == GE_BYTES || e->kind == GE_SPECIAL) { /* nothing further is a left corner */
                st_alt[t]++;
                st_pos[t] = 0;
                continue;
            }
            /* next time: the element after this one if this one is nullable */
            bool e_nullable = e->kind == GE_REPEAT ? (e->min == 0 || nullable[e->arg]) : nullable[e->arg];
            if (e_nullable) st_pos[t]++;
            else { st_alt[t]++; st_pos[t] = 0; }
            uint32_t c = e->arg;
            if (color[c] == 1) {
                rc = wk_fail(err, WK_EINVAL, "grammar rule '%s' is left-recursive (reaches itself before reading anything)",
                             gram_rule_name(g, c));
                break;
            }
            if (color[c] == 0) {
                color[c] = 1;
                st_rule[sp] = c;
                st_alt[sp] = g->rules[c].first_alt;
                st_pos[sp] = 0;
                sp++;
            }
        }
    }
done:
    free(color);
    free(st_rule);
    free(st_alt);
    free(st_pos);
    return rc;
}

/* Partition refinement: two bytes share a class iff every set has both or
 * neither. */
static void byte_classes(gram_grammar *g)
{
    uint8_t cls[256] = {0};
    uint32_t n = 1;
    for (size_t s = 0; s < g->n_sets && n < 256; s++) {
        int16_t remap[256][2];
        memset(remap, -1, sizeof remap);
        uint32_t m = 0;
        uint8_t next[256];
        for (unsigned b = 0; b < 256; b++) {
            int in = gram_set_has(g->sets[s], b);
            if (remap[cls[b]][in] < 0) remap[cls[b]][in] = (int16_t)m++;
            next[b] = (uint8_t)remap[cls[b]][in];
        }
        memcpy(cls, next, sizeof cls);
        n = m;
    }
    memcpy(g->byte_class, cls, sizeof cls);
    for (int b = 255; b >= 0; b--) g->class_rep[cls[b]] = (uint8_t)b;
    g->n_classes = n;
}

int gram_check(gram_grammar *g, wk_error *err)
{
    uint8_t *productive = malloc(g->n_rules);
    uint8_t *nullable = malloc(g->n_rules);
    int rc = 0;
    if (!productive || !nullable || fixed_point(g, true, productive) || fixed_point(g, false, nullable)) {
        rc = wk_fail(err, WK_ENOMEM, "grammar check: out of memory");
        goto done;
    }
    if ((rc = check_productive(g, productive, err))) goto done;
    if ((rc = check_left_recursion(g, nullable, err))) goto done;
    byte_classes(g);
done:
    free(productive);
    free(nullable);
    return rc;
}
