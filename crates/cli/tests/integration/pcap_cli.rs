//! `vantage pcap`, `vantage vddut` and `vantage capture`'s refusals as a user meets them: files
//! written here, no root.

use crate::support;

use std::process::{Command, Output};

use support::capture::{pcap, udp_frame};
use support::vantage_bin;

fn vantage(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .args(args)
        .output()
        .expect("run vantage")
}

const DESKTOP: [u8; 4] = [10, 1, 0, 1];
const CLIENT: [u8; 4] = [10, 1, 0, 2];

#[test]
fn pcap_prints_flows_and_refuses_what_is_not_a_capture() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("udp.pcap");
    let records: Vec<(u64, Vec<u8>)> = (0..5)
        .map(|index| (index * 250_000, udp_frame(DESKTOP, CLIENT, 5004, 1042)))
        .collect();
    std::fs::write(&file, pcap(&records)).unwrap();
    let output = vantage(&["pcap", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout.contains("pcap, 5 frames, 5 TCP/UDP packets in 1 flow "),
        "{stdout}"
    );
    assert!(
        stdout.contains("udp  10.1.0.1:4172 -> 10.1.0.2:5004"),
        "{stdout}"
    );

    let output = vantage(&["pcap", file.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let flow = &report["flows"][0];
    assert_eq!(flow["client_to_server"]["payload_bytes"], 5 * 1000);
    // 5000 bytes over the 1 s from the first to the last packet.
    assert_eq!(flow["client_to_server"]["throughput_bps"], 40_000.0);

    let not_a_capture = directory.path().join("notes.txt");
    std::fs::write(&not_a_capture, "these are notes, not packets\n").unwrap();
    let output = vantage(&["pcap", not_a_capture.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("notes.txt: not a pcap or pcapng file"),
        "{stderr}"
    );
    let output = vantage(&["pcap", "/nonexistent/capture.pcap"]);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot open /nonexistent/capture.pcap")
    );
}

#[test]
fn vddut_prints_each_task_s_update_and_says_when_no_marker_was_captured() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("session.pcap");
    let records = vec![
        (1_000_000, udp_frame(DESKTOP, CLIENT, 9999, 60)),
        (1_020_000, udp_frame(DESKTOP, CLIENT, 50_000, 1200)),
        (1_250_000, udp_frame(DESKTOP, CLIENT, 50_000, 1300)),
        (1_300_000, udp_frame(DESKTOP, CLIENT, 50_000, 110)),
        (2_900_000, udp_frame(DESKTOP, CLIENT, 50_000, 1400)),
    ];
    std::fs::write(&file, pcap(&records)).unwrap();
    let output = vantage(&[
        "vddut",
        file.to_str().unwrap(),
        "--marker-port",
        "9999",
        "--json",
    ]);
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let update = &report["tasks"][0]["update"];
    // The 110-byte frame is idle traffic; the frame 1.65 s later is past the 500 ms gap.
    assert_eq!(update["vddut_ns"], 250_000_000);
    assert_eq!(update["update_bytes"], 2500);
    let output = vantage(&["vddut", file.to_str().unwrap(), "--marker-port", "9999"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("0.250"), "{stdout}");

    let output = vantage(&["vddut", file.to_str().unwrap(), "--marker-port", "7"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no start marker (UDP to port 7)"),
        "{stderr}"
    );
}

/// A capture's options are the kind's parameters: what would let a filter be read as an
/// option, or a capture run unbounded, is refused with the option's name before any
/// program starts, and a missing capture program is named.
#[test]
fn capture_refuses_unsafe_options_and_names_a_missing_dumpcap() {
    for (args, says) in [
        (
            &["capture", "lo", "--filter=-w /etc/passwd"][..],
            "vantage capture: invalid option.filter: may not start with '-'",
        ),
        (
            &["capture", "lo", "--duration", "1500ms"][..],
            "vantage capture: invalid option.duration: must be a whole number of seconds, at least 1 s",
        ),
        (
            &["capture", "lo", "--duration", "1h"][..],
            "vantage capture: invalid option.duration: is longer than 600 s",
        ),
        (
            &["capture", "../x"][..],
            "vantage capture: invalid option.interface: '../x' is not an interface name",
        ),
    ] {
        let output = vantage(args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with(says), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    let output = vantage(&[
        "capture",
        "lo",
        "-d",
        "1s",
        "--dumpcap",
        "/nonexistent/dumpcap",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "vantage capture: cannot run /nonexistent/dumpcap (Wireshark's dumpcap, Debian package wireshark-common)"
        ),
        "{stderr}"
    );
}
