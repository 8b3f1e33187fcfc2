// Transpose of one block, the in-memory half of the out-of-core transpose (the CPU's:
// src/backend/cpu/transpose.rs): the block of `rows` x `cols` elements from column `c0`
// of a window of `rows` rows of `row_len` elements becomes `cols` x `rows` in `dst`.
// Elements are moved as unsigned integers of their size, so every dtype keeps its bits
// (NaN payloads included). One thread per output element (grid-stride): consecutive
// threads write consecutive elements.
// Instantiated per element size as extern "C" transpose_<u8|u16|u32|u64> by
// src/backend/cuda/source.rs.

template <typename T>
__device__ __forceinline__ void ts_transpose(const T* __restrict__ src, T* __restrict__ dst,
                                             unsigned long long row_len,
                                             unsigned long long c0, unsigned long long rows,
                                             unsigned long long cols) {
    TS_FOR_EACH(o, rows * cols) {
        unsigned long long j = o / rows, i = o - j * rows;
        dst[o] = src[i * row_len + c0 + j];
    }
}
