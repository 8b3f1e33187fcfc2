"""numpy and dask baselines for every task of the comparison harness (compare.py).

    python baselines.py TASK ENGINE IN.npy [OUT.npy [W.npy]]

TASK: colmean, colstd, map_f16, standardize, matmul, gaussian.
ENGINE:
  whole   numpy on the whole memmap, written as you would if it fitted in memory
  blocks  numpy on the memmap in 64 MiB row blocks, written into a memmapped .npy
          (what a careful numpy user writes for a file larger than memory)
  dask    dask.array over the same memmap with 64 MiB row chunks, default threaded
          scheduler, outputs stored into a memmapped .npy with da.store
Outputs are flushed to disk at the end (flush(), i.e. msync), as tilestream and the C
limit do. Statistics are computed in float64, as tilestream does, except where the whole
array variant uses numpy's defaults (noted below).
"""
import sys

import numpy as np

BLOCK = 64 << 20
SIGMA, RADIUS = 2.0, 8  # scipy: radius = int(4.0 * sigma + 0.5)


def block_rows(x):
    return max(1, BLOCK // (int(np.prod(x.shape[1:])) * x.itemsize))


def out_memmap(path, dtype, shape):
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)


def blocks(x):
    r = block_rows(x)
    for i in range(0, x.shape[0], r):
        yield i, x[i:i + r]


def main():
    task, engine, src = sys.argv[1:4]
    dst = sys.argv[4] if len(sys.argv) > 4 else None
    x = np.load(src, mmap_mode="r")
    n = x.shape[0]
    if engine == "dask":
        import dask.array as da
        d = da.from_array(x, chunks=(block_rows(x),) + x.shape[1:])

    if task in ("colmean", "colstd"):
        if engine == "whole":
            m = x.mean(0, dtype=np.float64) if task == "colmean" else x.std(0, dtype=np.float64)
        elif engine == "blocks":
            s = np.zeros(x.shape[1])
            q = np.zeros(x.shape[1])
            for _, b in blocks(x):
                if task == "colmean":
                    s += b.sum(0, dtype=np.float64)
                else:
                    b = b.astype(np.float64)
                    s += b.sum(0)
                    q += np.einsum("ij,ij->j", b, b)
            m = s / n if task == "colmean" else np.sqrt(np.maximum(q / n - (s / n) ** 2, 0))
        else:
            m = (d.mean(0, dtype=np.float64) if task == "colmean" else d.std(0, dtype=np.float64)).compute()
        print(m[:3])
        return

    if task == "map_f16":
        if engine == "whole":
            y = out_memmap(dst, np.float16, x.shape)
            y[:] = (x * 2 + 1).astype(np.float16)
        elif engine == "blocks":
            y = out_memmap(dst, np.float16, x.shape)
            for i, b in blocks(x):
                y[i:i + len(b)] = (b * 2 + 1).astype(np.float16)
        else:
            y = out_memmap(dst, np.float16, x.shape)
            da.store((d * 2 + 1).astype(np.float16), y, lock=False)
    elif task == "standardize":
        if engine == "whole":
            # the one-liner, with numpy's default (float32) statistics
            y = out_memmap(dst, np.float32, x.shape)
            y[:] = (x - x.mean(0)) / x.std(0)
        elif engine == "blocks":
            s = np.zeros(x.shape[1])
            q = np.zeros(x.shape[1])
            for _, b in blocks(x):
                b = b.astype(np.float64)
                s += b.sum(0)
                q += np.einsum("ij,ij->j", b, b)
            mean = s / n
            std = np.sqrt(np.maximum(q / n - mean ** 2, 0))
            y = out_memmap(dst, np.float32, x.shape)
            for i, b in blocks(x):
                y[i:i + len(b)] = (b - mean) / std
        else:
            y = out_memmap(dst, np.float32, x.shape)
            z = (d - d.mean(0, dtype=np.float64)) / d.std(0, dtype=np.float64)
            da.store(z.astype(np.float32), y, lock=False)
    elif task == "matmul":
        w = np.load(sys.argv[5])
        y = out_memmap(dst, np.float32, (n, w.shape[1]))
        if engine == "whole":
            y[:] = x @ w
        elif engine == "blocks":
            for i, b in blocks(x):
                y[i:i + len(b)] = b @ w
        else:
            da.store(d @ w, y, lock=False)
    elif task == "gaussian":
        import scipy.ndimage as ndi
        y = out_memmap(dst, np.float32, x.shape)
        if engine == "whole":
            y[:] = ndi.gaussian_filter(x, SIGMA)
        elif engine == "blocks":
            r = block_rows(x)
            for i in range(0, n, r):
                lo, hi = max(0, i - RADIUS), min(n, i + r + RADIUS)
                f = ndi.gaussian_filter(x[lo:hi], SIGMA)
                y[i:min(n, i + r)] = f[i - lo:i - lo + min(r, n - i)]
        else:
            g = d.map_overlap(ndi.gaussian_filter, depth=RADIUS, boundary="reflect", sigma=SIGMA,
                              dtype=np.float32)
            da.store(g, y, lock=False)
    else:
        sys.exit(f"unknown task {task}")
    y.flush()


if __name__ == "__main__":
    main()
