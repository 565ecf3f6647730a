/* The wire's bit packing of field elements (sqm.mpc.net.wire.pack_bits and packed_bits) compiled: the same bytes
 * and the same integers as the numpy functions.  Optional: wire loads it through ctypes only where it was built and
 * agrees with numpy on a sample; otherwise the numpy functions run.  The module is a CPython extension only so that
 * setuptools builds it; its functions are called by address through ctypes (which releases the GIL), with
 * C-contiguous arrays. */
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* n field elements a (in [0, 2^(32 + h))) to out: each one's low 32 bits as 4 little-endian bytes, then per group
 * of k elements (the last one padded with zeros) their high h bits, element i at bit i h of a little-endian word
 * of which the nb low bytes are written.  Returns 0, or -1 for an argument out of range. */
int sqm_wire_pack(const int64_t *a, int64_t n, int64_t h, int64_t k, int64_t nb, uint8_t *out)
{
    if (n < 0 || h < 1 || k < 1 || nb < 1 || nb > 8 || k * h > 64)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t lo = (uint32_t)(uint64_t)a[i];
        memcpy(out + 4 * i, &lo, 4); /* x86 and the other little-endian processors: the bytes as numpy's "<u4" */
    }
    uint8_t *o = out + 4 * n;
    for (int64_t g = 0; g * k < n; g++) {
        uint64_t word = 0;
        for (int64_t i = 0; i < k && g * k + i < n; i++)
            word |= (uint64_t)(a[g * k + i] >> 32) << (i * h); /* numpy's bits for any int64 too */
        for (int64_t b = 0; b < nb; b++)
            o[b] = (uint8_t)(word >> (8 * b));
        o += nb;
    }
    return 0;
}

/* The inverse of sqm_wire_pack for n elements (the padding's bits ignored) to out, and the count of elements not
 * below p (returned; -1 for an argument out of range). */
int64_t sqm_wire_unpack(const uint8_t *b, int64_t n, int64_t h, int64_t k, int64_t nb, int64_t p, int64_t *out)
{
    if (n < 0 || h < 1 || h > 31 || k < 1 || nb < 1 || nb > 8 || k * h > 64)
        return -1;
    const uint8_t *hb = b + 4 * n;
    uint64_t mask = ((uint64_t)1 << h) - 1;
    int64_t bad = 0;
    for (int64_t g = 0; g * k < n; g++) {
        uint64_t word = 0;
        for (int64_t j = 0; j < nb; j++)
            word |= (uint64_t)hb[j] << (8 * j);
        hb += nb;
        for (int64_t i = 0; i < k && g * k + i < n; i++) {
            int64_t e = g * k + i;
            uint32_t lo;
            memcpy(&lo, b + 4 * e, 4);
            int64_t v = (int64_t)((((word >> (i * h)) & mask) << 32) | lo);
            out[e] = v;
            bad += v >= p;
        }
    }
    return bad;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire_kernel",
                                    "The wire's compiled bit packing, called through ctypes.", -1, NULL};

PyMODINIT_FUNC PyInit__wire_kernel(void) { return PyModule_Create(&module); }
