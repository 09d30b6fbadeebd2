//! What the CLI's end-to-end tests share: the binary under test and the root check.

use std::path::PathBuf;

pub mod capture;
pub mod demo;
pub mod lab;

/// The `vantage` binary under test: `VANTAGE_BIN` (CI's release build), else Cargo's.
pub fn vantage_bin() -> PathBuf {
    std::env::var_os("VANTAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vantage")))
}

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uid_line = status.lines().find(|l| l.starts_with("Uid:"))?;
            // Real, effective, saved, filesystem: the effective one decides.
            uid_line.split_whitespace().nth(2).map(|uid| uid == "0")
        })
        .unwrap_or(false)
}
