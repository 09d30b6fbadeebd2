//! Live interface counters from Linux sysfs (`/sys/class/net/IFACE/statistics/*`),
//! sampled every interval for the `counters` kind; the deltas, wraps, resets and
//! rates are `vantage_model::counters`'s pure logic.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;
use thiserror::Error;
use vantage_model::counters::{
    CounterSample, CounterValues, CountersError as IntervalError, CountersResult, CountersSpec,
    COUNTER_NAMES,
};

use crate::sysfs::{read_counter_file, SysfsError};

/// Where Linux lists network interfaces.
pub const SYSFS_NET: &str = "/sys/class/net";

/// The interface every host has and nobody means by "the host's traffic".
const LOOPBACK: &str = "lo";

#[derive(Debug, Error)]
pub enum CountersError {
    #[error("interface '{interface}' does not exist ({} not found)", .path.display())]
    MissingInterface { interface: String, path: PathBuf },
    #[error("no interfaces but loopback under {}", .0.display())]
    NoInterfaces(PathBuf),
    #[error("cannot list {}: {source}", .path.display())]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Counter(#[from] SysfsError),
    #[error(transparent)]
    Intervals(#[from] IntervalError),
}

/// Every interface under `root` (normally [`SYSFS_NET`]) but loopback, by name.
pub fn interfaces(root: &Path) -> Result<Vec<String>, CountersError> {
    let entries = std::fs::read_dir(root).map_err(|source| CountersError::List {
        path: root.to_path_buf(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != LOOPBACK)
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(CountersError::NoInterfaces(root.to_path_buf()));
    }
    Ok(names)
}

/// The interface's counters now.
pub fn read_interface(root: &Path, interface: &str) -> Result<CounterValues, CountersError> {
    let directory = root.join(interface);
    if !directory.exists() {
        return Err(CountersError::MissingInterface {
            interface: interface.to_string(),
            path: directory,
        });
    }
    let statistics = directory.join("statistics");
    let mut values = [0u64; 8];
    for (value, name) in values.iter_mut().zip(COUNTER_NAMES) {
        *value = read_counter_file(&statistics.join(name)).map_err(|error| match error {
            // The interface went away between the check and the read.
            SysfsError::Read { ref source, .. }
                if source.kind() == std::io::ErrorKind::NotFound && !directory.exists() =>
            {
                CountersError::MissingInterface {
                    interface: interface.to_string(),
                    path: directory.clone(),
                }
            }
            other => CountersError::Counter(other),
        })?;
    }
    Ok(CounterValues::from_array(values))
}

/// Samples the spec's interfaces (every one but loopback when it names none) under
/// `root` `spec.count + 1` times, `spec.interval_us` apart on the monotonic clock
/// (each sample is due at start + k·interval, so a slow read does not push the
/// rest late), calling `on_sample` after each read but the first; then the result.
pub fn run_counters(
    root: &Path,
    spec: &CountersSpec,
    on_sample: &mut dyn FnMut(usize),
) -> Result<CountersResult, CountersError> {
    let names = if spec.interfaces.is_empty() {
        interfaces(root)?
    } else {
        spec.interfaces.clone()
    };
    let mut samples: Vec<(String, Vec<CounterSample>)> = names
        .iter()
        .map(|name| (name.clone(), Vec::with_capacity(spec.count as usize + 1)))
        .collect();
    let interval = Duration::from_micros(spec.interval_us);
    let started = Instant::now();
    for index in 0..=spec.count {
        let due = started + interval * index;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        for (name, taken) in &mut samples {
            let elapsed_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let values = read_interface(root, name)?;
            taken.push(CounterSample {
                time: Utc::now(),
                elapsed_ns,
                values,
            });
        }
        if index > 0 {
            on_sample(index as usize);
        }
    }
    Ok(CountersResult::from_samples(spec, &samples)?)
}

#[cfg(test)]
mod tests {
    use vantage_model::counters::CounterWidth;

    use super::*;

    fn fake_interface(root: &Path, name: &str, values: [u64; 8]) {
        let statistics = root.join(name).join("statistics");
        std::fs::create_dir_all(&statistics).unwrap();
        for (counter, value) in COUNTER_NAMES.iter().zip(values) {
            std::fs::write(statistics.join(counter), format!("{value}\n")).unwrap();
        }
    }

    #[test]
    fn reads_every_counter_of_an_interface() {
        let root = tempfile::tempdir().unwrap();
        fake_interface(root.path(), "eth0", [1, 2, 3, 4, 5, 6, 7, 8]);
        let values = read_interface(root.path(), "eth0").unwrap();
        assert_eq!(values.to_array(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(values.rx_dropped, 7);
    }

    #[test]
    fn a_missing_interface_is_named_with_its_path() {
        let root = tempfile::tempdir().unwrap();
        let error = read_interface(root.path(), "eth9").unwrap_err();
        let expected = format!(
            "interface 'eth9' does not exist ({} not found)",
            root.path().join("eth9").display()
        );
        assert_eq!(error.to_string(), expected);
        // A run naming it fails the same way before it waits out any interval.
        let spec = CountersSpec {
            interfaces: vec!["eth9".into()],
            interval_us: 10_000_000,
            count: 1,
            counter_bits: CounterWidth::Bits64,
        };
        let error = run_counters(root.path(), &spec, &mut |_| {}).unwrap_err();
        assert_eq!(error.to_string(), expected);
    }

    #[test]
    fn a_counter_that_is_not_a_number_is_named_with_its_path() {
        let root = tempfile::tempdir().unwrap();
        fake_interface(root.path(), "eth0", [0; 8]);
        let path = root.path().join("eth0/statistics/tx_errors");
        std::fs::write(&path, "many\n").unwrap();
        let error = read_interface(root.path(), "eth0").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{}: 'many' is not a counter value", path.display())
        );
    }

    #[test]
    fn every_interface_but_loopback_is_sampled_when_none_is_named() {
        let root = tempfile::tempdir().unwrap();
        for name in ["lo", "eth1", "eth0"] {
            fake_interface(root.path(), name, [10; 8]);
        }
        assert_eq!(interfaces(root.path()).unwrap(), vec!["eth0", "eth1"]);
        let spec = CountersSpec {
            interfaces: Vec::new(),
            interval_us: 1_000,
            count: 2,
            counter_bits: CounterWidth::Bits64,
        };
        let mut seen = Vec::new();
        let result = run_counters(root.path(), &spec, &mut |index| seen.push(index)).unwrap();
        assert_eq!(seen, vec![1, 2]);
        assert_eq!(result.interfaces.len(), 2);
        assert_eq!(result.interfaces[0].intervals.len(), 2);
        assert_eq!(result.interfaces[0].intervals[0].deltas.rx_bytes, Some(0));
        let empty = tempfile::tempdir().unwrap();
        fake_interface(empty.path(), "lo", [0; 8]);
        assert!(matches!(
            interfaces(empty.path()),
            Err(CountersError::NoInterfaces(_))
        ));
    }
}
