// Neighbourhood filters over one tile's padded box, with the CPU's order of operations
// (src/spec/ops/stencil/cpu.rs): the box is gathered on the host (the boundary modes,
// the CPU's own code), then these kernels run the filter's passes on the device, in the
// filter's float type F (f32, or f64 for wide inputs). Compiled with --fmad=false, each
// sum is the CPU's sequence of roundings: a tap sum is w[0]*x0, then + w[t]*xt in tap
// order; a dense sum starts from 0. So the bytes are the CPU's whatever the tile.
// Which kernel runs when, with which arguments, is src/backend/cuda/source.rs's
// StencilProgram::launches (pure, run on the host by tests/it/cuda_stencil_emulation.rs).
// Instantiated per (F, output) as extern "C" stencil_<kind>_<f>_<o>.

// A result stored as O: the cast rules, or the value itself when O is F (as the CPU
// copies an f32 or f64 result without converting it).
template <typename F, typename O> struct TsStore {
    __device__ static __forceinline__ O of(F v) { return Elem<O>::from_f64(Elem<F>::to_f64(v)); }
};
template <typename F> struct TsStore<F, F> {
    __device__ static __forceinline__ F of(F v) { return v; }
};

// One 1-D pass: out[i*ncols + j] = sum over t of w[t] * src[first + i*stride + j + t*step].
// mask_axis 1: an output column j with mask_first + j outside [0, mask_len) is the
// constant cval (a rows pass of a constant boundary: the intermediate outside the image
// is the constant, as scipy pads each 1-D pass); 2: the same for output rows.
template <typename F, typename O>
__device__ __forceinline__ void ts_stencil_taps(
    const F* __restrict__ src, O* __restrict__ out, const F* __restrict__ w,
    unsigned long long ntaps, unsigned long long nrows, unsigned long long ncols,
    unsigned long long stride, unsigned long long first, unsigned long long step,
    unsigned long long mask_axis, long long mask_first, long long mask_len, double cval) {
    TS_FOR_EACH(o, nrows * ncols) {
        unsigned long long i = o / ncols, j = o - i * ncols;
        long long m = mask_axis == 1 ? mask_first + (long long)j : mask_first + (long long)i;
        F acc;
        if (mask_axis != 0 && (m < 0 || m >= mask_len)) {
            acc = Elem<F>::from_f64(cval);
        } else {
            const F* s = src + first + i * stride + j;
            acc = w[0] * s[0];
            for (unsigned long long t = 1; t < ntaps; ++t) acc = acc + w[t] * s[t * step];
        }
        out[o] = TsStore<F, O>::of(acc);
    }
}

// A dense correlation (convolve, its kernel already flipped): out[i*tw + j] = 0 + sum
// over (a, b) in row-major order of w[a*kcols + b] * padded[(i+a+dr)*pw + j+b+dc].
template <typename F, typename O>
__device__ __forceinline__ void ts_stencil_dense(
    const F* __restrict__ padded, O* __restrict__ out, const F* __restrict__ w,
    unsigned long long krows, unsigned long long kcols, unsigned long long th,
    unsigned long long tw, unsigned long long pw, unsigned long long dr, unsigned long long dc) {
    TS_FOR_EACH(o, th * tw) {
        unsigned long long i = o / tw, j = o - i * tw;
        F acc = 0;
        for (unsigned long long a = 0; a < krows; ++a) {
            const F* row = padded + (i + a + dr) * pw + j + dc;
            for (unsigned long long b = 0; b < kcols; ++b) acc = acc + w[a * kcols + b] * row[b];
        }
        out[o] = TsStore<F, O>::of(acc);
    }
}

// The order key of a float (Rust's total_cmp: -NaN < -inf < ... < -0 < +0 < ... < NaN)
// as a signed integer, and back (the map is its own inverse).
template <typename F> struct TsKey;
template <> struct TsKey<float> {
    typedef int K;
    __device__ static __forceinline__ int of(float v) {
        int b = (int)__float_as_uint(v);
        return b ^ (int)(((unsigned int)(b >> 31)) >> 1);
    }
    __device__ static __forceinline__ float back(int k) {
        return __uint_as_float((unsigned int)(k ^ (int)(((unsigned int)(k >> 31)) >> 1)));
    }
};
template <> struct TsKey<double> {
    typedef long long K;
    __device__ static __forceinline__ long long of(double v) {
        long long b = __double_as_longlong(v);
        return b ^ (long long)(((unsigned long long)(b >> 63)) >> 1);
    }
    __device__ static __forceinline__ double back(long long k) {
        return __longlong_as_double(k ^ (long long)(((unsigned long long)(k >> 63)) >> 1));
    }
};

// The median of each S x S window (the upper median for even sizes): the element of
// rank S*S/2 in the total order, as the CPU's select_nth_unstable_by(total_cmp) picks
// (elements equal in that order have the same bits, so any selection gives the same
// value). A sorting network over the window held in registers: TsMedianNet<S>::sort,
// straight-line compare-exchanges generated on the host (src/spec/ops/stencil/cuda.rs,
// sorting_network: Batcher's odd-even merge sort, 394 comparators for S = 7 against
// 1176 for an odd-even transposition sort), emitted after this file.
template <int S> struct TsMedianNet;
#define TS_CX(x, y)                                   \
    {                                                 \
        K lo_ = v[x] < v[y] ? v[x] : v[y];            \
        K hi_ = v[x] < v[y] ? v[y] : v[x];            \
        v[x] = lo_;                                   \
        v[y] = hi_;                                   \
    }

template <typename F, typename O, int S>
__device__ __forceinline__ void ts_stencil_median(const F* __restrict__ padded,
                                                  O* __restrict__ out, unsigned long long th,
                                                  unsigned long long tw, unsigned long long pw) {
    typedef typename TsKey<F>::K K;
    TS_FOR_EACH(o, th * tw) {
        unsigned long long i = o / tw, j = o - i * tw;
        K v[S * S];
#pragma unroll
        for (int a = 0; a < S; ++a) {
#pragma unroll
            for (int b = 0; b < S; ++b) v[a * S + b] = TsKey<F>::of(padded[(i + a) * pw + j + b]);
        }
        TsMedianNet<S>::sort(v);
        out[o] = TsStore<F, O>::of(TsKey<F>::back(v[(S * S) / 2]));
    }
}

// Sobel's magnitude: out = sqrt(a*a + b*b), each product rounded, then the sum.
template <typename F, typename O>
__device__ __forceinline__ void ts_stencil_hypot(const F* __restrict__ a,
                                                 const F* __restrict__ b, O* __restrict__ out,
                                                 unsigned long long n) {
    TS_FOR_EACH(o, n) {
        F x = a[o], y = b[o];
        out[o] = TsStore<F, O>::of(sqrt(x * x + y * y));
    }
}
