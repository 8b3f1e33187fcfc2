// Complex functions of `map` on the device: sqrt, exp, log, log1p, sin, cos, tanh and
// power of a complex128 value (its parts as doubles), each writing the result's two
// parts through pointers. Included in a fused map kernel only when its program uses one
// (`src/backend/cuda/source/map.rs`).
//
// The CPU backend calls the C library's csqrt, cexp, clog, csin, ccos, ctanh and cpow,
// as numpy does (`src/ops/expr/cmath.rs`). These are written for tilestream from the
// textbook algorithms named at each function, on CUDA's real functions, with the values
// ISO C (Annex G) gives at infinities, NaN and signed zeros: a finite result may differ
// from the CPU's in its last bits, as `exp` or `sin` of a real value may.
// `tests/it/cuda_emulation.rs` runs them on the host against the CPU backend: special
// values equal, finite results within a few units in the last place of the result's
// magnitude.

#define TS_C_INF __longlong_as_double(0x7ff0000000000000ll)
#define TS_C_NAN __longlong_as_double(0x7ff8000000000000ll)
#define TS_C_DBL_MAX 1.7976931348623157e308
#define TS_C_DBL_MIN 2.2250738585072014e-308
// exp(x) is finite for x <= TS_C_EXP_SAFE; exp(TS_C_EXP_SAFE) scales beyond it
#define TS_C_EXP_SAFE 709.0

// v * exp(t) for t > TS_C_EXP_SAFE (halved when `half`: cosh(t) = sinh(t) = exp(t) / 2
// in f64 there) without overflowing before the last product: exp(t) in factors of
// exp(TS_C_EXP_SAFE), the first applied before the halving so that a subnormal v (the
// sine of a subnormal angle) keeps its bits.
__device__ __forceinline__ static double ts_c_exp_times(double v, double t, bool half) {
    if (v == 0.0) {
        return v;
    }
    const double e = exp(TS_C_EXP_SAFE);
    v *= e;
    t -= TS_C_EXP_SAFE;
    if (half) {
        v *= 0.5;
    }
    if (t > TS_C_EXP_SAFE) {
        v *= e;
        t -= TS_C_EXP_SAFE;
    }
    return v * exp(t);
}

// The principal square root: W. Kahan's rearrangement (re = sqrt((|z| + a) / 2),
// im = b / (2 re), or the mirror for a < 0, avoiding cancellation), scaled by powers of
// 4 where |z| would overflow or lose bits to underflow.
__device__ __forceinline__ static void ts_csqrt(double a, double b, double* re, double* im) {
    if (isinf(b)) {
        *re = TS_C_INF;
        *im = b;
        return;
    }
    if (isnan(a)) {
        *re = a;
        *im = TS_C_NAN;
        return;
    }
    if (isinf(a)) {
        if (a < 0) {
            *re = isnan(b) ? TS_C_NAN : 0.0;
            *im = copysign(TS_C_INF, b);
        } else {
            *re = a;
            *im = isnan(b) ? TS_C_NAN : copysign(0.0, b);
        }
        return;
    }
    if (isnan(b)) {
        *re = TS_C_NAN;
        *im = TS_C_NAN;
        return;
    }
    if (b == 0.0) {
        if (a < 0) {
            *re = 0.0;
            *im = copysign(sqrt(-a), b);
        } else {
            *re = fabs(sqrt(a));
            *im = copysign(0.0, b);
        }
        return;
    }
    if (a == 0.0) {
        const double r = fabs(b) >= 2 * TS_C_DBL_MIN ? sqrt(0.5 * fabs(b)) : 0.5 * sqrt(2 * fabs(b));
        *re = r;
        *im = copysign(r, b);
        return;
    }
    int scale = 0;
    if (fabs(a) > TS_C_DBL_MAX / 4 || fabs(b) > TS_C_DBL_MAX / 4) {
        a = ldexp(a, -2);
        b = ldexp(b, -2);
        scale = 1;
    } else if (fabs(a) < 2 * TS_C_DBL_MIN && fabs(b) < 2 * TS_C_DBL_MIN) {
        a = ldexp(a, 54);
        b = ldexp(b, 54);
        scale = -27;
    }
    const double d = hypot(a, b);
    double r, s;
    if (a > 0) {
        r = sqrt(0.5 * (d + a));
        s = 0.5 * (b / r);
    } else {
        s = sqrt(0.5 * (d - a));
        r = fabs(0.5 * (b / s));
    }
    if (scale != 0) {
        r = ldexp(r, scale);
        s = ldexp(s, scale);
    }
    *re = r;
    *im = copysign(s, b);
}

// exp(a) (cos b + i sin b), exp(a) taken in two factors where it alone would overflow.
__device__ __forceinline__ static void ts_cexp(double a, double b, double* re, double* im) {
    if (isnan(a)) {
        *re = a;
        *im = b == 0.0 ? b : TS_C_NAN;
        return;
    }
    if (!isfinite(b)) {
        if (isinf(a)) {
            *re = a > 0 ? a : 0.0;
            *im = a > 0 ? TS_C_NAN : copysign(0.0, b);
        } else {
            *re = TS_C_NAN;
            *im = TS_C_NAN;
        }
        return;
    }
    if (b == 0.0) {
        *re = exp(a);
        *im = b;
        return;
    }
    const double s = sin(b), c = cos(b);
    if (isinf(a)) {
        const double v = a > 0 ? a : 0.0;
        *re = copysign(v, c);
        *im = copysign(v, s);
        return;
    }
    if (a > TS_C_EXP_SAFE) {
        *re = ts_c_exp_times(c, a, false);
        *im = ts_c_exp_times(s, a, false);
        return;
    }
    const double e = exp(a);
    *re = e * c;
    *im = e * s;
}

// log|z| + i arg z, log|z| as CPython's cmath computes it: rescaled where |z| overflows
// or is subnormal, log1p((m - 1)(m + 1) + n^2) / 2 near the unit circle.
__device__ __forceinline__ static void ts_clog(double a, double b, double* re, double* im) {
    const double ax = fabs(a), ay = fabs(b);
    if (isnan(ax) && isfinite(ay)) {
        *re = ax;
        *im = TS_C_NAN;
        return;
    }
    double r;
    if (ax > TS_C_DBL_MAX / 4 || ay > TS_C_DBL_MAX / 4) {
        r = log(hypot(ax / 2, ay / 2)) + 0.69314718055994530942;
    } else if (ax < TS_C_DBL_MIN && ay < TS_C_DBL_MIN) {
        if (ax > 0 || ay > 0) {
            r = log(hypot(ldexp(ax, 53), ldexp(ay, 53))) - 53 * 0.69314718055994530942;
        } else {
            r = -TS_C_INF;
        }
    } else {
        const double h = hypot(ax, ay);
        if (0.71 <= h && h <= 1.73) {
            const double m = ax > ay ? ax : ay, n = ax > ay ? ay : ax;
            r = log1p((m - 1) * (m + 1) + n * n) / 2;
        } else {
            r = log(h);
        }
    }
    *re = r;
    *im = atan2(b, a);
}

// numpy's own log1p of a complex value: log(hypot(a + 1, b)) + i atan2(b, a + 1).
__device__ __forceinline__ static void ts_clog1p(double a, double b, double* re, double* im) {
    const double r = a + 1;
    *re = log(hypot(r, b));
    *im = atan2(b, r);
}

// cosh(x + iy) = cosh x cos y + i sinh x sin y.
__device__ __forceinline__ static void ts_ccosh(double x, double y, double* re, double* im) {
    if (y == 0.0) {
        *re = cosh(x);
        *im = copysign(0.0, x) * y;
        return;
    }
    if (!isfinite(y)) {
        if (isinf(x)) {
            *re = TS_C_INF;
            *im = TS_C_NAN;
        } else if (x == 0.0) {
            *re = TS_C_NAN;
            *im = 0.0;
        } else {
            *re = TS_C_NAN;
            *im = TS_C_NAN;
        }
        return;
    }
    const double s = sin(y), c = cos(y);
    if (fabs(x) <= TS_C_EXP_SAFE) {
        *re = cosh(x) * c;
        *im = sinh(x) * s;
    } else {
        *re = ts_c_exp_times(c, fabs(x), true);
        *im = copysign(1.0, x) * ts_c_exp_times(s, fabs(x), true);
    }
}

// sinh(x + iy) = sinh x cos y + i cosh x sin y.
__device__ __forceinline__ static void ts_csinh(double x, double y, double* re, double* im) {
    if (y == 0.0) {
        *re = sinh(x);
        *im = y;
        return;
    }
    if (!isfinite(y)) {
        if (isinf(x) || x == 0.0) {
            *re = x;
            *im = TS_C_NAN;
        } else {
            *re = TS_C_NAN;
            *im = TS_C_NAN;
        }
        return;
    }
    const double s = sin(y), c = cos(y);
    if (fabs(x) <= TS_C_EXP_SAFE) {
        *re = sinh(x) * c;
        *im = cosh(x) * s;
    } else {
        *re = copysign(1.0, x) * ts_c_exp_times(c, fabs(x), true);
        *im = ts_c_exp_times(s, fabs(x), true);
    }
}

// sin z = -i sinh(i z); where ISO C leaves the sign of an infinite imaginary part open
// (a real part that is infinite or NaN, an infinite imaginary part) it is +inf, as the
// C library's.
__device__ __forceinline__ static void ts_csin(double a, double b, double* re, double* im) {
    double p, q;
    ts_csinh(-b, a, &p, &q);
    *re = q;
    *im = !isfinite(a) && isinf(b) ? TS_C_INF : -p;
}

// cos z = cosh(i z).
__device__ __forceinline__ static void ts_ccos(double a, double b, double* re, double* im) {
    ts_ccosh(-b, a, re, im);
}

// tanh(x + iy) = (sinh x cosh x + i sin y cos y) / (sinh^2 x + cos^2 y); beyond
// |x| = 354 the real part is +-1 and the imaginary part 4 sin y cos y exp(-2|x|).
__device__ __forceinline__ static void ts_ctanh(double x, double y, double* re, double* im) {
    if (!isfinite(x) || !isfinite(y)) {
        if (isinf(x)) {
            *re = copysign(1.0, x);
            *im = isfinite(y) && fabs(y) > 1 ? copysign(0.0, sin(y) * cos(y)) : copysign(0.0, y);
        } else if (y == 0.0) {
            *re = x;
            *im = y;
        } else {
            *re = x == 0.0 ? x : TS_C_NAN;
            *im = TS_C_NAN;
        }
        return;
    }
    const double s = sin(y), c = cos(y);
    if (fabs(x) > 354.0) {
        *re = copysign(1.0, x);
        *im = 4 * s * c * exp(-2 * fabs(x));
        return;
    }
    const double sh = sinh(x), ch = cosh(x);
    const double den = sh * sh + c * c;
    *re = sh * ch / den;
    *im = s * c / den;
}

// numpy's complex product without a fused multiply-add (`npy_cpow`'s cmul).
__device__ __forceinline__ static void ts_cmul(double ar, double ai, double br, double bi, double* re, double* im) {
    const double r1 = ar * br, i1 = ai * bi, r2 = ar * bi, i2 = ai * br;
    *re = r1 - i1;
    *im = r2 + i2;
}

// C's complex product (ISO C Annex G.5.1): the schoolbook product, and where both parts
// come out NaN but an operand or a partial product is infinite, the infinity recovered
// (an infinite operand's parts taken as +-1 or +-0, NaN parts as +-0).
__device__ __forceinline__ static void ts_cmul_annex_g(double a, double b, double c, double d, double* re, double* im) {
    const double ac = a * c, bd = b * d, ad = a * d, bc = b * c;
    double x = ac - bd, y = ad + bc;
    if (isnan(x) && isnan(y)) {
        bool again = false;
        if (isinf(a) || isinf(b)) {
            a = copysign(isinf(a) ? 1.0 : 0.0, a);
            b = copysign(isinf(b) ? 1.0 : 0.0, b);
            if (isnan(c)) c = copysign(0.0, c);
            if (isnan(d)) d = copysign(0.0, d);
            again = true;
        }
        if (isinf(c) || isinf(d)) {
            c = copysign(isinf(c) ? 1.0 : 0.0, c);
            d = copysign(isinf(d) ? 1.0 : 0.0, d);
            if (isnan(a)) a = copysign(0.0, a);
            if (isnan(b)) b = copysign(0.0, b);
            again = true;
        }
        if (!again && (isinf(ac) || isinf(bd) || isinf(ad) || isinf(bc))) {
            if (isnan(a)) a = copysign(0.0, a);
            if (isnan(b)) b = copysign(0.0, b);
            if (isnan(c)) c = copysign(0.0, c);
            if (isnan(d)) d = copysign(0.0, d);
            again = true;
        }
        if (again) {
            x = TS_C_INF * (a * c - b * d);
            y = TS_C_INF * (a * d + b * c);
        }
    }
    *re = x;
    *im = y;
}

// a ** b as numpy's np.power computes it (`npy_cpow`): 1 for b = 0, 0 or NaN for a = 0,
// repeated products for an integer exponent below 100 in magnitude (then Smith's
// division of 1 for a negative one), exp(b log a) otherwise (C's product: the C
// library's cpow is that).
__device__ __forceinline__ static void ts_cpow(double ar, double ai, double br, double bi, double* re, double* im) {
    if (br == 0.0 && bi == 0.0) {
        *re = 1.0;
        *im = 0.0;
        return;
    }
    if (ar == 0.0 && ai == 0.0) {
        *re = br > 0 ? 0.0 : TS_C_NAN;
        *im = br > 0 ? 0.0 : TS_C_NAN;
        return;
    }
    if (bi == 0.0 && br > -100.0 && br < 100.0 && (double)(long long)br == br) {
        long long n = (long long)br;
        if (n == 1) {
            *re = ar;
            *im = ai;
            return;
        }
        if (n == 2) {
            ts_cmul(ar, ai, ar, ai, re, im);
            return;
        }
        if (n == 3) {
            double r, i;
            ts_cmul(ar, ai, ar, ai, &r, &i);
            ts_cmul(ar, ai, r, i, re, im);
            return;
        }
        if (n < 0) {
            n = -n;
        }
        double accr = 1.0, acci = 0.0, pr = ar, pi = ai;
        for (long long mask = 1;; mask <<= 1) {
            if (n & mask) {
                ts_cmul(accr, acci, pr, pi, &accr, &acci);
            }
            if (n < (mask << 1)) {
                break;
            }
            ts_cmul(pr, pi, pr, pi, &pr, &pi);
        }
        if (br < 0) {
            // Smith's division of 1 by acc
            const double abr = fabs(accr), abi = fabs(acci);
            if (abr >= abi) {
                if (abr == 0.0 && abi == 0.0) {
                    *re = 1.0 / abr;
                    *im = 0.0 / abi;
                } else {
                    const double rat = acci / accr, scl = 1.0 / (accr + acci * rat);
                    *re = (1.0 + 0.0 * rat) * scl;
                    *im = (0.0 - 1.0 * rat) * scl;
                }
            } else {
                const double rat = accr / acci, scl = 1.0 / (acci + accr * rat);
                *re = (1.0 * rat + 0.0) * scl;
                *im = (0.0 * rat - 1.0) * scl;
            }
        } else {
            *re = accr;
            *im = acci;
        }
        return;
    }
    double lr, li, pr, pi;
    ts_clog(ar, ai, &lr, &li);
    ts_cmul_annex_g(br, bi, lr, li, &pr, &pi);
    ts_cexp(pr, pi, re, im);
}
