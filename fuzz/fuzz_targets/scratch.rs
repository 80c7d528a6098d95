//! A scratch directory for targets that touch files.

/// A scratch directory on tmpfs where there is one: fsyncs there cost
/// nothing, so the fuzzer runs far more inputs per second.
pub fn dir() -> tempfile::TempDir {
    match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").expect("tempdir"),
        false => tempfile::tempdir().expect("tempdir"),
    }
}
