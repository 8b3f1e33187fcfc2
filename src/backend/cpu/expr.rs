//! The CPU kernel of fused expressions ([`crate::ops::expr`] parses and compiles them):
//! a program runs over a tile in blocks of [`BLOCK`] f64, each instruction one tight loop
//! that the compiler vectorizes, blocks spread over the rayon pool.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::ops::expr::{BLOCK, BinOp, Instr, Operand, Program, bin, complex_pow, complex_un, un};

/// Evaluates over one tile: `inputs[k]` holds the tile's elements of stream `k` (of
/// dtype `in_dtypes[k]`), `out` receives the result cast to `out_dtype`.
pub fn eval_tile(
    program: &Program,
    inputs: &[&[u8]],
    in_dtypes: &[DType],
    out: &mut [u8],
    out_dtype: DType,
) {
    // Each parallel job takes JOB_BLOCKS blocks and one scratch allocation for all of
    // them (a per-block allocation would cost more than the arithmetic).
    const JOB_BLOCKS: usize = 32;
    let n = out.len() / out_dtype.size();
    let es = out_dtype.size();
    out.par_chunks_mut(BLOCK * JOB_BLOCKS * es)
        .enumerate()
        .for_each(|(j, o)| {
            // the registers, then room for a result's two parts interleaved
            let mut scratch = vec![0.0f64; program.regs().max(1) * BLOCK + 2 * BLOCK];
            let job = |scratch: &mut [f64], o: &mut [u8]| {
                for (b, ob) in o.chunks_mut(BLOCK * es).enumerate() {
                    let start = (j * JOB_BLOCKS + b) * BLOCK;
                    let len = (n - start).min(BLOCK);
                    eval_block(
                        program, inputs, in_dtypes, start, len, scratch, ob, out_dtype,
                    );
                }
            };
            with_avx2(|| job(&mut scratch, o));
        });
}

/// Operand `o` at element `i` of the block.
fn value(o: Operand, i: usize, regs: &[f64]) -> f64 {
    match o {
        Operand::Const(v) => v,
        Operand::Reg(r) => regs[r * BLOCK + i],
    }
}

/// Registers `dst_re` and `dst_im` of the block from `f(regs, i)` for each element `i`
/// (the two parts of a complex function), through `tail` (two blocks).
fn pairs(
    regs: &mut [f64],
    tail: &mut [f64],
    len: usize,
    dst_re: usize,
    dst_im: usize,
    f: impl Fn(&[f64], usize) -> (f64, f64),
) {
    let (re, im) = tail.split_at_mut(BLOCK);
    for i in 0..len {
        (re[i], im[i]) = f(regs, i);
    }
    regs[dst_re * BLOCK..dst_re * BLOCK + len].copy_from_slice(&re[..len]);
    regs[dst_im * BLOCK..dst_im * BLOCK + len].copy_from_slice(&im[..len]);
}

#[allow(clippy::too_many_arguments)]
fn eval_block(
    program: &Program,
    inputs: &[&[u8]],
    in_dtypes: &[DType],
    start: usize,
    len: usize,
    scratch: &mut [f64],
    out: &mut [u8],
    out_dtype: DType,
) {
    let (regs, tail) = scratch.split_at_mut(program.regs() * BLOCK);
    for ins in program.code() {
        match *ins {
            Instr::Load { stream, dst } => {
                let d = in_dtypes[stream];
                let bytes = &inputs[stream][start * d.size()..(start + len) * d.size()];
                load(bytes, d, &mut regs[dst * BLOCK..dst * BLOCK + len]);
            }
            Instr::LoadPart { stream, imag, dst } => {
                let d = in_dtypes[stream];
                let bytes = &inputs[stream][start * d.size()..(start + len) * d.size()];
                load_part(bytes, d, imag, &mut regs[dst * BLOCK..dst * BLOCK + len]);
            }
            Instr::Un(op, a, dst) => {
                let (a, d) = operand_and_dst(regs, a, dst, len);
                match a {
                    Src::Reg(a) => d.iter_mut().zip(a).for_each(|(d, &x)| *d = un(op, x)),
                    Src::Same => d.iter_mut().for_each(|d| *d = un(op, *d)),
                    Src::Const(_) => unreachable!("constants are folded"),
                }
            }
            Instr::Bin(op, a, b, dst) => binary(regs, op, a, b, dst, len),
            Instr::Where(c, a, b, dst) => {
                for (i, t) in tail[..len].iter_mut().enumerate() {
                    *t = if value(c, i, regs) == 0.0 {
                        value(b, i, regs)
                    } else {
                        value(a, i, regs)
                    };
                }
                regs[dst * BLOCK..dst * BLOCK + len].copy_from_slice(&tail[..len]);
            }
            Instr::Fma(a, b, c, dst) => {
                for (i, t) in tail[..len].iter_mut().enumerate() {
                    *t = value(a, i, regs).mul_add(value(b, i, regs), value(c, i, regs));
                }
                regs[dst * BLOCK..dst * BLOCK + len].copy_from_slice(&tail[..len]);
            }
            // one call of the C library per element, its two parts stored together
            Instr::ComplexUn {
                op,
                re,
                im,
                dst_re,
                dst_im,
            } => {
                pairs(regs, tail, len, dst_re, dst_im, |regs, i| {
                    complex_un(op, value(re, i, regs), value(im, i, regs))
                });
            }
            Instr::ComplexPow {
                a,
                b,
                dst_re,
                dst_im,
            } => {
                pairs(regs, tail, len, dst_re, dst_im, |regs, i| {
                    complex_pow(
                        (value(a.0, i, regs), value(a.1, i, regs)),
                        (value(b.0, i, regs), value(b.1, i, regs)),
                    )
                });
            }
        }
    }
    if out_dtype.is_complex() {
        // the parts interleaved, as a complex array's bytes hold them; a real result's
        // imaginary part is +0, as numpy casts it
        let im = program.result_imag().unwrap_or(Operand::Const(0.0));
        for (i, t) in tail[..2 * len].chunks_exact_mut(2).enumerate() {
            t[0] = value(program.result(), i, regs);
            t[1] = value(im, i, regs);
        }
        store(&tail[..2 * len], out, out_dtype.part());
        return;
    }
    let res: &[f64] = match program.result() {
        Operand::Reg(r) => &regs[r * BLOCK..r * BLOCK + len],
        Operand::Const(v) => {
            tail[..len].fill(v);
            &tail[..len]
        }
    };
    store(res, out, out_dtype);
}

enum Src<'a> {
    Reg(&'a [f64]),
    Same,
    Const(f64),
}

/// Splits the registers into the source operand and the destination block.
fn operand_and_dst(regs: &mut [f64], a: Operand, dst: usize, len: usize) -> (Src<'_>, &mut [f64]) {
    match a {
        Operand::Const(v) => (Src::Const(v), &mut regs[dst * BLOCK..dst * BLOCK + len]),
        Operand::Reg(r) if r == dst => (Src::Same, &mut regs[dst * BLOCK..dst * BLOCK + len]),
        Operand::Reg(r) => {
            // registers are allocated in order, so a source is always below its destination
            let (lo, hi) = regs.split_at_mut(dst * BLOCK);
            (Src::Reg(&lo[r * BLOCK..r * BLOCK + len]), &mut hi[..len])
        }
    }
}

fn binary(regs: &mut [f64], op: BinOp, a: Operand, b: Operand, dst: usize, len: usize) {
    let (lo, hi) = regs.split_at_mut(dst * BLOCK);
    let d = &mut hi[..len];
    let get = |o: Operand| match o {
        Operand::Reg(r) => Src::Reg(&lo[r * BLOCK..r * BLOCK + len]),
        Operand::Const(v) => Src::Const(v),
    };
    // one monomorphic loop per operator and operand kind, so each vectorizes
    macro_rules! each_op {
        ($f:ident) => {
            match op {
                BinOp::Add => $f!(|x, y| x + y),
                BinOp::Sub => $f!(|x, y| x - y),
                BinOp::Mul => $f!(|x, y| x * y),
                BinOp::Div => $f!(|x, y| x / y),
                other => $f!(|x, y| bin(other, x, y)),
            }
        };
    }
    match (get(a), get(b)) {
        (Src::Reg(x), Src::Reg(y)) => {
            macro_rules! rr {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut()
                        .zip(x.iter().zip(y))
                        .for_each(|(d, (&x, &y))| *d = g(x, y));
                }};
            }
            each_op!(rr);
        }
        (Src::Reg(x), Src::Const(c)) => {
            macro_rules! rc {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut().zip(x).for_each(|(d, &x)| *d = g(x, c));
                }};
            }
            each_op!(rc);
        }
        (Src::Const(c), Src::Reg(y)) => {
            macro_rules! cr {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut().zip(y).for_each(|(d, &y)| *d = g(c, y));
                }};
            }
            each_op!(cr);
        }
        _ => unreachable!("constant pairs are folded"),
    }
}

/// Widens `bytes` of dtype `d` into `dst`.
fn load(bytes: &[u8], d: DType, dst: &mut [f64]) {
    crate::dispatch_dtype!(d, T => {
        match bytemuck::try_cast_slice::<u8, T>(bytes) {
            Ok(xs) => dst.iter_mut().zip(xs).for_each(|(o, &x)| *o = x.to_f64()),
            Err(_) => dst.iter_mut().zip(bytes.chunks_exact(std::mem::size_of::<T>())).for_each(|(o, c)| {
                *o = bytemuck::pod_read_unaligned::<T>(c).to_f64();
            }),
        }
    }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
}

/// Widens the real (or imaginary) parts of the complex elements `bytes` of dtype `d`
/// into `dst`.
fn load_part(bytes: &[u8], d: DType, imag: bool, dst: &mut [f64]) {
    let off = usize::from(imag);
    match d {
        DType::C64 => dst
            .iter_mut()
            .zip(bytes.chunks_exact(8))
            .for_each(|(o, c)| {
                *o = f64::from(bytemuck::pod_read_unaligned::<f32>(
                    &c[off * 4..off * 4 + 4],
                ));
            }),
        DType::C128 => dst
            .iter_mut()
            .zip(bytes.chunks_exact(16))
            .for_each(|(o, c)| *o = bytemuck::pod_read_unaligned::<f64>(&c[off * 8..off * 8 + 8])),
        _ => unreachable!("a part is loaded from a complex stream only (Program::compile_typed)"),
    }
}

use crate::dtype::store_f64 as store;

/// Runs `f` compiled for AVX2 when the CPU has it (`eval_block` and the loops it calls are
/// inlined into it), else as is. Both give the same bits: the same IEEE operations, no
/// contraction of a multiply and an add (`Instr::Fma` is `mul_add`, rounded once either way).
#[inline]
fn with_avx2(f: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { call_avx2(f) };
        return;
    }
    f();
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn call_avx2(f: impl FnOnce()) {
    f();
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;
    use crate::ops::expr::parse;

    fn eval(src: &str, vars: &[(&str, f64)]) -> f64 {
        let p = Program::compile(&parse(src).unwrap()).unwrap();
        let bufs: Vec<Vec<u8>> = p
            .streams
            .iter()
            .map(|s| {
                let v = vars.iter().find(|(n, _)| *n == s.name).unwrap().1;
                v.to_le_bytes().to_vec()
            })
            .collect();
        let ins: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let dts = vec![DType::F64; ins.len()];
        let mut out = [0u8; 8];
        eval_tile(&p, &ins, &dts, &mut out, DType::F64);
        f64::from_le_bytes(out)
    }

    #[test]
    fn precedence_like_python() {
        assert_eq!(eval("-x**2", &[("x", 3.0)]), -9.0);
        assert_eq!(eval("2**-1", &[]), 0.5);
        assert_eq!(eval("2**3**2", &[]), 512.0);
        assert_eq!(eval("1 - 2 - 3", &[]), -4.0);
        assert_eq!(eval("8 / 4 / 2", &[]), 1.0);
        assert_eq!(eval("1 + 2 * 3 < 8", &[]), 1.0);
        assert_eq!(eval("(x*2+1)", &[("x", 1.5)]), 4.0);
        assert_eq!(eval("where(x > 0, sqrt(x), -1)", &[("x", 16.0)]), 4.0);
        assert_eq!(eval("clip(x, 0, 1)", &[("x", 7.0)]), 1.0);
        assert_eq!(eval("round(2.5) + round(3.5)", &[]), 6.0);
        assert_eq!(eval("isnan(x)", &[("x", f64::NAN)]), 1.0);
        assert!(eval("max(x, 1)", &[("x", f64::NAN)]).is_nan());
        assert_eq!(eval("1e3 + .5 + 2.5E-1", &[]), 1000.75);
    }
}
