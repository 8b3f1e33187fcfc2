//! Operations: *what* is computed on a tile. These modules describe each operation (a
//! reduction's kind, axis and fixed order of operations; a compiled expression;
//! matmul's compute type and resident operand; the random
//! streams of `gen`) and what the planner asks of it. The kernels that compute them live
//! with their backend: rayon in [`crate::backend::cpu`], CUDA in `kernels/`. An
//! operation with kernels of its own (a neighbourhood filter) is one folder under
//! `spec/ops/`, descriptor and kernels together ([`crate::backend::BoxOp`]).

pub mod expr;
pub mod generate;
pub mod histogram;
pub mod matmul;
pub mod quantile;
pub mod reduce;

pub use reduce::{Axis, Partial, Reduce, ReduceOver, row_step};
