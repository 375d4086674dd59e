/* Views of the evaluation sheet (sheet.h): JSON lines, Markdown, a
 * side-by-side comparison and a self-contained HTML page with SVG charts. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/sheet.h"
#include "util/units.h"

static const char *k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
#define N_COLORS (sizeof k_colors / sizeof k_colors[0])

/* ---- reading rows -------------------------------------------------------------- */

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Metric at a dotted path ("prefill.tok_s"), NaN when absent. */
static double metric(const json_t *row, const char *path)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *o = row;
    char *save = NULL, *seg = strtok_r(buf, ".", &save);
    while (seg && o) {
        char *next = strtok_r(NULL, ".", &save);
        if (!next) return num(o, seg);
        o = json_object_get(o, seg);
        seg = next;
    }
    return NAN;
}

/* Packs in order of appearance, by SHA-256 (file name when there is none). */
static int pack_index(const json_t *rows, const json_t *row, const json_t **packs, int *n_packs, int cap)
{
    const json_t *p = json_object_get(row, "pack");
    const char *id = *str(p, "sha256") ? str(p, "sha256") : str(p, "file");
    for (int i = 0; i < *n_packs; i++) {
        const char *other = *str(packs[i], "sha256") ? str(packs[i], "sha256") : str(packs[i], "file");
        if (!strcmp(id, other)) return i;
    }
    (void)rows;
    if (*n_packs == cap) return -1;
    packs[*n_packs] = p;
    return (*n_packs)++;
}

#define MAX_PACKS 16

static int collect_packs(const json_t *rows, const json_t **packs)
{
    int n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) pack_index(rows, row, packs, &n, MAX_PACKS);
    return n;
}

/* The row of pack p at context c (NULL if none). */
static const json_t *row_at(const json_t *rows, const json_t *p, int64_t c)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const json_t *rp = json_object_get(row, "pack");
        if (!strcmp(str(rp, "sha256"), str(p, "sha256")) && !strcmp(str(rp, "file"), str(p, "file")) &&
            json_integer_value(json_object_get(row, "context")) == c)
            return row;
    }
    return NULL;
}

static int collect_contexts(const json_t *rows, int64_t *ctx, int cap)
{
    int n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int64_t c = json_integer_value(json_object_get(row, "context"));
        int k = 0;
        while (k < n && ctx[k] != c) k++;
        if (k == n && n < cap) ctx[n++] = c;
    }
    for (int a = 0; a < n; a++) /* ascending */
        for (int b = a + 1; b < n; b++)
            if (ctx[b] < ctx[a]) {
                int64_t t = ctx[a];
                ctx[a] = ctx[b];
                ctx[b] = t;
            }
    return n;
}

static const json_t *first_row_of(const json_t *rows, const json_t *p)
{
    int64_t ctx[64];
    int n = collect_contexts(rows, ctx, 64);
    for (int i = 0; i < n; i++) {
        const json_t *r = row_at(rows, p, ctx[i]);
        if (r) return r;
    }
    return NULL;
}

static void fmt_num(char *buf, size_t cap, double v, int decimals)
{
    if (isnan(v)) snprintf(buf, cap, "–");
    else snprintf(buf, cap, "%.*f", decimals, v);
}

static void class_bpw(const json_t *p, const char *cls, char *buf, size_t cap)
{
    fmt_num(buf, cap, num(json_object_get(json_object_get(p, "classes"), cls), "bpw"), 2);
}

static void needle_text(const json_t *q, char *buf, size_t cap)
{
    const json_t *n = json_object_get(q, "needle");
    if (json_is_object(n))
        snprintf(buf, cap, "%lld/%lld", (long long)json_integer_value(json_object_get(n, "found")),
                 (long long)json_integer_value(json_object_get(n, "of")));
    else snprintf(buf, cap, "–");
}

static void vt_text(const json_t *q, char *buf, size_t cap)
{
    const json_t *v = json_object_get(q, "vt");
    if (json_is_object(v)) snprintf(buf, cap, "%.2f", num(v, "score"));
    else snprintf(buf, cap, "–");
}

static void runtime_text(const json_t *row, char *buf, size_t cap)
{
    const json_t *r = json_object_get(row, "runtime"), *m = json_object_get(row, "machine");
    char ram[32];
    snprintf(buf, cap, "%s %s (%s; %s kernels, %s, KV %s, %lld threads) on %s, %lld cores, %s RAM%s%s", str(r, "name"),
             str(r, "version"), str(r, "build"), str(r, "kernels"), str(r, "device"), str(r, "kv_type"),
             (long long)json_integer_value(json_object_get(r, "threads")), str(m, "cpu"),
             (long long)json_integer_value(json_object_get(m, "cores")),
             wk_format_bytes(ram, sizeof ram, (uint64_t)json_integer_value(json_object_get(m, "ram_bytes"))),
             *str(m, "gpu") ? ", GPU " : "", str(m, "gpu"));
}

/* ---- JSON lines, Markdown ----------------------------------------------------- */

void sheet_write_jsonl(FILE *out, const json_t *rows)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        char *s = json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (s) fprintf(out, "%s\n", s);
        free(s);
    }
}

static void write_packs_md(FILE *out, const json_t *rows, const json_t **packs, int n)
{
    fprintf(out, "| pack | sha256 | weights | bpw | embeddings | attention | ffn | output | aux tables |\n"
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const json_t *p = packs[i];
        char w[32], a[32], e[16], at[16], ff[16], o[16];
        class_bpw(p, "embeddings", e, sizeof e);
        class_bpw(p, "attention", at, sizeof at);
        class_bpw(p, "ffn", ff, sizeof ff);
        class_bpw(p, "output", o, sizeof o);
        uint64_t aux = (uint64_t)json_integer_value(json_object_get(p, "aux_bytes"));
        fprintf(out, "| %s (%s) | %.12s… | %s | %.2f | %s | %s | %s | %s | %s |\n", str(p, "name"), str(p, "file"),
                str(p, "sha256"), wk_format_bytes(w, sizeof w, (uint64_t)json_integer_value(json_object_get(p, "weight_bytes"))),
                num(p, "bpw"), e, at, ff, o, aux ? wk_format_bytes(a, sizeof a, aux) : "–");
    }
    (void)rows;
}

void sheet_write_md(FILE *out, const json_t *rows)
{
    const json_t *packs[MAX_PACKS];
    int n = collect_packs(rows, packs);
    fprintf(out, "### Packs\n\nbits per weight from the tensor bytes, per tensor class\n\n");
    write_packs_md(out, rows, packs, n);
    /* runtime x machine combinations, numbered in order of appearance */
    char runs[MAX_PACKS][512];
    int n_runs = 0;
    fprintf(out, "\n### Speed\n\n| pack | run | context | prefill tok/s cold | prefill tok/s | decode tok/s | load ms |\n"
                 "|---|---:|---:|---:|---:|---:|---:|\n");
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        char rt[512], c[32], w[32], d[32];
        runtime_text(row, rt, sizeof rt);
        int run = 0;
        while (run < n_runs && strcmp(runs[run], rt)) run++;
        if (run == n_runs && n_runs < MAX_PACKS) snprintf(runs[n_runs++], sizeof runs[0], "%s", rt);
        fmt_num(c, sizeof c, metric(row, "prefill.tok_s_cold"), 1);
        fmt_num(w, sizeof w, metric(row, "prefill.tok_s"), 1);
        fmt_num(d, sizeof d, metric(row, "decode.tok_s"), 2);
        fprintf(out, "| %s | %d | %lld | %s | %s | %s | %.0f |\n", str(json_object_get(row, "pack"), "file"), run + 1,
                (long long)json_integer_value(json_object_get(row, "context")), c, w, d, num(row, "load_ms"));
    }
    fprintf(out, "\n");
    for (int r = 0; r < n_runs; r++) fprintf(out, "run %d: %s\n", r + 1, runs[r]);
    fprintf(out, "\n### Quality\n\n| pack | bpw | perplexity | scored tokens | needle | vt |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < n; k++) {
        const json_t *r = first_row_of(rows, packs[k]), *q = json_object_get(r, "quality");
        char ppl[32], nd[32], vt[32];
        fmt_num(ppl, sizeof ppl, metric(r, "quality.perplexity.ppl"), 2);
        needle_text(q, nd, sizeof nd);
        vt_text(q, vt, sizeof vt);
        fprintf(out, "| %s | %.2f | %s | %.0f | %s | %s |\n", str(packs[k], "file"), num(packs[k], "bpw"), ppl,
                metric(r, "quality.perplexity.tokens"), nd, vt);
        if (*str(q, "note")) fprintf(out, "\nnote (%s): %s\n\n", str(packs[k], "file"), str(q, "note"));
    }
}

/* ---- comparison ------------------------------------------------------------------ */

static void delta_cells(char *buf, size_t cap, double a, double b, int decimals)
{
    char sa[32], sb[32];
    fmt_num(sa, sizeof sa, a, decimals);
    fmt_num(sb, sizeof sb, b, decimals);
    if (isnan(a) || isnan(b) || a == 0) snprintf(buf, cap, "%s | %s | – | –", sa, sb);
    else snprintf(buf, cap, "%s | %s | %+.*f | %.3f×", sa, sb, decimals, b - a, b / a);
}

void sheet_write_compare_md(FILE *out, const json_t *rows)
{
    const json_t *packs[MAX_PACKS];
    int n = collect_packs(rows, packs);
    if (n < 2) {
        fprintf(out, "(one pack only: nothing to compare)\n");
        return;
    }
    const json_t *A = packs[0], *B = packs[1];
    fprintf(out, "### %s (A) vs %s (B)\n\n| | A | B | B − A | B / A |\n|---|---:|---:|---:|---:|\n", str(A, "file"),
            str(B, "file"));
    char cell[160];
    delta_cells(cell, sizeof cell, num(A, "weight_bytes") / 1048576.0, num(B, "weight_bytes") / 1048576.0, 1);
    fprintf(out, "| weights MiB | %s |\n", cell);
    delta_cells(cell, sizeof cell, num(A, "bpw"), num(B, "bpw"), 3);
    fprintf(out, "| bits/weight | %s |\n", cell);
    const char *classes[] = {"embeddings", "attention", "ffn", "output"};
    for (int c = 0; c < 4; c++) {
        const json_t *ca = json_object_get(json_object_get(A, "classes"), classes[c]),
                     *cb = json_object_get(json_object_get(B, "classes"), classes[c]);
        if (!ca && !cb) continue;
        delta_cells(cell, sizeof cell, num(ca, "bpw"), num(cb, "bpw"), 3);
        fprintf(out, "| %s bpw | %s |\n", classes[c], cell);
    }
    int64_t ctx[64];
    int nc = collect_contexts(rows, ctx, 64);
    for (int i = 0; i < nc; i++) {
        const json_t *ra = row_at(rows, A, ctx[i]), *rb = row_at(rows, B, ctx[i]);
        if (!ra || !rb) continue;
        const struct { const char *path, *label; int dec; } m[] = {
            {"prefill.tok_s_cold", "prefill tok/s cold", 1}, {"prefill.tok_s", "prefill tok/s", 1},
            {"decode.tok_s", "decode tok/s", 2}};
        for (int k = 0; k < 3; k++) {
            double a = metric(ra, m[k].path), b = metric(rb, m[k].path);
            if (isnan(a) && isnan(b)) continue;
            delta_cells(cell, sizeof cell, a, b, m[k].dec);
            fprintf(out, "| %s @ %lld | %s |\n", m[k].label, (long long)ctx[i], cell);
        }
    }
    const json_t *ra = first_row_of(rows, A), *rb = first_row_of(rows, B);
    delta_cells(cell, sizeof cell, metric(ra, "quality.perplexity.ppl"), metric(rb, "quality.perplexity.ppl"), 2);
    fprintf(out, "| perplexity | %s |\n", cell);
    delta_cells(cell, sizeof cell, metric(ra, "quality.needle.found"), metric(rb, "quality.needle.found"), 0);
    fprintf(out, "| needle codes found | %s |\n", cell);
    delta_cells(cell, sizeof cell, metric(ra, "quality.vt.score"), metric(rb, "quality.vt.score"), 2);
    fprintf(out, "| vt score | %s |\n", cell);
}

/* ---- HTML -------------------------------------------------------------------------- */

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

#define CW 520 /* chart geometry: width, height, margins */
#define CH 300
#define ML 64
#define MR 16
#define MT 34
#define MB 46

/* A nice upper bound for an axis (1, 2 or 5 times a power of ten). */
static double nice_max(double v)
{
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* Axis and point labels: 3 significant digits, k / M for large values ("2.19M"). */
static void short_num(char *buf, size_t cap, double v)
{
    /* from 999.5 up, %.3g alone writes exponents (3750 as "3.75e+03") */
    if (fabs(v) >= 999.5e3) snprintf(buf, cap, "%.3gM", v / 1e6);
    else if (fabs(v) >= 999.5) snprintf(buf, cap, "%.3gk", v / 1e3);
    else snprintf(buf, cap, "%.3g", v);
}

static void axes(FILE *f, const char *title, const char *ylabel, double ymax)
{
    fprintf(f, "<svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", CW, CH, CW, CH);
    fprintf(f, "<text x=\"%d\" y=\"20\" class=\"t\">", ML);
    esc(f, title);
    fprintf(f, "</text>\n");
    for (int i = 0; i <= 4; i++) {
        double y = MT + (CH - MT - MB) * (1 - i / 4.0);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"g\"/>", ML, CW - MR, y, y);
        char lab[32];
        short_num(lab, sizeof lab, ymax * i / 4.0);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%s</text>\n", ML - 6, y + 4, lab);
    }
    fprintf(f, "<text transform=\"translate(14 %d) rotate(-90)\" class=\"al\">", (MT + CH - MB) / 2);
    esc(f, ylabel);
    fprintf(f, "</text>\n");
}

/* Speed vs context: one line per pack over the contexts measured. */
static void speed_chart(FILE *f, const json_t *rows, const json_t **packs, int n, const char *path, const char *title,
                        const char *ylabel)
{
    int64_t ctx[64];
    int nc = collect_contexts(rows, ctx, 64);
    double ymax = 0;
    for (int p = 0; p < n; p++)
        for (int c = 0; c < nc; c++) {
            const json_t *r = row_at(rows, packs[p], ctx[c]);
            double v = r ? metric(r, path) : NAN;
            if (v > ymax) ymax = v;
        }
    ymax = nice_max(ymax * 1.05);
    axes(f, title, ylabel, ymax);
    const double w = CW - ML - MR, h = CH - MT - MB;
    for (int c = 0; c < nc; c++) {
        double x = ML + (nc == 1 ? w / 2 : w * c / (nc - 1));
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%lld</text>\n", x, CH - MB + 18, (long long)ctx[c]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"al\">context (tokens already in the sequence)</text>\n", ML + w / 2,
            CH - 8);
    for (int p = 0; p < n; p++) {
        const char *col = k_colors[p % N_COLORS];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int c = 0; c < nc; c++) {
            const json_t *r = row_at(rows, packs[p], ctx[c]);
            double v = r ? metric(r, path) : NAN;
            if (isnan(v)) continue;
            fprintf(f, "%.1f,%.1f ", ML + (nc == 1 ? w / 2 : w * c / (nc - 1)), MT + h * (1 - v / ymax));
        }
        fprintf(f, "\"/>\n");
        for (int c = 0; c < nc; c++) {
            const json_t *r = row_at(rows, packs[p], ctx[c]);
            double v = r ? metric(r, path) : NAN;
            if (isnan(v)) continue;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%.2f tok/s</title></circle>\n",
                    ML + (nc == 1 ? w / 2 : w * c / (nc - 1)), MT + h * (1 - v / ymax), col, v);
        }
    }
    fprintf(f, "</svg>\n");
}

/* Quality vs precision: perplexity (and needle/VT) against bits per weight, a point per pack. */
static void quality_chart(FILE *f, const json_t *rows, const json_t **packs, int n, const char *path, const char *title,
                          const char *ylabel)
{
    double ymax = 0, xmin = INFINITY, xmax = 0;
    for (int p = 0; p < n; p++) {
        double v = metric(first_row_of(rows, packs[p]), path), x = num(packs[p], "bpw");
        if (v > ymax) ymax = v;
        if (x < xmin) xmin = x;
        if (x > xmax) xmax = x;
    }
    ymax = nice_max(ymax * 1.1);
    if (!(xmax > xmin)) {
        xmin = xmin - 1;
        xmax = xmax + 1;
    }
    xmin = floor(xmin - 0.5);
    xmax = ceil(xmax + 0.5);
    axes(f, title, ylabel, ymax);
    const double w = CW - ML - MR, h = CH - MT - MB;
    for (double x = xmin; x <= xmax + 1e-9; x += 1)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%g</text>\n", ML + w * (x - xmin) / (xmax - xmin),
                CH - MB + 18, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"al\">bits per weight (from the tensor bytes)</text>\n", ML + w / 2,
            CH - 8);
    for (int p = 0; p < n; p++) {
        double v = metric(first_row_of(rows, packs[p]), path), x = num(packs[p], "bpw");
        if (isnan(v) || isnan(x)) continue;
        double cx = ML + w * (x - xmin) / (xmax - xmin), cy = MT + h * (1 - v / ymax);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"%s\"><title>%.3f</title></circle>", cx, cy,
                k_colors[p % N_COLORS], v);
        char lab[32];
        short_num(lab, sizeof lab, v);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"pl\">%s</text>\n", cx + 9, cy - 7, lab);
    }
    fprintf(f, "</svg>\n");
}

static void legend(FILE *f, const json_t **packs, int n)
{
    fprintf(f, "<p class=\"legend\">");
    for (int p = 0; p < n; p++) {
        fprintf(f, "<span><i style=\"background:%s\"></i>", k_colors[p % N_COLORS]);
        esc(f, str(packs[p], "file"));
        fprintf(f, " (%.2f bpw)</span> ", num(packs[p], "bpw"));
    }
    fprintf(f, "</p>\n");
}

/* Markdown table → HTML table (the views share one text). */
static void md_tables_to_html(FILE *f, const char *md)
{
    bool in_table = false;
    int row = 0;
    for (const char *line = md; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char *l = strndup(line, len);
        if (l[0] == '|') {
            if (!in_table) fprintf(f, "<table>\n");
            in_table = true;
            if (strstr(l, "|---") || strstr(l, "|--:") || strstr(l, "|---:")) {
                free(l);
                line = nl ? nl + 1 : NULL;
                continue;
            }
            fprintf(f, "<tr>");
            char *save = NULL;
            for (char *cell = strtok_r(l + 1, "|", &save); cell; cell = strtok_r(NULL, "|", &save)) {
                while (*cell == ' ') cell++;
                size_t cl = strlen(cell);
                while (cl && cell[cl - 1] == ' ') cell[--cl] = '\0';
                fprintf(f, row == 0 ? "<th>" : "<td>");
                esc(f, cell);
                fprintf(f, row == 0 ? "</th>" : "</td>");
            }
            fprintf(f, "</tr>\n");
            row++;
        } else {
            if (in_table) fprintf(f, "</table>\n");
            in_table = false;
            row = 0;
            if (!strncmp(l, "### ", 4)) {
                fprintf(f, "<h2>");
                esc(f, l + 4);
                fprintf(f, "</h2>\n");
            } else if (*l) {
                fprintf(f, "<p>");
                esc(f, l);
                fprintf(f, "</p>\n");
            }
        }
        free(l);
        line = nl ? nl + 1 : NULL;
    }
    if (in_table) fprintf(f, "</table>\n");
}

int sheet_write_html(const char *path, const json_t *rows, bool compare, wk_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return wk_fail(err, WK_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const json_t *packs[MAX_PACKS];
    int n = collect_packs(rows, packs);
    fprintf(f, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wick sheet</title>\n<style>\n"
               "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1120px}"
               "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
               "table{border-collapse:collapse;margin:8px 0;font-size:12.5px}"
               "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
               "td:first-child,th:first-child{text-align:left}"
               ".charts{display:flex;flex-wrap:wrap;gap:12px}svg{border:1px solid #ddd;background:#fff}"
               ".t{font-weight:600;font-size:13px}.g{stroke:#e5e5e5}.yl{font-size:11px;text-anchor:end;fill:#555}"
               ".xl{font-size:11px;text-anchor:middle;fill:#555}.al{font-size:11px;text-anchor:middle;fill:#333}"
               ".pl{font-size:11px;fill:#333}.legend span{margin-right:16px}"
               ".legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}"
               ".note{color:#555;font-size:12px}\n</style></head><body>\n<h1>wick evaluation sheet</h1>\n");
    if (rows && json_array_size(rows)) {
        char rt[512];
        runtime_text(json_array_get(rows, 0), rt, sizeof rt);
        fprintf(f, "<p class=\"note\">");
        esc(f, rt);
        fprintf(f, "</p>\n");
    }
    legend(f, packs, n);
    fprintf(f, "<div class=\"charts\">\n");
    speed_chart(f, rows, packs, n, "prefill.tok_s", "Prefill speed vs context", "tokens / s");
    speed_chart(f, rows, packs, n, "decode.tok_s", "Decode speed vs context", "tokens / s");
    quality_chart(f, rows, packs, n, "quality.perplexity.ppl", "Perplexity vs precision (lower is better)",
                  "perplexity");
    quality_chart(f, rows, packs, n, "quality.needle.found", "Needle codes found vs precision", "codes found");
    fprintf(f, "</div>\n");
    char *md = NULL;
    size_t mdlen = 0;
    FILE *m = open_memstream(&md, &mdlen);
    if (m) {
        if (compare) sheet_write_compare_md(m, rows);
        sheet_write_md(m, rows);
        fclose(m);
        md_tables_to_html(f, md);
        free(md);
    }
    fprintf(f, "<p class=\"note\">Made by wick sheet; self-contained (no scripts, fonts or images from the network). "
               "Speeds are medians of the repetitions; cold = the first prefill after loading.</p>\n</body></html>\n");
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return wk_fail(err, WK_EIO, "%s: %s", path, strerror(errno));
    }
    return WK_OK;
}
