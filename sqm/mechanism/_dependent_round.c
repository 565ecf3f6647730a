/* Dependent rounding's pairing loop (sqm.mechanism.quantize._round_rows) compiled: the same IEEE-754 double
 * operations in the same order on every value, so the same integers, bit for bit.  Optional: quantize loads it
 * through ctypes only where it was built and agrees with the numpy kernel on a sample; otherwise the numpy kernel
 * runs.  Built with -O2 -ffp-contract=off -fno-fast-math: no fused multiply-add, no reassociation.
 *
 * Rows are independent; they are taken BATCH at a time, column by column within each group, so that the steps
 * of a batch's rows (one per row, each a chain of divisions) overlap in the processor instead of waiting on one
 * another.  The module is a CPython extension only so that setuptools builds it; its function is called by
 * address through ctypes (which releases the GIL), with C-contiguous arrays. */
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define BATCH 16 /* rows at a time: four vectors of four doubles, independent of one another */
#define LANES 4
#define VECS (BATCH / LANES)

typedef double v4d __attribute__((vector_size(32), may_alias)); /* read where doubles were written */
typedef long long v4i __attribute__((vector_size(32), may_alias));

/* the processors' vector instructions where they have them (AVX2), chosen when the module loads; the same IEEE
 * operations on each lane either way */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* a where m (lanes -1 or 0) else b, bit for bit: the numpy kernel's _select */
static inline v4d sel(v4i m, v4d a, v4d b) { return (v4d)(((v4i)a & m) | ((v4i)b & ~m)); }
static inline v4i sel_i(v4i m, v4i a, v4i b) { return (a & m) | (b & ~m); }
/* np.minimum/np.maximum for non-NaN values (no NaN reaches a lane that counts); where the two are equal they
 * differ at most in the sign of a zero, which no comparison or integer sees */
static inline v4d vmin(v4d a, v4d b) { return sel(a < b, a, b); }
static inline v4d vmax(v4d a, v4d b) { return sel(a > b, a, b); }

/* One batch of nb <= BATCH rows starting at row r0, transposed into work: for column j, its BATCH rows at
 * work + j * BATCH (five such tables of d * BATCH values: fraction, floor, coin, bit decided, carried). */
CLONES static void batch(const double *x, const double *coins, int64_t r0, int64_t nb, int64_t d, double gamma,
                         const int64_t *cols, const int64_t *starts, int64_t ngroups, int64_t *out, v4d *work)
{
    const v4d zero = {0.0, 0.0, 0.0, 0.0}, one = {1.0, 1.0, 1.0, 1.0}, mone = {-1.0, -1.0, -1.0, -1.0};
    double *fr = (double *)work, *lo = fr + d * BATCH, *cn = lo + d * BATCH;
    v4i *bit = (v4i *)(cn + d * BATCH), *took = bit + d * VECS;
    /* gamma x, its floor and fraction, and the coins, row by row as they lie; rows past nb integral (never
     * paired, never written) */
    for (int64_t k = 0; k < nb; k++) {
        const double *xr = x + (r0 + k) * d, *ur = coins + (r0 + k) * d;
        for (int64_t j = 0; j < d; j++) {
            const double y = xr[j] * gamma;
            const double low = floor(y);
            fr[j * BATCH + k] = y - low; /* exact (Sterbenz) */
            lo[j * BATCH + k] = low;
            cn[j * BATCH + k] = ur[j];
        }
    }
    for (int64_t k = nb; k < BATCH; k++)
        for (int64_t j = 0; j < d; j++)
            fr[j * BATCH + k] = lo[j * BATCH + k] = cn[j * BATCH + k] = 0.0;
    const v4d *vfr = (const v4d *)fr, *vcn = (const v4d *)cn;
    v4d *vlo = (v4d *)lo;
    for (int64_t g = 0; g < ngroups; g++) {
        v4d p[VECS], nw1[VECS], coin0[VECS];
        v4i has[VECS];
        for (int v = 0; v < VECS; v++) {
            p[v] = zero;
            nw1[v] = mone; /* where no fraction is carried yet: keeps the unused divisions finite */
            coin0[v] = zero;
            has[v] = (v4i){0, 0, 0, 0};
        }
        for (int64_t c = starts[g]; c < starts[g + 1]; c++) {
            const int64_t j = cols[c];
            for (int v = 0; v < VECS; v++) {
                const int64_t at = j * VECS + v;
                const v4d p2 = vfr[at], u = vcn[at], pk = p[v], n1 = nw1[v];
                v4d nw2 = vlo[at] * (v4d){-2.0, -2.0, -2.0, -2.0};
                nw2 = nw2 - one; /* -w_j, odd */
                const v4i live = p2 > zero, h = has[v], pair = live & h;
                /* the rooms of p (moved by w_j s) and of p_j (moved by -w_c s), as quotients by signed weights */
                const v4d pm1 = pk - one;
                const v4d a1 = pm1 / nw2;
                const v4d a2 = pk / nw2;
                const v4d q2 = one - p2;
                const v4d np2 = -p2;
                const v4d b1 = q2 / n1;
                const v4d b2 = np2 / n1;
                const v4d ua = vmax(a1, a2), ub = vmax(b1, b2);
                const v4d la = vmin(a1, a2), lb = vmin(b1, b2);
                const v4d s_up = vmin(ua, ub);
                const v4d nsd = vmax(la, lb); /* minus the largest step down */
                v4d tot = nsd - s_up;
                tot = tot * u;
                const v4i go = tot > nsd;
                const v4i f1 = (ua <= ub) & go;
                const v4i f2 = (la >= lb) & ~go;
                const v4i fs = (f1 | f2) & pair; /* p settles first */
                const v4d s = sel(go, s_up, nsd);
                v4d m1 = nw2 * s;
                m1 = pk - m1;
                v4d m2 = n1 * s;
                m2 = p2 + m2;
                v4d nv = sel(fs, m2, m1);
                nv = vmin(nv, one);
                nv = vmax(nv, zero);
                const v4d w = sel(fs, nw2, n1);
                const v4i start = live & ~h; /* a chain begins at column j */
                p[v] = sel(start, p2, sel(pair, nv, pk));
                nw1[v] = sel(start, nw2, w);
                coin0[v] = sel(start, u, coin0[v]);
                has[v] = h | start;
                bit[at] = ((w < zero) ^ fs ^ go) & pair; /* the bit decided */
                took[at] = fs | start;                   /* column j became the carried one */
            }
        }
        /* each chain's last fraction by its first coin; then, backwards, each column that became the carried one
         * takes the bit decided where it was next settled; floor + bit, in place of the floor */
        for (int v = 0; v < VECS; v++) {
            v4i nxt = coin0[v] < p[v];
            for (int64_t c = starts[g + 1] - 1; c >= starts[g]; c--) {
                const int64_t at = cols[c] * VECS + v;
                const v4i b = sel_i(took[at], nxt, bit[at]);
                nxt = sel_i(took[at], bit[at], nxt);
                vlo[at] = vlo[at] + sel(b, one, zero);
            }
        }
    }
    for (int64_t k = 0; k < nb; k++) {
        int64_t *orow = out + (r0 + k) * d;
        for (int64_t j = 0; j < d; j++)
            orow[j] = (int64_t)lo[j * BATCH + k];
    }
}

/* Dependent rounding of the n x d row-major block x (coins: one per value, same layout) into out (n x d int64).
 * Groups: cols[starts[g]:starts[g + 1]] for g < ngroups, disjoint and covering 0..d-1 (the caller checks).
 * Returns 0, or -1 where its work buffer cannot be allocated. */
int sqm_dependent_round(const double *x, const double *coins, int64_t n, int64_t d, double gamma,
                        const int64_t *cols, const int64_t *starts, int64_t ngroups, int64_t *out)
{
    if (n <= 0 || d <= 0)
        return 0;
    v4d *work = aligned_alloc(sizeof(v4d), (size_t)(5 * d * BATCH) * sizeof(double));
    if (!work)
        return -1;
    for (int64_t r0 = 0; r0 < n; r0 += BATCH)
        batch(x, coins, r0, n - r0 < BATCH ? n - r0 : BATCH, d, gamma, cols, starts, ngroups, out, work);
    free(work);
    return 0;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dependent_round",
                                    "Dependent rounding's compiled pairing loop, called through ctypes.", -1, NULL};

PyMODINIT_FUNC PyInit__dependent_round(void) { return PyModule_Create(&module); }
