//! Running a reference program (perfquery, dumpcap) as a tool, bounded in time.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How a bounded run of a program ended short of its output.
#[derive(Debug)]
pub enum BoundedRunError {
    /// It could not be started or waited for.
    Io(std::io::Error),
    /// It was still running at the bound and was killed.
    Timeout,
}

/// Runs `command` with stdin closed and stdout and stderr collected, killing it if it
/// has not exited within `timeout`. The programs run this way print a few lines, so
/// their pipes never fill while they run.
pub fn run_bounded(command: &mut Command, timeout: Duration) -> Result<Output, BoundedRunError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(BoundedRunError::Io)?;
    let started = Instant::now();
    while child.try_wait().map_err(BoundedRunError::Io)?.is_none() {
        if started.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BoundedRunError::Timeout);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // It has exited: this collects its output and the status already reaped.
    child.wait_with_output().map_err(BoundedRunError::Io)
}

/// A shell script named `name` in `directory` standing in for a reference program.
#[cfg(test)]
pub(crate) fn fake_program(
    directory: &std::path::Path,
    name: &str,
    body: &str,
) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = directory.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
