/* Prefix index as a compressed radix tree over token ids. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cache/prefix_index.h"

typedef struct node {
    struct node *parent;
    int32_t *edge;         /* tokens from the parent to this node (owned) */
    int32_t edge_len;
    int32_t depth;         /* tokens from the root to the end of this node */
    struct node **kids;
    int n_kids, cap_kids;
    int n_ends;            /* entries whose sequence ends exactly here */
    int n_below;           /* entries ending here or in the subtree */
} node;

typedef struct entry {
    int64_t key;
    node *end;
    int32_t len;
} entry;

struct pidx {
    node root;
    entry *ents;
    int n_ents, cap_ents;
    size_t stored;
};

int pidx_new(pidx **out, wk_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return wk_fail(err, WK_ENOMEM, "prefix index: out of memory");
    return 0;
}

static void free_subtree(node *n)
{
    for (int i = 0; i < n->n_kids; i++) {
        free_subtree(n->kids[i]);
        free(n->kids[i]);
    }
    free(n->kids);
    free(n->edge);
}

void pidx_free(pidx *ix)
{
    if (!ix) return;
    free_subtree(&ix->root);
    free(ix->ents);
    free(ix);
}

int pidx_count(const pidx *ix) { return ix->n_ents; }
size_t pidx_stored_tokens(const pidx *ix) { return ix->stored; }

static node *find_kid(const node *n, int32_t tok)
{
    for (int i = 0; i < n->n_kids; i++)
        if (n->kids[i]->edge[0] == tok) return n->kids[i];
    return NULL;
}

static int add_kid(node *n, node *kid)
{
    if (n->n_kids == n->cap_kids) {
        int cap = n->cap_kids ? 2 * n->cap_kids : 2;
        node **k = realloc(n->kids, sizeof *k * (size_t)cap);
        if (!k) return WK_ENOMEM;
        n->kids = k;
        n->cap_kids = cap;
    }
    n->kids[n->n_kids++] = kid;
    kid->parent = n;
    return 0;
}

static void replace_kid(node *n, node *old, node *repl)
{
    for (int i = 0; i < n->n_kids; i++)
        if (n->kids[i] == old) {
            n->kids[i] = repl;
            repl->parent = n;
            return;
        }
}

static void drop_kid(node *n, node *kid)
{
    for (int i = 0; i < n->n_kids; i++)
        if (n->kids[i] == kid) {
            n->kids[i] = n->kids[--n->n_kids];
            return;
        }
}

static entry *find_entry(const pidx *ix, int64_t key)
{
    for (int i = 0; i < ix->n_ents; i++)
        if (ix->ents[i].key == key) return &ix->ents[i];
    return NULL;
}

/* Splits kid's edge after j tokens: a new node takes the first j tokens and
 * kid keeps the rest below it. Entry pointers stay valid (kid is the same
 * object). Returns the new middle node or NULL on allocation failure. */
static node *split_edge(pidx *ix, node *kid, int32_t j)
{
    node *mid = calloc(1, sizeof *mid);
    int32_t *head = malloc(sizeof(int32_t) * (size_t)j);
    int32_t *tail = malloc(sizeof(int32_t) * (size_t)(kid->edge_len - j));
    node **kids = malloc(sizeof *kids * 2);
    if (!mid || !head || !tail || !kids) {
        free(mid);
        free(head);
        free(tail);
        free(kids);
        return NULL;
    }
    memcpy(head, kid->edge, sizeof(int32_t) * (size_t)j);
    memcpy(tail, kid->edge + j, sizeof(int32_t) * (size_t)(kid->edge_len - j));
    node *parent = kid->parent;
    mid->edge = head;
    mid->edge_len = j;
    mid->depth = parent->depth + j;
    mid->n_below = kid->n_below;
    mid->kids = kids;
    mid->cap_kids = 2;
    replace_kid(parent, kid, mid);
    free(kid->edge);
    kid->edge = tail;
    kid->edge_len -= j;
    add_kid(mid, kid); /* capacity is there: cannot fail */
    (void)ix;
    return mid;
}

/* Removes empty nodes upward from n and merges a node left with one kid and
 * no entries into that kid, so the tree stays compressed. */
static void prune_from(pidx *ix, node *n)
{
    while (n != &ix->root && n->n_below == 0) {
        node *p = n->parent;
        drop_kid(p, n);
        ix->stored -= (size_t)n->edge_len;
        free_subtree(n);
        free(n);
        n = p;
    }
    if (n == &ix->root || n->n_ends || n->n_kids != 1) return;
    node *kid = n->kids[0];
    int32_t *e = malloc(sizeof(int32_t) * (size_t)(n->edge_len + kid->edge_len));
    if (!e) return; /* uncompressed but correct */
    memcpy(e, n->edge, sizeof(int32_t) * (size_t)n->edge_len);
    memcpy(e + n->edge_len, kid->edge, sizeof(int32_t) * (size_t)kid->edge_len);
    free(kid->edge);
    kid->edge = e;
    kid->edge_len += n->edge_len;
    replace_kid(n->parent, n, kid);
    free(n->edge);
    free(n->kids);
    free(n);
}

void pidx_remove(pidx *ix, int64_t key)
{
    entry *e = find_entry(ix, key);
    if (!e) return;
    node *end = e->end;
    *e = ix->ents[--ix->n_ents];
    end->n_ends--;
    for (node *x = end; x; x = x->parent) x->n_below--;
    prune_from(ix, end);
}

int pidx_put(pidx *ix, int64_t key, const int32_t *tokens, int32_t n, wk_error *err)
{
    pidx_remove(ix, key);
    if (ix->n_ents == ix->cap_ents) {
        int cap = ix->cap_ents ? 2 * ix->cap_ents : 8;
        entry *ents = realloc(ix->ents, sizeof *ents * (size_t)cap);
        if (!ents) return wk_fail(err, WK_ENOMEM, "prefix index: out of memory");
        ix->ents = ents;
        ix->cap_ents = cap;
    }
    node *x = &ix->root;
    int32_t d = 0;
    while (d < n) {
        node *kid = find_kid(x, tokens[d]);
        if (!kid) break;
        int32_t j = 0;
        while (j < kid->edge_len && d + j < n && kid->edge[j] == tokens[d + j]) j++;
        if (j < kid->edge_len) {
            kid = split_edge(ix, kid, j);
            if (!kid) goto oom;
        }
        x = kid;
        d += j;
    }
    if (d < n) {
        node *leaf = calloc(1, sizeof *leaf);
        int32_t *edge = malloc(sizeof(int32_t) * (size_t)(n - d));
        if (!leaf || !edge || add_kid(x, leaf)) {
            free(leaf);
            free(edge);
            goto oom;
        }
        memcpy(edge, tokens + d, sizeof(int32_t) * (size_t)(n - d));
        leaf->edge = edge;
        leaf->edge_len = n - d;
        leaf->depth = n;
        ix->stored += (size_t)(n - d);
        x = leaf;
    }
    x->n_ends++;
    for (node *y = x; y; y = y->parent) y->n_below++;
    ix->ents[ix->n_ents++] = (entry){key, x, n};
    return 0;
oom:
    /* A split may have left a node with no entries: tidy up. */
    if (x != &ix->root && x->n_below == 0) prune_from(ix, x);
    return wk_fail(err, WK_ENOMEM, "prefix index: out of memory adding %d tokens", n);
}

static int cmp_hits(const void *a, const void *b)
{
    const pidx_hit *x = a, *y = b;
    if (x->match != y->match) return x->match > y->match ? -1 : 1;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

int pidx_match(const pidx *ix, const int32_t *query, int32_t n, pidx_hit *hits, int cap)
{
    /* Walk the query down the tree; remember the fully matched nodes and the
     * node whose edge it stopped inside (with how far it got). */
    int path_cap = 64, n_path = 0;
    const node **path = malloc(sizeof *path * (size_t)path_cap);
    const node *partial = NULL;
    int32_t partial_len = 0;
    const node *x = &ix->root;
    int32_t d = 0;
    if (path) path[n_path++] = x;
    while (path && d < n) {
        const node *kid = find_kid(x, query[d]);
        if (!kid) break;
        int32_t j = 0;
        while (j < kid->edge_len && d + j < n && kid->edge[j] == query[d + j]) j++;
        if (j < kid->edge_len) {
            partial = kid;
            partial_len = j;
            break;
        }
        if (n_path == path_cap) {
            path_cap *= 2;
            const node **p = realloc(path, sizeof *p * (size_t)path_cap);
            if (!p) break;
            path = p;
        }
        path[n_path++] = kid;
        x = kid;
        d += j;
    }
    /* An entry's match: climb from its end node to the first node on the
     * path; the branch it came up through says how much it shares. */
    pidx_hit *all = malloc(sizeof *all * (size_t)(ix->n_ents ? ix->n_ents : 1));
    if (!all || !path) {
        free(all);
        free(path);
        return 0;
    }
    for (int i = 0; i < ix->n_ents; i++) {
        const node *prev = NULL, *y = ix->ents[i].end;
        for (;;) {
            bool on = false;
            for (int k = n_path - 1; k >= 0 && !on; k--) on = path[k] == y;
            if (on) break;
            prev = y;
            y = y->parent;
        }
        int32_t m = y->depth;
        if (prev && prev == partial) m += partial_len;
        all[i] = (pidx_hit){ix->ents[i].key, m, ix->ents[i].len};
    }
    qsort(all, (size_t)ix->n_ents, sizeof *all, cmp_hits);
    int n_out = ix->n_ents < cap ? ix->n_ents : cap;
    if (n_out > 0) memcpy(hits, all, sizeof *all * (size_t)n_out);
    free(all);
    free(path);
    return ix->n_ents;
}
