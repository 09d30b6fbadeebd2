//! A lab for one test: brought up under a unique name, taken down when dropped (test
//! passed or not), with endpoints in its nodes. Traffic stays inside its namespaces.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::{is_root, vantage_bin};

/// Tests in this binary build namespaces and measure delay: one at a time (nextest runs them in
/// the `serial-network` group; this lock covers plain `cargo test`).
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn scenario(name: &str) -> String {
    format!("{}/../../lab/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

pub fn require_root() {
    assert!(
        is_root(),
        "these tests build network namespaces and need root (CI runs them as root)"
    );
}

pub fn vantage(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .args(args)
        .output()
        .expect("run vantage")
}

pub fn vantage_ok(args: &[&str]) -> String {
    let output = vantage(args);
    assert!(
        output.status.success(),
        "vantage {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A unique lab name (≤ 12 chars) per test and process.
pub fn unique_lab(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{tag}{}{}",
        std::process::id() % 100_000,
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// Takes the lab down when dropped (test passed or not).
pub struct LabGuard {
    pub name: String,
}

impl LabGuard {
    pub fn up(scenario_file: &str, tag: &str) -> LabGuard {
        let guard = LabGuard {
            name: unique_lab(tag),
        };
        vantage_ok(&["lab", "up", &scenario(scenario_file), "--name", &guard.name]);
        guard
    }

    pub fn exec(&self, node: &str, command: &[&str]) -> Output {
        let mut args = vec!["lab", "exec", "--lab", &self.name, node, "--"];
        args.extend_from_slice(command);
        vantage(&args)
    }

    pub fn set(&self, link: &str, settings: &[&str]) {
        let mut args = vec!["lab", "set", "--lab", &self.name, link];
        args.extend_from_slice(settings);
        vantage_ok(&args);
    }

    /// `vantage throughput TARGET ARGS --json` run in `node`: its JSON document.
    pub fn throughput(&self, node: &str, target: &str, args: &[&str]) -> serde_json::Value {
        let bin = vantage_bin();
        let mut command = vec![bin.to_str().unwrap(), "throughput", target, "--json"];
        command.extend_from_slice(args);
        let output = self.exec(node, &command);
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).expect("throughput JSON")
    }

    pub fn status_json(&self) -> serde_json::Value {
        serde_json::from_str(&vantage_ok(&["lab", "status", &self.name, "--json"]))
            .expect("status JSON")
    }

    /// The mean delay the machine added to the configured one since the lab came up (µs):
    /// how late the forwarder wrote packets after their release times, over every packet it
    /// forwarded on every link and direction.
    pub fn mean_release_lateness_us(&self) -> f64 {
        let status = self.status_json();
        let links = status["counters"].as_array().cloned().unwrap_or_default();
        let (lateness_us, forwarded) = links
            .iter()
            .flat_map(|link| ["forward", "reverse"].map(|direction| &link[direction]))
            .map(|counters| {
                let count = |field: &str| {
                    counters[field]
                        .as_u64()
                        .unwrap_or_else(|| panic!("lab status without '{field}': {counters}"))
                };
                (count("release_lateness_us"), count("forwarded"))
            })
            .fold((0, 0), |(l, f), (lateness, forwarded)| {
                (l + lateness, f + forwarded)
            });
        lateness_us as f64 / forwarded.max(1) as f64
    }

    /// The forwarder's own account of frames it wrote late, for failure messages: a timing
    /// failure with none says the path, not the machine, added the delay.
    pub fn release_lateness(&self) -> String {
        let status = self.status_json();
        let links = status["counters"].as_array().cloned().unwrap_or_default();
        links
            .iter()
            .flat_map(|link| {
                ["forward", "reverse"].map(|direction| {
                    format!(
                        "{} {direction}: {} released late, worst {} µs",
                        link["link"].as_str().unwrap_or("?"),
                        link[direction]["released_late"],
                        link[direction]["max_release_lateness_us"]
                    )
                })
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        let _ = vantage(&["lab", "down", &self.name]);
    }
}

/// A vantage endpoint in a lab node, killed on drop (`lab exec` replaces itself with the
/// command, so the child is the endpoint).
pub struct LabEndpoint(std::process::Child);

impl LabEndpoint {
    pub fn start(lab: &LabGuard, node: &str, port: u16) -> LabEndpoint {
        use std::io::BufRead;
        let port = port.to_string();
        let mut child = Command::new(vantage_bin())
            .args(["lab", "exec", "--lab", &lab.name, node, "--"])
            .arg(vantage_bin())
            .args(["endpoint", "--port", &port, "--no-iperf3"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the endpoint");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut first_line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut first_line);
        let endpoint = LabEndpoint(child);
        assert!(
            first_line.contains("listening"),
            "endpoint in {node} did not start: {first_line:?}"
        );
        endpoint
    }
}

impl Drop for LabEndpoint {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
