//! Fleet parity: a configuration with every test kind, run by two agents on loopback
//! against each other and against hosts that are not agents — a stock `iperf3 -s`,
//! a TWAMP-Light/STAMP reflector and an ICMP/trace target. Every planned run must complete
//! with a result carrying its kind's metrics; none may be a non-start or a failure.
//! Run against SQLite and PostgreSQL.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use serde_json::json;
use vantage_probe::endpoint::{Endpoint, EndpointConfig};
use vantage_server::archive::{now_us, ResultFilter, RunState, SlaFilter};

/// Stops agents and the reflector, and kills `iperf3 -s`, even when the test fails.
struct Guard {
    stop: tokio::sync::watch::Sender<bool>,
    iperf3: Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = self.iperf3.kill();
        let _ = self.iperf3.wait();
    }
}

/// A stock `iperf3 -s` on a free loopback port, once it accepts connections.
fn start_iperf3() -> (Child, u16) {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("iperf3")
        .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 must be installed (scripts/install-deps installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "iperf3 -s did not start listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port)
}

async fn every_kind_scenario(kind: Kind) {
    let db = TestDb::new(kind, "kinds").await;
    let (server, admin) =
        common::start_fleet_server(&db, Duration::from_secs(20), Duration::from_secs(15)).await;
    let spool = tempfile::tempdir().unwrap();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (iperf3, iperf3_port) = start_iperf3();
    let _guard = Guard {
        stop: stop.clone(),
        iperf3,
    };
    // A reflector that is not an agent (a vantage endpoint without the control plane).
    let reflector = Endpoint::bind(EndpointConfig {
        listen: Some(Ipv4Addr::LOCALHOST.into()),
        port: 0,
        ..EndpointConfig::default()
    })
    .unwrap();
    let reflector_port = reflector.local_addr().port();
    let mut reflector_stopped = stopped.clone();
    tokio::spawn(reflector.run(async move {
        let _ = reflector_stopped.wait_for(|stop| *stop).await;
    }));

    let mut agents = Vec::new();
    for name in ["k1", "k2"] {
        agents.push(
            common::spawn_agent(&admin, &server.url(), name, spool.path(), &stopped, |_| {}).await,
        );
    }
    common::wait_for_registrations(&server, &["k1", "k2"]).await;
    // One occurrence of each task, due a few seconds after the configuration is
    // applied whatever the phase of the minute (offsets count from the epoch).
    let offset = format!("{}s", (now_us() / 1_000_000 + 6) % 60);
    let config = json!({
        "groups": [
            {"name": "pair", "kind": "list", "pairs": [["k1", "k2"]]},
            {"name": "to-iperf3", "kind": "external", "members": ["k1"], "targets": [format!("127.0.0.1:{iperf3_port}")]},
            {"name": "to-reflector", "kind": "external", "members": ["k2"], "targets": [format!("127.0.0.1:{reflector_port}")]},
            {"name": "to-host", "kind": "external", "members": ["k1"], "targets": ["127.0.0.1"]}
        ],
        "tests": [
            {"name": "rtt", "type": "latency", "spec": {"count": 5, "interval": "10ms", "timeout": "500ms"}},
            {"name": "stamp", "type": "latency", "spec": {"count": 5, "interval": "10ms", "timeout": "500ms", "udp_mode": "stamp"}},
            {"name": "ping-4096", "type": "latency", "spec": {"protocol": "icmp", "size": 4096, "allow_fragmentation": true, "count": 3, "interval": "10ms", "timeout": "500ms"}},
            {"name": "bulk", "type": "throughput", "spec": {"duration": "1s"}},
            {"name": "bulk-iperf3", "type": "throughput", "spec": {"tool": "iperf3", "duration": "1s"}},
            {"name": "downlink", "type": "capacity", "spec": {"reverse": true, "tcp_duration": "500ms", "udp_probe_duration": "300ms", "tcp_streams": 2}},
            {"name": "queue", "type": "sandwich", "spec": {"count": 5, "interval": "20ms", "timeout": "500ms"}},
            {"name": "route", "type": "trace", "spec": {"max_ttl": 4, "queries": 2, "timeout": "500ms"}},
            {"name": "route-icmp", "type": "trace", "spec": {"protocol": "icmp", "max_ttl": 4, "queries": 2, "timeout": "500ms"}},
            {"name": "bundle", "type": "health", "spec": {"count": 3, "interval": "10ms", "timeout": "500ms", "throughput_duration": "500ms"}},
            {"name": "segment", "type": "diagnose", "spec": {"probes": 10, "tcp_duration": "500ms", "tcp_omit": "100ms", "small_udp_duration": "200ms"}},
            {"name": "nics", "type": "counters", "spec": {"interfaces": "lo", "interval": "200ms", "count": 3}},
            {"name": "sniff", "type": "capture", "spec": {"interface": "lo", "filter": "tcp", "duration": "1s", "upload_packets": true}}
        ],
        "tasks": [
            {"name": "lat", "test": "rtt", "group": "pair", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "stamp-ext", "test": "stamp", "group": "to-reflector", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "icmp-ext", "test": "ping-4096", "group": "to-host", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "tput", "test": "bulk", "group": "pair", "every": "1m", "offset": offset, "slip": "40s", "directions": "one"},
            {"name": "tput-agents-iperf3", "test": "bulk-iperf3", "group": "pair", "every": "1m", "offset": offset, "slip": "40s", "directions": "one"},
            {"name": "tput-ext-iperf3", "test": "bulk-iperf3", "group": "to-iperf3", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "cap", "test": "downlink", "group": "pair", "every": "1m", "offset": offset, "slip": "40s", "directions": "one"},
            {"name": "sandwich", "test": "queue", "group": "pair", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "trace-agents", "test": "route", "group": "pair", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "trace-ext", "test": "route-icmp", "group": "to-host", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "health", "test": "bundle", "group": "pair", "every": "1m", "offset": offset, "slip": "40s", "directions": "one"},
            {"name": "diagnose", "test": "segment", "group": "pair", "every": "1m", "offset": offset, "slip": "40s", "directions": "one"},
            {"name": "counters", "test": "nics", "group": "pair", "every": "1m", "offset": offset, "slip": "40s"},
            {"name": "capture", "test": "sniff", "group": "pair", "every": "1m", "offset": offset, "slip": "40s"}
        ],
        // The scheduled capacity run is judged against a committed rate (Rufini et al.).
        "contracts": [{"name": "downlink-sla", "tasks": ["cap"], "rate": "1M"}]
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");
    let applied_us = now_us();

    // One occurrence of every task: wait until each task has a run and none of the
    // occurrence's runs is still to start or running (bounded). A task with several runs
    // (both directions, one per agent) is not done when its first run is.
    let tasks: BTreeSet<&str> = [
        "lat",
        "stamp-ext",
        "icmp-ext",
        "tput",
        "tput-agents-iperf3",
        "tput-ext-iperf3",
        "cap",
        "sandwich",
        "trace-agents",
        "trace-ext",
        "health",
        "diagnose",
        "counters",
        "capture",
    ]
    .into();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let runs = loop {
        let runs = server
            .state
            .archive
            .runs_between(applied_us - 5_000_000, applied_us + 60_000_000)
            .await
            .unwrap();
        let planned: BTreeSet<&str> = runs.iter().map(|run| run.task.as_str()).collect();
        let pending = runs
            .iter()
            .any(|run| matches!(run.state, RunState::Scheduled | RunState::Dispatched));
        if (planned == tasks && !pending) || tokio::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // While the scheduled runs complete under their tickets, an outsider's tests
    // against agent k2 are refused: native without a ticket or with a forged one, and
    // iperf3 without a presented ticket.
    let k2 = common::registration(&server, "k2").await;
    let refusals = tokio::task::spawn_blocking(move || {
        use vantage_model::throughput::{ThroughputSpec, ThroughputTool};
        use vantage_model::ticket::{TicketClaims, TicketSigner};
        let mut spec = ThroughputSpec::new("127.0.0.1", k2.endpoint_port);
        spec.duration_us = Some(500_000);
        let unticketed = vantage_probe::throughput::client::run_native(&spec)
            .expect_err("an unticketed test is refused")
            .to_string();
        spec.ticket = Some(TicketSigner::from_secret([1; 32]).sign(&TicketClaims {
            run_id: "forged".into(),
            test: "throughput".into(),
            client: "outsider".into(),
            server: "k2".into(),
            max_duration_ms: 60_000,
            not_after_us: now_us() + 60_000_000,
        }));
        let forged = vantage_probe::throughput::client::run_native(&spec)
            .expect_err("a forged ticket is refused")
            .to_string();
        let mut iperf3 = ThroughputSpec::new("127.0.0.1", k2.iperf3_port.unwrap());
        iperf3.tool = ThroughputTool::Iperf3;
        iperf3.duration_us = Some(1_000_000);
        let unpresented = vantage_probe::iperf3::client::run_iperf3(&iperf3)
            .expect_err("iperf3 without a presented ticket is refused")
            .to_string();
        [unticketed, forged, unpresented]
    })
    .await
    .unwrap();
    assert!(
        refusals[0].contains("serves throughput tests only with a ticket from its vantage server"),
        "{refusals:?}"
    );
    assert!(
        refusals[1].contains("signature does not verify"),
        "{refusals:?}"
    );
    assert!(
        refusals[2].contains("test authorization failed"),
        "{refusals:?}"
    );
    let _ = stop.send(true);
    for agent in agents {
        agent.await.unwrap().expect("agent ran without error");
    }

    // Every run of every kind completed: no non-start, failure or miss.
    let by_task: BTreeMap<&str, Vec<_>> = runs.iter().fold(BTreeMap::new(), |mut map, run| {
        map.entry(run.task.as_str())
            .or_insert_with(Vec::new)
            .push(run);
        map
    });
    assert_eq!(
        by_task.keys().copied().collect::<BTreeSet<_>>(),
        tasks,
        "{runs:#?}"
    );
    for run in &runs {
        assert_eq!(run.state, RunState::Completed, "{run:#?}");
    }
    for external in ["tput-ext-iperf3", "stamp-ext", "icmp-ext", "trace-ext"] {
        assert!(
            by_task[external].iter().all(|run| run.target.is_some()),
            "{external} runs name their external host"
        );
    }

    // Each result carries its kind's summary metrics.
    let results = server
        .state
        .archive
        .results(&ResultFilter {
            limit: 1000,
            include_raw: true,
            ..ResultFilter::default()
        })
        .await
        .unwrap();
    let metric = |task: &str, name: &str| -> f64 {
        let run = &by_task[task][0];
        let result = results
            .iter()
            .find(|result| result.run_id == run.id)
            .unwrap_or_else(|| panic!("{task}: no result"));
        *result
            .metrics
            .get(name)
            .unwrap_or_else(|| panic!("{task}: no {name} in {result:#?}"))
    };
    assert!(metric("lat", "rtt_median_us") > 0.0);
    assert_eq!(metric("stamp-ext", "loss_ratio"), 0.0);
    assert_eq!(metric("icmp-ext", "loss_ratio"), 0.0);
    assert!(metric("tput", "received_bps") > 1e6);
    assert!(metric("tput-agents-iperf3", "received_bps") > 1e6);
    assert!(metric("tput-ext-iperf3", "received_bps") > 1e6);
    assert!(metric("cap", "capacity_bps") > 1e6);
    // Its verdict was stored when the result was: the rate clause with its margin.
    let verdicts = server
        .state
        .archive
        .sla_verdicts(&SlaFilter {
            contract: Some("downlink-sla".into()),
            limit: 10,
            ..SlaFilter::default()
        })
        .await
        .unwrap();
    let verdict = verdicts
        .iter()
        .find(|verdict| verdict.run_id == by_task["cap"][0].id)
        .unwrap_or_else(|| panic!("no verdict on the capacity run: {verdicts:#?}"));
    let rate = &verdict.clauses[0];
    assert_eq!(rate.measured, metric("cap", "capacity_bps"), "{verdict:#?}");
    assert!(
        (rate.margin - (rate.measured - 1e6) / 1e6).abs() < 1e-9 && rate.pass && verdict.pass,
        "{verdict:#?}"
    );
    assert!(metric("sandwich", "sandwich_lost_rounds") == 0.0);
    let raw = |task: &str| {
        let run = &by_task[task][0];
        results
            .iter()
            .find(|result| result.run_id == run.id)
            .and_then(|result| result.result.clone())
            .unwrap()
    };
    // The health bundle's throughput part ran under the run's ticket; the server
    // evaluated its markers (a first round has only the timeout marker to evaluate).
    assert!(
        metric("health", "health_throughput_bps") > 1e6,
        "{}",
        raw("health")["throughput"]
    );
    assert_eq!(metric("health", "health_marker_timeout"), 0.0);
    // The diagnostic bundle's four transfers all ran under the run's one ticket.
    let diagnose = raw("diagnose");
    for direction in ["forward", "reverse"] {
        for part in ["tcp", "small_udp"] {
            let bps = diagnose[direction][part]["summary"]["received_bps"].as_f64();
            assert!(
                bps.is_some_and(|bps| bps > 1e6),
                "{direction} {part}: {diagnose}"
            );
        }
    }
    assert_eq!(diagnose["idle"]["received"], 10, "{diagnose}");
    for trace in ["trace-agents", "trace-ext"] {
        assert_eq!(metric(trace, "destination_reached"), 1.0, "{trace}");
        assert_eq!(metric(trace, "hop_count"), 1.0, "{trace}");
    }
    // Each agent of the pair read its own loopback once: three intervals each, also
    // visible per interval through the app metrics API, tagged with agent and interface.
    let counters = &by_task["counters"];
    let mut clients: Vec<&str> = counters.iter().map(|run| run.client.as_str()).collect();
    clients.sort();
    assert_eq!(clients, ["k1", "k2"]);
    assert!(counters.iter().all(|run| run.server == run.client));
    assert!(metric("counters", "interface_rx_bytes") >= 0.0);
    assert_eq!(metric("counters", "interface_counter_reset_intervals"), 0.0);
    // The app metrics are written just after the run is marked completed, so the last
    // run's may still be on their way: read until all three are there (bounded).
    for agent in ["k1", "k2"] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let body = loop {
            let (status, body) = admin
                .call(
                    "GET",
                    &format!("/api/v1/app-metrics?name=interface_rx_bytes&tag.agent={agent}&tag.interface=lo"),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{body}");
            if body["metrics"].as_array().unwrap().len() >= 3
                || tokio::time::Instant::now() > deadline
            {
                break body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let metrics = body["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), 3, "{body}");
        assert_eq!(metrics[0]["unit"], "bytes");
        assert_eq!(metrics[0]["publisher"], agent);
    }
    // Each agent captured on its own loopback and uploaded flow records and, as the
    // test asks, the packets: kept apart from the document, which holds their size and
    // digest, and served as the file they were.
    let captures = &by_task["capture"];
    let mut clients: Vec<&str> = captures.iter().map(|run| run.client.as_str()).collect();
    clients.sort();
    assert_eq!(clients, ["k1", "k2"]);
    let capture = raw("capture");
    assert_eq!(capture["spec"]["interface"], "lo", "{capture}");
    assert_eq!(capture["capture"]["format"], "pcapng", "{capture}");
    assert!(capture["flows"].is_array(), "{capture}");
    assert_eq!(
        metric("capture", "capture_flows"),
        capture["flows"].as_array().unwrap().len() as f64
    );
    assert_eq!(
        capture["spec"]["upload_packets"], true,
        "{}",
        capture["spec"]
    );
    assert!(
        capture["packets"]["bytes"].is_u64() && capture["packets"].get("pcapng_base64").is_none(),
        "{}",
        capture["packets"]
    );
    let packets = |run_id: &str| {
        admin
            .http
            .get(format!("{}/api/v1/captures/packets", admin.base))
            .query(&[("run_id", run_id)])
            .bearer_auth(&admin.token)
            .send()
    };
    let response = packets(&by_task["capture"][0].id).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-pcapng");
    let pcapng = response.bytes().await.unwrap();
    assert_eq!(capture["packets"]["bytes"], pcapng.len() as u64);
    assert_eq!(
        capture["packets"]["sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&pcapng))
    );
    let reread = vantage_passive::analyse(&pcapng[..], &vantage_passive::Options::default())
        .expect("the packets are the capture the records came from");
    assert_eq!(
        reread.flows.len(),
        capture["flows"].as_array().unwrap().len()
    );
    assert_eq!(reread.capture.frames, capture["capture"]["frames"]);
    let response = packets(&by_task["cap"][0].id).await.unwrap();
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("has no packets"),
        "{body}"
    );
    assert_eq!(raw("stamp-ext")["spec"]["udp_mode"], "stamp");
    assert_eq!(raw("icmp-ext")["spec"]["size_bytes"], 4096);
    assert_eq!(raw("cap")["spec"]["reverse"], true);
    assert_eq!(raw("tput-ext-iperf3")["spec"]["tool"], "iperf3");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_on_sqlite() {
    every_kind_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_on_postgres() {
    every_kind_scenario(Kind::Postgres).await;
}
