//! End-to-end tests of `vantage lab` (root: CI runs as root; without root they fail and say why).
//! Every lab gets a unique name and a guard that takes it down even when the test fails.
//! Traffic stays inside the labs' own namespaces.

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};
use support::lab::{
    require_root, scenario, serial, unique_lab, vantage, vantage_ok, LabEndpoint, LabGuard,
};
use support::vantage_bin;

fn netns_names() -> BTreeSet<String> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

fn host_link_names() -> BTreeSet<String> {
    let output = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .expect("ip -o link");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            l.split(": ")
                .nth(1)
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
        })
        .collect()
}

/// Per-packet RTTs (ms) from ping's output.
fn ping_rtts_ms(output: &Output) -> Vec<f64> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "no samples");
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `lab up` then `lab down` of every scenario leaves no namespace, interface, process or state.
#[test]
fn scenarios_up_then_down_leave_nothing_behind() {
    require_root();
    let _serial = serial();
    for (file, from, to_address) in [
        ("two-hosts.toml", "h1", "10.77.0.2"),
        ("gigabit-app.toml", "therapist", "10.77.4.2"),
        ("cloud-zones.toml", "a1", "fd77:0:0:2::4"),
    ] {
        let netns_before = netns_names();
        let links_before = host_link_names();
        let lab = LabGuard::up(file, "s");
        let status = lab.status_json();
        assert_eq!(
            status["forwarder_alive"], true,
            "{file}: forwarder not alive"
        );
        let node_count = status["state"]["topology"]["nodes"]
            .as_array()
            .unwrap()
            .len();
        let lab_netns: Vec<String> = netns_names()
            .into_iter()
            .filter(|n| {
                n.starts_with(&format!("vl-{}-", lab.name)) || *n == format!("vl-{}_emu", lab.name)
            })
            .collect();
        assert_eq!(
            lab_netns.len(),
            node_count + 1,
            "{file}: namespaces {lab_netns:?}"
        );
        let ping = lab.exec(
            from,
            &["ping", "-c", "3", "-i", "0.05", "-W", "2", to_address],
        );
        assert!(
            ping.status.success(),
            "{file}: {from} cannot reach {to_address}: {ping:?}"
        );

        let name = lab.name.clone();
        drop(lab);
        let leftover_netns: Vec<_> = netns_names().difference(&netns_before).cloned().collect();
        let ours: Vec<_> = leftover_netns
            .iter()
            .filter(|n| n.contains(&name))
            .collect();
        assert!(ours.is_empty(), "{file}: namespaces left behind: {ours:?}");
        let new_links: Vec<_> = host_link_names()
            .difference(&links_before)
            .cloned()
            .collect();
        assert!(
            new_links.is_empty(),
            "{file}: interfaces appeared in the host namespace: {new_links:?}"
        );
        assert!(
            !PathBuf::from(format!("/run/vantage-lab/{name}")).exists(),
            "{file}: state left behind"
        );
        let forwarders = Command::new("pgrep")
            .args(["-f", &format!("lab forwarder {name}$")])
            .output()
            .unwrap();
        assert!(
            forwarders.stdout.is_empty(),
            "{file}: forwarder still running"
        );
    }
}

/// 20 ms one-way delay in each direction: ping's median RTT reads 40 ms ± 1 ms.
#[test]
fn delay_of_20ms_each_way_reads_40ms_in_ping() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "d");
    lab.set("h1-h2", &["delay=20ms"]);
    let ping = lab.exec(
        "h1",
        &["ping", "-c", "100", "-i", "0.01", "-W", "2", "10.77.0.2"],
    );
    assert!(ping.status.success(), "{ping:?}");
    let mut rtts = ping_rtts_ms(&ping);
    assert!(rtts.len() >= 99, "only {} replies", rtts.len());
    let median_ms = median(&mut rtts);
    assert!(
        (median_ms - 40.0).abs() <= 1.0,
        "median RTT {median_ms} ms, expected 40 ± 1 ms; forwarder: {}",
        lab.release_lateness()
    );
}

/// 1 % configured loss (one direction) over 10 000 pings: the measured loss lies in the
/// binomial 99 % interval, and the forwarder's own counter agrees.
#[test]
fn loss_of_1_percent_over_10000_packets_is_within_the_binomial_99_percent_interval() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "l");
    // Warm up the neighbour caches before loss can hit ARP.
    assert!(lab
        .exec("h1", &["ping", "-c", "2", "-i", "0.05", "10.77.0.2"])
        .status
        .success());
    vantage_ok(&[
        "lab",
        "set",
        "--lab",
        &lab.name,
        "--direction",
        "forward",
        "h1-h2",
        "loss=1%",
    ]);
    const SENT: f64 = 10_000.0;
    // 0.3 ms apart: 3 s of sending, bounded by the count.
    let ping = lab.exec(
        "h1",
        &[
            "ping",
            "-q",
            "-c",
            "10000",
            "-i",
            "0.0003",
            "-W",
            "1",
            "10.77.0.2",
        ],
    );
    let text = String::from_utf8_lossy(&ping.stdout);
    let received: f64 = text
        .split(" received")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("cannot read ping summary: {text}"));
    let lost = SENT - received;
    // Binomial(10000, 0.01): mean 100, sd 9.95; 99 % two-sided ≈ mean ± 2.576 sd.
    let (mean, sd) = (SENT * 0.01, (SENT * 0.01 * 0.99_f64).sqrt());
    let (low, high) = (mean - 2.576 * sd, mean + 2.576 * sd);
    assert!(
        (low..=high).contains(&lost),
        "lost {lost} of {SENT}, 99 % interval {low:.0}..{high:.0}"
    );
    let status = lab.status_json();
    let forward = &status["counters"][0]["forward"];
    let dropped = forward["dropped_random_loss"].as_f64().unwrap();
    let seen = forward["received"].as_f64().unwrap();
    assert!(seen >= SENT, "forwarder saw {seen} packets");
    assert!(
        dropped >= lost - 1.0 && dropped <= lost + 1.0,
        "forwarder dropped {dropped}, ping lost {lost}"
    );
}

/// `lab set` changes a running lab: same forwarder, new delay, and back; bad values are refused.
#[test]
fn live_set_changes_impairments_without_teardown() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "v");
    let median_rtt = |lab: &LabGuard| {
        let ping = lab.exec(
            "h1",
            &["ping", "-c", "20", "-i", "0.02", "-W", "2", "10.77.0.2"],
        );
        median(&mut ping_rtts_ms(&ping))
    };
    let pid_before = lab.status_json()["state"]["forwarder_pid"].clone();
    assert!(median_rtt(&lab) < 5.0);
    lab.set(
        "h1-h2",
        &["delay=10ms", "jitter=1ms", "jitter_distribution=normal"],
    );
    let delayed = median_rtt(&lab);
    assert!(
        (18.0..=23.0).contains(&delayed),
        "median {delayed} ms after delay=10ms each way"
    );
    lab.set("h1-h2", &["delay=0ms", "jitter=0ms"]);
    assert!(median_rtt(&lab) < 5.0);
    let status = lab.status_json();
    assert_eq!(
        status["state"]["forwarder_pid"], pid_before,
        "forwarder was restarted"
    );
    assert_eq!(status["forwarder_alive"], true);

    let refused = vantage(&["lab", "set", "--lab", &lab.name, "h1-h2", "loss=5x"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("loss=5x: \"5x\" is not a percentage"),
        "{stderr}"
    );
    let unknown = vantage(&["lab", "set", "--lab", &lab.name, "nolink", "loss=1%"]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no link named nolink"));
}

/// A lab that fails halfway removes what it created, keeps what it did not, and names the step.
#[test]
fn failure_halfway_removes_what_was_made_and_names_the_step() {
    require_root();
    let _serial = serial();
    let name = unique_lab("f");
    let squatter = format!("vl-{name}-h2");
    struct Squatter(String);
    impl Drop for Squatter {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    assert!(Command::new("ip")
        .args(["netns", "add", &squatter])
        .status()
        .unwrap()
        .success());
    let _squatter = Squatter(squatter.clone());
    let _guard = LabGuard { name: name.clone() };
    let output = vantage(&["lab", "up", &scenario("two-hosts.toml"), "--name", &name]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("create namespace {squatter} for node h2"))
            && stderr.contains("removed"),
        "{stderr}"
    );
    let remaining: Vec<String> = netns_names()
        .into_iter()
        .filter(|n| n.contains(&name))
        .collect();
    assert_eq!(
        remaining,
        vec![squatter],
        "only the pre-existing namespace may remain"
    );
    assert!(!PathBuf::from(format!("/run/vantage-lab/{name}")).exists());
}

/// `lab exec` passes the exit code through; `lab gc` removes a lab whose forwarder died.
#[test]
fn exec_passes_exit_codes_and_gc_removes_dead_labs() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "g");
    assert_eq!(
        lab.exec("h2", &["sh", "-c", "exit 7"]).status.code(),
        Some(7)
    );
    assert_eq!(lab.exec("h1", &["true"]).status.code(), Some(0));
    let pid = lab.status_json()["state"]["forwarder_pid"]
        .as_u64()
        .unwrap();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let status = vantage_ok(&["lab", "status", &lab.name]);
    assert!(status.contains("NOT RUNNING"), "{status}");
    let gc = vantage_ok(&["lab", "gc"]);
    assert!(gc.contains(&lab.name), "{gc}");
    assert!(netns_names().iter().all(|n| !n.contains(&lab.name)));
}

/// Without root the lab refuses clearly; bad topologies are refused with the field path.
#[test]
fn refusals_say_why() {
    require_root();
    let _serial = serial();
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(vantage_bin())
        .args([
            "lab",
            "up",
            &scenario("two-hosts.toml"),
            "--name",
            &unique_lab("r"),
        ])
        .output()
        .expect("setpriv");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs root"), "{stderr}");

    let bad = std::env::temp_dir().join(format!("vantage-lab-bad-{}.toml", std::process::id()));
    let text = std::fs::read_to_string(scenario("two-hosts.toml")).unwrap()
        + "forward = { loss = \"5x\" }\n";
    std::fs::write(&bad, text).unwrap();
    let output = vantage(&["lab", "up", bad.to_str().unwrap()]);
    let _ = std::fs::remove_file(&bad);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("links[0].forward.loss: \"5x\" is not a percentage"),
        "{stderr}"
    );
}

/// Bazan-Antequera et al.'s incidents switch on and off live: the extra hop reroutes (RTT +4 ms), the tunnel
/// lowers the MTU, the duplex mismatch loses packets in one direction only.
#[test]
fn gigabit_app_incidents_switch_on_and_off() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("gigabit-app.toml", "i");
    let patient = "10.77.4.2";
    let median_rtt = |lab: &LabGuard| {
        let ping = lab.exec(
            "therapist",
            &["ping", "-c", "40", "-i", "0.01", "-W", "2", patient],
        );
        median(&mut ping_rtts_ms(&ping))
    };
    let incident = |name: &str, state: &str| {
        vantage_ok(&["lab", "incident", "--lab", &lab.name, name, state]);
    };
    let base = median_rtt(&lab);
    assert!(
        (5.0..7.5).contains(&base),
        "base RTT {base} ms: 5 ms configured plus ten forwarder passes; forwarder: {}",
        lab.release_lateness()
    );

    incident("extra-hop", "on");
    let rerouted = median_rtt(&lab);
    assert!(
        (rerouted - base - 4.0).abs() < 1.5,
        "extra hop: {rerouted} ms vs base {base} ms"
    );
    let routes = lab.exec("campus-border", &["ip", "route", "get", patient]);
    assert!(
        String::from_utf8_lossy(&routes.stdout).contains("dev detour-in"),
        "{routes:?}"
    );
    incident("extra-hop", "off");
    assert!((median_rtt(&lab) - base).abs() < 1.5);

    let big_ping = |lab: &LabGuard| {
        lab.exec(
            "therapist",
            &[
                "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1472", patient,
            ],
        )
    };
    assert!(
        big_ping(&lab).status.success(),
        "1500-byte packets pass before the tunnel"
    );
    incident("tunnel", "on");
    let refused = big_ping(&lab);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("mtu=1400"),
        "{refused:?}"
    );
    incident("tunnel", "off");
    assert!(
        big_ping(&lab).status.success(),
        "MTU restored after the tunnel"
    );

    incident("duplex-mismatch", "on");
    let lossy = lab.exec(
        "therapist",
        &["ping", "-q", "-c", "400", "-i", "0.002", "-W", "1", patient],
    );
    let summary = String::from_utf8_lossy(&lossy.stdout);
    let status = lab.status_json();
    let core = status["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["link"] == "campus-core")
        .expect("campus-core counters")
        .clone();
    let forward_drops = core["forward"]["dropped_burst_loss"].as_u64().unwrap()
        + core["forward"]["dropped_random_loss"].as_u64().unwrap();
    let reverse_drops = core["reverse"]["dropped_burst_loss"].as_u64().unwrap()
        + core["reverse"]["dropped_random_loss"].as_u64().unwrap();
    // Configured mean ≈ 2 % + bursts of 90 % loss 14 % of the time ≈ 14 %.
    assert!(
        forward_drops >= 20,
        "forward drops {forward_drops}: {summary}"
    );
    assert_eq!(reverse_drops, 0, "the mismatch is one-directional");
    incident("duplex-mismatch", "off");
    let active = lab.status_json()["state"]["active_incidents"].clone();
    assert_eq!(active, serde_json::json!([]));
}

/// Duplication, corruption and reordering happen on the wire, as receivers see them.
#[test]
fn duplication_corruption_and_reordering_reach_the_wire() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "w");
    let forward = |settings: &[&str]| {
        let mut args = vec![
            "lab",
            "set",
            "--lab",
            &lab.name,
            "--direction",
            "forward",
            "h1-h2",
        ];
        args.extend_from_slice(settings);
        vantage_ok(&args);
    };
    forward(&["duplicate=100%"]);
    let ping = lab.exec(
        "h1",
        &["ping", "-c", "10", "-i", "0.02", "-W", "1", "10.77.0.2"],
    );
    let text = String::from_utf8_lossy(&ping.stdout);
    // ping stops at its 10th reply, so the last duplicate may arrive after it has quit.
    assert!(
        text.contains("+10 duplicates") || text.contains("+9 duplicates"),
        "{text}"
    );
    let duplicated = lab.status_json()["counters"][0]["forward"]["duplicated"]
        .as_u64()
        .unwrap();
    assert!(duplicated >= 10, "duplicated {duplicated}");

    forward(&["duplicate=0%", "corrupt=100%"]);
    let ping = lab.exec(
        "h1",
        &["ping", "-c", "10", "-i", "0.02", "-W", "1", "10.77.0.2"],
    );
    assert!(
        ping_rtts_ms(&ping).is_empty(),
        "corrupted requests must not be answered: {ping:?}"
    );
    let corrupted = lab.status_json()["counters"][0]["forward"]["corrupted"]
        .as_u64()
        .unwrap();
    assert!(corrupted >= 10, "corrupted {corrupted}");

    forward(&["corrupt=0%", "delay=10ms", "reorder=50%"]);
    let ping = lab.exec(
        "h1",
        &["ping", "-c", "40", "-i", "0.001", "-W", "2", "10.77.0.2"],
    );
    let rtts = ping_rtts_ms(&ping);
    let overtaking = rtts.iter().filter(|&&r| r < 5.0).count();
    // The forwarder starts the delay a frame's measured transit early (about 15 µs), so a
    // held request can come back a few µs under 10 ms: "delayed" is above 9.5.
    let delayed = rtts.iter().filter(|&&r| r >= 9.5).count();
    assert!(
        overtaking >= 5 && delayed >= 5,
        "{overtaking} fast, {delayed} delayed: {rtts:?}"
    );
    let reordered = lab.status_json()["counters"][0]["forward"]["reordered"]
        .as_u64()
        .unwrap();
    assert_eq!(
        reordered as usize,
        overtaking,
        "every fast reply is a reordered request: {rtts:?}; forwarder: {}",
        lab.release_lateness()
    );
}

/// SIGTERM in the middle of `lab up` stops it between steps and removes what it had built.
#[test]
fn signal_during_up_rolls_back() {
    require_root();
    let _serial = serial();
    let name = unique_lab("k");
    let _guard = LabGuard { name: name.clone() };
    let child = Command::new(vantage_bin())
        .args(["lab", "up", &scenario("cloud-zones.toml"), "--name", &name])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lab up");
    // The emulator namespace is the first thing built; the 15 nodes and 18 links take longer.
    let emulator = format!("vl-{name}_emu");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !netns_names().contains(&emulator) {
        assert!(
            std::time::Instant::now() < deadline,
            "lab up never started building"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "lab up finished before the signal: {stderr}"
    );
    assert!(stderr.contains("interrupted by a signal"), "{stderr}");
    let remaining: Vec<String> = netns_names()
        .into_iter()
        .filter(|n| n.contains(&name))
        .collect();
    assert!(remaining.is_empty(), "left behind: {remaining:?}");
    assert!(!PathBuf::from(format!("/run/vantage-lab/{name}")).exists());
}

/// Bazan-Antequera et al.'s window story on an emulated WAN path: a 64 KiB socket buffer over 20 ms of
/// RTT caps TCP near window / RTT (~26 Mbit/s) although the path carries far more, and
/// the verdict says `receive_window` with the window / RTT evidence.
///
/// The story needs the path the test set up: a transfer during which the machine added more
/// than [`HELD_PATH_LATENESS_US`] to the packets' delay on average crossed a longer path, and
/// is run again on a new lab (at most [`HELD_PATH_ATTEMPTS`] times in all).
#[test]
fn small_window_over_a_delayed_path_is_limited_by_the_receive_window() {
    require_root();
    let _serial = serial();
    let mut not_held = Vec::new();
    for _ in 0..HELD_PATH_ATTEMPTS {
        let lab = LabGuard::up("two-hosts.toml", "w");
        lab.set("h1-h2", &["delay=10ms"]);
        let _endpoint = LabEndpoint::start(&lab, "h2", 7862);
        let result = lab.throughput(
            "h1",
            "10.77.0.2",
            &["--duration", "4s", "--omit", "1s", "--window", "64K"],
        );
        if lab.mean_release_lateness_us() > HELD_PATH_LATENESS_US {
            let lateness = format!(
                "{:.0} µs added per packet on average; {}",
                lab.mean_release_lateness_us(),
                lab.release_lateness()
            );
            eprintln!("the lab did not hold its 20 ms path ({lateness}): running again");
            not_held.push(lateness);
            continue;
        }
        let evidence = &result["evidence"];
        assert_eq!(
            result["limited_by"],
            "receive_window",
            "{evidence}; forwarder: {}",
            lab.release_lateness()
        );
        let received_bps = result["summary"]["received_bps"].as_f64().unwrap();
        let window_rate_bps = evidence["window_rate_bps"].as_f64().expect("window/RTT");
        let rtt_us = evidence["rtt_us"].as_f64().expect("RTT evidence");
        assert!(
            (17_000.0..=26_000.0).contains(&rtt_us),
            "RTT {rtt_us} µs over a 20 ms path: {evidence}; forwarder: {}",
            lab.release_lateness()
        );
        assert!(
            (received_bps / window_rate_bps - 1.0).abs() <= 0.3,
            "received {received_bps} vs window/RTT {window_rate_bps}: {evidence}"
        );
        // The emulated path carries over a gigabit (docs/lab.md floor); the window holds
        // this transfer to a few tens of megabits.
        assert!(received_bps < 100e6, "received {received_bps}: {evidence}");
        return;
    }
    panic!(
        "the lab did not hold its 20 ms path in {HELD_PATH_ATTEMPTS} attempts: {}",
        not_held.join(" | ")
    );
}

/// The mean delay the machine may add to each packet while a window-limited transfer still
/// measures the configured 20 ms path: 1 % of its round trip. The transfer carries window /
/// RTT (94 % of it on an idle machine, which adds 6-11 µs) and the verdict needs 90 %
/// (`WINDOW_FILLED_SHARE`); added delay takes its share of the round trip off the rate. A
/// forwarder descheduled for 12 ms in CI left a tenth of the packets late and the transfer
/// below the verdict's share.
const HELD_PATH_LATENESS_US: f64 = 200.0;
/// Labs a timing test brings up before it says the machine cannot hold the path.
const HELD_PATH_ATTEMPTS: usize = 3;

/// The story of Rufini et al. (Fotonica 2014) on the access-line lab: a 64 KiB window
/// holds a download to window/RTT far below the line at 150 ms, a 4-minute 720p video then
/// stalls where it plays smoothly at 20 ms, and 5 parallel flows fill a 100 Mbit/s line at
/// 100 ms that one flow cannot. CUBIC senders, as in the paper's time (bench/sla-qoe runs
/// the whole story beside iperf3).
#[test]
fn a_64k_window_on_the_access_line_tells_the_story_of_rufini_et_al() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("access-line.toml", "q");
    let _endpoint = LabEndpoint::start(&lab, "server", 7862);
    let server = "10.77.1.2";
    let download = |seconds: &str, window: &str, streams: &str| {
        lab.throughput(
            "client",
            server,
            &[
                "--reverse",
                "-t",
                seconds,
                "-O",
                "2",
                "--window",
                window,
                "-P",
                streams,
                "--congestion",
                "cubic",
            ],
        )
    };
    let mos = |result: &serde_json::Value| {
        let file = tempfile::NamedTempFile::new().expect("temporary file");
        std::fs::write(file.path(), result.to_string()).expect("write the series");
        let path = file.path().to_str().unwrap();
        let report: serde_json::Value = serde_json::from_str(&vantage_ok(&[
            "qoe",
            path,
            "--video",
            "4m",
            "--loop",
            "--json",
            "--profile",
            "youtube-480p",
            "--profile",
            "youtube-720p",
        ]))
        .expect("qoe JSON");
        let profiles = report["profiles"].as_array().unwrap();
        profiles
            .iter()
            .map(|p| {
                p["outcome"]["mos"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{p}"))
            })
            .collect::<Vec<_>>()
    };

    lab.set("core", &["delay=75ms"]);
    let far = download("8", "64K", "1");
    let received_bps = far["summary"]["received_bps"].as_f64().unwrap();
    let evidence = &far["evidence"];
    let window_rate_bps = evidence["window_rate_bps"].as_f64().expect("window/RTT");
    assert_eq!(far["limited_by"], "receive_window", "{evidence}");
    assert!(
        (received_bps / window_rate_bps - 1.0).abs() <= 0.1,
        "received {received_bps} vs window/RTT {window_rate_bps}: {evidence}"
    );
    assert!(
        received_bps < 0.15 * 50e6,
        "received {received_bps} on a 50 Mbit/s line"
    );
    assert_eq!(mos(&far), [5, 1], "480p and 720p at {received_bps} bit/s");

    lab.set("core", &["delay=10ms"]);
    let near = download("4", "64K", "1");
    let near_bps = near["summary"]["received_bps"].as_f64().unwrap();
    assert_eq!(mos(&near), [5, 5], "480p and 720p at {near_bps} bit/s");

    lab.set("access-line", &["rate=100M"]);
    lab.set("core", &["delay=50ms"]);
    let goodput_bps = 100e6 * 1448.0 / 1514.0;
    let one = download("6", "256K", "1")["summary"]["received_bps"]
        .as_f64()
        .unwrap();
    let five = download("6", "256K", "5")["summary"]["received_bps"]
        .as_f64()
        .unwrap();
    assert!(one < 0.5 * goodput_bps, "one flow {one} bit/s");
    assert!(
        five >= 0.9 * goodput_bps,
        "five flows {five} bit/s, one {one}"
    );
}

/// The IPv4 address `node` has on `link`, from `lab status --json`.
fn node_address(status: &serde_json::Value, node: &str, link: &str) -> String {
    let topology = &status["state"]["topology"];
    let index = topology["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n["name"] == node)
        .unwrap_or_else(|| panic!("node {node} in status"));
    let link = topology["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == link)
        .unwrap_or_else(|| panic!("link {link} in status"));
    let side = if link["a"]["node"] == index {
        "a_addresses"
    } else {
        assert_eq!(link["b"]["node"], index, "{node} is on {link}");
        "b_addresses"
    };
    let cidr = link[side]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .find(|a| a.contains('.'))
        .expect("an IPv4 address");
    cidr.split('/').next().unwrap().to_string()
}

/// Path discovery through the gigabit-app routers: every router answers (the lab turns ICMP
/// error rate limiting off), and the extra-hop incident shows up as a path change.
#[test]
fn trace_lists_every_router_and_sees_the_extra_hop_detour() {
    use vantage_model::trace::{compare_paths, TraceMethod, TraceResult};
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("gigabit-app.toml", "r");
    let status = lab.status_json();
    let at = |node: &str, link: &str| node_address(&status, node, link);
    let patient = at("patient", "last-mile");
    let bin = vantage_bin();
    let bin = bin.to_str().unwrap();
    let trace = |protocol: &str| -> TraceResult {
        let output = lab.exec(
            "therapist",
            &[
                bin,
                "trace",
                "--json",
                "--protocol",
                protocol,
                "--max-ttl",
                "10",
                &patient,
            ],
        );
        assert!(output.status.success(), "trace {protocol}: {output:?}");
        serde_json::from_slice(&output.stdout).expect("trace JSON")
    };
    let hops = |result: &TraceResult| -> Vec<Option<String>> {
        result.hops.iter().map(|h| h.address.clone()).collect()
    };
    // Routers answer from the interface that leads back to the therapist.
    let direct: Vec<Option<String>> = [
        at("campus-switch", "campus-access"),
        at("campus-border", "campus-core"),
        at("regional", "border-region"),
        at("lastmile", "regional-isp"),
        patient.clone(),
    ]
    .into_iter()
    .map(Some)
    .collect();
    // Three traces back to back: 9 time-exceeded per router within a second, more than the
    // kernel's default rate limit would answer.
    let mut before = None;
    let methods = [
        ("udp", TraceMethod::UdpDatagram),
        ("icmp", TraceMethod::IcmpRaw), // ping_group_range excludes root by default
        ("tcp", TraceMethod::TcpRaw),
    ];
    for (protocol, method) in methods {
        let result = trace(protocol);
        assert_eq!(result.method, method, "{protocol}");
        assert!(result.destination_reached, "{protocol}: {result:#?}");
        assert_eq!(hops(&result), direct, "{protocol}");
        for hop in &result.hops {
            assert_eq!(
                hop.answered, 3,
                "{protocol} TTL {}: every probe answered",
                hop.ttl
            );
            assert_eq!(hop.addresses.len(), 1, "one flow, one path");
        }
        before.get_or_insert(result);
    }
    let before = before.unwrap();
    // ICMP through an unprivileged ping socket once the namespace allows it: the routers'
    // time-exceeded messages then come back on the socket's error queue.
    let allow = lab.exec(
        "therapist",
        &["sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"],
    );
    assert!(allow.status.success(), "{allow:?}");
    let ping_socket = trace("icmp");
    assert_eq!(ping_socket.method, TraceMethod::IcmpDatagram);
    assert_eq!(hops(&ping_socket), direct);
    assert!(ping_socket.destination_reached);

    vantage_ok(&["lab", "incident", "--lab", &lab.name, "extra-hop", "on"]);
    let after = trace("udp");
    let detour = at("detour", "detour-in");
    let rerouted: Vec<Option<String>> = [
        at("campus-switch", "campus-access"),
        at("campus-border", "campus-core"),
        detour.clone(),
        at("regional", "detour-out"),
        at("lastmile", "regional-isp"),
        patient.clone(),
    ]
    .into_iter()
    .map(Some)
    .collect();
    assert_eq!(hops(&after), rerouted);
    let comparison = compare_paths(&before, &after);
    assert!(comparison.changed, "{comparison:?}");
    assert_eq!(comparison.first_difference_ttl, Some(3));
    assert!(comparison.added.contains(&detour), "{comparison:?}");
    assert_eq!(comparison.previous_destination_ttl, Some(5));
    assert_eq!(comparison.current_destination_ttl, Some(6));

    vantage_ok(&["lab", "incident", "--lab", &lab.name, "extra-hop", "off"]);
    let restored = trace("udp");

    // A silent address behind lastmile: the trace completes (exit 0) and says so.
    let silent = lab.exec(
        "therapist",
        &[
            bin,
            "trace",
            "-q",
            "1",
            "-m",
            "6",
            "-w",
            "300ms",
            "10.77.4.99",
        ],
    );
    assert!(silent.status.success(), "{silent:?}");
    let text = String::from_utf8_lossy(&silent.stdout);
    assert!(
        text.contains("destination 10.77.4.99 not reached within 6 hops"),
        "{text}"
    );
    assert!(
        text.contains(" 4  10.77.3.2 ") && text.contains(" 6  *"),
        "{text}"
    );
    let comparison = compare_paths(&before, &restored);
    assert!(!comparison.changed, "{comparison:?}");
    assert!(compare_paths(&after, &restored).changed);
}

/// A direction that only delays lets TCP's segmentation-offloaded frames cross whole (few frames
/// for many packets); once it loses packets every packet crosses alone, so each gets its own
/// fate, and the loss counters count packets.
#[test]
fn whole_frames_cross_until_a_direction_impairs_packets_one_by_one() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("two-hosts.toml", "o");
    lab.set("h1-h2", &["delay=1ms"]);
    let _endpoint = LabEndpoint::start(&lab, "h2", 7862);
    let forward = |lab: &LabGuard| lab.status_json()["counters"][0]["forward"].clone();
    let transfer = |lab: &LabGuard| lab.throughput("h1", "10.77.0.2", &["--bytes", "200M"]);
    let delta = |before: &serde_json::Value, after: &serde_json::Value, name: &str| {
        after[name].as_u64().unwrap() - before[name].as_u64().unwrap()
    };
    let before = forward(&lab);
    transfer(&lab);
    let after = forward(&lab);
    let packets = delta(&before, &after, "received");
    let offloaded = delta(&before, &after, "offloaded_frames");
    // 200 MB is ≈ 138 000 full-sized packets; whole frames carry up to 45 each.
    assert!(packets >= 130_000, "{before} → {after}");
    assert!(
        offloaded > 0 && offloaded * 4 < packets,
        "{offloaded} offloaded frames for {packets} packets: {after}"
    );
    assert_eq!(delta(&before, &after, "forwarded"), packets, "{after}");

    lab.set("h1-h2", &["--direction", "forward", "loss=1%"]);
    let before = forward(&lab);
    transfer(&lab);
    let after = forward(&lab);
    let packets = delta(&before, &after, "received");
    let lost = delta(&before, &after, "dropped_random_loss");
    assert_eq!(delta(&before, &after, "offloaded_frames"), 0, "{after}");
    // 1 % of the packets, not of frames: well inside [0.5 %, 1.5 %] at this count.
    assert!(
        lost * 200 >= packets && lost * 200 <= packets * 3,
        "lost {lost} of {packets}: {after}"
    );
    assert_eq!(
        delta(&before, &after, "forwarded") + lost,
        packets,
        "{after}"
    );
}

/// Bazan-Antequera et al.'s CPU-bound software VPN router: with `vpn-cpu` on, UDP falls to
/// about 45 Mbit/s whatever is offered (the rest is lost at the host's backlog) and TCP to about
/// 40, while the host's CPU is busy all the time; off, the path is back to far above that.
#[test]
fn vpn_cpu_saturates_the_tunnel_host_and_off_restores_the_line_rate() {
    require_root();
    let _serial = serial();
    let lab = LabGuard::up("gigabit-app.toml", "v");
    let _endpoint = LabEndpoint::start(&lab, "patient", 7862);
    let throughput = |lab: &LabGuard, args: &[&str]| {
        lab.throughput("therapist", "10.77.4.2", args)["summary"].clone()
    };
    let cpu_busy_us = |lab: &LabGuard| {
        let access = lab.status_json()["counters"][0].clone();
        assert_eq!(access["link"], "campus-access");
        access["forward"]["cpu_busy_us"].as_u64().unwrap()
            + access["reverse"]["cpu_busy_us"].as_u64().unwrap()
    };
    vantage_ok(&["lab", "incident", "--lab", &lab.name, "vpn-cpu", "on"]);

    let busy_before = cpu_busy_us(&lab);
    let udp = throughput(&lab, &["-u", "-b", "100M", "-t", "2s"]);
    let busy_us = cpu_busy_us(&lab) - busy_before;
    let received_bps = udp["received_bps"].as_f64().unwrap();
    let duration_us = udp["duration_s"].as_f64().unwrap() * 1e6;
    assert!(
        (40e6..=50e6).contains(&received_bps),
        "UDP through the CPU-bound host: {udp}"
    );
    let lost = 1.0 - udp["received_bytes"].as_f64().unwrap() / udp["sent_bytes"].as_f64().unwrap();
    assert!(lost > 0.4, "100 Mbit/s offered, {lost} lost: {udp}");
    assert!(
        busy_us as f64 >= 0.9 * duration_us,
        "the host's CPU was busy {busy_us} µs of {duration_us} µs"
    );

    let tcp = throughput(&lab, &["-t", "3s", "-O", "1s"]);
    let received_bps = tcp["received_bps"].as_f64().unwrap();
    assert!(
        (30e6..=48e6).contains(&received_bps),
        "TCP through the CPU-bound host: {tcp}"
    );

    vantage_ok(&["lab", "incident", "--lab", &lab.name, "vpn-cpu", "off"]);
    let tcp = throughput(&lab, &["-t", "2s"]);
    assert!(
        tcp["received_bps"].as_f64().unwrap() > 300e6,
        "the line rate is back without the CPU-bound host: {tcp}"
    );
}
