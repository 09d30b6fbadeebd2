//! Hand-worked checks of the health system: Eq. 1 and H_ALL on numbers worked out
//! in the comments, the timeout rule, markers on hand-made pairs of rounds, the
//! matrix's unknown and stale pairs, and the healthy-cluster selection.

use std::collections::BTreeMap;

use chrono::TimeZone;
use vantage_model::health::{
    HealthResult, RttIndicator, SandwichIndicator, TcpIndicator, ThroughputIndicator,
};

use super::*;

fn rtt(size_bytes: u32, rtt_us: &[f64]) -> RttIndicator {
    RttIndicator {
        size_bytes,
        sent: rtt_us.len() as u64,
        rtt_us: rtt_us.to_vec(),
        error: None,
    }
}

fn lost(size_bytes: u32, sent: u64) -> RttIndicator {
    RttIndicator {
        size_bytes,
        sent,
        rtt_us: Vec::new(),
        error: None,
    }
}

fn round() -> HealthResult {
    let time = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    HealthResult {
        test: "health".into(),
        target: "peer".into(),
        start_time: time,
        end_time: time,
        timeout_us: 5_000_000,
        icmp: Vec::new(),
        udp: Vec::new(),
        sandwich: None,
        tcp: None,
        throughput: None,
    }
}

fn icmp_round(rtts: [f64; 3]) -> HealthResult {
    HealthResult {
        icmp: vec![
            rtt(64, &[rtts[0], rtts[0]]),
            rtt(512, &[rtts[1]]),
            rtt(4096, &[rtts[2]]),
        ],
        ..round()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn eq1_normalises_each_size_over_the_hosts_peers_and_weights_larger_sizes_more() {
    // Host A's averages per size (µs):   64    512   4096
    //   B                                100   200   400
    //   C                                200   300   500
    //   D                                300   400   800
    // Eq. 1 for C: x64 = 100/200 = 0.5, x512 = 100/200 = 0.5, x4096 = 100/400 = 0.25;
    // weights by size rank 1/6, 2/6, 3/6: H = 0.5/6 + 1.0/6 + 0.75/6 = 0.375 as the
    // paper writes it (delay up = metric up); oriented higher = healthier: 0.625.
    let (b, c, d) = (
        icmp_round([100.0, 200.0, 400.0]),
        icmp_round([200.0, 300.0, 500.0]),
        icmp_round([300.0, 400.0, 800.0]),
    );
    let rounds = BTreeMap::from([("B", &b), ("C", &c), ("D", &d)]);
    let metrics = host_metrics(&rounds);
    assert!(close(metrics["B"].icmp.unwrap(), 1.0));
    assert!(close(metrics["C"].icmp.unwrap(), 0.625));
    assert!(close(metrics["D"].icmp.unwrap(), 0.0));
    // Only ICMP was measured: the other parts are absent, not 0 or 1.
    assert_eq!(metrics["C"].udp, None);
    assert_eq!(metrics["C"].throughput, None);
}

#[test]
fn udp_tcp_and_throughput_metrics_follow_their_weights() {
    // UDP: RTTs 64 and 1024 B (rank weights 1/3, 2/3 of half the metric) and the
    // sandwich delay (the other half). TCP: connect and RTT, half each. Throughput:
    // total bytes (higher is better) and per-second variation σ/mean (lower is better).
    let peer =
        |udp64: f64, udp1024: f64, sandwich: f64, connect: f64, bytes: u64, seconds: &[f64]| {
            HealthResult {
                udp: vec![rtt(64, &[udp64]), rtt(1024, &[udp1024])],
                sandwich: Some(SandwichIndicator {
                    rounds: 1,
                    large_size_bytes: 1472,
                    delay_us: vec![sandwich],
                    error: None,
                }),
                tcp: Some(TcpIndicator {
                    sent: 1,
                    connect_us: vec![connect],
                    rtt_us: vec![connect],
                    error: None,
                }),
                throughput: Some(ThroughputIndicator {
                    duration_s: 10.0,
                    received_bytes: bytes,
                    mean_bps: bytes as f64 * 0.8,
                    per_second_bps: seconds.to_vec(),
                    error: None,
                }),
                ..round()
            }
        };
    // P is best on everything but the sandwich; Q the reverse.
    let p = peer(100.0, 200.0, 50.0, 300.0, 1_000_000, &[8e6, 8e6]);
    let q = peer(200.0, 400.0, 10.0, 600.0, 500_000, &[2e6, 6e6]);
    let metrics = host_metrics(&BTreeMap::from([("P", &p), ("Q", &q)]));
    // P: UDP = 0.5·(1/3·1 + 2/3·1) + 0.5·0 = 0.5; TCP = 1; throughput = 0.5·1 + 0.5·1 = 1.
    assert!(close(metrics["P"].udp.unwrap(), 0.5));
    assert!(close(metrics["P"].tcp.unwrap(), 1.0));
    assert!(close(metrics["P"].throughput.unwrap(), 1.0));
    // Q: UDP = 0.5·0 + 0.5·1 = 0.5; TCP = 0; throughput = 0.
    assert!(close(metrics["Q"].udp.unwrap(), 0.5));
    assert!(close(metrics["Q"].tcp.unwrap(), 0.0));
    assert!(close(metrics["Q"].throughput.unwrap(), 0.0));
}

#[test]
fn h_all_is_eq3_and_keeps_the_proportions_when_a_part_is_dropped() {
    // docs/health.md's worked example.
    let parts = Parts {
        icmp: Some(0.625),
        udp: Some(0.6),
        tcp: Some(0.8),
        throughput: Some(0.25),
    };
    // 0.4·0.25 + 0.2·(0.625 + 0.6 + 0.8) = 0.1 + 0.405 = 0.505
    assert!(close(parts.score(&Weights::default()).unwrap(), 0.505));
    // Without throughput: 0.2·(0.625 + 0.6 + 0.8) / 0.6 = 0.675
    let light = Parts {
        throughput: None,
        ..parts
    };
    assert!(close(light.score(&Weights::default()).unwrap(), 0.675));
    assert_eq!(Parts::default().score(&Weights::default()), None);
    let tcp_only = Weights {
        throughput: 0.0,
        icmp: 0.0,
        udp: 0.0,
        tcp: 1.0,
    };
    assert!(close(parts.score(&tcp_only).unwrap(), 0.8));
}

#[test]
fn a_peer_that_never_answered_a_part_scores_zero_on_it() {
    let (b, c) = (
        icmp_round([100.0, 200.0, 400.0]),
        icmp_round([150.0, 250.0, 450.0]),
    );
    let silent = HealthResult {
        icmp: vec![lost(64, 10), lost(512, 10), lost(4096, 10)],
        ..round()
    };
    let metrics = host_metrics(&BTreeMap::from([("B", &b), ("C", &c), ("S", &silent)]));
    assert!(close(metrics["S"].icmp.unwrap(), 0.0));
    assert!(close(metrics["B"].icmp.unwrap(), 1.0));
}

#[test]
fn timeout_needs_two_indicators_and_zeroes_the_score() {
    let mut one = icmp_round([100.0, 200.0, 400.0]);
    one.udp = vec![lost(64, 10), lost(1024, 10)];
    let verdicts = markers(&one, None, &[], &MarkerSettings::default());
    let timeout = verdicts
        .iter()
        .find(|v| v.kind == MarkerKind::Timeout)
        .unwrap();
    assert!(!timeout.fired, "one silent indicator is not a timeout");

    let mut two = one.clone();
    two.tcp = Some(TcpIndicator {
        sent: 10,
        connect_us: Vec::new(),
        rtt_us: Vec::new(),
        error: Some("connection timed out".into()),
    });
    let verdicts = markers(&two, None, &[], &MarkerSettings::default());
    let timeout = verdicts
        .iter()
        .find(|v| v.kind == MarkerKind::Timeout)
        .unwrap();
    assert!(timeout.fired);
    assert!(timeout.detail.contains("udp, tcp"), "{}", timeout.detail);

    // In the matrix the pair's score is 0 and its state degraded, whatever its metrics.
    let hosts = [host("a", None), host("b", None), host("c", None)];
    let good = icmp_round([100.0, 200.0, 400.0]);
    let observations = [
        observation("a", "b", &two, vec![MarkerKind::Timeout]),
        observation("a", "c", &good, vec![]),
    ];
    let matrix = matrix(&hosts, &observations, &Weights::default(), NOW_US, HOUR_US);
    let pair = pair(&matrix, "a", "b");
    assert_eq!(pair.score, Some(0.0));
    assert_eq!(pair.state, PairState::Degraded);
}

fn fired(verdicts: &[MarkerVerdict], kind: MarkerKind) -> Option<bool> {
    verdicts.iter().find(|v| v.kind == kind).map(|v| v.fired)
}

#[test]
fn icmp_marker_fires_when_a_fifth_of_the_probes_exceed_the_previous_mean_plus_sigma() {
    // Previous 64 B round: mean 10 000 µs, σ = √(32 000 000/4) ≈ 2828 µs (above the
    // floors max(500 µs, 25 % of 10 000 = 2500 µs)): threshold ≈ 12 828 µs.
    let previous = HealthResult {
        icmp: vec![rtt(64, &[10_000.0, 14_000.0, 6_000.0, 10_000.0, 10_000.0])],
        ..round()
    };
    let settings = MarkerSettings::default();
    let with = |beyond: usize| HealthResult {
        icmp: vec![rtt(
            64,
            &[vec![13_000.0; beyond], vec![10_000.0; 10 - beyond]].concat(),
        )],
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&with(1), Some(&previous), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(false)
    );
    assert_eq!(
        fired(
            &markers(&with(2), Some(&previous), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(true)
    );
    // Probes just inside the threshold do not count.
    let inside = HealthResult {
        icmp: vec![rtt(64, &[12_800.0; 10])],
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&inside, Some(&previous), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(false)
    );
    // A quiet previous round (σ = 0) is floored: 25 % of its 10 ms mean.
    let quiet = HealthResult {
        icmp: vec![rtt(64, &[10_000.0; 5])],
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&inside, Some(&quiet), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(true)
    );
    let within_floor = HealthResult {
        icmp: vec![rtt(64, &[12_400.0; 10])],
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&within_floor, Some(&quiet), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(false)
    );
    // Two lost probes of ten are as bad as two late ones.
    let lossy = HealthResult {
        icmp: vec![RttIndicator {
            size_bytes: 64,
            sent: 10,
            rtt_us: vec![10_000.0; 8],
            error: None,
        }],
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&lossy, Some(&previous), &[], &settings),
            MarkerKind::Icmp
        ),
        Some(true)
    );
    // Without a previous round there is nothing to compare: no ICMP verdict.
    assert_eq!(
        fired(&markers(&with(5), None, &[], &settings), MarkerKind::Icmp),
        None
    );
}

#[test]
fn udp_marker_fires_on_rtt_or_on_a_half_again_sandwich_delay() {
    let sandwich = |delay: f64| {
        Some(SandwichIndicator {
            rounds: 2,
            large_size_bytes: 1472,
            delay_us: vec![delay, delay],
            error: None,
        })
    };
    let previous = HealthResult {
        udp: vec![rtt(64, &[500.0, 500.0, 500.0])],
        sandwich: sandwich(2000.0),
        ..round()
    };
    let current = |delay: f64| HealthResult {
        udp: vec![rtt(64, &[500.0; 5])],
        sandwich: sandwich(delay),
        ..round()
    };
    let settings = MarkerSettings::default();
    // 2000 → 2800 µs: +40 %, below +50 %.
    assert_eq!(
        fired(
            &markers(&current(2800.0), Some(&previous), &[], &settings),
            MarkerKind::Udp
        ),
        Some(false)
    );
    // 2000 → 3500 µs: +75 %.
    assert_eq!(
        fired(
            &markers(&current(3500.0), Some(&previous), &[], &settings),
            MarkerKind::Udp
        ),
        Some(true)
    );
    // A small delay tripling (100 → 300 µs) stays under the 500 µs floor.
    let quiet_before = HealthResult {
        sandwich: sandwich(100.0),
        ..previous.clone()
    };
    assert_eq!(
        fired(
            &markers(&current(300.0), Some(&quiet_before), &[], &settings),
            MarkerKind::Udp
        ),
        Some(false)
    );
}

#[test]
fn tcp_marker_pools_connect_time_and_rtt() {
    let tcp = |connect: &[f64], rtt: &[f64]| {
        Some(TcpIndicator {
            sent: connect.len() as u64,
            connect_us: connect.to_vec(),
            rtt_us: rtt.to_vec(),
            error: None,
        })
    };
    let previous = HealthResult {
        tcp: tcp(&[1000.0; 5], &[1000.0; 5]),
        ..round()
    };
    // σ = 0 is floored to max(500 µs, 25 %): threshold 1500 µs. Connect times up to
    // 1600 µs on 3 of 5 probes: 3 of 10 pooled probes beyond.
    let current = HealthResult {
        tcp: tcp(&[1600.0, 1600.0, 1600.0, 1000.0, 1000.0], &[1000.0; 5]),
        ..round()
    };
    let settings = MarkerSettings::default();
    assert_eq!(
        fired(
            &markers(&current, Some(&previous), &[], &settings),
            MarkerKind::Tcp
        ),
        Some(true)
    );
    let steady = HealthResult {
        tcp: tcp(&[1400.0; 5], &[1450.0; 5]),
        ..round()
    };
    assert_eq!(
        fired(
            &markers(&steady, Some(&previous), &[], &settings),
            MarkerKind::Tcp
        ),
        Some(false)
    );
}

#[test]
fn throughput_marker_compares_with_the_long_term_median() {
    let current = |mean_bps: f64| HealthResult {
        throughput: Some(ThroughputIndicator {
            duration_s: 10.0,
            received_bytes: (mean_bps * 10.0 / 8.0) as u64,
            mean_bps,
            per_second_bps: vec![mean_bps; 10],
            error: None,
        }),
        ..round()
    };
    let history = [100e6, 90e6, 110e6]; // median 100 Mbit/s: threshold 75 Mbit/s
    let settings = MarkerSettings::default();
    assert_eq!(
        fired(
            &markers(&current(70e6), None, &history, &settings),
            MarkerKind::Throughput
        ),
        Some(true)
    );
    assert_eq!(
        fired(
            &markers(&current(80e6), None, &history, &settings),
            MarkerKind::Throughput
        ),
        Some(false)
    );
    // No history yet: nothing to fall below.
    assert_eq!(
        fired(
            &markers(&current(1.0), None, &[], &settings),
            MarkerKind::Throughput
        ),
        None
    );
    // Only the newest long_term_rounds count.
    let short = MarkerSettings {
        long_term_rounds: 1,
        ..settings
    };
    assert_eq!(
        fired(
            &markers(&current(80e6), None, &[200e6, 100e6, 100e6], &short),
            MarkerKind::Throughput
        ),
        Some(true)
    );
}

const NOW_US: i64 = 10_000_000_000;
const HOUR_US: i64 = 3_600_000_000;

fn host(name: &str, zone: Option<&str>) -> Host {
    Host {
        name: name.into(),
        zone: zone.map(str::to_string),
    }
}

/// Eq. 1 over a host's rounds, from the rounds themselves.
fn host_metrics<'a>(rounds: &BTreeMap<&'a str, &HealthResult>) -> BTreeMap<&'a str, Parts> {
    let features: Vec<RoundFeatures> = rounds.values().map(|r| RoundFeatures::of(r)).collect();
    let parts = metrics_for_host(&features.iter().collect::<Vec<_>>());
    rounds.keys().copied().zip(parts).collect()
}

/// A round as the matrix sees it (its features and markers live for the test).
fn observation<'a>(
    client: &'a str,
    server: &'a str,
    result: &HealthResult,
    markers: Vec<MarkerKind>,
) -> Observation<'a> {
    Observation {
        client,
        server,
        run_id: "run",
        start_us: NOW_US - 60_000_000,
        features: Box::leak(Box::new(RoundFeatures::of(result))),
        markers: markers.leak(),
    }
}

fn pair<'a>(matrix: &'a Matrix, client: &str, server: &str) -> &'a PairHealth {
    matrix
        .pairs
        .iter()
        .find(|p| p.client == client && p.server == server)
        .unwrap()
}

#[test]
fn unmeasured_and_stale_pairs_are_unknown_not_healthy() {
    let hosts = [
        host("a", Some("z1")),
        host("b", Some("z1")),
        host("c", Some("z2")),
    ];
    let (near, far) = (
        icmp_round([100.0, 200.0, 400.0]),
        icmp_round([300.0, 400.0, 800.0]),
    );
    let mut stale = observation("b", "a", &near, vec![]);
    stale.start_us = NOW_US - 2 * HOUR_US;
    let observations = [
        observation("a", "b", &near, vec![]),
        observation("a", "c", &far, vec![MarkerKind::Icmp]),
        stale,
    ];
    let matrix = matrix(&hosts, &observations, &Weights::default(), NOW_US, HOUR_US);
    assert_eq!(matrix.pairs.len(), 6, "every ordered pair of three hosts");
    let ab = pair(&matrix, "a", "b");
    assert_eq!((ab.score, ab.state), (Some(1.0), PairState::Healthy));
    assert_eq!(ab.peers, Some(2));
    assert_eq!(ab.age_s, Some(60.0));
    let ac = pair(&matrix, "a", "c");
    assert_eq!((ac.score, ac.state), (Some(0.0), PairState::Degraded));
    assert_eq!(ac.markers, vec![MarkerKind::Icmp]);
    for (client, server) in [("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")] {
        let unknown = pair(&matrix, client, server);
        assert_eq!((unknown.score, unknown.state), (None, PairState::Unknown));
    }
    // Host scores average the known pairs either way: a = (1 + 0) / 2; b = 1; c = 0.
    let score = |name: &str| matrix.hosts.iter().find(|h| h.name == name).unwrap().score;
    assert_eq!(score("a"), Some(0.5));
    assert_eq!(score("b"), Some(1.0));
    assert_eq!(score("c"), Some(0.0));
    assert_eq!(matrix.hosts[2].zone.as_deref(), Some("z2"));
}

#[test]
fn a_host_no_longer_listed_still_shows_and_a_later_round_of_a_pair_wins() {
    // "gone" measured a and was measured by it, but is not among the hosts now.
    let hosts = [host("a", None), host("b", None)];
    let (near, far) = (
        icmp_round([100.0, 200.0, 400.0]),
        icmp_round([300.0, 400.0, 800.0]),
    );
    let observations = [
        observation("a", "gone", &near, vec![]),
        observation("gone", "a", &near, vec![]),
        observation("a", "b", &near, vec![]),
        // A second round of a → b, listed later: it replaces the first.
        observation("a", "b", &far, vec![MarkerKind::Icmp]),
    ];
    let scored = scored(&hosts, &observations, &Weights::default(), NOW_US, HOUR_US);
    assert_eq!(scored.names, ["a", "b", "gone"]);
    let matrix = scored.clone().into_matrix();
    assert_eq!(matrix.pairs.len(), 6);
    assert_eq!(pair(&matrix, "a", "b").markers, vec![MarkerKind::Icmp]);
    assert_eq!(pair(&matrix, "gone", "a").state, PairState::Healthy);
    assert_eq!(pair(&matrix, "b", "gone").state, PairState::Unknown);
    // The numbered cells say what the named pairs say.
    for (position, cell) in scored.cells.iter().enumerate() {
        let (client, server) = (position / 3, position % 3);
        if client == server {
            assert!(cell.is_none());
            continue;
        }
        let named = pair(&matrix, scored.names[client], scored.names[server]);
        assert_eq!(cell.as_ref().and_then(|c| c.score), named.score);
    }
    assert_eq!(matrix.hosts.len(), 3);
    assert_eq!(matrix.hosts[2].name, "gone");
}

#[test]
fn selection_prefers_the_references_zone_and_explains_what_it_left_out() {
    // r and a1, a2 share a zone (RTT 100 µs); b1, b2 are in another (RTT 300 µs);
    // nobody measured x.
    let names = ["r", "a1", "a2", "b1", "b2", "x"];
    let hosts: Vec<Host> = names.iter().map(|n| host(n, None)).collect();
    let zone = |n: &str| if n.starts_with('b') { 'b' } else { 'a' };
    let near = icmp_round([100.0, 100.0, 100.0]);
    let far = icmp_round([300.0, 300.0, 300.0]);
    let mut observations = Vec::new();
    for client in &names[..5] {
        for server in &names[..5] {
            if client != server {
                let result = if zone(client) == zone(server) {
                    &near
                } else {
                    &far
                };
                observations.push(observation(client, server, result, vec![]));
            }
        }
    }
    let matrix = matrix(&hosts, &observations, &Weights::default(), NOW_US, HOUR_US);
    let selection = select(&matrix, "r", 2);
    let mut chosen = selection.selected.clone();
    chosen.sort();
    assert_eq!(chosen, vec!["a1", "a2"]);
    assert_eq!(selection.scores["a1"], 1.0);
    assert_eq!(selection.runners_up.len(), 2);
    assert!(selection
        .runners_up
        .iter()
        .all(|(name, score)| name.starts_with('b') && *score == 0.0));
    assert!(
        selection.reasons.iter().any(|r| r.starts_with("x:")),
        "{:?}",
        selection.reasons
    );

    // Asking for more than there are says so.
    let all = select(&matrix, "r", 6);
    assert_eq!(all.selected.len(), 4);
    assert!(
        all.reasons.iter().any(|r| r.contains("only 4 hosts")),
        "{:?}",
        all.reasons
    );
}

#[test]
fn marker_metric_names_are_declared_by_the_health_kind() {
    let declared: Vec<&str> = vantage_model::kinds::health::KIND
        .metrics
        .iter()
        .map(|metric| metric.name)
        .collect();
    for kind in MarkerKind::ALL {
        assert!(
            declared.contains(&kind.metric_name()),
            "{}",
            kind.metric_name()
        );
    }
}

#[test]
fn fit_table_pairs_each_rounds_metrics_with_the_next_rounds_throughput() {
    // Client a probes b, c and d once a "round" (10 s apart inside a round, rounds an
    // hour apart) for four rounds; peer d never has throughput.
    let with_throughput = |rtt_us: f64, bps: Option<f64>| HealthResult {
        icmp: vec![rtt(64, &[rtt_us])],
        throughput: bps.map(|mean_bps| ThroughputIndicator {
            duration_s: 10.0,
            received_bytes: (mean_bps * 10.0 / 8.0) as u64,
            mean_bps,
            per_second_bps: vec![mean_bps, mean_bps * 0.9],
            error: None,
        }),
        ..round()
    };
    let mut results = Vec::new();
    for round in 0..4 {
        let factor = 1.0 + round as f64;
        results.push((
            "b",
            round,
            with_throughput(100.0 * factor, Some(50e6 / factor)),
        ));
        results.push(("c", round, with_throughput(200.0, Some(40e6))));
        results.push(("d", round, with_throughput(300.0, None)));
    }
    let archived: Vec<Archived<'_>> = results
        .iter()
        .enumerate()
        .map(|(index, (server, round, result))| Archived {
            client: "a",
            server,
            start_us: *round as i64 * HOUR_US + index as i64 % 3 * 10_000_000,
            result,
        })
        .collect();
    let table = fit_table(&archived, 30 * 60_000_000);
    assert_eq!(table.rounds, 4);
    // Rows: b and c in rounds 0..3 (their next round measured throughput); d never
    // has a target; round 3 has no next round.
    assert_eq!(table.target.len(), 6);
    assert_eq!(table.incomplete_rows, 6);
    // Every row measured ICMP and throughput; UDP and TCP were never measured.
    assert_eq!(table.names, vec!["H_TP", "H_ICMP"]);
    assert_eq!(table.columns.len(), 2);
    assert!(table.columns.iter().all(|column| column.len() == 6));
    // Round 0's row for b: its next round got 50/2 = 25 Mbit/s.
    assert!(table.target.contains(&25e6));
    // A round is split when the same peer appears twice.
    let twice = [
        archived[0].clone(),
        Archived {
            start_us: 1,
            ..archived[0].clone()
        },
    ];
    assert_eq!(fit_table(&twice, HOUR_US).rounds, 2);
}
