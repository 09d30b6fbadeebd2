//! `vantage diagnose` as users run it on loopback: a verdict against a stated target
//! with the window and loss budget it needs, an unreachable endpoint, and refusals.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use support::vantage_bin;

/// `vantage endpoint` on an ephemeral loopback port; killed on drop.
struct Endpoint {
    child: Child,
    port: u16,
}

impl Endpoint {
    fn start() -> Endpoint {
        let mut child = Command::new(vantage_bin())
            .args([
                "endpoint",
                "--listen",
                "127.0.0.1",
                "--port",
                "0",
                "--no-iperf3",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start vantage endpoint");
        let line = BufReader::new(child.stdout.take().expect("piped stdout"))
            .lines()
            .map_while(Result::ok)
            .find(|line| line.contains("listening on"))
            .expect("the endpoint says where it listens");
        let port = line
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Endpoint { child, port }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SHORT: &[&str] = &[
    "--probes",
    "20",
    "--tcp-duration",
    "500ms",
    "--tcp-omit",
    "100ms",
    "--small-udp-duration",
    "200ms",
];

fn diagnose(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .arg("diagnose")
        .args(args)
        .output()
        .expect("run vantage diagnose")
}

#[test]
fn loopback_meets_a_100_mbit_target_and_states_what_tcp_needs() {
    let endpoint = Endpoint::start();
    let target = format!("127.0.0.1:{}", endpoint.port);
    // The gigabit app's profile (200 Mbit/s) with its rate overridden.
    let mut args = vec![
        target.as_str(),
        "--app",
        "ptaas-kinect",
        "--target-rate",
        "100M",
        "--json",
    ];
    args.extend_from_slice(SHORT);
    let output = diagnose(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let diagnosis: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}); stderr: {stderr}"));
    assert_eq!(output.status.code(), Some(0), "{diagnosis:#}\n{stderr}");
    assert_eq!(diagnosis["verdict"], "healthy", "{diagnosis:#}");
    let target = &diagnosis["target"];
    assert_eq!(target["met"], true, "{target:#}");
    assert_eq!(
        (&target["app"], &target["target_rate_bps"]),
        (&Value::from("ptaas-kinect"), &Value::from(100_000_000)),
        "{target:#}"
    );
    assert!(
        target["forward_bps"].as_f64().unwrap() > 100e6,
        "{target:#}"
    );
    assert!(
        target["reverse_bps"].as_f64().unwrap() > 100e6,
        "{target:#}"
    );
    // window = 100 Mbit/s × the measured RTT.
    let rtt_s = target["rtt_us"].as_f64().unwrap() * 1e-6;
    let window = target["needs"]["window_bytes"].as_f64().unwrap();
    assert!((window - 100e6 / 8.0 * rtt_s).abs() < 1e-6, "{target:#}");
    for suspect in diagnosis["suspects"].as_array().unwrap() {
        assert!(suspect["confidence"].as_f64().unwrap() < 0.5, "{suspect:#}");
        for evidence in suspect["evidence"].as_array().unwrap() {
            for field in [
                "test", "metric", "value", "expected", "run_id", "supports", "weight",
            ] {
                assert!(
                    evidence.get(field).is_some(),
                    "{field} missing: {evidence:#}"
                );
            }
        }
    }
}

#[test]
fn an_endpoint_that_is_not_there_is_unreachable_with_the_reasons() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("127.0.0.1:{port}");
    let mut args = vec![target.as_str()];
    args.extend_from_slice(SHORT);
    let output = diagnose(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains(": unreachable"), "{stdout}");
    assert!(stderr.contains("forward tcp: cannot connect"), "{stderr}");
}

#[test]
fn bad_arguments_are_refused_with_what_and_where() {
    let output = diagnose(&["127.0.0.1", "--tcp-duration", "1s", "--tcp-omit", "1s"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--tcp-omit: must be shorter than tcp_duration"),
        "{stderr}"
    );
    let output = diagnose(&["127.0.0.1", "--probes", "5"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--probes:") && stderr.contains("from 10 to 10000"),
        "{stderr}"
    );
    let output = diagnose(&["no such host/x"]);
    assert_eq!(output.status.code(), Some(1));
    let output = diagnose(&["127.0.0.1", "--app", "4k"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown application profile '4k' (known: youtube-360p,"),
        "{stderr}"
    );
}
