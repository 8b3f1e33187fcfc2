#!/usr/bin/env python3
"""The GPU benchmark's baselines: the jobs of benches/gpu/kit.py's bench mode done the way
the CuPy and PyTorch documentations recommend for arrays larger than the GPU's share:
`np.load(mmap_mode="r")`, 64 MiB row blocks copied through page-locked staging buffers,
non-blocking copies; and CuPy on the whole array where it fits.

    python3 benches/gpu/baselines.py FRAMEWORK MODE TASK OUT INPUTS...

FRAMEWORK is torch or cupy, MODE chunked or whole, TASK one of colmean, colstd, affine16,
projection, gaussian, ndvi. Prints one JSON object: wall_s (from the first read to the
output written, after the framework is imported and the device initialised) and the
output's path. Outputs are .npy files, so kit.py compares them with tilestream's.
"""

import json
import sys
import time

import numpy as np

BLOCK = 64 << 20  # bytes of input per block
SIGMA, RADIUS = 2.0, 8  # gaussian sigma=2, truncate=4 (scipy's and tilestream's default)


def gauss_weights():
    t = np.arange(-RADIUS, RADIUS + 1, dtype=np.float64)
    w = np.exp(-0.5 * (t / SIGMA) ** 2)
    return (w / w.sum()).astype(np.float32)


class Torch:
    def __init__(self):
        import torch

        self.t = torch
        # float32 convolutions and products in float32, not TF32 (cuDNN's default for
        # convolutions is TF32, about 1e-3 relative error): the job tilestream does
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        self.dev = torch.device("cuda")
        torch.empty(1, device=self.dev).sum().item()  # context up

    def pinned(self, shape, dtype):
        t = self.t.empty(shape, dtype=getattr(self.t, np.dtype(dtype).name), pin_memory=True)
        return t, t.numpy()

    def to_dev(self, pinned_t):
        return pinned_t.to(self.dev, non_blocking=True)

    def from_np(self, a):
        return self.t.from_numpy(np.ascontiguousarray(a)).to(self.dev)

    def sync(self):
        self.t.cuda.synchronize()

    def f64(self, d):
        return d.double()

    def f32(self, d):
        return d.float()

    def sum0(self, d):
        return d.sum(0)

    def to_host(self, d, pinned_t):
        pinned_t.copy_(d, non_blocking=True)

    def half(self, d):
        return d.half()

    def matmul(self, a, b):
        return a @ b

    def nan(self):
        return float("nan")

    def where(self, m, a, b):
        return self.t.where(m, a, b)

    def sqrt(self, d):
        return self.t.sqrt(d)

    def numpy(self, d):
        return d.cpu().numpy()

    def gauss_rows(self, block, w):
        """Separable gaussian of a (rows, cols) block whose first and last RADIUS rows are
        halo: returns the inner rows. Columns reflect at the edges (scipy's 'reflect')."""
        F = self.t.nn.functional
        k = self.t.from_numpy(w).to(self.dev)
        x = block[None, None]
        x = F.conv2d(x, k.view(1, 1, -1, 1))  # along rows: the halo is consumed
        x = self.t.cat([x[..., :RADIUS].flip(-1), x, x[..., -RADIUS:].flip(-1)], dim=-1)
        x = F.conv2d(x, k.view(1, 1, 1, -1))
        return x[0, 0]


class Cupy:
    def __init__(self):
        import cupy
        import cupyx.scipy.ndimage as ndi

        self.cp = cupy
        self.ndi = ndi
        # the current (legacy default) stream: copies and kernels in issue order; a
        # non-blocking stream would let a kernel on the default stream read its block
        # before the copy on the other stream landed
        self.stream = cupy.cuda.get_current_stream()
        cupy.zeros(1).sum().item()

    def pinned(self, shape, dtype):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        mem = self.cp.cuda.alloc_pinned_memory(n)
        a = np.frombuffer(mem, dtype, int(np.prod(shape))).reshape(shape)
        return a, a

    def to_dev(self, pinned_a):
        d = self.cp.empty(pinned_a.shape, pinned_a.dtype)
        d.set(pinned_a, stream=self.stream)
        return d

    def from_np(self, a):
        return self.cp.asarray(a)

    def sync(self):
        self.stream.synchronize()
        self.cp.cuda.Device().synchronize()

    def f64(self, d):
        return d.astype(self.cp.float64)

    def f32(self, d):
        return d.astype(self.cp.float32)

    def sum0(self, d):
        return d.sum(0)

    def to_host(self, d, pinned_a):
        d.get(stream=self.stream, out=pinned_a)

    def half(self, d):
        return d.astype(self.cp.float16)

    def matmul(self, a, b):
        return a @ b

    def where(self, m, a, b):
        return self.cp.where(m, a, b)

    def sqrt(self, d):
        return self.cp.sqrt(d)

    def numpy(self, d):
        return self.cp.asnumpy(d)

    def gauss_rows(self, block, w):
        y = self.ndi.gaussian_filter1d(block, SIGMA, axis=0, truncate=4.0, mode="reflect")
        y = self.ndi.gaussian_filter1d(y, SIGMA, axis=1, truncate=4.0, mode="reflect")
        return y[RADIUS:-RADIUS] if block.shape[0] > 2 * RADIUS else y


def chunked(fw, task, out, inputs):
    x = np.load(inputs[0], mmap_mode="r")
    if task in ("colmean", "colstd", "affine16", "projection"):
        n, c = x.shape
        rows = max(1, BLOCK // (c * x.dtype.itemsize))
        pins = [fw.pinned((rows, c), x.dtype) for _ in range(2)]
        if task == "projection":
            w = fw.from_np(np.load(inputs[1]))
            pin_out = fw.pinned((rows, w.shape[1]), np.float32)
            y = np.lib.format.open_memmap(out, "w+", np.float32, (n, w.shape[1]))
        elif task == "affine16":
            pin_out = fw.pinned((rows, c), np.float16)
            y = np.lib.format.open_memmap(out, "w+", np.float16, (n, c))
        count, mean, m2 = 0, None, None
        for k, i in enumerate(range(0, n, rows)):
            r = min(rows, n - i)
            pt, pa = pins[k % 2]
            fw.sync()  # the copy that last used this buffer is done
            np.copyto(pa[:r], x[i : i + r])
            d = fw.to_dev(pt[:r])
            if task in ("colmean", "colstd"):
                dd = fw.f64(d)
                bm = fw.sum0(dd) / r
                if task == "colstd":
                    bm2 = fw.sum0((dd - bm) * (dd - bm))
                if mean is None:
                    mean, m2 = bm, (bm2 if task == "colstd" else None)
                else:  # Chan et al.'s combination of two blocks' moments
                    delta = bm - mean
                    tot = count + r
                    mean = mean + delta * (r / tot)
                    if task == "colstd":
                        m2 = m2 + bm2 + delta * delta * (count * r / tot)
                count += r
                continue
            res = fw.half(d * 2.0 + 1.0) if task == "affine16" else fw.matmul(d, w)
            ot, oa = pin_out
            fw.to_host(res, ot[:r])
            fw.sync()
            y[i : i + r] = oa[:r]
        if task in ("colmean", "colstd"):
            res = mean if task == "colmean" else fw.sqrt(m2 / count)
            np.save(out, fw.numpy(res))
        else:
            y.flush()
            del y
        return
    if task == "gaussian":
        h, wd = x.shape
        rows = max(1, BLOCK // (wd * 4))
        wts = gauss_weights()
        y = np.lib.format.open_memmap(out, "w+", np.float32, (h, wd))
        pt, pa = fw.pinned((rows + 2 * RADIUS, wd), np.float32)
        ot, oa = fw.pinned((rows, wd), np.float32)
        for i in range(0, h, rows):
            r = min(rows, h - i)
            # rows i-RADIUS .. i+r+RADIUS, reflected at the image's edges
            idx = np.arange(i - RADIUS, i + r + RADIUS)
            idx = np.where(idx < 0, -idx - 1, idx)
            idx = np.where(idx >= h, 2 * h - idx - 1, idx)
            lo, hi = max(idx.min(), 0), idx.max() + 1
            np.copyto(pa[: r + 2 * RADIUS], x[lo:hi][idx - lo])
            d = fw.to_dev(pt[: r + 2 * RADIUS])
            res = fw.gauss_rows(d, wts)
            fw.to_host(res, ot[:r])
            fw.sync()
            y[i : i + r] = oa[:r]
        y.flush()
        return
    if task == "ndvi":
        _, h, wd = x.shape
        rows = max(1, BLOCK // (2 * wd * x.dtype.itemsize))
        y = np.lib.format.open_memmap(out, "w+", np.float32, (h, wd))
        pt, pa = fw.pinned((2, rows, wd), x.dtype)
        ot, oa = fw.pinned((rows, wd), np.float32)
        for i in range(0, h, rows):
            r = min(rows, h - i)
            np.copyto(pa[0, :r], x[3, i : i + r])
            np.copyto(pa[1, :r], x[2, i : i + r])
            d = fw.to_dev(pt[:, :r])
            nir, red = fw.f32(d[0]), fw.f32(d[1])
            res = fw.where((d[0] == 0) | (d[1] == 0), nir * float("nan"), (nir - red) / (nir + red))
            fw.to_host(res, ot[:r])
            fw.sync()
            y[i : i + r] = oa[:r]
        y.flush()
        return
    raise SystemExit(f"unknown task {task}")


def whole(fw, task, out, inputs):
    x = fw.from_np(np.load(inputs[0], mmap_mode="r"))
    if task == "colmean":
        res = fw.f64(x).mean(0)
    elif task == "colstd":
        res = fw.f64(x).std(0)
    elif task == "affine16":
        res = fw.half(x * 2.0 + 1.0)
    elif task == "projection":
        res = fw.matmul(x, fw.from_np(np.load(inputs[1])))
    elif task == "gaussian":
        res = fw.ndi.gaussian_filter(x, SIGMA, truncate=4.0, mode="reflect")
    elif task == "ndvi":
        nir, red = fw.f32(x[3]), fw.f32(x[2])
        res = fw.where((x[3] == 0) | (x[2] == 0), nir * float("nan"), (nir - red) / (nir + red))
    else:
        raise SystemExit(f"unknown task {task}")
    np.save(out, fw.numpy(res))


def main():
    framework, mode, task, out, *inputs = sys.argv[1:]
    fw = Torch() if framework == "torch" else Cupy()
    t0 = time.perf_counter()
    (chunked if mode == "chunked" else whole)(fw, task, out, inputs)
    fw.sync()
    print(json.dumps({"wall_s": time.perf_counter() - t0, "output": out}))


if __name__ == "__main__":
    main()
