//! C libraries loaded at run time, for the codecs and formats whose only exact reading
//! is the one their reference library gives (libjpeg-turbo, libwebp, LERC) or whose
//! metadata only their library should parse (HDF5). Loading them when a file first
//! needs one keeps `cargo build` free of C libraries; a file that needs one where it is
//! missing is refused in one line saying what to install.
//!
//! Each user declares a [`Native`]: the environment variable that names the library's
//! path, the names it is looked for under, and the line that says how to install it.
//! The library loaded is kept for the whole process (in the user's `static`), so the
//! function pointers taken from it with [`symbol`] stay valid.

/// A C library looked for at run time.
#[derive(Debug, Clone, Copy)]
pub struct Native {
    /// The environment variable that gives the library's path: when set, it is the only
    /// place tried, so that a wrong path is said rather than bypassed.
    pub env: &'static str,
    /// The file names the library is looked for under, most specific first.
    pub names: &'static [&'static str],
    /// The refusal when it is missing: what needs it, what to install, the variable.
    pub install: &'static str,
}

impl Native {
    /// Loads the library.
    ///
    /// # Errors
    /// The one-line [`install`](Native::install) message when no name loads.
    pub fn load(&self) -> Result<libloading::Library, String> {
        let names: Vec<String> = match std::env::var(self.env) {
            Ok(p) if !p.is_empty() => vec![p],
            _ => self.names.iter().map(|s| (*s).to_string()).collect(),
        };
        names
            .iter()
            // SAFETY: loading runs the library's initialisers. Every library declared
            // in tilestream is a plain C library whose initialisers set up only its own
            // state, as for any program that links it.
            .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
            .ok_or_else(|| self.install.to_string())
    }

    /// The function `name` of `lib`, as the pointer type `F`; a library that lacks it is
    /// refused with the install message and `version`, the version that has it.
    ///
    /// # Safety
    /// `F` must be the function's C signature.
    ///
    /// # Errors
    /// The install message naming the missing function.
    pub unsafe fn symbol<F: Copy>(
        &self,
        lib: &libloading::Library,
        name: &str,
        version: &str,
    ) -> Result<F, String> {
        // SAFETY: the caller gives the signature
        unsafe { lib.get::<F>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| {
                format!(
                    "{} (the library found lacks {name}: {version} or later is needed)",
                    self.install
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_refused_with_its_install_line() {
        let n = Native {
            env: "TILESTREAM_TEST_NO_SUCH_LIBRARY",
            names: &["libtilestream-no-such-library.so.0"],
            install: "install nothing",
        };
        assert_eq!(n.load().err().as_deref(), Some("install nothing"));
    }
}
