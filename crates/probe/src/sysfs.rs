//! One counter file of Linux sysfs read as a number: what the interface and InfiniBand
//! samplers share.

use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SysfsError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: '{value}' is not a counter value", .path.display())]
    NotACounter { path: PathBuf, value: String },
}

/// The counter in the file at `path` (a decimal number and a newline).
pub fn read_counter_file(path: &Path) -> Result<u64, SysfsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SysfsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.trim().parse().map_err(|_| SysfsError::NotACounter {
        path: path.to_path_buf(),
        value: text.trim().to_string(),
    })
}
