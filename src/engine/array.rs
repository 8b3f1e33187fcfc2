//! Small in-memory results (reductions produce these) and their `.npz` files.

use std::path::Path;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::format::{OutputFile, fmt_shape};

/// An in-memory result (small: reductions produce these).
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
    pub(super) data: Vec<u8>,
}

impl Array {
    /// Wraps little-endian C-order bytes.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the byte count does not match shape and dtype.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n * dtype.size() != data.len() {
            return Err(Error::invalid(format!(
                "{} bytes do not make a {} {dtype} array",
                data.len(),
                fmt_shape(&shape)
            )));
        }
        Ok(Array { dtype, shape, data })
    }

    /// `values` as an array of `dtype` (each converted as [`Element::from_f64`] does:
    /// exact for values the type holds; of a complex dtype, the real parts, the
    /// imaginary parts zero).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the count does not match the shape.
    pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<Self> {
        let data = crate::dispatch_dtype!(dtype, T => {
            let v: Vec<T> = values.iter().map(|&x| T::from_f64(x)).collect();
            bytemuck::cast_slice::<T, u8>(&v).to_vec()
        }, complex => {
            let parts: Vec<f64> = values.iter().flat_map(|&x| [x, 0.0]).collect();
            let mut data = vec![0u8; parts.len() * dtype.part().size()];
            crate::dtype::store_f64(&parts, &mut data, dtype.part());
            data
        });
        Self::from_bytes(dtype, shape, data)
    }

    /// Element type.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape (empty for a scalar).
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// True if there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The raw bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The elements as `T`, or `None` if `T` is not this array's dtype.
    #[must_use]
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| bytemuck::pod_collect_to_vec(&self.data))
    }

    /// The elements widened to f64; of a complex array, the parts, interleaved (the real
    /// part of each element, then its imaginary part: numpy's `a.view(float)`).
    #[must_use]
    pub fn to_f64(&self) -> Vec<f64> {
        crate::dispatch_dtype!(self.dtype, T => {
            bytemuck::pod_collect_to_vec::<u8, T>(&self.data).into_iter().map(Element::to_f64).collect()
        }, complex => Array {
            dtype: self.dtype.part(),
            shape: vec![self.data.len() / self.dtype.part().size()],
            data: self.data.clone(),
        }.to_f64())
    }

    /// Casts to another dtype (through f64, with tilestream's cast rules; to a complex
    /// dtype with zero imaginary parts, from one by the real parts, as numpy's `astype`).
    #[must_use]
    pub fn cast(&self, to: DType) -> Array {
        if to == self.dtype {
            return self.clone();
        }
        let mut out = vec![0u8; self.len() * to.size()];
        // one call on the whole (small) array; alignment handled by the kernel
        let mut words = vec![0u64; out.len().div_ceil(8)];
        let dst = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..out.len()];
        if self.dtype.is_complex() || to.is_complex() {
            crate::backend::cpu::elementwise::cast_bytes(&self.data, self.dtype, dst, to);
        } else {
            crate::backend::cpu::elementwise::affine_bytes(
                &self.data, self.dtype, dst, to, 1.0, 0.0,
            );
        }
        out.copy_from_slice(dst);
        Array {
            dtype: to,
            shape: self.shape.clone(),
            data: out,
        }
    }

    /// Writes the array to `path` (`.npy` by extension, raw otherwise), atomically.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a `.tif`/`.tiff` or `.zarr` path (an engine run writes
    /// those, from a `.npy`); [`Error::Io`] if the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if crate::format::is_encoded(crate::format::OutFormat::of(path)) {
            return Err(Error::invalid(format!(
                "{}: Array::save writes .npy or raw files; save a .npy and convert it \
                 (Engine::cast, `tilestream convert`) to write a GeoTIFF or Zarr store",
                path.display()
            )));
        }
        let out = OutputFile::create(path, &self.shape, self.dtype)?;
        out.write_at(0, &self.data)?;
        out.finish()
    }
}

/// Writes arrays to an `.npz` (a zip of `.npy` entries, stored uncompressed) that
/// `np.load(path)[name]` reads; atomically, like every output.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written.
pub fn write_npz(path: &Path, arrays: &[(&str, &Array)]) -> Result<()> {
    persist_npz(npz_beside(path, arrays)?, path)
}

/// The `.npz` of [`write_npz`], written and flushed to a temporary file beside `path`
/// but not yet renamed to it ([`persist_npz`] does): a run writes it before its output
/// and puts it in place after, so a failed run leaves neither.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written.
pub fn npz_beside(path: &Path, arrays: &[(&str, &Array)]) -> Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let tmp = crate::format::temp_beside(path)?;
    let io = |e: zip::result::ZipError| Error::io("write", path, std::io::Error::other(e));
    let mut z = zip::ZipWriter::new(tmp.as_file());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, a) in arrays {
        z.start_file(format!("{name}.npy"), opts).map_err(io)?;
        let mut bytes = crate::format::npy::build_header(a.dtype(), a.shape());
        bytes.extend_from_slice(a.bytes());
        z.write_all(&bytes)
            .map_err(|e| Error::io("write", path, e))?;
    }
    z.finish().map_err(io)?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("flush", path, e))?;
    Ok(tmp)
}

/// Renames the temporary `.npz` of [`npz_beside`] to `path`.
///
/// # Errors
/// [`Error::Io`] if it cannot be renamed.
pub fn persist_npz(tmp: tempfile::NamedTempFile, path: &Path) -> Result<()> {
    tmp.persist(path)
        .map_err(|e| Error::io("rename the finished output to", path, e.error))?;
    Ok(())
}
