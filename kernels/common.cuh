// Common header of tilestream's CUDA kernels: element types and the casts tilestream
// applies wherever a result changes type, written to give the same bits as the CPU
// backend (src/dtype.rs):
//   - to floats: round to nearest even; f16 and bf16 through f32 rounded *to odd*
//     first (src/dtype.rs f32_round_to_odd), so the result is one correct rounding;
//   - to integers: toward zero, saturating at the type's limits, NaN to 0;
//   - to bool: != 0 (NaN is true);
//   - integer to integer: exact, saturating.
// No CUDA header is needed: f16/bf16 conversions are PTX `cvt` instructions (sm_80+).
// With TS_HOST_EMULATION the same code compiles as host C++ (tests/it/cuda_emulation.rs
// runs every kernel that way against the CPU backend); the three `cvt`s are then the
// host's IEEE conversions.
// Compiled with --fmad=false: like Rust, nothing is contracted unless written as fma().

typedef unsigned char ts_u8;
typedef unsigned short ts_u16;
typedef unsigned int ts_u32;
typedef unsigned long long ts_u64;
typedef signed char ts_i8;
typedef short ts_i16;
typedef int ts_i32;
typedef long long ts_i64;
typedef float ts_f32;
typedef double ts_f64;
struct ts_bool { unsigned char v; };
struct ts_f16 { unsigned short bits; };
struct ts_bf16 { unsigned short bits; };

// ---- float helpers ---------------------------------------------------------------

__device__ __forceinline__ float ts_f16_to_f32(unsigned short h) {
    if ((h & 0x7fffu) > 0x7c00u) {  // NaN: quieted, payload kept (as F16C does)
        return __uint_as_float((((unsigned int)h & 0x8000u) << 16) | 0x7fc00000u |
                               (((unsigned int)h & 0x3ffu) << 13));
    }
#ifdef TS_HOST_EMULATION
    return ts_host_f16_to_f32(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ float ts_bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// NaN conversions as x86 does them (quieted, sign and top payload bits kept), spelled
// out so the bits do not depend on how the GPU's cvt treats a NaN.
__device__ __forceinline__ float ts_f64_to_f32(double v) {
    if (v != v) {
        unsigned long long b = (unsigned long long)__double_as_longlong(v);
        return __uint_as_float((unsigned int)((b >> 32) & 0x80000000u) | 0x7fc00000u |
                               (unsigned int)((b >> 29) & 0x3fffffu));
    }
    return (float)v;  // round to nearest even
}

__device__ __forceinline__ double ts_f32_to_f64(float f) {
    if (f != f) {
        unsigned long long x = __float_as_uint(f);
        return __longlong_as_double((long long)(((x & 0x80000000ull) << 32) |
                                                0x7ff8000000000000ull |
                                                ((x & 0x3fffffull) << 29)));
    }
    return (double)f;
}

// f64 -> f32 rounded to odd: the CPU's branchless formula, operation for operation.
__device__ __forceinline__ float ts_f32_round_to_odd(double v) {
    float t = ts_f64_to_f32(v);
    double back = (double)t;
    unsigned int inexact = (back != v) & (fabsf(t) < __int_as_float(0x7f800000));
    unsigned int away = fabs(back) > fabs(v);
    return __uint_as_float((__float_as_uint(t) - (inexact & away)) | inexact);
}

// f32 -> f16 as x86 F16C does it (round to nearest even; NaN: quiet, sign and top
// payload bits kept).
__device__ __forceinline__ unsigned short ts_f32_to_f16(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
#ifdef TS_HOST_EMULATION
    return ts_host_f32_to_f16(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// f32 -> bf16 as the `half` crate does it (round to nearest even; NaN: top bits, quiet).
__device__ __forceinline__ unsigned short ts_f32_to_bf16(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((x >> 16) | 0x0040u);
    }
#ifdef TS_HOST_EMULATION
    return ts_host_f32_to_bf16(f);
#else
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// ---- element traits ----------------------------------------------------------------
// Elem<T>::to_f64, from_f64 (casts from float results), and for integer casts
// SIGNED / ival (the value as a 64-bit integer) / from_int (saturating).

template <typename T> struct Elem;

#define TS_INT_ELEM(T, S, LO, HI)                                                        \
    template <> struct Elem<T> {                                                       \
        static const bool IS_FLOAT = false;                                            \
        static const bool SIGNED = S;                                                  \
        __device__ static __forceinline__ double to_f64(T x) { return (double)x; }     \
        __device__ static __forceinline__ T from_f64(double v) {                       \
            if (v != v) return (T)0;                                                   \
            if (v <= (double)(LO)) return (T)(LO);                                     \
            if (v >= (double)(HI)) return (T)(HI);                                     \
            return (T)v;                                                               \
        }                                                                              \
        __device__ static __forceinline__ long long sval(T x) { return (long long)x; } \
        __device__ static __forceinline__ unsigned long long uval(T x) {               \
            return (unsigned long long)x;                                              \
        }                                                                              \
        __device__ static __forceinline__ T from_signed(long long v) {                 \
            if (S) {                                                                   \
                if (v < (long long)(LO)) return (T)(LO);                               \
                if (v > (long long)(HI)) return (T)(HI);                               \
                return (T)v;                                                           \
            }                                                                          \
            if (v < 0) return (T)0;                                                    \
            return from_unsigned((unsigned long long)v);                               \
        }                                                                              \
        __device__ static __forceinline__ T from_unsigned(unsigned long long v) {      \
            if (v > (unsigned long long)(HI)) return (T)(HI);                          \
            return (T)v;                                                               \
        }                                                                              \
    };

TS_INT_ELEM(ts_u8, false, 0, 255)
TS_INT_ELEM(ts_u16, false, 0, 65535)
TS_INT_ELEM(ts_u32, false, 0, 4294967295ull)
TS_INT_ELEM(ts_u64, false, 0, 18446744073709551615ull)
TS_INT_ELEM(ts_i8, true, -128, 127)
TS_INT_ELEM(ts_i16, true, -32768, 32767)
TS_INT_ELEM(ts_i32, true, (-2147483647 - 1), 2147483647)
TS_INT_ELEM(ts_i64, true, (-9223372036854775807ll - 1), 9223372036854775807ll)

template <> struct Elem<ts_bool> {
    static const bool IS_FLOAT = false;
    static const bool SIGNED = false;
    __device__ static __forceinline__ double to_f64(ts_bool x) { return x.v != 0 ? 1.0 : 0.0; }
    __device__ static __forceinline__ ts_bool from_f64(double v) {
        ts_bool b;
        b.v = v != 0.0;
        return b;
    }
    __device__ static __forceinline__ long long sval(ts_bool x) { return x.v != 0; }
    __device__ static __forceinline__ unsigned long long uval(ts_bool x) { return x.v != 0; }
    __device__ static __forceinline__ ts_bool from_signed(long long v) {
        ts_bool b;
        b.v = v != 0;
        return b;
    }
    __device__ static __forceinline__ ts_bool from_unsigned(unsigned long long v) {
        ts_bool b;
        b.v = v != 0;
        return b;
    }
};

template <> struct Elem<ts_f32> {
    static const bool IS_FLOAT = true;
    __device__ static __forceinline__ double to_f64(float x) { return ts_f32_to_f64(x); }
    __device__ static __forceinline__ float from_f64(double v) { return ts_f64_to_f32(v); }
    // integers to f32 round once, from the integer (Rust's `i128 as f32`)
    __device__ static __forceinline__ float from_signed(long long v) { return (float)v; }
    __device__ static __forceinline__ float from_unsigned(unsigned long long v) { return (float)v; }
};

template <> struct Elem<ts_f64> {
    static const bool IS_FLOAT = true;
    __device__ static __forceinline__ double to_f64(double x) { return x; }
    __device__ static __forceinline__ double from_f64(double v) { return v; }
    __device__ static __forceinline__ double from_signed(long long v) { return (double)v; }
    __device__ static __forceinline__ double from_unsigned(unsigned long long v) { return (double)v; }
};

template <> struct Elem<ts_f16> {
    static const bool IS_FLOAT = true;
    __device__ static __forceinline__ double to_f64(ts_f16 x) { return ts_f32_to_f64(ts_f16_to_f32(x.bits)); }
    __device__ static __forceinline__ ts_f16 from_f64(double v) {
        ts_f16 h;
        h.bits = ts_f32_to_f16(ts_f32_round_to_odd(v));
        return h;
    }
    // the CPU goes through f64 (exact below 2^53; larger values are infinite in f16)
    __device__ static __forceinline__ ts_f16 from_signed(long long v) { return from_f64((double)v); }
    __device__ static __forceinline__ ts_f16 from_unsigned(unsigned long long v) { return from_f64((double)v); }
};

template <> struct Elem<ts_bf16> {
    static const bool IS_FLOAT = true;
    __device__ static __forceinline__ double to_f64(ts_bf16 x) { return ts_f32_to_f64(ts_bf16_to_f32(x.bits)); }
    __device__ static __forceinline__ ts_bf16 from_f64(double v) {
        ts_bf16 h;
        h.bits = ts_f32_to_bf16(ts_f32_round_to_odd(v));
        return h;
    }
    __device__ static __forceinline__ ts_bf16 from_signed(long long v) { return from_f64((double)v); }
    __device__ static __forceinline__ ts_bf16 from_unsigned(unsigned long long v) { return from_f64((double)v); }
};

// A grid-stride loop over n elements. The host emulation can walk it backwards
// (TS_HOST_REVERSE): a kernel whose threads read what other threads of the same launch
// write gives another result in the other order, which the emulation tests catch.
#if defined(TS_HOST_EMULATION) && defined(TS_HOST_REVERSE)
#define TS_FOR_EACH(i, n)                                                                 \
    for (unsigned long long ts_n_ = (n), i = ts_n_ - 1; i < ts_n_; --i)
#else
#define TS_FOR_EACH(i, n)                                                                 \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)gridDim.x * blockDim.x)
#endif
