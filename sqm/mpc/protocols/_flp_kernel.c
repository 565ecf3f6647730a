/* The fully linear proof's prover (sqm.mpc.protocols.flp.prove) compiled: per column of the grid, the polynomial
 * U_j's values at the nodes 0..G (the blind, then the column) extended to the points G+1..dG, the column's
 * polynomial g_j at every point 0..dG, weighted by beta_j and summed over the columns.  Every value is an exact
 * field element, so the proof is the numpy prover's, element for element.  Optional: flp loads it through ctypes
 * only where it was built and agrees with the numpy prover on a sample; otherwise the numpy prover runs.
 *
 * Arithmetic mod an odd p < 2^62 in Montgomery form (R = 2^64): a product is one 64 x 64 -> 128-bit
 * multiplication and a reduction of two more (redc), with no division.  The extension's G + 1 products per point
 * are summed in 128 bits (folded below p 2^64 whenever the high word reaches p) and reduced once; the weighted
 * gadget values are summed over the columns the same way.
 *
 * For p < 2^50 and grid entries of small absolute value (their signed representatives), blocks of columns are
 * computed in doubles, one column per vector lane: a product mod p as the exact ab = h + l (a fused
 * multiply-add), q = floor(h / p) off by at most one, r = ab - q p exact in [-p, 2p) and corrected (:c:func:`dmul`);
 * the extension's sums with E cut into two limbs of at most 25 bits are exact doubles, reduced once.  Below 2^44
 * the values stay unreduced in (-3p, 6p) between products (dmul_lazy), and a block of valid digits skips the nodes,
 * where its polynomial vanishes.  The remaining blocks (large entries) take the Montgomery path, column by column.
 *
 * Beside the prover: the verifiers' steps (sqm_flp_gadget, sqm_flp_combine) and the input proof's steps around it
 * (sqm_ip_*: the witness, weighted digit sums, the grid's gather, the sharing's linear combinations), each the
 * numpy function's exact integers, each checked against it at load (flp._compiled, input_proof._steps).  The
 * module is a CPython extension only so that setuptools builds it; its functions are called by address through
 * ctypes (which releases the GIL), with C-contiguous arrays. */
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* the processors' vector and fused multiply-add instructions where they have them (AVX2 and FMA, asked of the
 * processor at run time); the same exact integers either way */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FAST_TARGET 1
#endif

#define COLS 64      /* columns at a time in doubles (at most 2^53 / p of them: their sum stays exact) */
#define DBL_BITS 50  /* the doubles' path takes p < 2^50 */
#define LAZY_BITS 44 /* below 2^44 its extension and degree-8 digit gadget reduce lazily (dblock_body) */

typedef unsigned __int128 u128;

typedef struct {
    uint64_t p, pinv, r2; /* p, -p^-1 mod 2^64, R^2 mod p */
} field;

/* T R^-1 mod p, for T < p 2^64 */
static inline uint64_t redc(const field *f, u128 t)
{
    uint64_t m = (uint64_t)t * f->pinv;
    uint64_t r = (uint64_t)((t + (u128)m * f->p) >> 64);
    return r >= f->p ? r - f->p : r;
}

static inline uint64_t mul(const field *f, uint64_t a, uint64_t b) { return redc(f, (u128)a * b); }

static inline uint64_t add(const field *f, uint64_t a, uint64_t b)
{
    uint64_t s = a + b;
    return s >= f->p ? s - f->p : s;
}

static inline uint64_t sub(const field *f, uint64_t a, uint64_t b) { return a >= b ? a - b : a + f->p - b; }

/* a 128-bit sum folded below p 2^64 (its high word reduced) */
static inline u128 fold(const field *f, u128 t)
{
    uint64_t hi = (uint64_t)(t >> 64);
    return hi >= f->p ? ((u128)(hi % f->p) << 64) | (uint64_t)t : t;
}

static void field_init(field *f, uint64_t p)
{
    uint64_t inv = p; /* p^-1 mod 2^64 by Newton's iteration (p odd: correct to 3 bits, doubling each step) */
    for (int i = 0; i < 6; i++)
        inv *= 2 - p * inv;
    f->p = p;
    f->pinv = (uint64_t)0 - inv;
    uint64_t r = (uint64_t)(((u128)1 << 64) % p);
    f->r2 = (uint64_t)(((u128)r * r) % p);
}

static inline uint64_t to_mont(const field *f, uint64_t a) { return mul(f, a, f->r2); }

/* g_j(u) R for u R: the digit polynomial prod_{v < d} (u - v) (d even), paired as (u - v)(u - (d-1-v)) = w +
 * v (d-1-v) with w = u (u - d + 1); for d = 8, with z = w + 6, g = (z^2 + 4z)(z^2 - 36) */
static inline uint64_t digit_poly(const field *f, uint64_t u, int64_t d, const uint64_t *pairs, uint64_t dm1,
                                  uint64_t six, uint64_t c36)
{
    uint64_t w = mul(f, u, sub(f, u, dm1));
    if (d == 8) {
        uint64_t z = add(f, w, six);
        uint64_t t = mul(f, z, z);
        uint64_t z2 = add(f, z, z);
        uint64_t z4 = add(f, z2, z2);
        return mul(f, add(f, t, z4), sub(f, t, c36));
    }
    uint64_t acc = w;
    for (int64_t v = 1; v < d / 2; v++)
        acc = mul(f, acc, add(f, w, pairs[v]));
    return acc;
}

/* r in [-p, 2p) to [0, p) */
static inline __attribute__((always_inline)) double dfix(double p, double r)
{
    r = r < 0 ? r + p : r;
    return r >= p ? r - p : r;
}

/* a b mod p for doubles a, b in [0, p), p < 2^50 (u = 1/p): h = fl(ab), l = ab - h exactly (a fused
 * multiply-add; h and l integers), q = floor(h u) within one of floor(ab / p) (relative error below 2^-51 on a
 * quotient below 2^50), h - q p an integer below 2^53 computed exactly, r = ab - q p in [-p, 2p) */
static inline __attribute__((always_inline)) double dmul(double p, double u, double a, double b)
{
    double h = a * b;
    double l = fma(a, b, -h);
    double q = floor(h * u);
    return dfix(p, fma(-q, p, h) + l);
}

/* a b mod p up to a multiple of p: in (-p, 2p), for doubles a, b of any signs with |a b| / p < 2^50 (the proof
 * of dmul: q within one of floor(ab / p), h - q p and r integers below 2^53); no correction */
static inline __attribute__((always_inline)) double dmul_lazy(double p, double u, double a, double b)
{
    double h = a * b;
    double l = fma(a, b, -h);
    double q = floor(h * u);
    return fma(-q, p, h) + l;
}

/* an integer s with |s| < 2^53 mod p up to a multiple of p: in (-p, 2p) */
static inline __attribute__((always_inline)) double dred_lazy(double p, double u, double s) { return fma(-floor(s * u), p, s); }

/* an integer s with |s| < 2^53 mod p */
static inline __attribute__((always_inline)) double dred(double p, double u, double s) { return dfix(p, fma(-floor(s * u), p, s)); }

typedef struct {
    double p, u, c1;  /* p, 1/p, 2^lw mod p */
    int64_t g, d, n, std, lw;
    const double *eh, *el, *e0, *ef; /* E's limbs (points x G, above and below bit lw), first column, whole */
    const double *pairs;        /* v (d-1-v) mod p */
} dctx;

/* columns j0..j0+nb-1 (nb <= COLS, all of them digit columns or none, ``nf`` factors fl/fr per column beyond the
 * digits') in doubles: their weighted gadget values at every point added to acc (n doubles in [0, p)) */
static inline __attribute__((always_inline)) void dblock_body(const dctx *c, const int64_t *Y, int64_t m, int64_t j0, int64_t nb, const int64_t *a,
                          const int64_t *beta, int digits, int64_t nf, const double *fl, const double *fr,
                          double *acc, int whole, int lazy, int skip)
{
    /* whole: E whole (one exact sum, else two limbs); lazy (p < 2^44): the extension, the degree-8 digit gadget
     * and the other columns' factors reduce only up to multiples of p (dmul_lazy, dred_lazy: every value in
     * (-3p, 6p), every product below 36 p^2 < 2^50 p), corrected once per gadget value; skip: every entry of the
     * block a digit 0..d-1, whose polynomial vanishes there, so the nodes 1..G add nothing */
    const double p = c->p, u = c->u;
    const int64_t g = c->g, d = c->d;
    double ys[64 * COLS], yd[64 * COLS], ad[COLS], bd[COLS], uv[COLS], gv[COLS], sh[COLS], sl[COLS];
    const int64_t nb8 = (nb + 7) & ~(int64_t)7; /* the extension's sums take 8 columns at a time */
    for (int64_t k = 0; k < g; k++) {
        for (int64_t jj = 0; jj < nb; jj++) {
            int64_t y = Y[k * m + j0 + jj];
            yd[k * COLS + jj] = (double)y;
            ys[k * COLS + jj] = (double)(y > (int64_t)(p / 2) ? y - (int64_t)p : y);
        }
        for (int64_t jj = nb; jj < nb8; jj++)
            ys[k * COLS + jj] = 0;
    }
    for (int64_t jj = 0; jj < nb; jj++) {
        ad[jj] = (double)a[j0 + jj];
        bd[jj] = (double)beta[j0 + jj];
    }
    const double dm1 = fmod((double)(d - 1), p), six = fmod(6.0, p), c36 = fmod(36.0, p);
    for (int64_t i = 0; i < c->n; i++) {
        if (skip && i == 1)
            i = g + 1;
        if (i == 0) {
            for (int64_t jj = 0; jj < nb; jj++)
                uv[jj] = ad[jj];
        } else if (i <= g) {
            for (int64_t jj = 0; jj < nb; jj++)
                uv[jj] = yd[(i - 1) * COLS + jj];
        } else { /* the extension: sum_k E[r, k] y_k in two exact limb sums, and the blind's term */
            int64_t r = i - g - 1;
            const double *eh = c->eh + r * g, *el = c->el + r * g, *ef = c->ef + r * g;
            double e0 = c->e0[r], c1 = c->c1;
            if (whole) { /* 8 columns' sums at a time, held in registers over the nodes */
                for (int64_t j8 = 0; j8 < nb8; j8 += 8) {
                    double t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    for (int64_t k = 0; k < g; k++) {
                        const double e = ef[k], *y = ys + k * COLS + j8;
                        for (int q = 0; q < 8; q++)
                            t[q] = fma(e, y[q], t[q]);
                    }
                    for (int q = 0; q < 8; q++)
                        sh[j8 + q] = t[q];
                }
                if (lazy)
                    for (int64_t jj = 0; jj < nb; jj++)
                        uv[jj] = dred_lazy(p, u, sh[jj]) + dmul_lazy(p, u, ad[jj], e0); /* in (-2p, 4p) */
                else
                    for (int64_t jj = 0; jj < nb; jj++) {
                        double v = dred(p, u, sh[jj]) + dmul(p, u, ad[jj], e0);
                        uv[jj] = v >= p ? v - p : v;
                    }
            } else {
            for (int64_t j8 = 0; j8 < nb8; j8 += 8) {
                double th[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tl[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int64_t k = 0; k < g; k++) {
                    const double h = eh[k], l = el[k], *y = ys + k * COLS + j8;
                    for (int q = 0; q < 8; q++) {
                        th[q] = fma(h, y[q], th[q]);
                        tl[q] = fma(l, y[q], tl[q]);
                    }
                }
                for (int q = 0; q < 8; q++) {
                    sh[j8 + q] = th[q];
                    sl[j8 + q] = tl[q];
                }
            }
            if (lazy)
                for (int64_t jj = 0; jj < nb; jj++) /* in (-3p, 6p) */
                    uv[jj] = dmul_lazy(p, u, dred_lazy(p, u, sh[jj]), c1) + dred_lazy(p, u, sl[jj]) + dmul_lazy(p, u, ad[jj], e0);
            else
                for (int64_t jj = 0; jj < nb; jj++) {
                    double v = dmul(p, u, dred(p, u, sh[jj]), c1) + dred(p, u, sl[jj]);
                    v = v >= p ? v - p : v;
                    v += dmul(p, u, ad[jj], e0);
                    uv[jj] = v >= p ? v - p : v;
                }
            }
        }
        if (lazy && digits && d != 8 && i > g) /* this gadget takes values in [0, p) */
            for (int64_t jj = 0; jj < nb; jj++)
                uv[jj] = dred(p, u, uv[jj]);
        if (lazy && digits && d == 8) {
            for (int64_t jj = 0; jj < nb; jj++) { /* x in (-3p, 6p); w, zz in (-p, 2p); s1 in (-5p, 14p) */
                double x = uv[jj];
                double w = dmul_lazy(p, u, x, x - dm1);
                double z = w + six;
                double zz = dmul_lazy(p, u, z, z);
                gv[jj] = dfix(p, dmul_lazy(p, u, dmul_lazy(p, u, zz + 4 * z, zz - c36), bd[jj]));
            }
        } else if (digits && d == 8) {
            for (int64_t jj = 0; jj < nb; jj++) {
                double x = uv[jj], t = x - dm1;
                double w = dmul(p, u, x, t < 0 ? t + p : t);
                double z = w + six;
                z = z >= p ? z - p : z;
                double zz = dmul(p, u, z, z);
                double s1 = dred(p, u, zz + 4 * z), s2 = zz - c36;
                gv[jj] = dmul(p, u, dmul(p, u, s1, s2 < 0 ? s2 + p : s2), bd[jj]);
            }
        } else if (digits) {
            for (int64_t jj = 0; jj < nb; jj++) {
                double x = uv[jj], t = x - dm1;
                sh[jj] = gv[jj] = dmul(p, u, x, t < 0 ? t + p : t); /* w, and the product so far */
            }
            for (int64_t v = 1; v < d / 2; v++)
                for (int64_t jj = 0; jj < nb; jj++) {
                    double f = sh[jj] + c->pairs[v];
                    gv[jj] = dmul(p, u, gv[jj], f >= p ? f - p : f);
                }
            for (int64_t jj = 0; jj < nb; jj++)
                gv[jj] = dmul(p, u, gv[jj], bd[jj]);
        } else if (lazy) { /* u in (-3p, 6p), each factor in (-4p, 6p), the product in (-p, 2p) */
            for (int64_t jj = 0; jj < nb; jj++)
                gv[jj] = bd[jj];
            for (int64_t q = 0; q < nf; q++)
                for (int64_t jj = 0; jj < nb; jj++)
                    gv[jj] = dmul_lazy(p, u, gv[jj], fma(fl[q * COLS + jj], uv[jj], -fr[q * COLS + jj]));
            for (int64_t jj = 0; jj < nb; jj++)
                gv[jj] = dfix(p, gv[jj]);
        } else {
            for (int64_t jj = 0; jj < nb; jj++)
                gv[jj] = bd[jj];
            for (int64_t q = 0; q < nf; q++)
                for (int64_t jj = 0; jj < nb; jj++) {
                    double f = fma(fl[q * COLS + jj], uv[jj], -fr[q * COLS + jj]); /* lin u - root, in (-p, p) */
                    gv[jj] = dmul(p, u, gv[jj], f < 0 ? f + p : f);
                }
        }
        /* the block's nb values (integers, their sum below 2^53: exact in any order) in 8 running sums */
        double s8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s = 0;
        int64_t full = nb & ~(int64_t)7;
        for (int64_t j8 = 0; j8 < full; j8 += 8)
            for (int q = 0; q < 8; q++)
                s8[q] += gv[j8 + q];
        for (int64_t jj = full; jj < nb; jj++)
            s += gv[jj];
        for (int q = 0; q < 8; q++)
            s += s8[q];
        s = acc[i] + dred(p, u, s);
        acc[i] = s >= p ? s - p : s;
    }
}

/* dblock_body for mode = whole | 2 lazy | 4 skip (its flags), each combination compiled on its own */
#define DBLOCK_MODES(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode)                                    \
    switch (mode) {                                                                                               \
    case 0: dblock_body(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, 0, 0, 0); break;                      \
    case 1: dblock_body(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, 1, 0, 0); break;                      \
    case 2: dblock_body(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, 0, 1, 0); break;                      \
    case 3: dblock_body(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, 1, 1, 0); break;                      \
    default: dblock_body(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode & 1, (mode >> 1) & 1, 1); break; \
    }

static void dblock_plain(const dctx *c, const int64_t *Y, int64_t m, int64_t j0, int64_t nb, const int64_t *a,
                         const int64_t *beta, int digits, int64_t nf, const double *fl, const double *fr, double *acc, int mode)
{
    DBLOCK_MODES(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
}

#ifdef FAST_TARGET
__attribute__((target("avx2,fma"))) static void dblock_fast(const dctx *c, const int64_t *Y, int64_t m, int64_t j0,
                                                            int64_t nb, const int64_t *a, const int64_t *beta,
                                                            int digits, int64_t nf, const double *fl,
                                                            const double *fr, double *acc, int mode)
{
    DBLOCK_MODES(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
}

__attribute__((target("avx512f,avx512dq,avx2,fma,prefer-vector-width=512"))) static void
dblock_wide(const dctx *c, const int64_t *Y, int64_t m, int64_t j0, int64_t nb, const int64_t *a, const int64_t *beta,
            int digits, int64_t nf, const double *fl, const double *fr, double *acc, int mode)
{
    DBLOCK_MODES(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
}
#endif

/* the vector instructions this processor has: 0 none, 1 AVX2 and FMA, 2 also AVX-512 */
static int simd_support(void)
{
#ifdef FAST_TARGET
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 2 : 1;
#else
    return 0;
#endif
}

static int simd_level = -1; /* the variant dblock runs (-1: not chosen yet, then the best supported) */

/* Cap the doubles' path at a variant (0 plain, 1 AVX2, 2 AVX-512; -1 the best this processor has) and return the
 * variant in effect: for tests, which compare every variant's values. */
int sqm_flp_simd(int level)
{
    int best = simd_support();
    simd_level = level < 0 || level > best ? best : level;
    return simd_level;
}

static void dblock(const dctx *c, const int64_t *Y, int64_t m, int64_t j0, int64_t nb, const int64_t *a,
                   const int64_t *beta, int digits, int64_t nf, const double *fl, const double *fr, double *acc, int mode)
{
    if (simd_level < 0)
        sqm_flp_simd(-1);
#ifdef FAST_TARGET
    if (simd_level == 2) {
        dblock_wide(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
        return;
    }
    if (simd_level == 1) {
        dblock_fast(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
        return;
    }
#endif
    dblock_plain(c, Y, m, j0, nb, a, beta, digits, nf, fl, fr, acc, mode);
}

/* one column j's weighted gadget values at every point added to acc (128-bit sums of Montgomery forms), in
 * Montgomery arithmetic; u: work space of n values, em: E R^2 (points x (G+1)) */
static void mcolumn(const field *f, const int64_t *Y, int64_t g, int64_t m, int64_t j, const int64_t *a,
                    const uint64_t *em, int wide, const int64_t *lin, const int64_t *roots, int64_t d, int64_t std,
                    const int64_t *beta, const uint64_t *pairs, uint64_t *u, uint64_t *fr, int64_t *fl, u128 *acc)
{
    int64_t points = (d - 1) * g, n = d * g + 1;
    uint64_t p = f->p, dm1 = to_mont(f, (uint64_t)(d - 1) % p), six = to_mont(f, 6 % p), c36 = to_mont(f, 36 % p),
             one = to_mont(f, 1);
    /* the nodes (plain), the extension's sums, then every point in Montgomery form */
    u[0] = (uint64_t)a[j];
    for (int64_t k = 0; k < g; k++)
        u[k + 1] = (uint64_t)Y[k * m + j];
    for (int64_t i = 0; i < points; i++) { /* in registers: G + 1 products and one reduction per point */
        const uint64_t *row = em + i * (g + 1);
        u128 t = 0;
        if (wide)
            for (int64_t k = 0; k <= g; k++)
                t = fold(f, t + (u128)row[k] * u[k]);
        else
            for (int64_t k = 0; k <= g; k++)
                t += (u128)row[k] * u[k];
        u[g + 1 + i] = redc(f, t);
    }
    for (int64_t k = 0; k <= g; k++)
        u[k] = to_mont(f, u[k]);
    uint64_t bj = to_mont(f, (uint64_t)beta[j]);
    if (j < std) {
        for (int64_t i = 0; i < n; i++)
            acc[i] = fold(f, acc[i] + (u128)digit_poly(f, u[i], d, pairs, dm1, six, c36) * bj);
        return;
    }
    const int64_t *lj = lin + j * d, *rj = roots + j * d;
    int64_t nf = 0; /* the factors that are not the constant 1 (lin 0, root -1), roots in Montgomery form */
    for (int64_t q = 0; q < d; q++)
        if (lj[q] || (uint64_t)rj[q] != p - 1) {
            fl[nf] = lj[q];
            fr[nf++] = to_mont(f, (uint64_t)rj[q]);
        }
    for (int64_t i = 0; i < n; i++) {
        uint64_t prod = one;
        for (int64_t q = 0; q < nf; q++)
            prod = mul(f, prod, fl[q] ? sub(f, u[i], fr[q]) : sub(f, 0, fr[q]));
        acc[i] = fold(f, acc[i] + (u128)prod * bj);
    }
}

/* The proof's values P(0..dG) (out, dG + 1 field elements) for the G x m grid Y (field elements; row k at
 * Y + k ld, ld >= m: a grid's column slice proves without a copy),
 * the blinds a (m), the extension matrix E ((d-1)G x (G+1), row i: the Lagrange coefficients of the nodes 0..G
 * at G + 1 + i), the columns' polynomials (lin, roots: m x d, factor i of column j: lin u - root; the first std
 * columns the digit polynomial) and weights beta (m).  Returns 0, or -1 where a buffer cannot be allocated or
 * an argument is out of range. */
int sqm_flp_prove(const int64_t *Y, int64_t g, int64_t m, int64_t ld, const int64_t *a, const int64_t *E,
                  const int64_t *lin, const int64_t *roots, int64_t d, int64_t std, const int64_t *beta, int64_t p,
                  int64_t *out)
{
    if (p < 3 || !(p & 1) || (uint64_t)p >= (uint64_t)1 << 62 || g < 1 || m < 0 || ld < m || d < 1 || std < 0 ||
        std > m || (std && (d % 2)))
        return -1;
    field f;
    field_init(&f, (uint64_t)p);
    int64_t points = (d - 1) * g, n = d * g + 1;
    int pbits = 0;
    while (pbits < 63 && ((int64_t)1 << pbits) <= p)
        pbits++;
    /* the doubles' path: p < 2^50, at most 64 nodes (its block arrays); blocks whose entries are small */
    int64_t lw = (pbits + 1) / 2, cols = COLS;
    while (cols > 1 && (double)cols * (double)p >= 9007199254740992.0)
        cols /= 2;
    int use_dbl = pbits <= DBL_BITS && g <= 64 && cols >= 8;
    /* E in Montgomery form squared (E R^2): a 128-bit sum of its products with plain values, reduced once, is
     * the extension's value in Montgomery form */
    size_t es = (size_t)((g + 1) * (points ? points : 1));
    uint64_t *em = malloc(sizeof(uint64_t) * es);
    double *eh = malloc(sizeof(double) * es), *el = malloc(sizeof(double) * es), *e0 = malloc(sizeof(double) * es);
    double *ef = malloc(sizeof(double) * es);
    uint64_t *u = malloc(sizeof(uint64_t) * (size_t)n);
    u128 *acc = malloc(sizeof(u128) * (size_t)n);
    double *accd = malloc(sizeof(double) * (size_t)n), *dpairs = malloc(sizeof(double) * (size_t)(d / 2 + 1));
    uint64_t *pairs = malloc(sizeof(uint64_t) * (size_t)(d / 2 + 1));
    uint64_t *fr = malloc(sizeof(uint64_t) * (size_t)d);
    int64_t *fl = malloc(sizeof(int64_t) * (size_t)d);
    double *dfl = malloc(sizeof(double) * (size_t)(d * COLS)), *dfr = malloc(sizeof(double) * (size_t)(d * COLS));
    int64_t *fidx = malloc(sizeof(int64_t) * (size_t)d);
    int rc = -1;
    if (!em || !eh || !el || !e0 || !ef || !u || !acc || !accd || !dpairs || !pairs || !fr || !fl || !dfl || !dfr || !fidx)
        goto done;
    for (int64_t i = 0; i < points * (g + 1); i++)
        em[i] = mul(&f, to_mont(&f, (uint64_t)E[i]), f.r2);
    for (int64_t i = 0; i < points; i++) {
        e0[i] = (double)E[i * (g + 1)];
        for (int64_t k = 0; k < g; k++) {
            int64_t e = E[i * (g + 1) + k + 1];
            ef[i * g + k] = (double)e;
            eh[i * g + k] = (double)(e >> lw);
            el[i * g + k] = (double)(e & (((int64_t)1 << lw) - 1));
        }
    }
    /* G + 1 products below (p - 1)^2 sum below p 2^64 (redc's bound) without folding when p < 2^64 / (G + 1) */
    int wide = (u128)(g + 1) * (uint64_t)(p - 1) * (uint64_t)(p - 1) >= ((u128)(uint64_t)p << 64);
    for (int64_t v = 0; v <= d / 2; v++) {
        pairs[v] = to_mont(&f, (uint64_t)((v * (d - 1 - v)) % p));
        dpairs[v] = (double)((v * (d - 1 - v)) % p);
    }
    for (int64_t i = 0; i < n; i++) {
        acc[i] = 0;
        accd[i] = 0;
    }
    dctx c = {(double)p, 1.0 / (double)p, (double)(((uint64_t)1 << lw) % (uint64_t)p), g, d, n, std, lw,
              eh, el, e0, ef, dpairs};
    /* a block's entries y (signed) qualify when G 2^lw |y| < 2^53: the limb sums stay exact */
    int64_t ymax = use_dbl ? (int64_t)((9007199254740992.0 / (double)g) / (double)((int64_t)1 << lw)) - 1 : 0;
    for (int64_t j0 = 0; j0 < m;) {
        int64_t nb = m - j0 < cols ? m - j0 : cols;
        if (j0 < std && j0 + nb > std)
            nb = std - j0; /* a block is all digit columns or none */
        int ok = use_dbl, alldig = j0 < std;
        int64_t big = 0; /* the block's largest |entry| */
        for (int64_t k = 0; ok && k < g; k++)
            for (int64_t jj = 0; jj < nb; jj++) {
                int64_t y = Y[k * ld + j0 + jj];
                int64_t s = y > p / 2 ? p - y : y;
                big = s > big ? s : big;
                alldig &= y >= 0 && y < d;
                if (s > ymax) {
                    ok = 0;
                    break;
                }
            }
        int64_t nf = 0;
        if (ok && j0 >= std) { /* the factors that are not the constant 1 (lin 0, root -1) in every column */
            for (int64_t q = 0; q < d; q++) {
                int one = 1;
                for (int64_t jj = 0; jj < nb; jj++)
                    if (lin[(j0 + jj) * d + q] || roots[(j0 + jj) * d + q] != p - 1)
                        one = 0;
                if (!one)
                    fidx[nf++] = q;
            }
            for (int64_t q = 0; q < nf; q++)
                for (int64_t jj = 0; jj < nb; jj++) {
                    dfl[q * COLS + jj] = (double)lin[(j0 + jj) * d + fidx[q]];
                    dfr[q * COLS + jj] = (double)roots[(j0 + jj) * d + fidx[q]];
                }
        }
        if (ok)
            /* one exact sum with E whole where G |y| (p - 1) < 2^53 (digits in small fields), else two limbs */
            dblock(&c, Y, ld, j0, nb, a, beta, j0 < std, nf, dfl, dfr, accd,
                   ((double)g * (double)big * (double)(p - 1) < 9007199254740992.0) | (pbits <= LAZY_BITS) << 1 |
                       alldig << 2);
        else
            for (int64_t j = j0; j < j0 + nb; j++)
                mcolumn(&f, Y, g, ld, j, a, em, wide, lin, roots, d, std, beta, pairs, u, fr, fl, acc);
        j0 += nb;
    }
    for (int64_t i = 0; i < n; i++) { /* (sum g beta R^2) R^-2, plus the doubles' sums */
        uint64_t v = redc(&f, redc(&f, acc[i])) + (uint64_t)accd[i];
        out[i] = (int64_t)(v >= (uint64_t)p ? v - (uint64_t)p : v);
    }
    rc = 0;
done:
    free(em), free(eh), free(el), free(e0), free(ef), free(u), free(acc), free(accd), free(dpairs), free(pairs), free(fr);
    free(fl), free(dfl), free(dfr), free(fidx);
    return rc;
}

/* ----- a products part (flp.prove_products): P(x) = sum_{i, j} beta_ij U_Aij(x) (c_i - U_Bj(x)) at x = 0..2G ----
 * Every wire (its blind, then its G entries) is a field element below p < 2^46, cut into two limbs of 23 bits, as
 * is each extension coefficient: the four limb sums of G + 1 products (each below 2^46) are exact doubles below
 * 2^53, combined as S00 + 2^23 (S01 + S10) + 2^46 S11 mod p (dred, dmul).  A block of columns of B and each
 * block of A beside it: U_B at every point held, U_A computed and multiplied in point by point. */

#define PB_BITS 46 /* the products' doubles path: p below 2^46 */

typedef struct {
    double p, u, c23, c46; /* p, 1/p, 2^23 mod p, 2^46 mod p */
    int64_t g;
    const double *e1, *e0; /* the extension's coefficients (G x (G+1), points G+1..2G), above and below bit 23 */
} pctx;

/* the wires of columns j0..j0+nb-1 (nb <= COLS) of Y (row k at Y + k ld) at every point 0..2G: out[x * COLS + jj] */
static inline __attribute__((always_inline)) void pwires(const pctx *c, const int64_t *Y, int64_t ld, int64_t j0,
                                                         int64_t nb, const int64_t *a, double *out)
{
    const double p = c->p, u = c->u;
    const int64_t g = c->g;
    double w1[65 * COLS], w0[65 * COLS];
    int64_t high = 0; /* any entry from 2^23 on (a blind, an inverse); else (looked-up values) two sums suffice */
    for (int64_t k = 0; k <= g; k++)
        for (int64_t jj = 0; jj < nb; jj++) {
            int64_t v = k == 0 ? a[j0 + jj] : Y[(k - 1) * ld + j0 + jj];
            out[k * COLS + jj] = (double)v;
            w1[k * COLS + jj] = (double)(v >> 23);
            w0[k * COLS + jj] = (double)(v & ((1 << 23) - 1));
            high |= k > 0 ? v >> 23 : 0;
        }
    for (int64_t r = 0; r < g; r++) {
        const double *e1 = c->e1 + r * (g + 1), *e0 = c->e0 + r * (g + 1);
        double s00[COLS], s01[COLS], s11[COLS];
        for (int64_t jj = 0; jj < nb; jj++) /* the blind's four limb products; then the nodes' */
            s00[jj] = e0[0] * w0[jj], s01[jj] = fma(e0[0], w1[jj], e1[0] * w0[jj]), s11[jj] = e1[0] * w1[jj];
        if (high)
            for (int64_t k = 1; k <= g; k++) {
                const double h = e1[k], l = e0[k], *x1 = w1 + k * COLS, *x0 = w0 + k * COLS;
                for (int64_t jj = 0; jj < nb; jj++) {
                    s00[jj] = fma(l, x0[jj], s00[jj]);
                    s01[jj] = fma(l, x1[jj], fma(h, x0[jj], s01[jj]));
                    s11[jj] = fma(h, x1[jj], s11[jj]);
                }
            }
        else
            for (int64_t k = 1; k <= g; k++) {
                const double h = e1[k], l = e0[k], *x0 = w0 + k * COLS;
                for (int64_t jj = 0; jj < nb; jj++) {
                    s00[jj] = fma(l, x0[jj], s00[jj]);
                    s01[jj] = fma(h, x0[jj], s01[jj]);
                }
            }
        double *o = out + (g + 1 + r) * COLS;
        for (int64_t jj = 0; jj < nb; jj++) {
            double v = dred(p, u, s00[jj]) + dmul(p, u, dred(p, u, s01[jj]), c->c23);
            v = v >= p ? v - p : v;
            v += dmul(p, u, dred(p, u, s11[jj]), c->c46);
            o[jj] = v >= p ? v - p : v;
        }
    }
}

static inline __attribute__((always_inline)) void pblock_body(const pctx *c, const int64_t *Y, int64_t ld, int64_t n,
                                                              int64_t k, int64_t j0, int64_t nb, const int64_t *a,
                                                              const int64_t *beta, const int64_t *off,
                                                              const double *cs, double *acc)
{
    const double p = c->p, u = c->u;
    const int64_t pts = 2 * c->g + 1;
    double ub[129 * COLS], ua[129 * COLS], bd[COLS], od[COLS];
    pwires(c, Y, ld, j0, nb, a, ub);
    int sq = 0; /* the B wires' squares, (U_B + o)^2 weighted by their beta, where any weight is not zero */
    for (int64_t jj = 0; jj < nb; jj++) {
        bd[jj] = (double)beta[j0 + jj];
        od[jj] = (double)off[j0 + jj];
        sq |= beta[j0 + jj] != 0;
    }
    if (sq)
        for (int64_t x = 0; x < pts; x++) {
            const double *vb = ub + x * COLS;
            double s = 0;
            for (int64_t jj = 0; jj < nb; jj++) {
                double v = vb[jj] + od[jj];
                v = v >= p ? v - p : v;
                s += dmul(p, u, dmul(p, u, v, v), bd[jj]); /* nb values below p: < 2^52 */
            }
            s = acc[x] + dred(p, u, s);
            acc[x] = s >= p ? s - p : s;
        }
    for (int64_t i = 0; i < k; i++) {
        int64_t ja = (1 + i) * n + j0;
        pwires(c, Y, ld, ja, nb, a, ua);
        for (int64_t jj = 0; jj < nb; jj++)
            bd[jj] = (double)beta[ja + jj];
        for (int64_t x = 0; x < pts; x++) {
            const double *vb = ub + x * COLS, *va = ua + x * COLS;
            double s = 0;
            for (int64_t jj = 0; jj < nb; jj++) {
                double d = cs[i] - vb[jj];
                s += dmul(p, u, dmul(p, u, va[jj], d < 0 ? d + p : d), bd[jj]); /* nb values below p: < 2^52 */
            }
            s = acc[x] + dred(p, u, s);
            acc[x] = s >= p ? s - p : s;
        }
    }
}

static void pblock_plain(const pctx *c, const int64_t *Y, int64_t ld, int64_t n, int64_t k, int64_t j0, int64_t nb,
                         const int64_t *a, const int64_t *beta, const int64_t *off, const double *cs, double *acc)
{
    pblock_body(c, Y, ld, n, k, j0, nb, a, beta, off, cs, acc);
}

#ifdef FAST_TARGET
__attribute__((target("avx2,fma"))) static void pblock_fast(const pctx *c, const int64_t *Y, int64_t ld, int64_t n,
                                                            int64_t k, int64_t j0, int64_t nb, const int64_t *a,
                                                            const int64_t *beta, const int64_t *off, const double *cs,
                                                            double *acc)
{
    pblock_body(c, Y, ld, n, k, j0, nb, a, beta, off, cs, acc);
}

__attribute__((target("avx512f,avx512dq,avx2,fma,prefer-vector-width=512"))) static void
pblock_wide(const pctx *c, const int64_t *Y, int64_t ld, int64_t n, int64_t k, int64_t j0, int64_t nb,
            const int64_t *a, const int64_t *beta, const int64_t *off, const double *cs, double *acc)
{
    pblock_body(c, Y, ld, n, k, j0, nb, a, beta, off, cs, acc);
}
#endif

/* P(0..2G) (out) of a products part for the G x (1 + k) n grid Y (row k at Y + k ld, entries in [0, p)), blinds a
 * and weights beta ((1 + k) n each; the first n weigh the B wires' squares), the B wires' offsets off (n, in [0,
 * p)), constants cs (k, in [0, p)) and the extension matrix E (G x (G + 1), row r: the Lagrange coefficients of the
 * nodes 0..G at G + 1 + r).  Returns 0, or -1 for an argument out of range (p from 2^46 on, G above 64: the numpy
 * prover). */
int sqm_flp_prove_products(const int64_t *Y, int64_t g, int64_t ld, int64_t n, int64_t k, const int64_t *a,
                           const int64_t *E, const int64_t *cs, const int64_t *beta, const int64_t *off, int64_t p,
                           int64_t *out)
{
    if (p < 3 || (uint64_t)p >= (uint64_t)1 << PB_BITS || g < 1 || g > 64 || n < 0 || k < 1 || k > 64 ||
        ld < (1 + k) * n)
        return -1;
    for (int64_t i = 0; i < (1 + k) * n; i++)
        if (a[i] < 0 || a[i] >= p || beta[i] < 0 || beta[i] >= p || (i < n && (off[i] < 0 || off[i] >= p)))
            return -1;
    for (int64_t r = 0; r < g; r++)
        for (int64_t j = 0; j < (1 + k) * n; j++)
            if (Y[r * ld + j] < 0 || Y[r * ld + j] >= p)
                return -1;
    size_t es = (size_t)(g * (g + 1));
    double *e1 = malloc(sizeof(double) * es), *e0 = malloc(sizeof(double) * es), acc[129], csd[64];
    if (!e1 || !e0) {
        free(e1), free(e0);
        return -1;
    }
    for (size_t i = 0; i < es; i++) {
        e1[i] = (double)(E[i] >> 23);
        e0[i] = (double)(E[i] & ((1 << 23) - 1));
    }
    for (int64_t i = 0; i < k; i++)
        csd[i] = (double)cs[i];
    double pd = (double)p;
    pctx c = {pd, 1.0 / pd, (double)(((uint64_t)1 << 23) % (uint64_t)p), (double)(((uint64_t)1 << 46) % (uint64_t)p),
              g, e1, e0};
    for (int64_t x = 0; x <= 2 * g; x++)
        acc[x] = 0;
    if (simd_level < 0)
        sqm_flp_simd(-1);
    for (int64_t j0 = 0; j0 < n; j0 += COLS) {
        int64_t nb = n - j0 < COLS ? n - j0 : COLS;
#ifdef FAST_TARGET
        if (simd_level == 2)
            pblock_wide(&c, Y, ld, n, k, j0, nb, a, beta, off, csd, acc);
        else if (simd_level == 1)
            pblock_fast(&c, Y, ld, n, k, j0, nb, a, beta, off, csd, acc);
        else
#endif
            pblock_plain(&c, Y, ld, n, k, j0, nb, a, beta, off, csd, acc);
    }
    for (int64_t x = 0; x <= 2 * g; x++)
        out[x] = (int64_t)acc[x];
    free(e1), free(e0);
    return 0;
}

/* sum_j beta_j g_j(u_j) mod p (out[0]) for one point's values u (m field elements; the columns' polynomials as
 * in sqm_flp_prove): the verifiers' side of the identity.  Returns 0, or -1 for an argument out of range. */
int sqm_flp_gadget(const int64_t *uv, int64_t m, const int64_t *lin, const int64_t *roots, int64_t d, int64_t std,
                   const int64_t *beta, int64_t p, int64_t *out)
{
    if (p < 3 || !(p & 1) || (uint64_t)p >= (uint64_t)1 << 62 || m < 0 || d < 1 || std < 0 || std > m ||
        (std && (d % 2)) || d > 64)
        return -1;
    field f;
    field_init(&f, (uint64_t)p);
    uint64_t pairs[33], fr[64];
    for (int64_t v = 0; v <= d / 2 && v < 33; v++)
        pairs[v] = to_mont(&f, (uint64_t)((v * (d - 1 - v)) % p));
    uint64_t q = (uint64_t)p, dm1 = to_mont(&f, (uint64_t)(d - 1) % q), six = to_mont(&f, 6 % q),
             c36 = to_mont(&f, 36 % q), one = to_mont(&f, 1);
    u128 acc = 0;
    for (int64_t j = 0; j < m; j++) {
        uint64_t x = to_mont(&f, (uint64_t)uv[j]), val;
        if (j < std)
            val = digit_poly(&f, x, d, pairs, dm1, six, c36);
        else {
            const int64_t *lj = lin + j * d, *rj = roots + j * d;
            val = one;
            for (int64_t k = 0; k < d; k++) {
                if (!lj[k] && (uint64_t)rj[k] == q - 1)
                    continue;
                fr[k] = to_mont(&f, (uint64_t)rj[k]);
                val = mul(&f, val, lj[k] ? sub(&f, x, fr[k]) : sub(&f, 0, fr[k]));
            }
        }
        acc = fold(&f, acc + (u128)val * to_mont(&f, (uint64_t)beta[j]));
    }
    out[0] = (int64_t)redc(&f, redc(&f, acc));
    return 0;
}

/* out[j] = (coef[0] a[j] + sum_k coef[k + 1] Y[k, j]) mod p for the G x m row-major grid Y (field elements):
 * the verifiers' U_j(r).  Returns 0, or -1 for an argument out of range. */
int sqm_flp_combine(const int64_t *a, const int64_t *Y, int64_t g, int64_t m, const int64_t *coef, int64_t p,
                    int64_t *out)
{
    if (p < 3 || !(p & 1) || (uint64_t)p >= (uint64_t)1 << 62 || g < 0 || m < 0 || g > 1024)
        return -1;
    field f;
    field_init(&f, (uint64_t)p);
    uint64_t c[1025]; /* coef R^2: a 128-bit sum of their products with plain values, reduced twice, is plain */
    for (int64_t k = 0; k <= g; k++)
        c[k] = mul(&f, to_mont(&f, (uint64_t)coef[k]), f.r2);
    int wide = (u128)(g + 1) * (uint64_t)(p - 1) * (uint64_t)(p - 1) >= ((u128)(uint64_t)p << 64);
    for (int64_t j = 0; j < m; j++) {
        u128 t = (u128)c[0] * (uint64_t)a[j];
        for (int64_t k = 0; k < g; k++) {
            t += (u128)c[k + 1] * (uint64_t)Y[k * m + j];
            if (wide)
                t = fold(&f, t);
        }
        out[j] = (int64_t)redc(&f, redc(&f, fold(&f, t)));
    }
    return 0;
}

/* ----- the input proof's steps around the FLP (sqm.mpc.protocols.input_proof): every result an exact field
 * element or integer, the numpy functions' own ----- */

/* the K base-8 digits of v in [0, width] (input_proof.encode_range): the top one min(floor(v / R) R, width - R + 1)
 * with R = 8^(K-1), the low ones the base-8 digits of the rest */
static inline void range_digits(int64_t v, int64_t k, int64_t width, int64_t *o)
{
    if (k <= 0)
        return;
    int64_t sh = 3 * (k - 1), r = (int64_t)1 << sh, cap = width - r + 1;
    int64_t top = v >= cap ? cap : (v >> sh) << sh, rest = v - top; /* v >= 0: floor(v / r) r */
    o[k - 1] = top;
    for (int64_t i = 0; i < k - 1; i++) {
        o[i] = rest & 7;
        rest >>= 3;
    }
}

/* An honest client's witness (input_proof.witness) for the rows x ncols block x (row-major): per column j the kc[j]
 * digits of x - lo[j] in [0, hi[j] - lo[j]], then per group q (its columns gcols[goff[q]..goff[q+1]-1]) the
 * squared norm s, then per group the kg[q] digits of lim[q] - s in [0, lim[q]]; out: rows x width.  Returns 0, 1
 * where an entry is outside its range, 2 where a norm is above its limit (nothing defined in out then), -1 for an
 * argument out of range. */
int sqm_ip_witness(const int64_t *x, int64_t rows, int64_t ncols, const int64_t *lo, const int64_t *hi,
                   const int64_t *kc, int64_t ng, const int64_t *goff, const int64_t *gcols, const int64_t *lim,
                   const int64_t *kg, int64_t width, int64_t *out)
{
    if (rows < 0 || ncols < 0 || ng < 0 || width < 0 || ng > 4096)
        return -1;
    for (int64_t i = 0; i < rows; i++) {
        int bad = 0;
        for (int64_t j = 0; j < ncols; j++)
            bad |= (x[i * ncols + j] < lo[j]) | (x[i * ncols + j] > hi[j]);
        if (bad)
            return 1;
    }
    uint64_t s[4096];
    for (int64_t i = 0; i < rows; i++) {
        const int64_t *xi = x + i * ncols;
        int64_t *o = out + i * width;
        for (int64_t j = 0; j < ncols; j++) {
            range_digits(xi[j] - lo[j], kc[j], hi[j] - lo[j], o);
            o += kc[j];
        }
        for (int64_t q = 0; q < ng; q++) {
            uint64_t t = 0; /* int64 wrapping, as numpy's */
            for (int64_t c = goff[q]; c < goff[q + 1]; c++)
                t += (uint64_t)xi[gcols[c]] * (uint64_t)xi[gcols[c]];
            if ((int64_t)t > lim[q])
                return 2;
            s[q] = t;
            *o++ = (int64_t)t;
        }
        for (int64_t q = 0; q < ng; q++) {
            range_digits(lim[q] - (int64_t)s[q], kg[q], lim[q], o);
            o += kg[q];
        }
    }
    return 0;
}

/* t mod p for |t| / p < 2^50 (u = 1 / p): a double quotient off by at most one from floor(t / p), corrected once
 * each way (the int64 sums of sqm_ip_weighted and sqm_ip_lincomb) */
static inline __attribute__((always_inline)) int64_t reduce_near(int64_t p, double u, int64_t t)
{
    int64_t r = t - (int64_t)floor((double)t * u) * p;
    r = r < 0 ? r + p : r;
    return r >= p ? r - p : r;
}

static inline uint64_t reduce_signed(int64_t v, uint64_t p)
{
    if (v >= 0 && (uint64_t)v < p)
        return (uint64_t)v;
    int64_t r = v % (int64_t)p;
    return (uint64_t)(r < 0 ? r + (int64_t)p : r);
}

/* out[i, q] = (add[q] + sum_{k < widths[q]} w[o_q + k] W[i, starts[q] + k]) mod p (o_q = widths[0] + ..
 * + widths[q-1]) for the rows x stride array W (int64, any integers): per block of digits its weighted sum
 * (input_proof._weighted, values).  Returns 0, or -1 for an argument out of range. */
int sqm_ip_weighted(const int64_t *W, int64_t rows, int64_t stride, int64_t n, const int64_t *starts,
                    const int64_t *widths, const int64_t *w, const int64_t *add, int64_t p, int64_t *out)
{
    if (p < 3 || !(p & 1) || (uint64_t)p >= (uint64_t)1 << 62 || rows < 0 || n < 0 || n > 65536)
        return -1;
    field f;
    field_init(&f, (uint64_t)p);
    uint64_t q = (uint64_t)p;
    int64_t total = 0;
    for (int64_t c = 0; c < n; c++)
        total += widths[c];
    uint64_t *wm = malloc(sizeof(uint64_t) * (size_t)(total ? total : 1)); /* w R^2 (reduced) */
    uint64_t *am = malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));        /* add R (reduced) */
    if (!wm || !am) {
        free(wm), free(am);
        return -1;
    }
    for (int64_t k = 0; k < total; k++)
        wm[k] = mul(&f, to_mont(&f, reduce_signed(w[k], q)), f.r2);
    for (int64_t c = 0; c < n; c++)
        am[c] = mul(&f, to_mont(&f, reduce_signed(add[c], q)), f.r2);
    /* a block whose weights are >= 0 with (p - 1)(sum w + 1) < 2^62 (p < 2^50): its exact sum in int64 from
     * values in [0, p), reduced once with a double quotient (within one of the floor), as sqm_ip_lincomb's */
    int64_t *ap = malloc(sizeof(int64_t) * (size_t)(n ? n : 1)); /* add reduced, or -1: the Montgomery sums */
    if (!ap) {
        free(wm), free(am);
        return -1;
    }
    for (int64_t c = 0, o = 0; c < n; o += widths[c], c++) {
        u128 sw = 1;
        int ok = q < (uint64_t)1 << DBL_BITS;
        for (int64_t k = 0; k < widths[c] && ok; k++) {
            ok = w[o + k] >= 0 && w[o + k] < (int64_t)1 << 62;
            sw += ok ? (uint64_t)w[o + k] : 0;
        }
        ap[c] = ok && (u128)(q - 1) * sw < (u128)1 << 62 ? (int64_t)reduce_signed(add[c], q) : -1;
    }
    const double u = 1.0 / (double)q;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t *wi = W + i * stride;
        const uint64_t *wk = wm;
        const int64_t *wo = w;
        for (int64_t c = 0; c < n; c++) {
            const int64_t *d = wi + starts[c];
            int64_t kw = widths[c];
            uint64_t bad = 1;
            if (ap[c] >= 0) {
                uint64_t t = (uint64_t)ap[c];
                bad = 0;
                for (int64_t k = 0; k < kw; k++) {
                    t += (uint64_t)wo[k] * (uint64_t)d[k];
                    bad |= (uint64_t)d[k] >= q;
                }
                if (!bad)
                    out[i * n + c] = reduce_near(p, u, (int64_t)t);
            }
            if (bad) {
                u128 t = am[c];
                for (int64_t k = 0; k < kw; k++) {
                    uint64_t v = d[k] >= 0 && (uint64_t)d[k] < q ? (uint64_t)d[k] : reduce_signed(d[k], q);
                    t = fold(&f, t + (u128)wk[k] * v);
                }
                out[i * n + c] = (int64_t)redc(&f, redc(&f, t));
            }
            wk += kw;
            wo += kw;
        }
    }
    free(wm), free(am), free(ap);
    return 0;
}

/* Y[k, off + r nidx + c] = src[(k per + r) stride + idx[c]] for the records k per + r < rows, else 0 (k < g,
 * r < per, c < nidx): one part of the proof's grid (input_proof.grid), records split among the G nodes in order.
 * Returns 0, or -1 for an argument out of range. */
int sqm_ip_gather(const int64_t *src, int64_t rows, int64_t stride, const int64_t *idx, int64_t nidx, int64_t g,
                  int64_t per, int64_t *Y, int64_t ycols, int64_t off)
{
    if (rows < 0 || nidx < 0 || g < 1 || per < 0 || off < 0 || off + per * nidx > ycols)
        return -1;
    int64_t runs = 0; /* idx as runs of consecutive columns (the low digits' runs of K - 1, the values' one run) */
    for (int64_t c = 0; c < nidx; c++) {
        if (idx[c] < 0 || idx[c] >= stride)
            return -1;
        runs += c == 0 || idx[c] != idx[c - 1] + 1;
    }
    int64_t *rs = malloc(sizeof(int64_t) * (size_t)(2 * runs + 1)), *rl = rs + runs; /* run start, length */
    if (!rs)
        return -1;
    for (int64_t c = 0, q = -1; c < nidx; c++) {
        if (c == 0 || idx[c] != idx[c - 1] + 1)
            rs[++q] = idx[c], rl[q] = 0;
        rl[q]++;
    }
    for (int64_t k = 0; k < g; k++)
        for (int64_t r = 0; r < per; r++) {
            int64_t row = k * per + r;
            int64_t *dst = Y + k * ycols + off + r * nidx;
            if (row < rows) {
                const int64_t *s = src + row * stride;
                for (int64_t q = 0; q < runs; q++) {
                    const int64_t *from = s + rs[q];
                    for (int64_t c = 0; c < rl[q]; c++)
                        dst[c] = from[c];
                    dst += rl[q];
                }
            } else
                for (int64_t c = 0; c < nidx; c++)
                    dst[c] = 0;
        }
    free(rs);
    return 0;
}

/* out[i] = 1 / v[i] mod p (n field elements, none zero): Montgomery's trick, the prefix products, one inversion
 * (Fermat: x^(p-2)) and the way back (lookup.inverses: 1 / (alpha - t) over a table).  Returns 0, 1 where some
 * v[i] is 0 mod p (nothing defined in out then), -1 for an argument out of range. */
int sqm_ip_inverses(const int64_t *v, int64_t n, int64_t p, int64_t *out)
{
    if (p < 3 || !(p & 1) || (uint64_t)p >= (uint64_t)1 << 62 || n < 0)
        return -1;
    if (n == 0)
        return 0;
    field f;
    field_init(&f, (uint64_t)p);
    uint64_t *pre = malloc(sizeof(uint64_t) * (size_t)n);
    if (!pre)
        return -1;
    uint64_t acc = to_mont(&f, 1);
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= p) {
            free(pre);
            return -1;
        }
        if (v[i] == 0) {
            free(pre);
            return 1;
        }
        pre[i] = acc; /* the product of v[0..i-1], Montgomery form */
        acc = mul(&f, acc, to_mont(&f, (uint64_t)v[i]));
    }
    uint64_t inv = to_mont(&f, 1), base = acc, e = (uint64_t)p - 2; /* acc^(p-2): 1 / (v[0] .. v[n-1]) */
    while (e) {
        if (e & 1)
            inv = mul(&f, inv, base);
        base = mul(&f, base, base);
        e >>= 1;
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        uint64_t vm = to_mont(&f, (uint64_t)v[i]);
        out[i] = (int64_t)redc(&f, mul(&f, inv, pre[i])); /* 1 / v[i], out of Montgomery form */
        inv = mul(&f, inv, vm);
    }
    free(pre);
    return 0;
}

/* out[i, a nl + q] = tabs[a tsize + toff[q] + W[i * stride + cols[q]]] (rows x na nl): an honest client's inverses
 * 1 / (alpha_a - y) looked up in its tables' inverses (lookup.inverse_witness), row by row.  Returns 0, 1 where an
 * entry is outside its table [0, width[q]] (nothing defined in out then), -1 for an argument out of range. */
int sqm_ip_table_gather(const int64_t *W, int64_t rows, int64_t stride, const int64_t *cols, const int64_t *toff,
                        const int64_t *width, int64_t nl, const int64_t *tabs, int64_t tsize, int64_t na,
                        int64_t *out)
{
    if (rows < 0 || nl < 0 || na < 1 || tsize < 0)
        return -1;
    for (int64_t q = 0; q < nl; q++)
        if (cols[q] < 0 || cols[q] >= stride || toff[q] < 0 || width[q] < 0 || toff[q] + width[q] >= tsize)
            return -1;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t *w = W + i * stride;
        int64_t *o = out + i * na * nl;
        for (int64_t q = 0; q < nl; q++) {
            int64_t y = w[cols[q]];
            if (y < 0 || y > width[q])
                return 1;
            for (int64_t a = 0; a < na; a++)
                o[a * nl + q] = tabs[a * tsize + toff[q] + y];
        }
    }
    return 0;
}

#define LC_BLOCK 1024 /* entries a linear combination sums at a time (its int64 sums stay in cache) */

/* sqm_ip_lincomb with small signed coefficients sc (few parties): per entry the exact sum in int64 (|s| < 2^62 for
 * values in [0, p)), reduced once with a double quotient (|s| / p < 2^50: within one of floor(s / p)).  A block at
 * a time, one coefficient at a time (loops the compiler vectorizes); a block holding a value outside [0, p) is
 * summed again entry by entry from the values reduced.  The same integers either way. */
static inline __attribute__((always_inline)) void lincomb_small_body(const int64_t *const *vals, const int64_t *sc,
                                                                     int64_t nv, int64_t n, int64_t p, int64_t *out)
{
    const double u = 1.0 / (double)p;
    int64_t acc[LC_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += LC_BLOCK) {
        int64_t nb = n - i0 < LC_BLOCK ? n - i0 : LC_BLOCK;
        uint64_t bad = 0;
        for (int64_t i = 0; i < nb; i++)
            acc[i] = 0;
        for (int64_t k = 0; k < nv; k++) {
            const int64_t *v = vals[k] + i0, c = sc[k];
            for (int64_t i = 0; i < nb; i++) { /* wrapping (unsigned) where a value is out of range: redone */
                acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)c * (uint64_t)v[i]);
                bad |= (uint64_t)v[i] >= (uint64_t)p;
            }
        }
        if (bad)
            for (int64_t i = 0; i < nb; i++) {
                int64_t t = 0;
                for (int64_t k = 0; k < nv; k++)
                    t += sc[k] * (int64_t)reduce_signed(vals[k][i0 + i], (uint64_t)p);
                acc[i] = t;
            }
        int64_t *o = out + i0;
        for (int64_t i = 0; i < nb; i++)
            o[i] = reduce_near(p, u, acc[i]);
    }
}

static void lincomb_small_plain(const int64_t *const *vals, const int64_t *sc, int64_t nv, int64_t n, int64_t p,
                                int64_t *out)
{
    lincomb_small_body(vals, sc, nv, n, p, out);
}

#ifdef FAST_TARGET
__attribute__((target("avx2,fma"))) static void lincomb_small_fast(const int64_t *const *vals, const int64_t *sc,
                                                                   int64_t nv, int64_t n, int64_t p, int64_t *out)
{
    lincomb_small_body(vals, sc, nv, n, p, out);
}

__attribute__((target("avx512f,avx512dq,avx2,fma,prefer-vector-width=512"))) static void
lincomb_small_wide(const int64_t *const *vals, const int64_t *sc, int64_t nv, int64_t n, int64_t p, int64_t *out)
{
    lincomb_small_body(vals, sc, nv, n, p, out);
}
#endif

/* out[i] = sum_{k < nv} coef[k] vals[k][i] mod p (n entries; vals: nv pointers to int64 arrays of any integers,
 * coef in [0, p)): a polynomial's value from its values at other points (input_proof._through).  Returns 0, or -1
 * for an argument out of range. */
int sqm_ip_lincomb(const int64_t *const *vals, const int64_t *coef, int64_t nv, int64_t n, int64_t p, int64_t *out)
{
    if (p < 3 || (uint64_t)p >= (uint64_t)1 << 62 || nv < 1 || nv > 256 || n < 0)
        return -1;
    uint64_t c[256], cs[256], q = (uint64_t)p;
    int64_t sc[256];
    u128 small = 0; /* sum |c| p over the signed coefficients */
    for (int64_t k = 0; k < nv; k++) {
        if (coef[k] < 0 || (uint64_t)coef[k] >= q)
            return -1;
        c[k] = (uint64_t)coef[k];
        cs[k] = (uint64_t)(((u128)c[k] << 64) / q); /* Shoup: c v - floor(cs v / 2^64) p is in [0, 2p) */
        sc[k] = coef[k] > p / 2 ? coef[k] - p : coef[k];
        small += (u128)(uint64_t)(sc[k] < 0 ? -sc[k] : sc[k]) * q;
    }
    if (small < (u128)1 << 62 && p < (int64_t)1 << 50) {
        if (simd_level < 0)
            sqm_flp_simd(-1);
#ifdef FAST_TARGET
        if (simd_level == 2)
            lincomb_small_wide(vals, sc, nv, n, p, out);
        else if (simd_level == 1)
            lincomb_small_fast(vals, sc, nv, n, p, out);
        else
#endif
            lincomb_small_plain(vals, sc, nv, n, p, out);
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < nv; k++) {
            int64_t sv = vals[k][i];
            uint64_t v = sv >= 0 ? (uint64_t)sv : reduce_signed(sv, q);
            uint64_t r = c[k] * v - (uint64_t)(((u128)cs[k] * v) >> 64) * q;
            r = r >= q ? r - q : r;
            acc += r;
            acc = acc >= q ? acc - q : acc;
        }
        out[i] = (int64_t)acc;
    }
    return 0;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flp_kernel",
                                    "The fully linear proof's compiled prover, called through ctypes.", -1, NULL};

PyMODINIT_FUNC PyInit__flp_kernel(void) { return PyModule_Create(&module); }
