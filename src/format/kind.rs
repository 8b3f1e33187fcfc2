//! The formats a tensor is stored in ([`Format`]), the ones an output can be written as
//! ([`OutFormat`], chosen from the destination's extension or `--format`), and the
//! `name[:level]` compression specs of both.

use std::path::Path;

use crate::error::{Error, Result};

/// How a tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// numpy `.npy`, with its version.
    Npy {
        /// (major, minor) format version.
        version: (u8, u8),
    },
    /// Headerless little-endian C-order data; shape and dtype given by the user.
    Raw,
    /// A GeoTIFF (or plain TIFF): bands x rows x columns.
    GeoTiff,
    /// A Zarr v3 array (a directory with `zarr.json`).
    Zarr,
    /// One dataset of an HDF5 or NetCDF-4 file.
    Hdf5,
    /// A JPEG 2000 file or codestream: bands x rows x columns.
    Jp2,
    /// One variable of a NetCDF-3 file.
    NetCdf3 {
        /// 1 (classic), 2 (64-bit offsets) or 5 (64-bit data).
        version: u8,
    },
}

/// The format an output is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFormat {
    /// `.npy` with its header.
    Npy,
    /// Headerless little-endian C-order data.
    Raw,
    /// Tiled GeoTIFF.
    GeoTiff,
    /// Zarr v3 store.
    Zarr,
}

impl OutFormat {
    /// What a destination of this format is on disk: a file, or a Zarr store.
    #[must_use]
    pub(crate) fn dest(self) -> crate::io::own_files::Dest {
        match self {
            OutFormat::Zarr => crate::io::own_files::Dest::Store,
            _ => crate::io::own_files::Dest::File,
        }
    }

    /// The format a destination's name asks for: `.npy`, `.tif`/`.tiff`, `.zarr`, else
    /// raw.
    #[must_use]
    pub fn of(dest: &Path) -> Self {
        if crate::format::is_npy_path(dest) {
            OutFormat::Npy
        } else if is_tiff_name(dest) {
            OutFormat::GeoTiff
        } else if crate::io::own_files::Dest::of(dest) == crate::io::own_files::Dest::Store {
            OutFormat::Zarr
        } else {
            OutFormat::Raw
        }
    }
}

impl std::str::FromStr for OutFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "npy" => Ok(OutFormat::Npy),
            "raw" => Ok(OutFormat::Raw),
            "tif" | "tiff" | "geotiff" => Ok(OutFormat::GeoTiff),
            "zarr" => Ok(OutFormat::Zarr),
            _ => Err(Error::invalid(format!(
                "unknown output format `{s}`: use npy, raw, tif or zarr"
            ))),
        }
    }
}

/// A compression given as `name[:level]` on the command line.
pub(crate) struct CodecSpec<'a, B: Fn() -> Error> {
    /// The name, lower-cased.
    pub name: String,
    /// The level as written, if given.
    pub level: Option<&'a str>,
    bad: B,
}

impl<'a, B: Fn() -> Error> CodecSpec<'a, B> {
    /// Splits `s`; `bad` makes the error for a spec that does not hold.
    pub fn parse(s: &'a str, bad: B) -> Self {
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n, Some(l)),
            None => (s, None),
        };
        CodecSpec {
            name: name.to_ascii_lowercase(),
            level,
            bad,
        }
    }

    /// The level, `default` when none was given, checked to lie in `lo..=hi`.
    pub fn level_in(&self, default: i64, lo: i64, hi: i64) -> Result<i64> {
        match self.level {
            None => Ok(default),
            Some(l) => l
                .parse::<i64>()
                .ok()
                .filter(|v| (lo..=hi).contains(v))
                .ok_or_else(&self.bad),
        }
    }

    /// The error for this spec.
    pub fn bad(&self) -> Error {
        (self.bad)()
    }
}

/// True if the path names a TIFF (`.tif` or `.tiff`, case-insensitive). Here rather than
/// in `tiff/`, which names this module's kinds: the kinds name no format's module.
#[must_use]
pub(crate) fn is_tiff_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
}
