//! The `session-store` command as the history readers' tests run it.
#![allow(dead_code)]

use std::path::Path;

/// Runs `cmd`, checks that it did not panic, and returns its exit code,
/// stdout and stderr.
pub fn run(mut cmd: assert_cmd::Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        stderr,
    )
}

/// `session-store --root ROOT` with the given arguments.
pub fn command(root: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("session-store").unwrap();
    cmd.arg("--root").arg(root);
    cmd
}

/// `export ID --format FORMAT`, line by line.
pub fn export(root: &Path, id: &str, format: &str) -> Vec<String> {
    let mut cmd = command(root);
    cmd.args(["export", id, "--format", format]);
    let (code, stdout, stderr) = run(cmd);
    assert_eq!(code, 0, "{stderr}");
    stdout.lines().map(str::to_owned).collect()
}
