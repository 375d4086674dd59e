/* Numbers with bounds: minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum as digit patterns.
 *
 * A range of non-negative integers [lo, hi] splits into ranges of equal
 * digit count; one of those is written digit by digit: equal leading
 * digits as literals, then the part from lo's digit up, the full middle
 * digits, and the part up to hi's digit (each part recursively), with
 * whole ranges like 300..699 collapsed into [3-6][0-9]{2}.
 * Numbers (not integers) take integer bounds only: x in [A, B] is an
 * integer part in a range with any fraction, the bound itself with a zero
 * fraction, and for an exclusive lower bound the bound with a non-zero
 * fraction; negative numbers are "-" and a magnitude range. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/json_schema_impl.h"

#define INT_DIGITS 16
#define INT_LIMIT 9999999999999999ll /* 16 digits: the grammar's integer part */

/* d[i..L) all equal to ch */
static bool all_digits(const char *d, int i, int L, char ch)
{
    for (; i < L; i++)
        if (d[i] != ch) return false;
    return true;
}

static void put_digit_class(gram_buf *b, char lo, char hi)
{
    if (lo == hi) gram_buf_printf(b, "\"%c\"", lo);
    else gram_buf_printf(b, "[%c-%c]", lo, hi);
}

static void put_any_digits(gram_buf *b, int n)
{
    if (n == 1) gram_buf_puts(b, " [0-9]");
    else if (n > 1) gram_buf_printf(b, " [0-9]{%d}", n);
}

/* Digit strings a[i..L) .. z[i..L) (a <= z, equal before i). */
static void put_same_length(gram_buf *b, const char *a, const char *z, int i, int L)
{
    while (i < L && a[i] == z[i]) {
        gram_buf_printf(b, " \"%c\"", a[i]);
        i++;
    }
    if (i == L) return;
    bool low_full = all_digits(a, i + 1, L, '0'), high_full = all_digits(z, i + 1, L, '9');
    char mid_lo = low_full ? a[i] : (char)(a[i] + 1);
    char mid_hi = high_full ? z[i] : (char)(z[i] - 1);
    char nines[INT_DIGITS + 1], zeros[INT_DIGITS + 1];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    gram_buf_puts(b, " (");
    bool first = true;
    if (!low_full) {
        gram_buf_printf(b, " \"%c\"", a[i]);
        put_same_length(b, a, nines, i + 1, L);
        first = false;
    }
    if (mid_lo <= mid_hi) {
        gram_buf_puts(b, first ? " " : " | ");
        put_digit_class(b, mid_lo, mid_hi);
        put_any_digits(b, L - i - 1);
        first = false;
    }
    if (!high_full) {
        gram_buf_printf(b, "%s\"%c\"", first ? " " : " | ", z[i]);
        put_same_length(b, zeros, z, i + 1, L);
    }
    gram_buf_puts(b, " )");
}

/* ( ... ) for the integers lo..hi, 0 <= lo <= hi <= INT_LIMIT. */
static void put_uint_range(gram_buf *b, int64_t lo, int64_t hi)
{
    gram_buf_puts(b, "(");
    int64_t p = 1;
    bool first_alt = true;
    for (int L = 1; L <= INT_DIGITS; L++, p *= 10) {
        int64_t first = L == 1 ? 0 : p, last = p * 10 - 1;
        int64_t a = lo > first ? lo : first, z = hi < last ? hi : last;
        if (a > z) continue;
        char da[24], dz[24];
        snprintf(da, sizeof da, "%0*lld", L, (long long)a);
        snprintf(dz, sizeof dz, "%0*lld", L, (long long)z);
        if (!first_alt) gram_buf_puts(b, " |");
        first_alt = false;
        put_same_length(b, da, dz, 0, L);
    }
    gram_buf_puts(b, " )");
}

/* A bound of a schema: the stricter of the inclusive and exclusive forms. */
typedef struct bound {
    bool has;
    double v;
    bool excl;
} bound;

static void tighten(bound *b, double v, bool excl, bool lower)
{
    if (!b->has || (lower ? v > b->v : v < b->v) || (v == b->v && excl)) {
        b->has = true;
        b->v = v;
        b->excl = excl;
    }
}

static int read_bounds(js_ctx *c, const json_t *s, bound *lo, bound *hi)
{
    memset(lo, 0, sizeof *lo);
    memset(hi, 0, sizeof *hi);
    const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    const json_t *xmn = json_object_get(s, "exclusiveMinimum"), *xmx = json_object_get(s, "exclusiveMaximum");
    const char *names[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    const json_t *vals[] = {mn, mx, xmn, xmx};
    for (int k = 0; k < 4; k++) {
        if (!vals[k]) continue;
        if (k >= 2 && json_is_boolean(vals[k])) continue; /* draft 4 form, applied below */
        if (!json_is_number(vals[k]) || !isfinite(json_number_value(vals[k]))) {
            js_fail(c, WK_EINVAL, "%s must be a finite number", names[k]);
            return -1;
        }
    }
    bool draft4_lo = json_is_true(xmn), draft4_hi = json_is_true(xmx);
    if (mn) tighten(lo, json_number_value(mn), draft4_lo, true);
    if (mx) tighten(hi, json_number_value(mx), draft4_hi, false);
    if (json_is_number(xmn)) tighten(lo, json_number_value(xmn), true, true);
    if (json_is_number(xmx)) tighten(hi, json_number_value(xmx), true, false);
    return 0;
}

static const char *integer_rule(js_ctx *c, const bound *blo, const bound *bhi)
{
    /* inclusive integer bounds within the grammar's digit limit */
    double lo = -(double)INT_LIMIT, hi = (double)INT_LIMIT;
    if (blo->has) {
        double v = blo->excl ? floor(blo->v) + 1 : ceil(blo->v);
        if (v > lo) lo = v;
    }
    if (bhi->has) {
        double v = bhi->excl ? ceil(bhi->v) - 1 : floor(bhi->v);
        if (v < hi) hi = v;
    }
    if (lo > hi)
        return js_fail(c, WK_EINVAL, "no integer of at most %d digits satisfies the minimum/maximum", INT_DIGITS);
    int64_t ilo = (int64_t)lo, ihi = (int64_t)hi;
    gram_buf b = {0};
    bool first = true;
    if (ihi >= 0) {
        put_uint_range(&b, ilo > 0 ? ilo : 0, ihi);
        first = false;
    }
    if (ilo < 0) {
        if (!first) gram_buf_puts(&b, " | ");
        gram_buf_puts(&b, "\"-\" ");
        put_uint_range(&b, ihi < 0 ? -ihi : 1, -ilo);
    }
    const char *r = js_rule(c, "integer", &b);
    gram_buf_free(&b);
    return r;
}

/* Non-negative decimals in [A, B] (B_inf: unbounded), no exponent. */
static void put_decimal_range(gram_buf *b, int64_t A, bool A_excl, int64_t B, bool B_excl, bool B_inf)
{
    static const char frac[] = "( \".\" [0-9]{1,16} )?";
    static const char nonzero_frac[] = "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}";
    static const char zero_frac[] = "( \".\" \"0\"{1,16} )?";
    if (B_inf) {
        B = INT_LIMIT;
        B_excl = false;
    }
    bool first = true;
    gram_buf_puts(b, "(");
#define ALT() gram_buf_puts(b, first ? " " : " | "), first = false
    if (A_excl && A < B) {
        ALT();
        gram_buf_printf(b, "\"%lld\" %s", (long long)A, nonzero_frac);
    }
    int64_t free_lo = A_excl ? A + 1 : A, free_hi = B_inf ? B : B - 1;
    if (free_lo <= free_hi) {
        ALT();
        put_uint_range(b, free_lo, free_hi);
        gram_buf_printf(b, " %s", frac);
    }
    if (!B_inf && !B_excl && (B > A || !A_excl)) {
        ALT();
        gram_buf_printf(b, "\"%lld\" %s", (long long)B, zero_frac);
    }
#undef ALT
    gram_buf_puts(b, " )");
}

static bool range_empty(int64_t A, bool A_excl, int64_t B, bool B_excl, bool B_inf)
{
    return !B_inf && (A > B || (A == B && (A_excl || B_excl)));
}

static const char *number_rule(js_ctx *c, const bound *blo, const bound *bhi)
{
    const double limit = (double)INT_LIMIT;
    const bound *bs[] = {blo, bhi};
    for (int k = 0; k < 2; k++)
        if (bs[k]->has && fabs(bs[k]->v) < limit && bs[k]->v != floor(bs[k]->v))
            return js_fail(c, WK_EUNSUPPORTED, "%s %g on a number: only integer bounds are supported",
                           k ? "maximum" : "minimum", bs[k]->v);
    if ((blo->has && blo->v >= limit) || (bhi->has && bhi->v <= -limit))
        return js_fail(c, WK_ERANGE, "number bounds beyond %d digits", INT_DIGITS);
    bool lo_inf = !blo->has || blo->v <= -limit, hi_inf = !bhi->has || bhi->v >= limit;
    int64_t lo = lo_inf ? 0 : (int64_t)blo->v, hi = hi_inf ? 0 : (int64_t)bhi->v;
    bool lo_excl = !lo_inf && blo->excl, hi_excl = !hi_inf && bhi->excl;
    gram_buf b = {0};
    bool first = true;
    /* x >= 0 */
    int64_t A = lo_inf || lo < 0 ? 0 : lo;
    bool A_excl = !lo_inf && lo >= 0 && lo_excl;
    if ((hi_inf || hi >= 0) && !range_empty(A, A_excl, hi, hi_excl, hi_inf)) {
        put_decimal_range(&b, A, A_excl, hi, hi_excl, hi_inf);
        first = false;
    }
    /* x < 0: magnitudes (-min(hi, 0), -lo] */
    if (lo_inf || lo < 0) {
        int64_t mA = !hi_inf && hi < 0 ? -hi : 0;
        bool mA_excl = !hi_inf && hi < 0 ? hi_excl : true;
        int64_t mB = lo_inf ? 0 : -lo;
        if (!range_empty(mA, mA_excl, mB, lo_excl, lo_inf)) {
            if (!first) gram_buf_puts(&b, " | ");
            gram_buf_puts(&b, "\"-\" ");
            put_decimal_range(&b, mA, mA_excl, mB, lo_excl, lo_inf);
            first = false;
        }
    }
    if (first) {
        gram_buf_free(&b);
        return js_fail(c, WK_EINVAL, "no number satisfies the minimum/maximum");
    }
    const char *r = js_rule(c, "number", &b);
    gram_buf_free(&b);
    return r;
}

const char *js_number(js_ctx *c, const json_t *schema, bool integer)
{
    bound lo, hi;
    if (read_bounds(c, schema, &lo, &hi)) return NULL;
    if (!lo.has && !hi.has) return js_common(c, integer ? JS_INTEGER : JS_NUMBER);
    return integer ? integer_rule(c, &lo, &hi) : number_rule(c, &lo, &hi);
}
