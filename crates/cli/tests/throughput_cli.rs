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
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vantage binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = port_of(&lines.next().unwrap().unwrap());
        let iperf3_port = port_of(&lines.next().unwrap().unwrap());
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
