// `tilestream gen` on the device: element i of the tensor is a function of (seed, i)
// alone, the same steps as src/ops/generate.rs operation for operation (compiled with
// --fmad=false, so nothing is contracted), hence the CPU's bytes:
//   - 64 random bits from Philox4x32-10 keyed by the seed, counter i / 2 (words 0-1 for
//     even i, 2-3 for odd);
//   - a normal draw: Wichura's AS 241 inverse normal CDF of (k + 1/2) / 2^52, k the top
//     52 bits, with fdlibm's logarithm written from IEEE operations (ts_ln), not the
//     CUDA math library's log (whose last bit may differ from the CPU's);
//   - a uniform draw: low + (high - low) * (top 53 bits / 2^53), kept below high.
// Instantiated per distribution and output dtype as extern "C" gen_<dist>_<dtype>
// (gen_normal_f32) by src/backend/cuda/source.rs, arguments (y, n, start, seed,
// last_dim, a, b): a, b are (mean, std) for normal, (low, high) for uniform.

__device__ __forceinline__ void ts_philox4x32_10(unsigned int c[4], unsigned int k0,
                                                 unsigned int k1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned long long p0 = 0xD2511F53ull * c[0];
        unsigned long long p1 = 0xCD9E8D57ull * c[2];
        unsigned int n0 = (unsigned int)(p1 >> 32) ^ c[1] ^ k0;
        unsigned int n2 = (unsigned int)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = (unsigned int)p1;
        c[2] = n2;
        c[3] = (unsigned int)p0;
    }
}

__device__ __forceinline__ unsigned long long ts_gen_bits(unsigned long long seed,
                                                          unsigned long long idx) {
    unsigned long long pair = idx >> 1;
    unsigned int c[4] = {(unsigned int)pair, (unsigned int)(pair >> 32), 0u, 0u};
    ts_philox4x32_10(c, (unsigned int)seed, (unsigned int)(seed >> 32));
    return (idx & 1) ? ((unsigned long long)c[3] << 32 | c[2])
                     : ((unsigned long long)c[1] << 32 | c[0]);
}

// fdlibm's __ieee754_log for positive, finite, normal x (src/ops/generate.rs `ln`).
__device__ __forceinline__ double ts_ln(double x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10,
                 lg1 = 6.666666666666735130e-01, lg2 = 3.999999999940941908e-01,
                 lg3 = 2.857142874366239149e-01, lg4 = 2.222219843214978396e-01,
                 lg5 = 1.818357216161805012e-01, lg6 = 1.531383769920937332e-01,
                 lg7 = 1.479819860511658591e-01;
    unsigned long long bits = (unsigned long long)__double_as_longlong(x);
    int hx = (int)(bits >> 32);
    int k = (hx >> 20) - 1023;
    hx &= 0x000fffff;
    int i = (hx + 0x95f64) & 0x100000;
    double m = __longlong_as_double(
        (long long)(((unsigned long long)(unsigned int)(hx | (i ^ 0x3ff00000)) << 32) |
                    (bits & 0xffffffffull)));
    k += i >> 20;
    double f = m - 1.0;
    double dk = (double)k;
    if ((0x000fffff & (2 + hx)) < 3) {
        if (f == 0.0) return k == 0 ? 0.0 : dk * ln2_hi + dk * ln2_lo;
        double r = f * f * (0.5 - 0.33333333333333333 * f);
        return k == 0 ? f - r : dk * ln2_hi - ((r - dk * ln2_lo) - f);
    }
    double s = f / (2.0 + f);
    double z = s * s;
    double w = z * z;
    double t1 = w * (lg2 + w * (lg4 + w * lg6));
    double t2 = z * (lg1 + w * (lg3 + w * (lg5 + w * lg7)));
    double r = t2 + t1;
    double hfsq = 0.5 * f * f;
    if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) {
        return k == 0 ? f - (hfsq - s * (hfsq + r))
                      : dk * ln2_hi - ((hfsq - (s * (hfsq + r) + dk * ln2_lo)) - f);
    }
    return k == 0 ? f - s * (f - r) : dk * ln2_hi - ((s * (f - r) - dk * ln2_lo) - f);
}

// Wichura's AS 241 (PPND16), src/ops/generate.rs `normal_quantile`.
__device__ __forceinline__ double ts_normal_quantile(double p) {
    double q = p - 0.5;
    if (fabs(q) <= 0.425) {
        double r = 0.180625 - q * q;
        double num = (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r +
                           6.7265770927008700853e+4) * r + 4.5921953931549871457e+4) * r +
                         1.3731693765509461125e+4) * r + 1.9715909503065514427e+3) * r +
                       1.3314166789178437745e+2) * r + 3.3871328727963666080e+0) * q;
        double den = ((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r +
                          3.9307895800092710610e+4) * r + 2.1213794301586595867e+4) * r +
                        5.3941960214247511077e+3) * r + 6.8718700749205790830e+2) * r +
                      4.2313330701600911252e+1) * r + 1.0;
        return num / den;
    }
    double r = sqrt(-ts_ln(q <= 0.0 ? p : 1.0 - p));
    double num, den;
    if (r <= 5.0) {
        r = r - 1.6;
        num = ((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r +
                   2.41780725177450611770e-1) * r + 1.27045825245236838258e+0) * r +
                 3.64784832476320460504e+0) * r + 5.76949722146069140550e+0) * r +
               4.63033784615654529590e+0) * r + 1.42343711074968357734e+0;
        den = ((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r +
                   1.51986665636164571966e-2) * r + 1.48103976427480074590e-1) * r +
                 6.89767334985100004550e-1) * r + 1.67638483018380384940e+0) * r +
               2.05319162663775882187e+0) * r + 1.0;
    } else {
        r = r - 5.0;
        num = ((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r +
                   1.24266094738807843860e-3) * r + 2.65321895265761230930e-2) * r +
                 2.96560571828504891230e-1) * r + 1.78482653991729133580e+0) * r +
               5.46378491116411436990e+0) * r + 6.65790464350110377720e+0;
        den = ((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r +
                   1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r +
                 1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r +
               5.99832206555887937690e-1) * r + 1.0;
    }
    double x = num / den;
    return q < 0.0 ? -x : x;
}

// (k + 1/2) / 2^52 for the top 52 bits k: in (0, 1), symmetric about 1/2.
__device__ __forceinline__ double ts_open_unit(unsigned long long bits) {
    return ((double)(bits >> 12) + 0.5) * (1.0 / 4503599627370496.0);
}

// The largest double below finite x.
__device__ __forceinline__ double ts_below(double x) {
    long long b = __double_as_longlong(x);
    if (x > 0.0) return __longlong_as_double(b - 1);
    if (x == 0.0) return -__longlong_as_double(1);
    return __longlong_as_double(b + 1);
}

#define TS_GEN_DEMO 0
#define TS_GEN_NORMAL 1
#define TS_GEN_UNIFORM 2

template <int DIST>
__device__ __forceinline__ double ts_gen_value(unsigned long long bits, unsigned long long idx,
                                               unsigned long long last_dim, double a,
                                               double b) {
    if (DIST == TS_GEN_DEMO) {
        unsigned long long col = last_dim > 0 ? idx % last_dim : 0;
        return ts_normal_quantile(ts_open_unit(bits)) + (double)col / 100.0;
    }
    if (DIST == TS_GEN_NORMAL) return a + b * ts_normal_quantile(ts_open_unit(bits));
    double u = (double)(bits >> 11) * (1.0 / 9007199254740992.0);
    double v = a + (b - a) * u;
    double hb = ts_below(b);
    return v < hb ? v : hb;
}

template <typename O, int DIST>
__device__ __forceinline__ void ts_gen(O* __restrict__ y, unsigned long long n,
                                       unsigned long long start, unsigned long long seed,
                                       unsigned long long last_dim, double a, double b) {
    TS_FOR_EACH(i, n) {
        unsigned long long idx = start + i;
        y[i] = Elem<O>::from_f64(ts_gen_value<DIST>(ts_gen_bits(seed, idx), idx, last_dim, a, b));
    }
}
