//! `vantage demo --lab` end to end (root: CI runs as root; without root it fails and
//! says why): two zones of two hosts behind routers 5 ms apart, an agent in each host,
//! the health bundle as a mesh. The matrix must show the paper's zone pattern (every
//! host scores its own-zone peer above the other zone's), `select` must pick the
//! reference's zone first, and after `vantage lab set` adds 10 ms to one host's link the
//! next rounds towards and from that host must fire the ICMP marker and make it every
//! other host's worst peer, without lowering the ICMP metric of the other pairs. All
//! queries go through `vantage health … --json`. The demo removes its lab on exit; a
//! guard takes it down if the test fails first.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::demo::Demo;
use support::{is_root, vantage_bin};

const HOSTS: [&str; 4] = ["a1", "a2", "b1", "b2"];

fn zone(host: &str) -> char {
    host.chars().next().unwrap()
}

fn scenario(lab: &str) -> String {
    let mut text = format!(
        "[lab]\nname = \"{lab}\"\n\n[[nodes]]\nname = \"gw-a\"\nkind = \"router\"\n\n[[nodes]]\nname = \"gw-b\"\nkind = \"router\"\n"
    );
    for host in HOSTS {
        text.push_str(&format!(
            "\n[[nodes]]\nname = \"{host}\"\ntags = {{ zone = \"{}\" }}\n\n[[links]]\nname = \"{host}-link\"\na = \"{host}\"\nb = \"sw-{}\"\n",
            zone(host),
            zone(host)
        ));
    }
    for z in ['a', 'b'] {
        text.push_str(&format!(
            "\n[[switches]]\nname = \"sw-{z}\"\n\n[[links]]\na = \"gw-{z}\"\nb = \"sw-{z}\"\n"
        ));
    }
    text.push_str(
        "\n[[links]]\nname = \"zones\"\na = \"gw-a\"\nb = \"gw-b\"\nboth = { delay = \"5ms\" }\n",
    );
    text
}

fn health(url: &str, token: &str, args: &[&str]) -> Value {
    let output = Command::new(vantage_bin())
        .arg("health")
        .args(args)
        .args(["--server", url, "--token", token, "--json"])
        .output()
        .expect("run vantage health");
    assert!(
        output.status.success(),
        "vantage health {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON answer")
}

fn scores(matrix: &Value) -> BTreeMap<(String, String), f64> {
    matrix["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|pair| {
            Some((
                (
                    pair["client"].as_str()?.to_string(),
                    pair["server"].as_str()?.to_string(),
                ),
                pair["score"].as_f64()?,
            ))
        })
        .collect()
}

/// Polls the matrix until `done` accepts it, for at most `limit`.
fn matrix_when(
    url: &str,
    token: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let matrix = health(url, token, &["matrix"]);
        if done(&matrix) {
            return matrix;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {matrix:#}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The time a pair's latest round started, as seconds since the Unix epoch.
fn round_start_s(pair: &Value, computed_at_s: f64) -> f64 {
    computed_at_s - pair["age_s"].as_f64().unwrap_or(f64::INFINITY)
}

fn computed_at_s(matrix: &Value) -> f64 {
    let text = matrix["computed_at"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_micros() as f64
        / 1e6
}

#[test]
fn zones_selection_and_a_degraded_link_in_the_lab() {
    assert!(
        is_root(),
        "demo --lab builds network namespaces and needs root (CI runs as root)"
    );
    let lab = format!("hz{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zones.toml");
    std::fs::write(&file, scenario(&lab)).unwrap();
    let file = file.to_str().unwrap();
    let demo = [
        "--lab",
        file,
        "--health-every",
        "15s",
        "--summary-every",
        "30s",
        "--duration",
        "300s",
    ];
    let (_guard, banner) = Demo::start(&demo, Some(&lab));
    let (url, token) = (banner.url, banner.reader_token);
    assert!(
        url.starts_with("http://198.18.0.") && !token.is_empty(),
        "banner: {url} {token}"
    );

    // Two rounds of every pair, so markers have a previous round to compare with.
    let baseline = matrix_when(
        &url,
        &token,
        Duration::from_secs(90),
        "every pair measured",
        |m| scores(m).len() == 12,
    );
    let before = scores(&baseline);
    for client in HOSTS {
        let own: Vec<f64> = HOSTS
            .iter()
            .filter(|s| **s != client && zone(s) == zone(client))
            .map(|s| before[&(client.to_string(), s.to_string())])
            .collect();
        let other: Vec<f64> = HOSTS
            .iter()
            .filter(|s| zone(s) != zone(client))
            .map(|s| before[&(client.to_string(), s.to_string())])
            .collect();
        let worst_own = own.iter().copied().fold(f64::INFINITY, f64::min);
        let best_other = other.iter().copied().fold(0.0, f64::max);
        assert!(
            worst_own > best_other,
            "{client}: own zone {own:?} vs other zone {other:?}"
        );
    }
    let hosts_by_zone: BTreeMap<String, String> = baseline["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["zone"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(hosts_by_zone["a1"], "a");
    assert_eq!(hosts_by_zone["b2"], "b");
    let selection = health(&url, &token, &["select", "--reference", "a1", "-k", "1"]);
    assert_eq!(
        selection["selected"],
        serde_json::json!(["a2"]),
        "{selection:#}"
    );

    // 10 ms more each way on a1's own link: a1 is now further from a2 than zone b is.
    let changed_s = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    let output = Command::new(vantage_bin())
        .args(["lab", "set", "--lab", &lab, "a1-link", "delay=10ms"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let involves_a1 = |pair: &Value| pair["client"] == "a1" || pair["server"] == "a1";
    let after = matrix_when(
        &url,
        &token,
        Duration::from_secs(60),
        "a round of every pair after the change",
        |m| {
            let at = computed_at_s(m);
            m["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|pair| round_start_s(pair, at) > changed_s + 1.0)
        },
    );
    for pair in after["pairs"].as_array().unwrap() {
        let markers = pair["markers"].as_array().unwrap();
        if involves_a1(pair) {
            assert!(markers.contains(&serde_json::json!("icmp")), "{pair}");
        }
    }
    let now = scores(&after);
    for client in HOSTS.iter().filter(|c| **c != "a1") {
        let to_a1 = now[&(client.to_string(), "a1".to_string())];
        for server in HOSTS.iter().filter(|s| *s != client && **s != "a1") {
            let other = now[&(client.to_string(), server.to_string())];
            assert!(
                to_a1 < other,
                "{client}: a1 scores {to_a1}, {server} {other}"
            );
        }
    }
    // a2 lost its near neighbour.
    assert!(now[&("a2".into(), "a1".into())] < before[&("a2".into(), "a1".into())] - 0.3);
    // Pairs not involving a1 were not lowered on the metric the change moves (ICMP RTT;
    // the sandwich and TCP features carry the measuring hosts' noise, and every metric
    // is relative to the client's other peers, so scores may move a little either way).
    let icmp = |matrix: &Value, client: &str, server: &str| {
        matrix["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["client"] == client && p["server"] == server)
            .and_then(|p| p["parts"]["icmp"].as_f64())
            .unwrap()
    };
    for client in HOSTS.iter().filter(|c| **c != "a1") {
        for server in HOSTS.iter().filter(|s| *s != client && **s != "a1") {
            let (was, now) = (
                icmp(&baseline, client, server),
                icmp(&after, client, server),
            );
            assert!(now >= was - 0.1, "{client}->{server}: ICMP {was} -> {now}");
        }
    }
}

fn run_ok(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `vantage diagnose therapist patient` against the demo's server, as JSON.
fn diagnose_path(url: &str, token: &str) -> Value {
    let output = Command::new(vantage_bin())
        .args([
            "diagnose",
            "therapist",
            "patient",
            "--server",
            url,
            "--token",
            token,
            "--json",
        ])
        .output()
        .expect("run vantage diagnose");
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no diagnosis ({e}): {stderr}"))
}

/// (cause, segment, direction) of a suspect.
fn named(suspect: &Value) -> (String, String, String) {
    let text = |key: &str| suspect[key].as_str().unwrap_or("?").to_string();
    (text("cause"), text("segment"), text("direction"))
}

fn suspects(diagnosis: &Value) -> Vec<(String, String, String)> {
    diagnosis["suspects"]
        .as_array()
        .map(|list| list.iter().map(named).collect())
        .unwrap_or_default()
}

const PATIENT_NETNS: &str = "vl-gigabit-patient";

/// Sets the patient's TCP receive buffers (its namespace's own `tcp_rmem`); returns
/// what they were.
fn patient_rmem(value: &str) -> String {
    let read = Command::new("ip")
        .args([
            "netns",
            "exec",
            PATIENT_NETNS,
            "sysctl",
            "-n",
            "net.ipv4.tcp_rmem",
        ])
        .output()
        .expect("read tcp_rmem");
    let before = String::from_utf8_lossy(&read.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let setting = format!("net.ipv4.tcp_rmem={value}");
    run_ok(
        "ip",
        &[
            "netns",
            "exec",
            PATIENT_NETNS,
            "sysctl",
            "-q",
            "-w",
            &setting,
        ],
    );
    before
}

/// The patient's agent started again by the test; stopped when dropped.
struct RestartedAgent {
    child: std::process::Child,
}

impl Drop for RestartedAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Restarts the patient's agent with its command line, environment and log. A TCP
/// listener's connections keep the receive buffer the listener was made with, so new
/// `tcp_rmem` bounds nothing the running endpoint accepts (it kept the 128 KiB default,
/// a ~96 KiB window: 80 % of the last-mile leg, on the edge of a shortfall) until it
/// listens again — as on a host configured at boot.
fn restart_patient_agent() -> RestartedAgent {
    let pids = Command::new("ip")
        .args(["netns", "pids", PATIENT_NETNS])
        .output()
        .expect("list the patient's processes");
    let proc_file = |pid: &str, name: &str| std::fs::read(format!("/proc/{pid}/{name}"));
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|byte| *byte == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect()
    };
    let (pid, command_line) = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .find_map(|pid| {
            let command_line = split(proc_file(pid, "cmdline").ok()?);
            (command_line.get(1).map(String::as_str) == Some("agent"))
                .then(|| (pid.to_string(), command_line))
        })
        .expect("the patient's agent runs in its namespace");
    let environment = split(proc_file(&pid, "environ").expect("the agent's environment"));
    let log = std::fs::read_link(format!("/proc/{pid}/fd/2")).expect("the agent's log");
    let registrations = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("trusting the server's ticket keys")
            .count()
    };
    let registered = registrations(&log);
    run_ok("kill", &["-TERM", &pid]);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Gone, or a zombie until the demo reaps it at its end.
    let running = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    };
    while running(&pid) {
        assert!(
            Instant::now() < deadline,
            "the patient's agent did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let child = Command::new("ip")
        .args(["netns", "exec", PATIENT_NETNS])
        .args(&command_line)
        .env_clear()
        .envs(environment.iter().filter_map(|pair| pair.split_once('=')))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .expect("append to the agent's log"),
        )
        .spawn()
        .expect("start the patient's agent again");
    let agent = RestartedAgent { child };
    // Registered: its endpoint listens and trusts the server's tickets.
    let deadline = Instant::now() + Duration::from_secs(30);
    while registrations(&log) == registered {
        assert!(
            Instant::now() < deadline,
            "the restarted agent did not register: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    agent
}

/// The PTaaS path (Bazan-Antequera et al.) at 1 Gbit/s per segment with an agent at
/// every hop: healthy without an incident; each incident alone, and a 32 KiB receive
/// window at the patient, named first with its segment and direction; two at once,
/// both named.
#[test]
fn diagnose_names_each_gigabit_app_incident_and_its_segment() {
    assert!(
        is_root(),
        "demo --lab builds network namespaces and needs root (CI runs as root)"
    );
    let demo = [
        "--lab",
        "gigabit-app",
        "--health-every",
        "1h",
        "--summary-every",
        "1h",
        "--duration",
        "1200s",
    ];
    let (_guard, banner) = Demo::start(&demo, Some("gigabit"));
    let (url, token) = (banner.url, banner.admin_token);
    // Wait until every agent has registered: a diagnosis before refuses unknown agents.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = health(&url, &token, &["matrix"]);
        let hosts = answer["hosts"].as_array().map_or(0, Vec::len);
        if hosts >= 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "agents never registered: {answer:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let mut failures = Vec::new();
    let mut check = |case: &str, diagnosis: &Value, expected: &[(&str, &str, &str)]| {
        let found = suspects(diagnosis);
        let confident: Vec<_> = diagnosis["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["confidence"].as_f64().unwrap_or(0.0) >= 0.5)
            .map(named)
            .collect();
        let ok = match expected {
            [] => diagnosis["verdict"] == "healthy",
            [one] => {
                diagnosis["verdict"] == "degraded"
                    && found.first()
                        == Some(&(one.0.to_string(), one.1.to_string(), one.2.to_string()))
            }
            many => many.iter().all(|(cause, segment, direction)| {
                confident.contains(&(
                    cause.to_string(),
                    segment.to_string(),
                    direction.to_string(),
                ))
            }),
        };
        println!("case {case}: {} {found:?}", diagnosis["verdict"]);
        // Each suspect's confidence and evidence in a line: what a failure turned on.
        for suspect in diagnosis["suspects"].as_array().into_iter().flatten() {
            let evidence: Vec<String> = suspect["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|fact| {
                    format!(
                        "{} {}={} {}",
                        fact["test"].as_str().unwrap_or("?"),
                        fact["metric"].as_str().unwrap_or("?"),
                        fact["value"],
                        if fact["supports"] == true {
                            "for"
                        } else {
                            "against"
                        }
                    )
                })
                .collect();
            println!(
                "  {:?} {:.2}: {}",
                named(suspect),
                suspect["confidence"].as_f64().unwrap_or(f64::NAN),
                evidence.join("; ")
            );
        }
        if !ok {
            failures.push(format!("{case}: expected {expected:?}, got {diagnosis:#}"));
        }
    };
    let lab = |incident: &str, state: &str| {
        run_ok(
            vantage_bin().to_str().unwrap(),
            &["lab", "incident", "--lab", "gigabit", incident, state],
        )
    };

    // A path that names an agent the server does not know is refused with the reason.
    let refused = Command::new(vantage_bin())
        .args([
            "diagnose",
            "therapist",
            "nobody",
            "--server",
            &url,
            "--token",
            &token,
        ])
        .output()
        .expect("run vantage diagnose");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.status.code() == Some(1)
            && stderr.contains("field 'destination': agent 'nobody' is not registered"),
        "{stderr}"
    );

    check("healthy", &diagnose_path(&url, &token), &[]);
    // Each incident alone: (cause, segment, direction) named first.
    for (incident, expected) in [
        (
            "duplex-mismatch",
            ("one_way_loss", "campus-switch – campus-border", "forward"),
        ),
        (
            "extra-hop",
            ("path_change", "campus-border – regional", "forward"),
        ),
        (
            "tunnel",
            ("tunnel_overhead", "therapist – campus-switch", "both"),
        ),
        ("vpn-cpu", ("host_cpu", "therapist – campus-switch", "both")),
    ] {
        lab(incident, "on");
        check(incident, &diagnose_path(&url, &token), &[expected]);
        lab(incident, "off");
    }
    // A 32 KiB receive window at the patient (the PTaaS study's patient host had 64 KiB;
    // 32 KiB keeps the last-mile leg, 1 ms RTT, well short of the line, so the window shows
    // there too, not only end to end, where the duplex mismatch's loss may bind first).
    let default_rmem = patient_rmem("4096 32768 32768");
    let _patient_agent = restart_patient_agent();
    check(
        "32 KiB window",
        &diagnose_path(&url, &token),
        &[("receive_window", "patient", "forward")],
    );
    lab("duplex-mismatch", "on");
    check(
        "window and duplex mismatch",
        &diagnose_path(&url, &token),
        &[
            ("receive_window", "patient", "forward"),
            ("one_way_loss", "campus-switch – campus-border", "forward"),
        ],
    );
    lab("duplex-mismatch", "off");
    patient_rmem(&default_rmem);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
