// Matmul with a resident right-hand side: Y (rows x n) = X (rows x k) @ W (k x n), for a
// tile of X's rows in X's own dtype, W resident on the device in the compute type C (f32
// or f64: src/ops/matmul.rs chooses it, exact for both operands), Y cast to the output
// dtype once, as the CPU does (src/backend/cpu/matmul.rs).
//
// Each output element is one chain of fused multiply-adds over k in ascending order,
// starting from +0: a row's result depends only on that row and W, so the bytes do not
// depend on the tile, the budget, the number of streams or the launch shape. The CPU's
// blocked sgemm/dgemm (matrixmultiply) sums in another order, so the devices agree to
// rounding, and exactly wherever every partial sum is exact (integer-valued data).
// Instantiated per (X, C, Y) as extern "C" matmul_<x>_<c>_<y> by
// src/backend/cuda/source.rs.

template <typename C> struct TsFma;
template <> struct TsFma<float> {
    __device__ static __forceinline__ float f(float a, float b, float c) { return fmaf(a, b, c); }
};
template <> struct TsFma<double> {
    __device__ static __forceinline__ double f(double a, double b, double c) { return fma(a, b, c); }
};

// One thread per output element (grid-stride): the threads of a warp share a row of X
// (one broadcast load) and read consecutive columns of W (coalesced).
template <typename I, typename C, typename O>
__device__ __forceinline__ void ts_matmul(const I* __restrict__ x, O* __restrict__ y,
                                          unsigned long long rows, const C* __restrict__ w,
                                          unsigned long long k, unsigned long long n) {
    TS_FOR_EACH(i, rows * n) {
        unsigned long long r = i / n, j = i - r * n;
        const I* xr = x + r * k;
        C acc = 0;
        for (unsigned long long p = 0; p < k; ++p) {
            acc = TsFma<C>::f(Elem<C>::from_f64(Elem<I>::to_f64(xr[p])), w[p * n + j], acc);
        }
        y[i] = Elem<O>::from_f64(Elem<C>::to_f64(acc));
    }
}
