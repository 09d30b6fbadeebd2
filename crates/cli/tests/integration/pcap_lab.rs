//! `vantage pcap` on captures made in a lab during known transfers, checked against
//! tshark's reading of the same files and against the transfer's own figures. Root: the
//! lab builds namespaces; captures are taken inside them with dumpcap.

use crate::support;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use support::lab::{require_root, serial, vantage_ok, LabEndpoint, LabGuard};
use support::vantage_bin;

/// dumpcap in a lab node, stopped (SIGINT, so it finishes the file) on drop.
struct Capture {
    child: Option<Child>,
    path: PathBuf,
}

impl Capture {
    /// Starts capturing TCP port 7862 on `interface` of `node`; returns once dumpcap says it
    /// is capturing.
    fn start(
        lab: &LabGuard,
        node: &str,
        interface: &str,
        extra: &[&str],
        path: PathBuf,
    ) -> Capture {
        let mut child = Command::new(vantage_bin())
            .args([
                "lab", "exec", "--lab", &lab.name, node, "--", "dumpcap", "-i", interface,
            ])
            .args(extra)
            .args(["-f", "tcp port 7862", "-w"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dumpcap (Debian's tshark package)");
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped"));
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            said += &line;
            if line.starts_with("Capturing on") {
                break;
            }
        }
        assert!(
            said.contains("Capturing on"),
            "dumpcap on {node}/{interface} did not start: {said}"
        );
        // Keep reading its stderr so a full pipe never blocks it.
        std::thread::spawn(move || for _ in stderr.lines() {});
        Capture {
            child: Some(child),
            path,
        }
    }

    /// Stops dumpcap and returns the file.
    fn finish(mut self) -> PathBuf {
        self.stop();
        self.path.clone()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            );
            let _ = child.wait();
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a test's captures go: removed when it passes, kept (and named on stderr) when it
/// fails, so the files that disagreed can be opened in Wireshark.
struct CaptureDirectory(Option<tempfile::TempDir>);

impl CaptureDirectory {
    fn new() -> Self {
        Self(Some(
            tempfile::Builder::new()
                .prefix("vantage-pcap-test-")
                .tempdir()
                .expect("temp dir"),
        ))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl Drop for CaptureDirectory {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(directory) = self.0.take() {
                eprintln!("captures kept in {}", directory.keep().display());
            }
        }
    }
}

fn pcap_json(path: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["pcap", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&vantage_ok(&args)).expect("pcap JSON")
}

/// One direction of a TCP connection as tshark reads it.
#[derive(Debug, Default)]
struct TsharkDirection {
    packets: u64,
    payload_bytes: u64,
    retransmits: u64,
}

#[derive(Debug, Default)]
struct TsharkReading {
    /// Keyed by `sender -> receiver`, each ADDR:PORT as vantage prints it.
    directions: BTreeMap<String, TsharkDirection>,
    /// `tcp.analysis.ack_rtt` (µs) of each SYN-ACK (`t_SYNACK − t_SYN`, the last one's) and
    /// of each handshake's final ACK (`t_ACK − t_SYNACK`), and `tcp.analysis.initial_rtt`
    /// (`t_ACK − t_SYN`, from the last SYN), keyed by the client's ADDR:PORT.
    syn_ack_rtt_us: BTreeMap<String, f64>,
    final_ack_rtt_us: BTreeMap<String, f64>,
    initial_rtt_us: BTreeMap<String, f64>,
}

fn endpoint(address: &str, port: &str) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

fn tshark(path: &Path) -> TsharkReading {
    let fields = |filter: &str, fields: &[&str]| -> Vec<Vec<String>> {
        let mut command = Command::new("tshark");
        command.args(["-n", "-r"]).arg(path).args([
            "-Y",
            filter,
            "-T",
            "fields",
            "-E",
            "separator=|",
        ]);
        for field in fields {
            command.args(["-e", field]);
        }
        let output = command.output().expect("tshark (Debian's tshark package)");
        assert!(
            output.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| line.split('|').map(String::from).collect())
            .collect()
    };
    let sender = |row: &[String]| {
        let address = if row[0].is_empty() { &row[1] } else { &row[0] };
        endpoint(address, &row[2])
    };
    let receiver = |row: &[String]| {
        let address = if row[3].is_empty() { &row[4] } else { &row[3] };
        endpoint(address, &row[5])
    };
    let addressing = [
        "ip.src",
        "ipv6.src",
        "tcp.srcport",
        "ip.dst",
        "ipv6.dst",
        "tcp.dstport",
    ];
    let mut reading = TsharkReading::default();
    let mut with_length = addressing.to_vec();
    with_length.push("tcp.len");
    for row in fields("tcp", &with_length) {
        let key = format!("{} -> {}", sender(&row), receiver(&row));
        let direction = reading.directions.entry(key).or_default();
        direction.packets += 1;
        direction.payload_bytes += row[6].parse::<u64>().expect("tcp.len");
    }
    for row in fields("tcp.analysis.retransmission", &addressing) {
        let key = format!("{} -> {}", sender(&row), receiver(&row));
        reading.directions.entry(key).or_default().retransmits += 1;
    }
    let mut with_rtt = addressing.to_vec();
    with_rtt.push("tcp.analysis.ack_rtt");
    for row in fields("tcp.flags.syn == 1 && tcp.flags.ack == 1", &with_rtt) {
        if let Ok(seconds) = row[6].parse::<f64>() {
            reading.syn_ack_rtt_us.insert(receiver(&row), seconds * 1e6);
        }
    }
    // The handshake's ACK: the client's first segment acknowledging sequence 1 (relative).
    with_rtt.push("tcp.analysis.initial_rtt");
    for row in fields(
        "tcp.flags.syn == 0 && tcp.ack == 1 && tcp.seq == 1 && tcp.analysis.ack_rtt",
        &with_rtt,
    ) {
        if let (Ok(ack_rtt_s), Ok(initial_rtt_s)) = (row[6].parse::<f64>(), row[7].parse::<f64>()) {
            reading
                .final_ack_rtt_us
                .entry(sender(&row))
                .or_insert(ack_rtt_s * 1e6);
            reading
                .initial_rtt_us
                .entry(sender(&row))
                .or_insert(initial_rtt_s * 1e6);
        }
    }
    reading
}

/// Every flow's bytes, packets and retransmissions each way agree exactly with tshark's;
/// the handshake RTT within 50 µs of tshark's ack_rtt of the SYN-ACK (capture near the
/// client) or of the handshake's ACK (near the server).
fn assert_agrees_with_tshark(path: &Path, label: &str) -> Value {
    let report = pcap_json(path, &[]);
    let reading = tshark(path);
    let flows = report["flows"].as_array().expect("flows");
    assert!(!flows.is_empty(), "{label}: no flows in {report}");
    for flow in flows {
        let client = flow["client"].as_str().unwrap().to_string();
        let server = flow["server"].as_str().unwrap().to_string();
        for (key, direction) in [
            (format!("{client} -> {server}"), "client_to_server"),
            (format!("{server} -> {client}"), "server_to_client"),
        ] {
            let ours = &flow[direction];
            let Some(theirs) = reading.directions.get(&key) else {
                // A direction that sent nothing (a SYN never answered) is absent in both.
                assert_eq!(
                    ours["packets"], 0,
                    "{label}: tshark has no {key}: {reading:?}"
                );
                continue;
            };
            assert_eq!(
                ours["payload_bytes"], theirs.payload_bytes,
                "{label} {key} bytes"
            );
            assert_eq!(ours["packets"], theirs.packets, "{label} {key} packets");
            assert_eq!(
                ours["retransmits"], theirs.retransmits,
                "{label} {key} retransmits: {ours}"
            );
        }
        // dumpcap says it is capturing a moment before it is: the first connection's SYN
        // can be missed, and then neither tool has a handshake RTT. Near the server the
        // RTT is t_ACK − t_SYN, tshark's initial RTT; the ACK's own ack_rtt leaves out the
        // server's turnaround, which the handshake's intervals give apart.
        // tshark's initial RTT counts from the last SYN (a retransmitted SYN starts it
        // again, as Karn's rule has it) but its ack_rtt from the first transmission of
        // what is acknowledged, so the intervals are taken from the initial RTT: near the
        // client t_SYNACK − t_SYN is it less the ACK's ack_rtt, near the server t_ACK −
        // t_SYNACK is it less the SYN-ACK's (the same as the ack_rtts when nothing was sent
        // twice; a SYN-ACK lost after one SYN was 1 s off otherwise).
        let initial_us = reading.initial_rtt_us.get(&client).copied();
        let reference_us = match flow["capture_side"].as_str() {
            Some("client") => initial_us.map(|initial| initial - reading.final_ack_rtt_us[&client]),
            Some("server") => {
                if let Some(initial) = initial_us {
                    let ours_us = flow["handshake"]["syn_ack_to_ack_us"].as_f64().unwrap();
                    let theirs_us = initial - reading.syn_ack_rtt_us[&client];
                    assert!(
                        (ours_us - theirs_us).abs() <= 50.0,
                        "{label} {client}: SYN-ACK to ACK {ours_us} µs, tshark {theirs_us} µs"
                    );
                }
                initial_us
            }
            _ => None,
        };
        match (flow["handshake_rtt_us"].as_f64(), reference_us) {
            (Some(ours_us), Some(theirs_us)) => assert!(
                (ours_us - theirs_us).abs() <= 50.0,
                "{label} {client}: handshake RTT {ours_us} µs, tshark {theirs_us} µs"
            ),
            (None, None) => assert!(
                !reading.syn_ack_rtt_us.contains_key(&client),
                "{label} {client}: tshark saw the handshake, vantage did not: {flow}"
            ),
            (ours, theirs) => {
                panic!("{label} {client}: handshake RTT {ours:?} µs, tshark {theirs:?}: {flow}")
            }
        }
    }
    // The transfers' data connections start well after the capture: their handshakes are in.
    assert!(
        flows.iter().any(|flow| flow["handshake_rtt_us"].is_f64()),
        "{label}: no handshake RTT at all"
    );
    report
}

fn interface_of(lab: &LabGuard, node: &str) -> String {
    let output = lab.exec(node, &["ip", "-o", "link", "show"]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .find(|name| name != "lo")
        .expect("a non-loopback interface")
}

/// Captures of lossy transfers over IPv4 and IPv6, taken four ways at once (Ethernet and
/// the same cut to 96 bytes at the sender, Linux cooked SLL at the sender, SLL2 at the
/// receiver), plus the Ethernet one with every frame tagged VLAN 42 by tcprewrite (this
/// kernel has no 802.1Q module to tag them live): every flow agrees with tshark.
#[test]
fn flow_records_agree_with_tshark_on_lab_captures() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "p");
    lab.set("h1-h2", &["delay=2ms", "loss=1%", "rate=100M"]);
    let _endpoint = LabEndpoint::start(&lab, "h2", 7862);
    let directory = CaptureDirectory::new();
    let file = |name: &str| directory.path().join(name);
    let h1_interface = interface_of(&lab, "h1");
    let captures = vec![
        (
            "ethernet",
            Capture::start(&lab, "h1", &h1_interface, &["-P"], file("ethernet.pcap")),
        ),
        (
            "snaplen-96",
            Capture::start(&lab, "h1", &h1_interface, &["-s", "96"], file("cut.pcapng")),
        ),
        (
            "sll",
            Capture::start(&lab, "h1", "any", &["-y", "LINUX_SLL"], file("sll.pcapng")),
        ),
        (
            "sll2-server",
            Capture::start(
                &lab,
                "h2",
                "any",
                &["-y", "LINUX_SLL2"],
                file("sll2.pcapng"),
            ),
        ),
    ];
    for target in ["10.77.0.2", "fd77::2"] {
        lab.throughput("h1", target, &["--duration", "2s"]);
    }
    let mut files: Vec<(&str, PathBuf)> = captures
        .into_iter()
        .map(|(label, capture)| (label, capture.finish()))
        .collect();
    let tagged = file("vlan.pcap");
    let output = Command::new("tcprewrite")
        .args([
            "--enet-vlan=add",
            "--enet-vlan-tag=42",
            "--enet-vlan-cfi=0",
            "--enet-vlan-pri=0",
            "-i",
        ])
        .arg(&files[0].1)
        .arg("-o")
        .arg(&tagged)
        .output()
        .expect("tcprewrite (Debian's tcpreplay package)");
    assert!(output.status.success(), "tcprewrite: {output:?}");
    files.push(("vlan-42", tagged));
    for (label, path) in files {
        let report = assert_agrees_with_tshark(&path, label);
        let capture_facts = &report["capture"];
        let tcp_flows = report["flows"].as_array().unwrap();
        assert!(
            tcp_flows
                .iter()
                .any(|flow| flow["client"].as_str().unwrap().starts_with("[fd77::1]")),
            "{label}: no IPv6 flow"
        );
        let retransmits: u64 = tcp_flows
            .iter()
            .map(|flow| flow["client_to_server"]["retransmits"].as_u64().unwrap())
            .sum();
        assert!(
            retransmits > 0,
            "{label}: 1 % loss and no retransmission seen"
        );
        if label == "snaplen-96" {
            assert!(
                capture_facts["truncated_frames"].as_u64().unwrap() > 0,
                "{capture_facts}"
            );
        }
        let expected_side = if label == "sll2-server" {
            "server"
        } else {
            "client"
        };
        for flow in tcp_flows
            .iter()
            .filter(|flow| !flow["capture_side"].is_null())
        {
            assert_eq!(flow["capture_side"], expected_side, "{label}: {flow}");
        }
    }
}

/// Bazan-Antequera et al.'s 64 KiB window over a delayed path, seen passively (the
/// receiver's buffer capped so that it advertises about 64 KiB against a 125 KB
/// bandwidth-delay product): the capture at the sender says the receive window limited
/// the transfer most of the time,
/// and its rate agrees with the transfer's own figure within 1 %; the same path without
/// the window cap is not window-limited.
#[test]
fn a_window_limited_transfer_is_told_apart_from_an_unlimited_one() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "q");
    lab.set("h1-h2", &["delay=10ms", "rate=50M"]);
    let _endpoint = LabEndpoint::start(&lab, "h2", 7862);
    let directory = CaptureDirectory::new();
    let interface = interface_of(&lab, "h1");
    let data_flow = |report: &Value| -> Value {
        report["flows"]
            .as_array()
            .unwrap()
            .iter()
            .max_by_key(|flow| flow["client_to_server"]["payload_bytes"].as_u64().unwrap())
            .cloned()
            .expect("a flow")
    };

    let capture = Capture::start(
        &lab,
        "h1",
        &interface,
        &[],
        directory.path().join("window.pcapng"),
    );
    // Only the receiver's window is capped (its namespace's receive buffer limit, which
    // advertises about 64 KiB): `--window` would also cap the sender's send buffer, and a
    // sender waiting on its own buffer is not limited by the receive window.
    let rmem_default = sysctl(&lab, "h2", "net.ipv4.tcp_rmem");
    sysctl_set(&lab, "h2", "net.ipv4.tcp_rmem", "4096 65536 98304");
    let result = lab.throughput("h1", "10.77.0.2", &["--duration", "4s"]);
    sysctl_set(&lab, "h2", "net.ipv4.tcp_rmem", &rmem_default);
    let report = assert_agrees_with_tshark(&capture.finish(), "64 KiB window");
    let flow = data_flow(&report);
    let share = &flow["limited_by_share"];
    assert!(
        share["receive_window"].as_f64().unwrap() > 0.5,
        "64 KiB window: {share}"
    );
    let ours_bps = flow["client_to_server"]["throughput_bps"].as_f64().unwrap();
    let active_bps = result["summary"]["received_bps"].as_f64().unwrap();
    assert!(
        (ours_bps / active_bps - 1.0).abs() <= 0.01,
        "capture {ours_bps} bit/s, transfer {active_bps} bit/s"
    );

    let capture = Capture::start(
        &lab,
        "h1",
        &interface,
        &[],
        directory.path().join("open.pcapng"),
    );
    lab.throughput("h1", "10.77.0.2", &["--duration", "4s"]);
    let report = assert_agrees_with_tshark(&capture.finish(), "open window");
    let share = &data_flow(&report)["limited_by_share"];
    assert!(
        share["receive_window"].as_f64().unwrap() < 0.2,
        "open window: {share}"
    );
}

/// A sysctl's value in a lab node's namespace.
fn sysctl(lab: &LabGuard, node: &str, name: &str) -> String {
    let output = lab.exec(node, &["sysctl", "-n", name]);
    assert!(output.status.success(), "sysctl {name}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn sysctl_set(lab: &LabGuard, node: &str, name: &str, value: &str) {
    let output = lab.exec(node, &["sysctl", "-w", &format!("{name}={value}")]);
    assert!(output.status.success(), "sysctl {name}={value}: {output:?}");
}
