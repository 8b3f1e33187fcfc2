//! The vocabulary of operations: one module per operation, each holding its spec (the
//! arguments every front end gives it, serialised with an `"op"` tag), the files it
//! reads and writes, how it is planned and how it runs. [`operations!`] lists them once:
//! it makes [`OpSpec`](super::OpSpec), its dispatch, and the list of names front ends
//! check against ([`OpSpec::NAMES`](super::OpSpec::NAMES)).
//!
//! Adding an operation is a module here that implements [`Operation`] (with, for the
//! command line, its subcommand's arguments), and its `mod` line and its entry in the
//! [`operations!`] call at the end of this file.

use std::path::{Path, PathBuf};

use crate::io::own_files::Written;
use crate::plan::Plan;
use crate::tiling::BoxPlan;
use crate::{DType, Engine, Error, Result, RunReport};

use super::{OutputLayout, Source, SpecPlan};

/// How an operation's tiles are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tiling {
    /// Flat C-order tiles writing an output of the operation's own ([`Operation::written`]):
    /// planned with room for encoding it as it is written ([`Engine::plan_writing`]), or
    /// in boxes along its chunks ([`Operation::boxes`]).
    FlatWriting,
    /// Flat tiles whose result is small and written at the end (reductions).
    FlatResult,
    /// Boxes of the operation's own ([`Operation::plan_tiles`] gives them).
    Boxes,
}

/// What every operation is to the engine's front door ([`Engine::plan_spec`],
/// [`Engine::run_spec`]): its files, its plan and its run.
pub(crate) trait Operation {
    /// Every file the operation reads (a convolution kernel included).
    fn inputs(&self) -> Vec<&Path>;

    /// The file (or store, or patch directory) the operation writes.
    fn output(&self) -> &Path;

    /// The sources it reads, in order, and the path it writes, for a front end that
    /// binds them after the rest is given: a pipeline file's steps read earlier values by
    /// name, and write where the pipeline says.
    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf);

    /// Makes the files its parameters name (a convolution kernel; not its sources or
    /// output) relative to `base`, a pipeline file's directory.
    fn relative_to(&mut self, _base: &Path) {}

    /// The element-wise expression (see `ops/expr.rs`) it computes, over its sources
    /// named `names` in order: a pipeline fuses it into the steps that use it. `None`
    /// for an operation that is not one expression.
    ///
    /// # Errors
    /// Bad parameters.
    fn expression(&self, _names: &[&str]) -> Result<Option<String>> {
        Ok(None)
    }

    /// Whether its output holds its input's values moved, not computed (a transpose):
    /// then its nodata value is its input's.
    fn moves_values(&self) -> bool {
        false
    }

    /// Every path the operation writes: its output, and files besides it.
    fn writes(&self) -> Vec<Written<'_>> {
        vec![Written {
            role: "output",
            path: self.output(),
            dir: false,
        }]
    }

    /// Whether a journal can resume a run of it (`tiles`, with many outputs, cannot).
    fn resumable(&self) -> bool {
        true
    }

    /// How its tiles are cut.
    fn tiling(&self) -> Tiling {
        Tiling::FlatWriting
    }

    /// The shape and dtype of what it writes, when known before it runs (for the room its
    /// encoding takes, and what runs after the tiles): by default its
    /// [`output_layout`](Self::output_layout).
    ///
    /// # Errors
    /// Bad parameters; I/O errors opening the inputs.
    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        Ok(self.output_layout().ok().map(|l| (l.shape, l.dtype)))
    }

    /// What it writes when its output rows follow its input's (a job split by rows over a
    /// cluster makes the file its tasks fill from it).
    ///
    /// # Errors
    /// [`Error::Invalid`] for operations whose rows do not follow their input's.
    fn output_layout(&self) -> Result<OutputLayout> {
        Err(Error::invalid(
            "only affine, cast, clip, convert, map, matmul, standardize and filters write \
             outputs whose rows follow their input's",
        ))
    }

    /// Its plan, without the room for encoding the output: flat tiles, or its boxes
    /// ([`Tiling::Boxes`]).
    ///
    /// # Errors
    /// Bad parameters, unreadable inputs, a budget too small.
    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan>;

    /// The one input an element-wise operation reads whole, element for element (its
    /// boxes are found from it); `None` for the others.
    fn elementwise_input(&self) -> Option<&Source> {
        None
    }

    /// The boxes along its output's chunks an element-wise operation runs in when its
    /// flat plan `flat` cannot encode its output of `shape` and `dtype` as it writes it
    /// ([`Engine::elementwise_boxes`]); `None` for the others. By default, those of its
    /// [`elementwise_input`](Self::elementwise_input).
    ///
    /// # Errors
    /// Unreadable inputs.
    fn boxes(
        &self,
        e: &Engine,
        flat: &Plan,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        match self.elementwise_input() {
            Some(input) => e.boxes_of_one(input, flat, self.output(), shape, dtype),
            None => Ok(None),
        }
    }

    /// Runs it, with its paths already checked.
    ///
    /// # Errors
    /// Whatever the operation returns.
    fn run(&self, e: &Engine) -> Result<RunReport>;
}

/// A subcommand's arguments, as the spec of its operation.
#[cfg(feature = "cli")]
pub(crate) trait Arguments {
    /// The spec the arguments give.
    ///
    /// # Errors
    /// [`Error::Invalid`] for arguments that do not parse (a shape, a dtype, `NAME=FILE`).
    fn spec(&self) -> Result<OpSpec>;
}

/// The keys a pipeline file's step of an operation may give besides `op` and `out` (its
/// inputs by the names of earlier values); `None` for operations pipelines do not run.
pub(crate) trait PipelineStep {
    /// The keys, in the order the error for a wrong one lists them.
    const KEYS: Option<&'static [&'static str]> = None;

    /// Those of the keys that name an earlier value, in the order of
    /// [`Operation::paths_mut`]'s sources.
    const NAMES: &'static [&'static str] = &["input"];
}

// each operation's module (declared here rather than by `operations!`, so that rustfmt
// sees them)
mod affine;
mod cast;
mod clip;
mod convert;
mod function;
mod generate;
mod histogram;
mod map;
mod matmul;
mod reduce;
pub use function::WorkingMemory;
pub use histogram::{BinsSpec, ExtremeValue};
pub use reduce::{Axes, Qs};
mod standardize;
#[doc(hidden)]
pub mod stencil;
mod tiles;
mod transpose;

/// Lists the operations once (those with a subcommand under `commands`, those without
/// one under `library`): re-exports each one's spec from its module; makes
/// [`OpSpec`] (serialised with an `"op"` tag of the variant's snake-case name), its names
/// and its dispatch; and, with the `cli` feature, the command line's subcommands
/// ([`Op`], named as the operation unless `cli` names it otherwise) from each module's
/// arguments struct.
macro_rules! operations {
    (commands { $($(#[$doc:meta])* $module:ident::$variant:ident($spec:ident, $args:ident) = $name:literal
        $(, cli $cli:literal)?;)+ }
     library { $($(#[$ldoc:meta])* $lmodule:ident::$lvariant:ident($lspec:ident) = $lname:literal;)* }) => {
        $(pub use $module::$spec;)+
        $(pub use $lmodule::$lspec;)*

        /// An operation: its inputs, its output and every parameter that changes the
        /// output's bytes. Serialised with an `"op"` tag (`{"op": "reduce", ...}`).
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum OpSpec {
            $($(#[$doc])* $variant($spec),)+
            $($(#[$ldoc])* $lvariant($lspec),)*
        }

        impl OpSpec {
            /// The name of every operation, as its `"op"` tag spells it.
            pub const NAMES: &'static [&'static str] = &[$($name,)+ $($lname,)*];

            /// The operation's name (its `"op"` tag).
            #[must_use]
            pub fn name(&self) -> &'static str {
                match self {
                    $(OpSpec::$variant(_) => $name,)+
                    $(OpSpec::$lvariant(_) => $lname,)*
                }
            }

            /// The keys a pipeline file's step of the operation `name` may give besides
            /// `op` and `out`; `None` for an operation pipelines do not run (or no
            /// operation).
            #[must_use]
            pub fn pipeline_keys(name: &str) -> Option<&'static [&'static str]> {
                match name {
                    $($name => <$spec as PipelineStep>::KEYS,)+
                    $($lname => <$lspec as PipelineStep>::KEYS,)*
                    _ => None,
                }
            }

            /// The keys of [`OpSpec::pipeline_keys`] that name an earlier value.
            #[must_use]
            pub(crate) fn pipeline_names(name: &str) -> &'static [&'static str] {
                match name {
                    $($name => <$spec as PipelineStep>::NAMES,)+
                    $($lname => <$lspec as PipelineStep>::NAMES,)*
                    _ => &[],
                }
            }

            pub(crate) fn operation(&self) -> &dyn Operation {
                match self {
                    $(OpSpec::$variant(o) => o,)+
                    $(OpSpec::$lvariant(o) => o,)*
                }
            }

            pub(crate) fn operation_mut(&mut self) -> &mut dyn Operation {
                match self {
                    $(OpSpec::$variant(o) => o,)+
                    $(OpSpec::$lvariant(o) => o,)*
                }
            }
        }

        $(
            impl From<$spec> for OpSpec {
                fn from(o: $spec) -> Self {
                    OpSpec::$variant(o)
                }
            }
        )+
        $(
            impl From<$lspec> for OpSpec {
                fn from(o: $lspec) -> Self {
                    OpSpec::$lvariant(o)
                }
            }
        )*

        /// The command line's subcommands that run an operation, one per operation.
        #[cfg(feature = "cli")]
        #[doc(hidden)]
        #[derive(clap::Subcommand, Clone, Debug)]
        pub enum Op {
            $($(#[command(name = $cli)])? $variant($module::$args),)+
        }

        #[cfg(feature = "cli")]
        impl Op {
            /// The spec the subcommand's arguments give.
            ///
            /// # Errors
            /// [`Error::Invalid`] for arguments that do not parse.
            pub fn spec(&self) -> Result<OpSpec> {
                match self {
                    $(Op::$variant(a) => Arguments::spec(a),)+
                }
            }
        }
    };
}

operations! {
    commands {
    /// A reduction (`sum`, `mean`, `var`, `std`, `min`, `max`) over one axis or all.
    reduce::Reduce(ReduceSpec, ReduceArgs) = "reduce";
    /// `y = scale * x + offset`, cast.
    affine::Affine(AffineSpec, AffineArgs) = "affine";
    /// An elementwise expression over named inputs.
    map::Map(MapSpec, MapArgs) = "map";
    /// `x @ w` with `w` resident.
    matmul::Matmul(MatmulSpec, MatmulArgs) = "matmul";
    /// Per-column `(x - mean) / std`.
    standardize::Standardize(StandardizeSpec, StandardizeArgs) = "standardize";
    /// numpy's `np.histogram` per band or over everything, into an `.npz`.
    histogram::Histogram(HistogramSpec, HistogramArgs) = "histogram";
    /// A format conversion (and optional cast): the output's format is its name's (or
    /// the engine's output format).
    convert::Convert(ConvertSpec, ConvertArgs) = "convert";
    /// A cast to `dtype`.
    cast::Cast(CastSpec, CastArgs) = "cast";
    /// Each element limited to `[lo, hi]`.
    clip::Clip(ClipSpec, ClipArgs) = "clip";
    /// A neighbourhood filter over halo'd tiles.
    stencil::Stencil(StencilSpec, StencilArgs) = "stencil";
    /// Swaps the last two axes.
    transpose::Transpose(TransposeSpec, TransposeArgs) = "transpose";
    /// Cuts an image into patch files and an index.
    tiles::Tiles(TilesSpec, TilesArgs) = "tiles";
    /// `tilestream gen` data, reproducible from the seed.
    generate::Generate(GenerateSpec, GenArgs) = "generate", cli "gen";
    }
    // operations a library front end runs, with no subcommand: a pipeline's `function`
    // step is a Python function, which only the Python package can call
    library {
    /// A user's function over blocks, named `module:function` (pipelines run from Python).
    function::Function(FunctionSpec) = "function";
    }
}
