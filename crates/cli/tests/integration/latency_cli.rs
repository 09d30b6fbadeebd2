//! The `vantage endpoint`, `latency` and `sandwich` commands as users run them:
//! argument errors, exit codes, and the `--json` contract fields of PRODUCT.md.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

fn vantage() -> Command {
    Command::new(
        std::env::var("VANTAGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vantage").to_string()),
    )
}

/// `vantage endpoint` on an ephemeral loopback port; killed on drop.
struct EndpointProcess {
    child: Child,
    port: u16,
}

impl EndpointProcess {
    fn start() -> Self {
        let mut child = vantage()
            .args(["endpoint", "--listen", "::", "--port", "0", "--no-iperf3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vantage endpoint starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("listening line");
        // "vantage endpoint listening on [::]:PORT (UDP: …"
        let port = line
            .split_whitespace()
            .nth(4)
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Self { child, port }
    }
}

impl Drop for EndpointProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(args: &[&str]) -> Output {
    vantage().args(args).output().expect("vantage runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "failed: {}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn latency_json_carries_the_contract_fields_for_every_protocol() {
    let endpoint = EndpointProcess::start();
    let port = endpoint.port.to_string();
    for (target, protocol) in [
        ("127.0.0.1", "udp"),
        ("::1", "udp"),
        ("127.0.0.1", "tcp"),
        ("::1", "icmp"),
    ] {
        let output = run(&[
            "latency",
            target,
            "--port",
            &port,
            "--protocol",
            protocol,
            "--count",
            "4",
            "--interval",
            "10ms",
            "--json",
        ]);
        let doc = json(&output);
        assert!(
            output.stderr.is_empty(),
            "--json prints nothing else: {}",
            stderr(&output)
        );
        let summary = &doc["summary"];
        assert_eq!(summary["sent"], 4, "{protocol} {target}");
        assert_eq!(summary["received"], 4, "{protocol} {target}");
        assert_eq!(summary["loss_ratio"], 0.0);
        for field in ["min", "median", "mean", "p95", "p99", "max", "stddev"] {
            assert!(summary["rtt_us"][field].is_f64(), "rtt_us.{field} in {doc}");
        }
        for field in ["rfc3550", "mean_abs_delta", "median_abs_delta"] {
            assert!(summary["jitter_us"][field].is_f64(), "jitter_us.{field}");
        }
        assert_eq!(doc["test"], "latency");
        assert_eq!(doc["samples"].as_array().map(Vec::len), Some(4));
        assert!(doc["timestamping"]["transmit"].is_string());
        let cpu = &doc["probe_cpu"];
        assert!(cpu["saturated"].is_boolean(), "probe_cpu in {doc}");
        assert!(
            cpu["thread_cpu_ratio"].as_f64().is_some_and(|r| r >= 0.0),
            "{cpu}"
        );
        if protocol == "udp" {
            assert!(summary["one_way"]["local_clock"]["synchronized"].is_boolean());
            assert_eq!(summary["forward_lost"], 0);
        }
        if protocol == "tcp" {
            assert!(summary["connect_us"]["median"].is_f64());
        }
    }
}

#[test]
fn human_output_summarises_like_ping() {
    let endpoint = EndpointProcess::start();
    let output = run(&[
        "latency",
        &format!("localhost:{}", endpoint.port),
        "--count",
        "3",
        "--interval",
        "10ms",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("3 sent, 3 received, 0.0% loss"), "{text}");
    assert!(
        text.contains("rtt min/median/mean/p95/p99/max/stddev"),
        "{text}"
    );
    assert!(text.contains("jitter: RFC 3550"), "{text}");
    assert!(text.contains("reflector: Sender TTL 64\n"), "{text}");
}

#[test]
fn stamp_mode_reports_the_echoed_ssid() {
    let endpoint = EndpointProcess::start();
    let port = endpoint.port.to_string();
    let args = ["latency", "127.0.0.1", "--port", &port, "--count", "3"];
    let stamp = [&args[..], &["--interval", "10ms", "--udp-mode", "stamp"]].concat();
    let output = run(&stamp);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("UDP STAMP, 64 B probes"), "{text}");
    assert!(text.contains("SSID echoed (STAMP reflector"), "{text}");
    let doc = json(&run(&[&stamp[..], &["--json"]].concat()));
    assert_eq!(doc["spec"]["udp_mode"], "stamp");
    assert_eq!(doc["summary"]["received"], 3);
    assert_eq!(doc["summary"]["reflector"]["ssid_echoed"], true);
    assert_eq!(doc["summary"]["reflector"]["replies_without_ttl"], 0);
    let output = run(&[&stamp[..], &["--size", "45"]].concat());
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--size 45"), "{}", stderr(&output));
}

#[test]
fn sandwich_json_reports_rounds_and_queuing_delay() {
    let endpoint = EndpointProcess::start();
    let doc = json(&run(&[
        "sandwich",
        "127.0.0.1",
        "--port",
        &endpoint.port.to_string(),
        "--count",
        "3",
        "--gap",
        "500us",
        "--interval",
        "10ms",
        "--large-size",
        "1400",
        "--json",
    ]));
    assert_eq!(doc["test"], "sandwich");
    assert_eq!(doc["summary"]["rounds"], 3);
    assert_eq!(doc["summary"]["completed_rounds"], 3);
    assert_eq!(doc["summary"]["large_size_bytes"], 1400);
    assert!(doc["summary"]["queuing_delay_us"]["median"].is_f64());
    assert_eq!(doc["rounds"].as_array().map(Vec::len), Some(3));
}

#[test]
fn bad_arguments_fail_with_a_reason() {
    let cases: [(&[&str], &str); 6] = [
        (&["latency", "127.0.0.1", "--interval", "5"], "missing unit"),
        (
            &["latency", "127.0.0.1", "--timeout", "soon"],
            "invalid duration",
        ),
        (&["latency", "127.0.0.1", "--size", "12X"], "unknown prefix"),
        (&["latency", "127.0.0.1", "--size", "10"], "--size 10"),
        (&["latency", "127.0.0.1", "--dscp", "64"], "64"),
        (&["latency", "127.0.0.1", "--protocol", "sctp"], "sctp"),
    ];
    for (args, reason) in cases {
        let output = run(args);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(output.stdout.is_empty(), "{args:?} printed a result");
        assert!(
            stderr(&output).contains(reason),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn refused_and_unresolvable_targets_exit_non_zero_with_one_line() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    for (args, reason) in [
        (
            vec![
                "latency",
                "127.0.0.1",
                "--port",
                closed.as_str(),
                "--count",
                "2",
                "--interval",
                "10ms",
            ],
            "refused",
        ),
        (
            vec![
                "latency",
                "127.0.0.1",
                "--port",
                closed.as_str(),
                "--protocol",
                "tcp",
                "--count",
                "2",
            ],
            "refused",
        ),
        (
            vec!["latency", "no-such-host.invalid", "--count", "1"],
            "cannot resolve",
        ),
    ] {
        let output = run(&args);
        assert!(!output.status.success(), "{args:?} succeeded");
        let message = stderr(&output);
        assert_eq!(message.trim_end().lines().count(), 1, "{args:?}: {message}");
        assert!(message.contains(reason), "{args:?}: {message}");
    }
}

#[test]
fn a_silent_target_exits_1_after_printing_its_report() {
    // A bound socket that never reads: no reply and no port unreachable, only silence.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let common = [
        "latency",
        "127.0.0.1",
        "--port",
        port.as_str(),
        "--count",
        "2",
        "--interval",
        "10ms",
        "--timeout",
        "200ms",
    ];
    let output = run(&common);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("2 sent, 0 received, 100.0% loss"), "{text}");
    assert!(text.contains("rtt: no probe came back"), "{text}");

    let output = run(&[&common[..], &["--json"]].concat());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(doc["summary"]["received"], 0);
    assert_eq!(doc["summary"]["loss_ratio"], 1.0);
    drop(silent);
}
