// Reductions over tiles, with the CPU's order of operations (src/ops/reduce.rs), so a
// GPU result has the same bits as the CPU's whatever the tiling:
//
// The reduced data of one outer index is a matrix of `vcols` columns (the inner axes, or
// 8 lanes when nothing follows the reduced axis). Each column is summed sequentially
// within fixed blocks of `block_rows` rows; each block's partial is merged into the
// column's total in block order; at the end of the outer index the total is finished
// (on the host, by the CPU's own code).
//
// A tile holds flat elements [start, start + n). Two kernels per tile:
//   - ts_reduce_blocks: one thread per (outer, block, column) cell the tile touches,
//     pushing the column's rows of that block that lie in the tile, in order, starting
//     from the carried open partial when the block began in an earlier tile;
//   - ts_reduce_merge: one thread per (outer, column), merging the cells of blocks
//     complete by the tile's end in block order; outer indices the tile completes go to
//     `done` (finished by the host); the carried state (total, open partial, shift, as
//     the CPU's State) is read from one buffer and written to the other, swapped per
//     tile, since the first and the last outer index of a tile are different threads.
// Instantiated per operation and dtype as extern "C" reduce_{blocks,merge}_<op>_<dtype>
// by src/backend/cuda/source.rs. Compiled with --fmad=false: d * d + q is not fused.

// Everything a launch needs to know about its tile, the reduction's geometry and the
// input's nodata value (all u64, so the host's #[repr(C)] twin has the same layout).
struct TsReduceTile {
    unsigned long long start;       // first flat element of the tile
    unsigned long long n;           // elements in the tile
    unsigned long long per;         // elements per outer index (len * inner)
    unsigned long long vcols;       // columns of the virtual matrix
    unsigned long long block_rows;  // rows per block
    unsigned long long wide;        // 1 when inner > 1 (vcols = inner), 0 for lanes
    unsigned long long first;       // the tile's first outer index
    unsigned long long n_o;         // outer indices the tile touches
    unsigned long long b0;          // first block touched in the first outer index
    unsigned long long b1;          // last block touched in the last outer index
    unsigned long long nb;          // blocks per outer index
    unsigned long long count_first; // blocks touched in the first outer index
    unsigned long long has_nodata;  // 1 when elements equal to `nodata` are missing
    unsigned long long nodata;      // the nodata value's bytes (little-endian, zero-padded)
};

// ---- element order and limits (as src/dtype.rs: PartialOrd, LOWEST, HIGHEST) --------

template <typename T> struct TsOrd {  // integers
    __device__ static __forceinline__ bool lt(T a, T b) { return a < b; }
    __device__ static __forceinline__ bool eq(T a, T b) { return a == b; }
    __device__ static __forceinline__ bool nan(T) { return false; }
};
template <> struct TsOrd<ts_bool> {  // the byte, as the derived order of Bool(u8)
    __device__ static __forceinline__ bool lt(ts_bool a, ts_bool b) { return a.v < b.v; }
    __device__ static __forceinline__ bool eq(ts_bool a, ts_bool b) { return a.v == b.v; }
    __device__ static __forceinline__ bool nan(ts_bool) { return false; }
};
#define TS_FLOAT_ORD(T)                                                                  \
    template <> struct TsOrd<T> {                                                        \
        __device__ static __forceinline__ bool lt(T a, T b) {                            \
            return Elem<T>::to_f64(a) < Elem<T>::to_f64(b);                              \
        }                                                                                \
        __device__ static __forceinline__ bool eq(T a, T b) {                            \
            return Elem<T>::to_f64(a) == Elem<T>::to_f64(b);                             \
        }                                                                                \
        __device__ static __forceinline__ bool nan(T x) {                                \
            double d = Elem<T>::to_f64(x);                                               \
            return d != d;                                                               \
        }                                                                                \
    };
TS_FLOAT_ORD(ts_f32)
TS_FLOAT_ORD(ts_f64)
TS_FLOAT_ORD(ts_f16)
TS_FLOAT_ORD(ts_bf16)

template <typename T> struct TsLimits;
#define TS_INT_LIMITS(T, LO, HI)                                                         \
    template <> struct TsLimits<T> {                                                     \
        __device__ static __forceinline__ T lowest() { return (T)(LO); }                 \
        __device__ static __forceinline__ T highest() { return (T)(HI); }                \
    };
TS_INT_LIMITS(ts_u8, 0, 255)
TS_INT_LIMITS(ts_u16, 0, 65535)
TS_INT_LIMITS(ts_u32, 0, 4294967295ull)
TS_INT_LIMITS(ts_u64, 0, 18446744073709551615ull)
TS_INT_LIMITS(ts_i8, -128, 127)
TS_INT_LIMITS(ts_i16, -32768, 32767)
TS_INT_LIMITS(ts_i32, (-2147483647 - 1), 2147483647)
TS_INT_LIMITS(ts_i64, (-9223372036854775807ll - 1), 9223372036854775807ll)
template <> struct TsLimits<ts_bool> {
    __device__ static __forceinline__ ts_bool lowest() { ts_bool b; b.v = 0; return b; }
    __device__ static __forceinline__ ts_bool highest() { ts_bool b; b.v = 1; return b; }
};
template <> struct TsLimits<ts_f32> {
    __device__ static __forceinline__ float lowest() { return __uint_as_float(0xff800000u); }
    __device__ static __forceinline__ float highest() { return __uint_as_float(0x7f800000u); }
};
template <> struct TsLimits<ts_f64> {
    __device__ static __forceinline__ double lowest() {
        return __longlong_as_double((long long)0xfff0000000000000ull);
    }
    __device__ static __forceinline__ double highest() {
        return __longlong_as_double((long long)0x7ff0000000000000ull);
    }
};
template <> struct TsLimits<ts_f16> {
    __device__ static __forceinline__ ts_f16 lowest() { ts_f16 h; h.bits = 0xfc00u; return h; }
    __device__ static __forceinline__ ts_f16 highest() { ts_f16 h; h.bits = 0x7c00u; return h; }
};
template <> struct TsLimits<ts_bf16> {
    __device__ static __forceinline__ ts_bf16 lowest() { ts_bf16 h; h.bits = 0xff80u; return h; }
    __device__ static __forceinline__ ts_bf16 highest() { ts_bf16 h; h.bits = 0x7f80u; return h; }
};

// ---- the accumulators (src/backend/cpu/reduce.rs: FloatSum, IntSum, Moments, MinK,
// MaxK, and the NaN- and nodata-aware NanFloatSum, NanMoments, NanExtreme, CountK,
// NodataIntSum, NodataExtreme) ----------------------------------------------------
//
// Each is a struct made once per thread from the launch's arguments (`make`: the nodata
// value, for the forms that leave elements out), with `push` (one element, `shift` the
// column's variance shift), the static `zero` and `merge`, and `shift` (the shift an
// element gives, as the CPU's Kernel::shift).

// The families that take no launch parameter.
#define TS_PLAIN(K)                                                                      \
    __device__ static __forceinline__ K make(const TsReduceTile&) { return K(); }        \
    __device__ __forceinline__ double shift(T x) const { return Elem<T>::to_f64(x); }

// Float sum and mean: f64.
template <typename T> struct TsFSum {
    typedef double A;
    static const bool SHIFT = false;
    TS_PLAIN(TsFSum)
    __device__ static __forceinline__ A zero() { return 0.0; }
    __device__ __forceinline__ void push(A& a, T x, double) const { a = a + Elem<T>::to_f64(x); }
    __device__ static __forceinline__ void merge(A& a, A b) { a = a + b; }
};

// The value of an integer element as wrapping 64-bit bits (the CPU's `to_i64`).
template <typename T> __device__ __forceinline__ unsigned long long ts_ibits(T x) {
    return Elem<T>::SIGNED ? (unsigned long long)Elem<T>::sval(x) : Elem<T>::uval(x);
}

// Integer sum and mean: wrapping 64-bit (the bits of the CPU's i64 wrapping_add).
template <typename T> struct TsISum {
    typedef unsigned long long A;
    static const bool SHIFT = false;
    TS_PLAIN(TsISum)
    __device__ static __forceinline__ A zero() { return 0ull; }
    __device__ __forceinline__ void push(A& a, T x, double) const { a += ts_ibits(x); }
    __device__ static __forceinline__ void merge(A& a, A b) { a += b; }
};

// Variance and std: sums of d and d * d, d = x - shift.
struct TsMom { double s, q; };
template <typename T> struct TsMoments {
    typedef TsMom A;
    static const bool SHIFT = true;
    TS_PLAIN(TsMoments)
    __device__ static __forceinline__ A zero() { A a; a.s = 0.0; a.q = 0.0; return a; }
    __device__ __forceinline__ void push(A& a, T x, double shift) const {
        double d = Elem<T>::to_f64(x) - shift;
        a.s = a.s + d;
        a.q = a.q + d * d;
    }
    __device__ static __forceinline__ void merge(A& a, A b) {
        a.s = a.s + b.s;
        a.q = a.q + b.q;
    }
};

// Min and max in the input's type; a NaN wins and stays.
template <typename T> struct TsMin {
    typedef T A;
    static const bool SHIFT = false;
    TS_PLAIN(TsMin)
    __device__ static __forceinline__ A zero() { return TsLimits<T>::highest(); }
    __device__ static __forceinline__ void take(A& a, T x) {
        if (TsOrd<T>::lt(x, a) || TsOrd<T>::nan(x)) a = x;
    }
    __device__ __forceinline__ void push(A& a, T x, double) const { take(a, x); }
    __device__ static __forceinline__ void merge(A& a, A b) { take(a, b); }
};
template <typename T> struct TsMax {
    typedef T A;
    static const bool SHIFT = false;
    TS_PLAIN(TsMax)
    __device__ static __forceinline__ A zero() { return TsLimits<T>::lowest(); }
    __device__ static __forceinline__ void take(A& a, T x) {
        if (TsOrd<T>::lt(a, x) || TsOrd<T>::nan(x)) a = x;
    }
    __device__ __forceinline__ void push(A& a, T x, double) const { take(a, x); }
    __device__ static __forceinline__ void merge(A& a, A b) { take(a, b); }
};

// An element's bytes as the low bytes of a u64 (the CPU's ArgK::bits), and back.
template <typename T> __device__ __forceinline__ unsigned long long ts_to_bits(T x) {
    unsigned long long b = 0ull;
    memcpy(&b, &x, sizeof(T));
    return b;
}
template <typename T> __device__ __forceinline__ T ts_from_bits(unsigned long long b) {
    T x;
    memcpy(&x, &b, sizeof(T));
    return x;
}

// Which elements the NaN-aware forms take: not NaN, and not the nodata value when the
// launch has one (compared as values of the type: -0.0 is 0.0's nodata too), as the
// CPU's NotNan and NotNodata.
template <typename T> struct TsValid {
    bool has;
    T nd;
    __device__ static __forceinline__ TsValid make(const TsReduceTile& t) {
        TsValid v;
        v.has = t.has_nodata != 0ull;
        v.nd = ts_from_bits<T>(t.nodata);
        return v;
    }
    __device__ __forceinline__ bool ok(T x) const {
        return !TsOrd<T>::nan(x) && !(has && TsOrd<T>::eq(x, nd));
    }
};

// The families with a validity test: `make` reads it from the launch; an element left
// out gives the shift 0.
#define TS_MASKED(K)                                                                     \
    TsValid<T> v;                                                                        \
    __device__ static __forceinline__ K make(const TsReduceTile& t) {                    \
        K k;                                                                             \
        k.v = TsValid<T>::make(t);                                                       \
        return k;                                                                        \
    }                                                                                    \
    __device__ __forceinline__ double shift(T x) const {                                 \
        return v.ok(x) ? Elem<T>::to_f64(x) : 0.0;                                       \
    }

// nansum and nanmean: (sum, count) in f64, a missing element adding 0.0 (not skipped:
// -0.0 + 0.0 is 0.0 on the CPU too).
struct TsF2 { double s, n; };
template <typename T> struct TsNanFSum {
    typedef TsF2 A;
    static const bool SHIFT = false;
    TS_MASKED(TsNanFSum)
    __device__ static __forceinline__ A zero() { A a; a.s = 0.0; a.n = 0.0; return a; }
    __device__ __forceinline__ void push(A& a, T x, double) const {
        bool ok = v.ok(x);
        a.s = a.s + (ok ? Elem<T>::to_f64(x) : 0.0);
        a.n = a.n + (ok ? 1.0 : 0.0);
    }
    __device__ static __forceinline__ void merge(A& a, A b) {
        a.s = a.s + b.s;
        a.n = a.n + b.n;
    }
};

// nanvar and nanstd: sums of d, d * d and the count.
struct TsMom3 { double s, q, n; };
template <typename T> struct TsNanMoments {
    typedef TsMom3 A;
    static const bool SHIFT = true;
    TS_MASKED(TsNanMoments)
    __device__ static __forceinline__ A zero() { A a; a.s = 0.0; a.q = 0.0; a.n = 0.0; return a; }
    __device__ __forceinline__ void push(A& a, T x, double shift) const {
        bool ok = v.ok(x);
        double d = Elem<T>::to_f64(x) - shift;
        a.s = a.s + (ok ? d : 0.0);
        a.q = a.q + (ok ? d * d : 0.0);
        a.n = a.n + (ok ? 1.0 : 0.0);
    }
    __device__ static __forceinline__ void merge(A& a, A b) {
        a.s = a.s + b.s;
        a.q = a.q + b.q;
        a.n = a.n + b.n;
    }
};

// nanmin and nanmax of a float type: (value in f64, count), NaN for none (the host).
template <typename T, bool MAX> struct TsNanExtreme {
    typedef TsF2 A;
    static const bool SHIFT = false;
    TS_MASKED(TsNanExtreme)
    __device__ static __forceinline__ bool better(double x, double than) {
        return MAX ? x > than : x < than;
    }
    __device__ static __forceinline__ A zero() {
        A a;
        a.s = MAX ? -__longlong_as_double(0x7ff0000000000000ll)
                  : __longlong_as_double(0x7ff0000000000000ll);
        a.n = 0.0;
        return a;
    }
    __device__ __forceinline__ void push(A& a, T x, double) const {
        double d = Elem<T>::to_f64(x);
        bool ok = v.ok(x);
        if (ok && better(d, a.s)) a.s = d;
        a.n = a.n + (ok ? 1.0 : 0.0);
    }
    __device__ static __forceinline__ void merge(A& a, A b) {
        if (better(b.s, a.s)) a.s = b.s;
        a.n = a.n + b.n;
    }
};

// count: the valid elements, as the CPU's i64.
template <typename T> struct TsCount {
    typedef unsigned long long A;
    static const bool SHIFT = false;
    TS_MASKED(TsCount)
    __device__ static __forceinline__ A zero() { return 0ull; }
    __device__ __forceinline__ void push(A& a, T x, double) const { a += v.ok(x) ? 1ull : 0ull; }
    __device__ static __forceinline__ void merge(A& a, A b) { a += b; }
};

// nansum of an integer type with a nodata value: wrapping 64-bit, the nodata adding 0.
template <typename T> struct TsNodataISum {
    typedef unsigned long long A;
    static const bool SHIFT = false;
    TS_MASKED(TsNodataISum)
    __device__ static __forceinline__ A zero() { return 0ull; }
    __device__ __forceinline__ void push(A& a, T x, double) const {
        a += v.ok(x) ? ts_ibits(x) : 0ull;
    }
    __device__ static __forceinline__ void merge(A& a, A b) { a += b; }
};

// nanmin and nanmax of an integer type with a nodata value, compared in the type:
// (the value's bits, count); the type's extreme while empty.
struct TsU2 { unsigned long long b, n; };
template <typename T, bool MAX> struct TsNodataExtreme {
    typedef TsU2 A;
    static const bool SHIFT = false;
    TS_MASKED(TsNodataExtreme)
    __device__ static __forceinline__ bool better(T x, T than) {
        return MAX ? TsOrd<T>::lt(than, x) : TsOrd<T>::lt(x, than);
    }
    __device__ static __forceinline__ A zero() {
        A a;
        a.b = ts_to_bits<T>(MAX ? TsLimits<T>::lowest() : TsLimits<T>::highest());
        a.n = 0ull;
        return a;
    }
    __device__ __forceinline__ void push(A& a, T x, double) const {
        bool ok = v.ok(x);
        if (ok && better(x, ts_from_bits<T>(a.b))) a.b = ts_to_bits<T>(x);
        a.n += ok ? 1ull : 0ull;
    }
    __device__ static __forceinline__ void merge(A& a, A b) {
        if (better(ts_from_bits<T>(b.b), ts_from_bits<T>(a.b))) a.b = b.b;
        a.n += b.n;
    }
};
template <typename T> using TsNanMin = TsNanExtreme<T, false>;
template <typename T> using TsNanMax = TsNanExtreme<T, true>;
template <typename T> using TsNodataMin = TsNodataExtreme<T, false>;
template <typename T> using TsNodataMax = TsNodataExtreme<T, true>;

// ---- where a (outer, column) lies in the tile ---------------------------------------

struct TsSpan {
    unsigned long long base;   // flat index of the outer index's position 0
    unsigned long long p0, p1; // its positions inside the tile: [p0, p1)
    unsigned long long rows;   // rows of the column (0 for a lane beyond a short outer)
    unsigned long long rlo;    // the column's first row inside the tile
    unsigned long long rhi;    // one past its last row inside the tile
};

__device__ __forceinline__ TsSpan ts_span(const TsReduceTile& t, unsigned long long ol,
                                          unsigned long long c) {
    TsSpan s;
    s.base = (t.first + ol) * t.per;
    s.p0 = ol == 0 ? t.start - s.base : 0;
    unsigned long long end = t.start + t.n - s.base;
    s.p1 = end < t.per ? end : t.per;
    s.rows = c < t.per ? (t.per - c + t.vcols - 1) / t.vcols : 0;
    s.rlo = s.p0 > c ? (s.p0 - c + t.vcols - 1) / t.vcols : 0;
    s.rhi = s.p1 > c ? (s.p1 - 1 - c) / t.vcols + 1 : 0;
    if (s.rhi > s.rows) s.rhi = s.rows;
    return s;
}

// The shift of (outer, column): its first element (the outer's first element for lanes),
// from the tile when it is in it, else the carried one. `known` says whether it is either.
template <typename T, typename K>
__device__ __forceinline__ double ts_shift(const K& k, const T* x, const TsReduceTile& t,
                                           const TsSpan& s,
                                           unsigned long long ol, unsigned long long c,
                                           const double* shift, bool* in_tile) {
    if (t.wide) {
        if (ol == 0 && s.p0 > c) { *in_tile = false; return shift[c]; }
        if (c < s.p1) { *in_tile = true; return k.shift(x[s.base + c - t.start]); }
        *in_tile = false;
        return 0.0;
    }
    if (ol == 0 && s.p0 > 0) { *in_tile = false; return shift[c]; }
    *in_tile = true;
    return k.shift(x[s.base - t.start]);
}

// The (outer, block) of cell pair q.
__device__ __forceinline__ void ts_pair(const TsReduceTile& t, unsigned long long q,
                                        unsigned long long* ol, unsigned long long* b) {
    if (q < t.count_first) {
        *ol = 0;
        *b = t.b0 + q;
    } else {
        unsigned long long r = q - t.count_first;
        *ol = 1 + r / t.nb;
        *b = r % t.nb;
    }
}

template <typename T, typename K>
__device__ __forceinline__ void ts_reduce_blocks(const T* __restrict__ x, TsReduceTile t,
                                                 const typename K::A* __restrict__ open,
                                                 const double* __restrict__ shift,
                                                 typename K::A* __restrict__ part,
                                                 unsigned long long cells) {
    const K k = K::make(t);
    TS_FOR_EACH(i, cells) {
        unsigned long long c = i % t.vcols, ol, b;
        ts_pair(t, i / t.vcols, &ol, &b);
        TsSpan s = ts_span(t, ol, c);
        typename K::A a = K::zero();
        unsigned long long blo = b * t.block_rows;
        unsigned long long bhi = blo + t.block_rows < s.rows ? blo + t.block_rows : s.rows;
        // begun in an earlier tile and not finished there: continue its partial
        if (ol == 0 && blo < s.rlo && s.rlo < bhi) a = open[c];
        unsigned long long r0 = blo > s.rlo ? blo : s.rlo;
        unsigned long long r1 = bhi < s.rhi ? bhi : s.rhi;
        if (r0 < r1) {
            bool in_tile;
            double sh = K::SHIFT ? ts_shift(k, x, t, s, ol, c, shift, &in_tile) : 0.0;
            const T* p = x + (s.base + c - t.start);
            for (unsigned long long r = r0; r < r1; ++r) k.push(a, p[r * t.vcols], sh);
        }
        part[i] = a;
    }
}

template <typename T, typename K>
__device__ __forceinline__ void ts_reduce_merge(const T* __restrict__ x, TsReduceTile t,
                                                const typename K::A* __restrict__ total,
                                                const typename K::A* __restrict__ open,
                                                const double* __restrict__ shift,
                                                const typename K::A* __restrict__ part,
                                                typename K::A* __restrict__ done,
                                                typename K::A* __restrict__ total_out,
                                                typename K::A* __restrict__ open_out,
                                                double* __restrict__ shift_out) {
    const K k = K::make(t);
    TS_FOR_EACH(i, t.n_o * t.vcols) {
        unsigned long long c = i % t.vcols, ol = i / t.vcols;
        TsSpan s = ts_span(t, ol, c);
        typename K::A tot = ol == 0 ? total[c] : K::zero();
        typename K::A opn = K::zero();
        unsigned long long bfrom = ol == 0 ? t.b0 : 0;
        unsigned long long bto = ol + 1 == t.n_o ? t.b1 : t.nb - 1;
        unsigned long long q = ol == 0 ? 0 : t.count_first + (ol - 1) * t.nb;
        for (unsigned long long b = bfrom; b <= bto; ++b, ++q) {
            unsigned long long blo = b * t.block_rows;
            unsigned long long bhi = blo + t.block_rows < s.rows ? blo + t.block_rows : s.rows;
            if (blo >= bhi || bhi <= s.rlo || blo >= s.rhi) continue;  // none of it here
            typename K::A v = part[q * t.vcols + c];
            if (bhi <= s.rhi) {
                K::merge(tot, v);  // the block ends inside the tile
            } else {
                opn = v;  // it goes on in the next tile
            }
        }
        if (s.p1 == t.per) done[i] = tot;
        // The state the next tile starts from (written by the last outer index's threads
        // only, into the other buffer: the first outer index's threads read this one):
        // reset after a finished outer index, as the CPU's State::reset; the shift of a
        // column not reached yet is kept.
        if (ol + 1 == t.n_o) {
            bool finished = s.p1 == t.per;
            total_out[c] = finished ? K::zero() : tot;
            open_out[c] = finished ? K::zero() : opn;
            bool in_tile = false;
            double sh =
                K::SHIFT && !finished ? ts_shift(k, x, t, s, ol, c, shift, &in_tile) : 0.0;
            shift_out[c] = in_tile ? sh : shift[c];
        }
    }
}
