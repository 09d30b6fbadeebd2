//! `vantage counters` end to end: the missing-interface error, the table and JSON over
//! loopback, and — as root, in two network namespaces this test creates — a known
//! transfer over a veth pair whose deltas must equal `ip -s -j link show`'s, exactly.

use crate::support;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;
use support::{is_root, vantage_bin};
use vantage_model::counters::COUNTER_NAMES;

fn vantage(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .args(args)
        .output()
        .expect("run vantage")
}

#[test]
fn a_missing_interface_is_named_with_its_path() {
    let output = vantage(&["counters", "nosuch0", "--interval", "10ms", "--count", "1"]);
    assert!(!output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "vantage counters: interface 'nosuch0' does not exist (/sys/class/net/nosuch0 not found)\n"
    );
    let output = vantage(&["counters", "lo", "--interval", "0s"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("option.interval: must be longer than zero"),
        "{output:?}"
    );
}

#[test]
fn loopback_prints_a_table_and_json() {
    let output = vantage(&["counters", "lo", "--interval", "50ms", "--count", "2"]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "--- interface counters every 0.05 s, 64-bit counters ---"
    );
    assert!(lines[1].starts_with("interface "), "{text}");
    assert_eq!(
        lines.iter().filter(|line| line.starts_with("lo ")).count(),
        2,
        "{text}"
    );
    assert!(
        lines[4].starts_with("lo: 2 intervals (0 with a counter reset, 0 wrapped)"),
        "{text}"
    );

    let output = vantage(&[
        "counters",
        "lo",
        "--interval",
        "50ms",
        "--count",
        "2",
        "--json",
    ]);
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["counter_bits"], "64");
    assert_eq!(json["interfaces"][0]["interface"], "lo");
    assert_eq!(
        json["interfaces"][0]["intervals"].as_array().unwrap().len(),
        2
    );
    assert_eq!(json["summary"]["intervals"], 2);
}

/// Two network namespaces joined by a veth pair, deleted on drop (also on failure),
/// with IPv6 off and static neighbours so that nothing but the test's traffic crosses.
struct VethPair {
    namespaces: [String; 2],
    interfaces: [String; 2],
}

fn sh(args: &[&str]) {
    let output = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        output.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl VethPair {
    fn create() -> VethPair {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let pair = VethPair {
            namespaces: [format!("vcn{tag}a"), format!("vcn{tag}b")],
            interfaces: [format!("vc{tag}a"), format!("vc{tag}b")],
        };
        let mut created = Vec::new();
        for namespace in &pair.namespaces {
            sh(&["ip", "netns", "add", namespace]);
            created.push(namespace.clone());
            // Before the veth exists, so it is born without IPv6 (no router or
            // neighbour solicitations, no MLD reports on the counted interface).
            for key in ["all", "default"] {
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    namespace,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                ]);
            }
        }
        let [a, b] = &pair.namespaces;
        let [veth_a, veth_b] = &pair.interfaces;
        sh(&[
            "ip",
            "link",
            "add",
            veth_a,
            "netns",
            a,
            "address",
            "02:00:00:c0:00:01",
            "type",
            "veth",
            "peer",
            "name",
            veth_b,
            "netns",
            b,
            "address",
            "02:00:00:c0:00:02",
        ]);
        sh(&["ip", "-n", a, "addr", "add", "10.203.0.1/30", "dev", veth_a]);
        sh(&["ip", "-n", b, "addr", "add", "10.203.0.2/30", "dev", veth_b]);
        // Static neighbours: no ARP exchange during the measurement.
        sh(&[
            "ip",
            "-n",
            a,
            "neigh",
            "add",
            "10.203.0.2",
            "lladdr",
            "02:00:00:c0:00:02",
            "dev",
            veth_a,
            "nud",
            "permanent",
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "neigh",
            "add",
            "10.203.0.1",
            "lladdr",
            "02:00:00:c0:00:01",
            "dev",
            veth_b,
            "nud",
            "permanent",
        ]);
        sh(&["ip", "-n", a, "link", "set", veth_a, "up"]);
        sh(&["ip", "-n", b, "link", "set", veth_b, "up"]);
        pair
    }

    /// `ip -s -j link show` of the first interface: counters by this module's names.
    fn ip_counters(&self) -> [u64; 8] {
        let output = Command::new("ip")
            .args([
                "-n",
                &self.namespaces[0],
                "-s",
                "-j",
                "link",
                "show",
                "dev",
                &self.interfaces[0],
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let links: Value = serde_json::from_slice(&output.stdout).unwrap();
        let stats = &links[0]["stats64"];
        let read = |direction: &str, field: &str| stats[direction][field].as_u64().unwrap();
        [
            read("rx", "bytes"),
            read("tx", "bytes"),
            read("rx", "packets"),
            read("tx", "packets"),
            read("rx", "errors"),
            read("tx", "errors"),
            read("rx", "dropped"),
            read("tx", "dropped"),
        ]
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and so the pair.
        for namespace in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", namespace])
                .status();
        }
    }
}

/// 20 echo requests of 1000 payload bytes and their 20 replies: each frame is
/// 1000 + 8 (ICMP) + 20 (IPv4) + 14 (Ethernet) bytes on the veth.
const PINGS: u64 = 20;
const FRAME_BYTES: u64 = 1000 + 8 + 20 + 14;

#[test]
fn a_known_transfer_over_a_veth_matches_ip_link_exactly() {
    assert!(
        is_root(),
        "this test builds network namespaces and needs root (CI runs it as root)"
    );
    let pair = VethPair::create();
    let before = pair.ip_counters();
    let counters = Command::new("ip")
        .args(["netns", "exec", &pair.namespaces[0]])
        .arg(vantage_bin())
        .args([
            "counters",
            &pair.interfaces[0],
            "--interval",
            "1s",
            "--count",
            "3",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The transfer falls between the first sample (at once) and the last (3 s).
    std::thread::sleep(Duration::from_millis(1200));
    sh(&[
        "ip",
        "netns",
        "exec",
        &pair.namespaces[0],
        "ping",
        "-q",
        "-c",
        &PINGS.to_string(),
        "-i",
        "0.02",
        "-s",
        "1000",
        "-W",
        "2",
        "10.203.0.2",
    ]);
    let output = counters.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let after = pair.ip_counters();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let interface = &result["interfaces"][0];
    assert_eq!(interface["interface"], pair.interfaces[0].as_str());
    let totals = &interface["totals"];
    assert_eq!(totals["intervals"], 3);
    assert_eq!(totals["reset_intervals"], 0);

    println!(
        "{:<11} {:>12} {:>12} {:>12}",
        "counter", "vantage", "ip -s link", "expected"
    );
    let expected = [
        PINGS * FRAME_BYTES,
        PINGS * FRAME_BYTES,
        PINGS,
        PINGS,
        0,
        0,
        0,
        0,
    ];
    let mut rows = Vec::new();
    for (index, name) in COUNTER_NAMES.iter().enumerate() {
        let ours = totals[name].as_u64().unwrap();
        let theirs = after[index] - before[index];
        println!("{name:<11} {ours:>12} {theirs:>12} {:>12}", expected[index]);
        rows.push((name, ours, theirs, expected[index]));
        // Each interval's delta adds up to the run's.
        let summed: u64 = interface["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|interval| interval[name].as_u64().unwrap())
            .sum();
        assert_eq!(summed, ours, "{name}");
    }
    for (name, ours, theirs, expected) in rows {
        assert_eq!(ours, theirs, "{name}: vantage counters vs ip -s link");
        assert_eq!(
            ours, expected,
            "{name}: vantage counters vs the transfer sent"
        );
    }
    // Some interval saw the transfer at its rate; none invented one.
    let rates: Vec<f64> = interface["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|interval| interval["tx_rate_bps"].as_f64().unwrap())
        .collect();
    assert!(rates.iter().any(|&rate| rate > 0.0), "{rates:?}");
}
