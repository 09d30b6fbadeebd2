//! `vantage throughput` / `vantage capacity` / the endpoint's iperf3 listener, through
//! the binary, on loopback: the JSON contract of PRODUCT.md and error exits.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

fn vantage() -> String {
    std::env::var("VANTAGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vantage").to_string())
}

/// `vantage endpoint` on ephemeral ports; killed on drop.
struct Endpoint {
    child: Child,
    port: u16,
    iperf3_port: u16,
}

fn port_of(line: &str) -> u16 {
    let after = line
        .split("127.0.0.1:")
        .nth(1)
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

impl Endpoint {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// Started with `extra` options, once it says where it listens.
    fn start_with(extra: &[&str]) -> Self {
        let mut child = Command::new(vantage())
            .args([
                "endpoint",
                "--listen",
                "127.0.0.1",
                "--port",
                "0",
                "--iperf3-port",
                "0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vantage binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map(Result::unwrap);
        let mut line_with = |text: &str| {
            lines
                .find(|line| line.contains(text))
                .unwrap_or_else(|| panic!("the endpoint never said '{text}'"))
        };
        let port = port_of(&line_with("vantage endpoint listening on"));
        let iperf3_port = port_of(&line_with("iperf3-compatible listener on"));
        Endpoint {
            child,
            port,
            iperf3_port,
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_json(args: &[&str]) -> Value {
    let output = Command::new(vantage()).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

#[test]
fn throughput_json_carries_the_contract_fields() {
    let endpoint = Endpoint::start();
    let port = endpoint.port.to_string();
    let result = run_json(&[
        "throughput",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "1s",
        "-P",
        "2",
        "-i",
        "500ms",
        "--json",
    ]);
    let summary = &result["summary"];
    for field in ["sent_bps", "received_bps"] {
        assert!(summary[field].as_f64().unwrap() > 0.0, "{field}: {summary}");
    }
    assert!(summary["retransmits"].is_u64(), "{summary}");
    let intervals = result["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 2);
    for interval in intervals {
        assert!(
            interval["start_s"].is_f64() && interval["end_s"].is_f64() && interval["bps"].is_f64()
        );
        assert_eq!(
            interval["streams"].as_array().unwrap().len(),
            2,
            "per-stream bps: {interval}"
        );
    }
    assert!(
        result["host"]["cpu_ratio"]["sender"].is_f64()
            && result["host"]["cpu_ratio"]["receiver"].is_f64()
    );
    let verdicts = [
        "network",
        "receive_window",
        "send_buffer",
        "cpu",
        "rate_cap",
        "unknown",
    ];
    assert!(
        verdicts.contains(&result["limited_by"].as_str().unwrap()),
        "{}",
        result["limited_by"]
    );

    let udp = run_json(&[
        "throughput",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "1s",
        "-u",
        "-b",
        "20M",
        "-R",
        "--json",
    ]);
    assert!(
        udp["summary"]["udp"]["received_packets"].as_u64().unwrap() > 1000,
        "{}",
        udp["summary"]
    );
}

#[test]
fn endpoint_iperf3_listener_serves_stock_iperf3_and_the_iperf3_tool() {
    let endpoint = Endpoint::start();
    let port = endpoint.iperf3_port.to_string();
    let output = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port, "-t", "1", "-R", "-J"])
        .output()
        .expect("iperf3");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        json["end"]["sum_received"]["bytes"].as_f64().unwrap() > 0.0,
        "{json}"
    );
    let ours = run_json(&[
        "throughput",
        "127.0.0.1",
        "-p",
        &port,
        "--tool",
        "iperf3",
        "-t",
        "1s",
        "--json",
    ]);
    assert!(ours["summary"]["received_bps"].as_f64().unwrap() > 0.0);
    assert_eq!(ours["spec"]["tool"], "iperf3");
}

#[test]
fn capacity_json_carries_the_contract_fields() {
    let endpoint = Endpoint::start();
    let port = endpoint.port.to_string();
    let result = run_json(&[
        "capacity",
        "127.0.0.1",
        "-p",
        &port,
        "--tcp-duration",
        "1s",
        "--probe-duration",
        "1s",
        "--streams",
        "2",
        "--json",
    ]);
    let summary = &result["summary"];
    assert!(summary["capacity_bps"].as_f64().unwrap() > 0.0, "{summary}");
    assert!(summary["tcp_bps"].as_f64().unwrap() > 0.0, "{summary}");
    assert!(summary["rtt_us"].is_f64(), "{summary}");
    assert!(summary["verified_loss_ratio"].is_f64(), "{summary}");
    assert!(result["bound"]["binding"].is_string());
    let calibration = &result["calibration"];
    assert!(calibration["probe_limited"].is_boolean(), "{calibration}");
    assert_eq!(
        calibration["streams"], result["spec"]["tcp_streams"],
        "{calibration}"
    );
    assert!(calibration["reason"].is_string(), "{calibration}");
}

/// `--repeat N` (Miravalls-Sierra et al., 2018): every run's document and each metric
/// across the runs; a run that fails stops the series and names itself.
#[test]
fn repeat_reports_every_run_and_the_metrics_across_them() {
    let endpoint = Endpoint::start();
    let port = endpoint.port.to_string();
    let report = run_json(&[
        "throughput",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "0.5",
        "--repeat",
        "3",
        "--repeat-gap",
        "100ms",
        "--json",
    ]);
    assert_eq!(report["test"], "throughput");
    assert_eq!(
        (report["repeat"].as_u64(), report["gap_us"].as_u64()),
        (Some(3), Some(100_000))
    );
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let received: Vec<f64> = runs
        .iter()
        .map(|run| run["summary"]["received_bps"].as_f64().unwrap())
        .collect();
    let row = report["across_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["metric"] == "received_bps")
        .expect("received_bps across the runs")
        .clone();
    let mean = received.iter().sum::<f64>() / 3.0;
    assert!(
        (row["mean"].as_f64().unwrap() - mean).abs() <= 1e-6 * mean,
        "{row}"
    );
    let (min, max) = (
        received.iter().cloned().fold(f64::MAX, f64::min),
        received.iter().cloned().fold(0.0, f64::max),
    );
    assert_eq!(
        (row["min"].as_f64().unwrap(), row["max"].as_f64().unwrap()),
        (min, max)
    );
    assert_eq!(row["runs"], 3);

    let latency = run_json(&[
        "latency",
        "127.0.0.1",
        "-p",
        &port,
        "-c",
        "5",
        "-i",
        "10ms",
        "--repeat",
        "2",
        "--repeat-gap",
        "0s",
        "--json",
    ]);
    assert_eq!(latency["runs"].as_array().unwrap().len(), 2);
    assert!(latency["across_runs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|row| row["metric"] == "rtt_median_us" && row["runs"] == 2));

    drop(endpoint);
    let (ok, _, stderr) = run(&[
        "throughput",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "0.5",
        "--repeat",
        "2",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("vantage throughput: run 1 of 2: "),
        "{stderr}"
    );
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn bad_arguments_and_unreachable_targets_fail_with_one_line() {
    let output = Command::new(vantage())
        .args(["throughput", "127.0.0.1", "-u", "-b", "10m"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("milli"));

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let output = Command::new(vantage())
        .args(["throughput", "127.0.0.1", "-p", &port, "-t", "1s"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot connect"), "{stderr}");

    let output = Command::new(vantage())
        .args(["capacity", "127.0.0.1", "--epsilon", "2"])
        .output()
        .unwrap();
    assert!(!output.status.success());
}

/// `vantage` with `args`: (success, stdout, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(vantage()).args(args).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `vantage ticket issue` with `key` for `endpoint`, written to `out`.
fn issue_ticket(key: &std::path::Path, endpoint: &str, test_time: &str, out: &std::path::Path) {
    let (ok, ticket, stderr) = run(&[
        "ticket",
        "issue",
        "--key",
        key.to_str().unwrap(),
        "--endpoint",
        endpoint,
        "--test-time",
        test_time,
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!("ticket for endpoint '{endpoint}'")),
        "{stderr}"
    );
    std::fs::write(out, ticket).unwrap();
}

#[test]
fn a_standalone_endpoint_serves_throughput_only_under_its_tickets() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let text = |name: &str| path(name).to_str().unwrap().to_string();

    // A key: the secret in a file only its owner reads, the public key on stdout.
    let (ok, public_key, stderr) = run(&["ticket", "key", "--out", &text("lab.key")]);
    assert!(ok, "{stderr}");
    let public_key = public_key.trim().to_string();
    assert_eq!(public_key.len(), 64, "{public_key}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path("lab.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (ok, _, stderr) = run(&["ticket", "key", "--out", &text("lab.key")]);
    assert!(
        !ok && stderr.contains("exists; a key is never overwritten"),
        "{stderr}"
    );
    let (ok, _, _) = run(&["ticket", "key", "--out", &text("other.key")]);
    assert!(ok);
    std::fs::write(
        path("authorized_keys"),
        format!("# the lab's signer\n{public_key}\n"),
    )
    .unwrap();

    // Bad configurations are refused before anything listens.
    std::fs::write(path("bad_keys"), format!("{public_key}\nabcd\n")).unwrap();
    let (ok, _, stderr) = run(&[
        "endpoint",
        "--port",
        "0",
        "--authorized-keys",
        &text("bad_keys"),
        "--name",
        "ep1",
    ]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("line 2: public key has 2 bytes, expected 32"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(&["endpoint", "--port", "0", "--name", "ep1"]);
    assert!(!ok && stderr.contains("--authorized-keys"), "{stderr}");

    let endpoint = Endpoint::start_with(&[
        "--authorized-keys",
        &text("authorized_keys"),
        "--name",
        "ep1",
    ]);
    let port = endpoint.port.to_string();
    let iperf3_port = endpoint.iperf3_port.to_string();
    let native = |ticket: Option<&str>| {
        let mut args = vec!["throughput", "127.0.0.1", "-p", &port, "-t", "1s", "--json"];
        if let Some(ticket) = ticket {
            args.extend(["--ticket", ticket]);
        }
        run(&args)
    };

    let (ok, _, stderr) = native(None);
    assert!(!ok);
    assert!(
        stderr.contains(
            "standalone endpoint 'ep1' serves throughput tests only with a ticket from a key in its --authorized-keys"
        ),
        "{stderr}"
    );
    // Latency probes need no ticket.
    let (ok, _, stderr) = run(&[
        "latency",
        "127.0.0.1",
        "-p",
        &port,
        "--count",
        "3",
        "--interval",
        "20ms",
    ]);
    assert!(ok, "{stderr}");

    // A ticket covering 2.5 s: a 1 s native test, a 1 s iperf3 test, then no more.
    issue_ticket(&path("lab.key"), "ep1", "2500ms", &path("ticket.json"));
    let (ok, stdout, stderr) = native(Some(&text("ticket.json")));
    assert!(ok, "{stderr}");
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert!(result["summary"]["received_bps"].as_f64().unwrap() > 0.0);
    let iperf3 = |ticket: Option<&str>| {
        let mut args = vec![
            "throughput",
            "127.0.0.1",
            "-p",
            &iperf3_port,
            "--tool",
            "iperf3",
            "-t",
            "1s",
        ];
        if let Some(ticket) = ticket {
            args.extend(["--ticket", ticket, "--ticket-port", &port]);
        }
        run(&args)
    };
    let (ok, _, stderr) = iperf3(Some(&text("ticket.json")));
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = native(Some(&text("ticket.json")));
    assert!(!ok);
    assert!(
        stderr.contains("has used 2000 ms of the 2500 ms its ticket covers"),
        "{stderr}"
    );

    // An iperf3 client that presented no ticket gets iperf3's own refusal (stock
    // `iperf3 -c` too: probe tests/tickets.rs).
    let (ok, _, stderr) = iperf3(None);
    assert!(
        !ok && stderr.contains("test authorization failed"),
        "{stderr}"
    );

    // Tickets for another endpoint, or signed by a key it does not trust, are refused.
    issue_ticket(&path("lab.key"), "ep2", "10s", &path("ep2.json"));
    let (ok, _, stderr) = native(Some(&text("ep2.json")));
    assert!(!ok);
    assert!(
        stderr.contains("the ticket is for 'ep2', not for standalone endpoint 'ep1'"),
        "{stderr}"
    );
    let (ok, _, stderr) = iperf3(Some(&text("ep2.json")));
    assert!(
        !ok && stderr.contains("the ticket is for 'ep2'"),
        "{stderr}"
    );
    issue_ticket(&path("other.key"), "ep1", "10s", &path("foreign.json"));
    let (ok, _, stderr) = native(Some(&text("foreign.json")));
    assert!(
        !ok && stderr.contains("signature does not verify"),
        "{stderr}"
    );

    // A file that is not a ticket is refused by the argument parser.
    std::fs::write(path("garbage.json"), "{\"claims\": 1}").unwrap();
    let (ok, _, stderr) = native(Some(&text("garbage.json")));
    assert!(
        !ok && stderr.contains("not a ticket as `vantage ticket issue` writes it"),
        "{stderr}"
    );
}
