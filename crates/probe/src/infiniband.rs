//! Live `PortXmitWait` reads of this host's InfiniBand ports from Linux sysfs
//! (`/sys/class/infiniband/DEVICE/ports/N/counters/port_xmit_wait`), in rounds as the
//! collection script of Alali (PhD dissertation, University of Virginia, 2019, ch. 2)
//! takes them: N reads per port, a pause after each, the time just before each read
//! and its turnaround recorded. Counters are never reset; the forced idle time
//! fraction is computed from the deltas (`vantage_analysis::fitf`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use thiserror::Error;

use crate::subprocess::{run_bounded, BoundedRunError};
use crate::sysfs::{read_counter_file, SysfsError};

/// Where Linux lists InfiniBand devices.
pub const SYSFS_ROOT: &str = "/sys/class/infiniband";

/// One port of an InfiniBand device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPort {
    pub device: String,
    pub port: u32,
    /// sysfs `rate`, e.g. "56 Gb/sec (4X FDR)".
    pub rate: Option<String>,
    counter_path: PathBuf,
}

impl IbPort {
    pub fn counter_path(&self) -> &Path {
        &self.counter_path
    }
}

#[derive(Debug, Error)]
pub enum InfinibandError {
    #[error("no InfiniBand ports under {}", .0.display())]
    NoPorts(PathBuf),
    #[error("no active InfiniBand port under {} ({ports} not active)", .root.display())]
    NoActivePorts { root: PathBuf, ports: usize },
    #[error(transparent)]
    Counter(#[from] SysfsError),
    #[error("cannot run {} (infiniband-diags' perfquery reads a switch port's counters): {source}", .program.display())]
    PerfqueryMissing {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{command} did not answer within {} s", PERFQUERY_TIMEOUT.as_secs())]
    PerfqueryTimeout { command: String },
    #[error("{command} failed ({status}): {stderr}")]
    PerfqueryFailed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// How long one `perfquery` may take: it answers in milliseconds on a working fabric;
/// a subnet that does not answer must not hold the sampling forever.
pub const PERFQUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The output of `perfquery -x LID PORT` (extended, 64-bit counters; the management
/// datagram goes through the fabric, so it reads a switch's port as well as a host's),
/// run as `program`. Its `PortXmitWait` is read by `vantage_analysis::fitf::parse_perfquery`.
pub fn perfquery(program: &Path, lid: u32, port: u32) -> Result<String, InfinibandError> {
    let command = format!("{} -x {lid} {port}", program.display());
    let output = run_bounded(
        std::process::Command::new(program).args(["-x", &lid.to_string(), &port.to_string()]),
        PERFQUERY_TIMEOUT,
    )
    .map_err(|error| match error {
        BoundedRunError::Io(source) => InfinibandError::PerfqueryMissing {
            program: program.to_path_buf(),
            source,
        },
        BoundedRunError::Timeout => InfinibandError::PerfqueryTimeout {
            command: command.clone(),
        },
    })?;
    if !output.status.success() {
        return Err(InfinibandError::PerfqueryFailed {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_string())
}

fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            )
        })
        .collect();
    found.sort();
    found
}

/// The InfiniBand ports under `root` (normally [`SYSFS_ROOT`]) that have a
/// `port_xmit_wait` counter and are active: `link_layer` "InfiniBand" and `state`
/// "ACTIVE" where those files exist (the dissertation samples only operational ports).
pub fn discover(root: &Path) -> Result<Vec<IbPort>, InfinibandError> {
    let mut ports = Vec::new();
    let mut inactive = 0;
    for (device, device_dir) in entries(root) {
        for (port, port_dir) in entries(&device_dir.join("ports")) {
            let Ok(port) = port.parse::<u32>() else {
                continue;
            };
            let counter_path = port_dir.join("counters").join("port_xmit_wait");
            if !counter_path.is_file() {
                continue;
            }
            let link_layer = read_trimmed(&port_dir.join("link_layer"));
            if link_layer.is_some_and(|layer| layer != "InfiniBand") {
                continue;
            }
            // sysfs writes e.g. "4: ACTIVE".
            if read_trimmed(&port_dir.join("state")).is_some_and(|state| !state.contains("ACTIVE"))
            {
                inactive += 1;
                continue;
            }
            ports.push(IbPort {
                device: device.clone(),
                port,
                rate: read_trimmed(&port_dir.join("rate")),
                counter_path,
            });
        }
    }
    match (ports.is_empty(), inactive) {
        (true, 0) => Err(InfinibandError::NoPorts(root.to_path_buf())),
        (true, ports) => Err(InfinibandError::NoActivePorts {
            root: root.to_path_buf(),
            ports,
        }),
        (false, _) => Ok(ports),
    }
}

/// The port's `port_xmit_wait` now.
pub fn read_counter(port: &IbPort) -> Result<u64, InfinibandError> {
    Ok(read_counter_file(port.counter_path())?)
}

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplePlan {
    pub rounds: u64,
    /// Reads of each port per round (the dissertation's 100).
    pub reads: usize,
    /// Pause after each read of every port (the dissertation's 100 ms).
    pub interval: Duration,
}

/// One read of one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRead {
    /// From 1.
    pub round: u64,
    /// Index into the ports sampled.
    pub port_index: usize,
    /// Nanoseconds since the epoch just before the read.
    pub t_query_ns: u64,
    pub t_turnaround_ns: u64,
    pub value: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// Reads every port `plan.reads` times per round with `read` (normally
/// [`read_counter`] for a host port, [`perfquery`]'s output for a switch port), all
/// ports one after another at each step, pausing `plan.interval` after each step but
/// the last.
pub fn sample<P, E>(
    ports: &[P],
    plan: &SamplePlan,
    mut read: impl FnMut(&P) -> Result<u64, E>,
) -> Result<Vec<CounterRead>, E> {
    let steps = plan.rounds * plan.reads as u64;
    let mut reads = Vec::with_capacity(steps as usize * ports.len());
    for step in 0..steps {
        let round = step / plan.reads as u64 + 1;
        for (port_index, port) in ports.iter().enumerate() {
            let t_query_ns = now_ns();
            let started = Instant::now();
            let value = read(port)?;
            let t_turnaround_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            reads.push(CounterRead {
                round,
                port_index,
                t_query_ns,
                t_turnaround_ns,
                value,
            });
        }
        if step + 1 < steps {
            std::thread::sleep(plan.interval);
        }
    }
    Ok(reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn fake_port(root: &Path, device: &str, port: u32, state: &str, wait: u64) {
        let dir = root.join(device).join("ports").join(port.to_string());
        write(&dir.join("counters/port_xmit_wait"), &format!("{wait}\n"));
        write(&dir.join("state"), state);
        write(&dir.join("link_layer"), "InfiniBand\n");
        write(&dir.join("rate"), "56 Gb/sec (4X FDR)\n");
    }

    #[test]
    fn discovers_active_infiniband_ports_and_reads_them() {
        let root = tempfile::tempdir().unwrap();
        fake_port(root.path(), "mlx4_0", 1, "4: ACTIVE\n", 17);
        fake_port(root.path(), "mlx4_0", 2, "1: DOWN\n", 0);
        // A RoCE port has the counter too, but no InfiniBand link.
        fake_port(root.path(), "mlx5_0", 1, "4: ACTIVE\n", 0);
        write(&root.path().join("mlx5_0/ports/1/link_layer"), "Ethernet\n");
        let ports = discover(root.path()).unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!((ports[0].device.as_str(), ports[0].port), ("mlx4_0", 1));
        assert_eq!(ports[0].rate.as_deref(), Some("56 Gb/sec (4X FDR)"));
        assert_eq!(read_counter(&ports[0]).unwrap(), 17);
        write(ports[0].counter_path(), "lots\n");
        assert!(read_counter(&ports[0])
            .unwrap_err()
            .to_string()
            .ends_with("port_xmit_wait: 'lots' is not a counter value"));
    }

    #[test]
    fn no_device_and_no_active_port_are_errors() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("infiniband");
        assert_eq!(
            discover(&missing).unwrap_err().to_string(),
            format!("no InfiniBand ports under {}", missing.display())
        );
        fake_port(root.path(), "mlx4_0", 1, "1: DOWN\n", 0);
        assert!(matches!(
            discover(root.path()),
            Err(InfinibandError::NoActivePorts { ports: 1, .. })
        ));
    }

    /// A scripted counter that wraps at 2³²: the reads keep its values in order, one
    /// round after another, with times that only move forward.
    #[test]
    fn samples_rounds_of_reads_without_resetting() {
        let root = tempfile::tempdir().unwrap();
        fake_port(root.path(), "mlx4_0", 1, "4: ACTIVE\n", 0);
        fake_port(root.path(), "mlx4_1", 1, "4: ACTIVE\n", 0);
        let ports = discover(root.path()).unwrap();
        let script = [4_294_967_000u64, 4_294_967_200, 100, 900, 1_000, 1_500];
        let mut next = script.iter().cycle();
        let plan = SamplePlan {
            rounds: 2,
            reads: 3,
            interval: Duration::from_millis(2),
        };
        let reads = sample(&ports, &plan, |_| {
            Ok::<_, InfinibandError>(*next.next().unwrap())
        })
        .unwrap();
        assert_eq!(reads.len(), 12);
        let values: Vec<u64> = reads.iter().map(|r| r.value).collect();
        assert_eq!(values[..6], script);
        let rounds: Vec<u64> = reads.iter().map(|r| r.round).collect();
        assert_eq!(rounds, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
        let ports_read: Vec<usize> = reads.iter().map(|r| r.port_index).collect();
        assert_eq!(ports_read[..4], [0, 1, 0, 1]);
        assert!(reads
            .windows(2)
            .all(|pair| pair[1].t_query_ns >= pair[0].t_query_ns));
        // Steps are at least the interval apart.
        assert!(reads[2].t_query_ns - reads[0].t_query_ns >= 2_000_000);
        let failing = sample(&ports, &plan, |port| {
            Err(InfinibandError::Counter(SysfsError::Read {
                path: port.counter_path().to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            }))
        });
        assert!(failing.is_err());
    }

    /// A stand-in for perfquery: a shell script printing what the real one prints.
    fn fake_perfquery(dir: &Path, body: &str) -> PathBuf {
        crate::subprocess::fake_program(dir, "perfquery", body)
    }

    #[test]
    fn perfquery_runs_with_the_extended_flag_and_says_why_it_failed() {
        let dir = tempfile::tempdir().unwrap();
        let program = fake_perfquery(
            dir.path(),
            r##"echo "# Port extended counters: Lid $2 port $3 ($1)""##,
        );
        assert_eq!(
            perfquery(&program, 12, 3).unwrap(),
            "# Port extended counters: Lid 12 port 3 (-x)\n"
        );

        let program = fake_perfquery(dir.path(), "echo 'ibwarn: mad_rpc failed' >&2; exit 2");
        let error = perfquery(&program, 12, 3).unwrap_err().to_string();
        assert!(
            error.ends_with("perfquery -x 12 3 failed (exit status: 2): ibwarn: mad_rpc failed"),
            "{error}"
        );

        let missing = dir.path().join("absent");
        let error = perfquery(&missing, 12, 3).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!(
                "cannot run {} (infiniband-diags' perfquery",
                missing.display()
            )),
            "{error}"
        );

        let program = fake_perfquery(dir.path(), "exec sleep 30");
        let error = perfquery(&program, 12, 3).unwrap_err().to_string();
        assert!(
            error.ends_with("perfquery -x 12 3 did not answer within 5 s"),
            "{error}"
        );
    }
}
