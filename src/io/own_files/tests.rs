//! Unit tests of the parent module.

#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn a_run_writes_no_input_and_no_path_twice() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("x.npy");
    std::fs::write(&input, b"data").unwrap();
    let link = d.path().join("link.npy");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let hard = d.path().join("hard.npy");
    std::fs::hard_link(&input, &hard).unwrap();
    let w = |role, path| Written {
        role,
        path,
        dir: false,
    };
    let out = d.path().join("y.npy");
    let reads = [("input", input.as_path())];
    // a new output and a second new file beside it are fine
    let stats = d.path().join("st.npz");
    check_run_paths(&[w("output", &out), w("statistics", &stats)], &reads).unwrap();
    // the input by its name, through a symbolic link, by a second hard link, or by a
    // name with `.` in it
    let dotted = d.path().join(".").join("x.npy");
    for p in [&input, &link, &hard, &dotted] {
        let e = check_run_paths(&[w("output", &out), w("statistics", p)], &reads)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is also an input"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // two outputs at one place, neither existing yet
    let again = d.path().join(".").join("y.npy");
    let e = check_run_paths(&[w("output", &out), w("statistics", &again)], &reads)
        .unwrap_err()
        .to_string();
    assert!(e.contains("both the output and the statistics"), "{e}");
    // a FIFO where a file goes
    let fifo = d.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = check_run_paths(&[w("output", &out), w("statistics", &fifo)], &reads)
        .unwrap_err()
        .to_string();
    assert!(e.contains("FIFO"), "{e}");
    // nothing was created
    let mut names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["fifo", "hard.npy", "link.npy", "x.npy"]);
}

#[test]
fn journal_names_must_be_this_destinations_temporary_outputs() {
    assert!(temp_name_of("out.npy", ".out.npy.Ab3xYz.tilestream-tmp"));
    for bad in [
        "../out.npy",
        "/etc/passwd",
        ".out.npy.Ab3xYz.tilestream-tmp/../../x",
        ".other.npy.Ab3xYz.tilestream-tmp",
        ".out.npy..tilestream-tmp",
        ".out.npy.a/b.tilestream-tmp",
        ".out.npy.journal.tilestream-tmp.x",
        "out.npy",
    ] {
        assert!(!temp_name_of("out.npy", bad), "{bad}");
    }
}

#[test]
fn own_files_are_regular_files_with_one_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("own");
    open_own(&p, true).expect("created");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&p, &link).expect("symlink");
    assert!(open_own(&link, false).is_err());
    let hard = dir.path().join("hard");
    std::fs::hard_link(&p, &hard).expect("hard link");
    let e = open_own(&hard, false).expect_err("two links").to_string();
    assert!(e.contains("hard links"), "{e}");
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("cstr");
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = open_own(&fifo, false).expect_err("fifo").to_string();
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn destinations_that_are_not_files_or_array_stores_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    check_destination(&dir.path().join("new.npy"), Dest::File).expect("absent");
    let f = dir.path().join("f.npy");
    std::fs::write(&f, b"x").expect("write");
    check_destination(&f, Dest::File).expect("a file");
    let e = check_destination(Path::new("/dev/null"), Dest::File)
        .expect_err("device")
        .to_string();
    assert!(e.contains("character device"), "{e}");
    // a directory with `{}` as zarr.json, or with other files, is not an array store
    let z = dir.path().join("s.zarr");
    std::fs::create_dir(&z).expect("mkdir");
    std::fs::write(z.join("zarr.json"), b"{}").expect("write");
    assert!(check_destination(&z, Dest::Store).is_err());
    std::fs::write(
        z.join("zarr.json"),
        br#"{"zarr_format":3,"node_type":"array"}"#,
    )
    .expect("write");
    std::fs::create_dir(z.join("c")).expect("mkdir");
    check_destination(&z, Dest::Store).expect("an array store");
    std::fs::write(z.join("notes.txt"), b"mine").expect("write");
    let e = check_destination(&z, Dest::Store)
        .expect_err("other files")
        .to_string();
    assert!(e.contains("notes.txt"), "{e}");
    assert!(check_destination(&f, Dest::Store).is_err());
}
