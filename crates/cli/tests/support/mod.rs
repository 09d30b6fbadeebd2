//! What the CLI's end-to-end tests share: the binary under test and the root check.

use std::path::PathBuf;

#[allow(dead_code)] // only the capture tests write captures
pub mod capture;
#[allow(dead_code)] // only the demo tests start demos
pub mod demo;
#[allow(dead_code)] // each lab test binary uses part of the harness
pub mod lab;

/// The `vantage` binary under test: `VANTAGE_BIN` (CI's release build), else Cargo's.
pub fn vantage_bin() -> PathBuf {
    std::env::var_os("VANTAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vantage")))
}

/// Whether this process runs with effective uid 0.
#[allow(dead_code)] // not every test binary builds namespaces
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
