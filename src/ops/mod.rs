//! Operations: *what* is computed on a tile. The engine plans and streams; these modules
//! hold the arithmetic, written once, generic over the element types.

pub mod elementwise;
pub mod expr;
pub mod generate;
pub mod matmul;
pub mod reduce;
pub mod stencil;
pub mod transpose;

pub use reduce::{Axis, Reduce, ReduceOver};
