//! What every format shares with the file system: memory-mapped windows of inputs
//! ([`window`]), temporary files beside a destination, their names, locks and the
//! cleaning of what killed runs left ([`temp`]), and the rules for which files a run may
//! create, lock, replace and delete ([`own_files`]), and the threads formats read and
//! encode on in parallel ([`pool`]), and the C libraries some codecs load at run time
//! ([`native`]), and where an input's bytes come from: a local file or an object in an
//! object store read by ranges ([`source`], [`remote`]). Nothing here reads or writes a
//! format's contents;
//! `crate::format` builds on it.

pub mod native;
pub mod own_files;
pub(crate) mod pool;
pub mod remote;
pub mod source;
pub mod temp;
pub mod window;
