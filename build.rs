//! Tells the tests whether a Python with numpy (and zarr) was given: the cross-checks
//! against numpy and zarr-python then run, and are listed as ignored (with the reason)
//! when it was not, instead of passing without checking anything.

fn main() {
    println!("cargo::rerun-if-env-changed=TILESTREAM_PYTHON");
    println!("cargo::rustc-check-cfg=cfg(tilestream_python)");
    if std::env::var_os("TILESTREAM_PYTHON").is_some_and(|p| !p.is_empty()) {
        println!("cargo::rustc-cfg=tilestream_python");
    }
}
