// Elementwise kernels over one tile: affine (y = cast(fma(x, scale, offset))), cast,
// and standardize (y = cast((x - mean[c]) / std[c]), c = (flat index / inner) % cols:
// inner 1 per column, the elements of a channel per channel).
// Instantiated per dtype pair as extern "C" <op>_<in>_<out> by the generated wrapper
// (src/backend/cuda/source.rs), the same arithmetic as src/ops/elementwise.rs.

template <typename I, typename O>
__device__ __forceinline__ void ts_affine(const I* __restrict__ x, O* __restrict__ y,
                                          unsigned long long n, double scale, double offset) {
    TS_FOR_EACH(i, n) { y[i] = Elem<O>::from_f64(fma(Elem<I>::to_f64(x[i]), scale, offset)); }
}

// Integers to anything go through the integer path (exact, saturating), as on the CPU.
template <typename I, typename O, bool INT_IN, bool SIGNED_IN> struct TsCast;

template <typename I, typename O, bool SIGNED_IN> struct TsCast<I, O, true, SIGNED_IN> {
    __device__ static __forceinline__ O one(I x) {
        return SIGNED_IN ? Elem<O>::from_signed(Elem<I>::sval(x))
                         : Elem<O>::from_unsigned(Elem<I>::uval(x));
    }
};

template <typename I, typename O, bool SIGNED_IN> struct TsCast<I, O, false, SIGNED_IN> {
    __device__ static __forceinline__ O one(I x) { return Elem<O>::from_f64(Elem<I>::to_f64(x)); }
};

template <typename I> struct TsSigned { static const bool V = false; };
template <> struct TsSigned<ts_i8> { static const bool V = true; };
template <> struct TsSigned<ts_i16> { static const bool V = true; };
template <> struct TsSigned<ts_i32> { static const bool V = true; };
template <> struct TsSigned<ts_i64> { static const bool V = true; };

template <typename I, typename O>
__device__ __forceinline__ void ts_cast(const I* __restrict__ x, O* __restrict__ y,
                                        unsigned long long n) {
    TS_FOR_EACH(i, n) {
        y[i] = TsCast<I, O, !Elem<I>::IS_FLOAT, TsSigned<I>::V>::one(x[i]);
    }
}

// A cast to the same dtype copies the bytes (a bool byte of 0xd4 stays 0xd4), as the
// CPU does; overload resolution prefers this more specialized template.
template <typename T>
__device__ __forceinline__ void ts_cast(const T* __restrict__ x, T* __restrict__ y,
                                        unsigned long long n) {
    TS_FOR_EACH(i, n) { y[i] = x[i]; }
}

template <typename I, typename O>
__device__ __forceinline__ void ts_standardize(const I* __restrict__ x, O* __restrict__ y,
                                               unsigned long long n, unsigned long long start,
                                               const double* __restrict__ mean,
                                               const double* __restrict__ sd,
                                               unsigned long long cols,
                                               unsigned long long inner) {
    TS_FOR_EACH(i, n) {
        unsigned long long c = ((start + i) / inner) % cols;
        y[i] = Elem<O>::from_f64((Elem<I>::to_f64(x[i]) - mean[c]) / sd[c]);
    }
}
