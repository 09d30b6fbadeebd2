//! Hand-built paths A – B – C (source A, destination C): a healthy one, then each
//! cause alone and two at once. The segment document is a real loopback bundle's
//! (one `vantage throughput`, `latency` and UDP run) with the figures each case sets.

use serde_json::json;

use super::*;

const HEALTHY_SEGMENT: &str = include_str!("healthy-segment.json");
const LINE_BPS: f64 = 940e6;

fn bundle() -> DiagnosticResult {
    let mut result: DiagnosticResult = serde_json::from_str(HEALTHY_SEGMENT).unwrap();
    for checks in [&mut result.forward, &mut result.reverse] {
        let tcp = checks.tcp.as_mut().unwrap();
        tcp.summary.received_bps = LINE_BPS;
        // The small datagrams went at their 100 Mbit/s cap and all arrived.
        let udp = &mut checks.small_udp.as_mut().unwrap().summary;
        udp.sent_bps = 100e6;
        udp.received_bps = 100e6;
    }
    for summary in [
        result.idle.as_mut(),
        result.forward.loaded.as_mut(),
        result.reverse.loaded.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        summary.sent = 100;
        summary.received = 100;
        summary.rtt_us.as_mut().unwrap().median = 1_000.0;
    }
    result
}

fn segment(from: &str, to: &str) -> SegmentObservation {
    SegmentObservation {
        from: from.to_string(),
        to: to.to_string(),
        end_to_end: false,
        run_id: Some(format!("run-{from}-{to}")),
        result: bundle(),
    }
}

fn healthy_path() -> Observations {
    let mut end_to_end = segment("A", "C");
    end_to_end.end_to_end = true;
    Observations {
        request: DiagnoseRequest {
            source: "A".to_string(),
            destination: "C".to_string(),
            target_rate_bps: None,
            target_rtt_us: None,
            app: None,
            segments: true,
        },
        path: vec!["A".to_string(), "B".to_string(), "C".to_string()],
        segments: vec![end_to_end, segment("A", "B"), segment("B", "C")],
        trace: None,
        previous_trace: None,
        agent_addresses: BTreeMap::new(),
        tests_run: Vec::new(),
    }
}

fn seg<'a>(observations: &'a mut Observations, from: &str, to: &str) -> &'a mut DiagnosticResult {
    &mut observations
        .segments
        .iter_mut()
        .find(|s| s.from == from && s.to == to)
        .unwrap()
        .result
}

fn tcp(checks: &mut DiagnosticDirection) -> &mut ThroughputResult {
    checks.tcp.as_mut().unwrap()
}

fn first(diagnosis: &Diagnosis) -> &Suspect {
    diagnosis
        .suspects
        .first()
        .unwrap_or_else(|| panic!("no suspect: {diagnosis:#?}"))
}

fn named(diagnosis: &Diagnosis, cause: Cause) -> &Suspect {
    diagnosis
        .suspects
        .iter()
        .find(|s| s.cause == cause)
        .unwrap_or_else(|| panic!("{cause:?} not named: {diagnosis:#?}"))
}

/// The destination C's receive buffer capped at 64 KiB: the end-to-end transfer
/// and the last segment's both stop at the window.
fn small_window_at_c(observations: &mut Observations) {
    for (from, bps) in [("A", 130e6), ("B", 600e6)] {
        let tcp = tcp(&mut seg(observations, from, "C").forward);
        tcp.summary.received_bps = bps;
        tcp.limited_by = LimitedBy::ReceiveWindow;
        tcp.evidence.rwnd_limited_ratio = Some(0.7);
        tcp.evidence.peer_window_bytes = Some(65_536.0);
        tcp.evidence.rtt_us = Some(4_000.0);
    }
}

/// A half-duplex port on A – B: loss A→B only, more of it under load.
fn duplex_mismatch_on_a_b(observations: &mut Observations) {
    for from in ["A"] {
        for to in ["B", "C"] {
            let result = seg(observations, from, to);
            result.idle.as_mut().unwrap().forward_lost = 12;
            let loaded = result.forward.loaded.as_mut().unwrap();
            loaded.sent = 300;
            loaded.forward_lost = 60;
            let forward = tcp(&mut result.forward);
            forward.summary.received_bps = 20e6;
            forward.summary.retransmits = Some(400);
            // The small datagrams went at 30 Mbit/s and 15 % of them were lost.
            let udp = &mut result.forward.small_udp.as_mut().unwrap().summary;
            udp.sent_bps = 30e6;
            udp.received_bps = 25.5e6;
        }
    }
}

#[test]
fn a_healthy_path_is_healthy_with_no_suspect() {
    let diagnosis = diagnose(&healthy_path());
    assert_eq!(diagnosis.verdict, Verdict::Healthy, "{diagnosis:#?}");
    assert!(diagnosis.suspects.is_empty(), "{diagnosis:#?}");
    assert_eq!(diagnosis.target.forward_bps, Some(LINE_BPS));
    assert_eq!(diagnosis.target.met, None);
}

#[test]
fn a_small_receive_window_names_the_receiver_forward() {
    let mut observations = healthy_path();
    small_window_at_c(&mut observations);
    let diagnosis = diagnose(&observations);
    assert_eq!(diagnosis.verdict, Verdict::Degraded);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::ReceiveWindow, "C", PathDirection::Forward),
        "{diagnosis:#?}"
    );
    // Both measurements into C, each with its run.
    let runs: Vec<_> = suspect
        .evidence
        .iter()
        .filter_map(|e| e.run_id.as_deref())
        .collect();
    assert!(
        runs.contains(&"run-A-C") && runs.contains(&"run-B-C"),
        "{runs:?}"
    );
    assert!(suspect.confidence >= DEGRADED_CONFIDENCE);
}

#[test]
fn one_way_loss_rising_with_load_names_the_segment_and_direction() {
    let mut observations = healthy_path();
    duplex_mismatch_on_a_b(&mut observations);
    // The reverse transfer, whose ACKs cross the lossy direction, carried little: not
    // an MTU black hole (the small probes were lost too) and not a rate limit.
    let reverse = tcp(&mut seg(&mut observations, "A", "B").reverse);
    reverse.summary.received_bps = 5e6;
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::OneWayLoss, "A – B", PathDirection::Forward),
        "{diagnosis:#?}"
    );
    assert!(
        diagnosis.suspects.iter().all(|s| s.cause != Cause::Mtu
            && (s.cause != Cause::RateLimit || s.confidence < DEGRADED_CONFIDENCE)),
        "{diagnosis:#?}"
    );
    // 12 % idle, the reverse clean (for), 20 % under load: rising (for).
    let loaded = suspect
        .evidence
        .iter()
        .find(|e| e.test.starts_with("probes under tcp"))
        .unwrap();
    assert!((loaded.value - 0.2).abs() < 1e-9 && loaded.supports && loaded.weight == 0.4);
    // The datagrams crossed at more than TCP got: not a rate limit.
    assert!(diagnosis
        .suspects
        .iter()
        .all(|s| s.cause != Cause::RateLimit || s.confidence < DEGRADED_CONFIDENCE));
}

#[test]
fn a_packet_bound_host_is_host_cpu_and_a_shaper_is_a_rate_limit() {
    let mut observations = healthy_path();
    let result = seg(&mut observations, "A", "B");
    for checks in [&mut result.forward, &mut result.reverse] {
        tcp(checks).summary.received_bps = 40e6;
        // Sent at 60 Mbit/s; 14 300 datagrams/s of 128 B arrived: 14.6 Mbit/s, 0.46 of
        // TCP's frame rate.
        let udp = &mut checks.small_udp.as_mut().unwrap().summary;
        udp.sent_bps = 60e6;
        udp.received_bps = 14.6e6;
    }
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::HostCpu, "A – B", PathDirection::Both),
        "{diagnosis:#?}"
    );
    // The same rates with datagrams carrying TCP's frame rate: a shaper.
    let result = seg(&mut observations, "A", "B");
    for checks in [&mut result.forward, &mut result.reverse] {
        // 40 × 1514/1448 = 41.8 Mbit/s of frames: 31.5 Mbit/s of 128 B payloads.
        checks.small_udp.as_mut().unwrap().summary.received_bps = 31.5e6;
    }
    let diagnosis = diagnose(&observations);
    assert_eq!(first(&diagnosis).cause, Cause::RateLimit, "{diagnosis:#?}");
    // Datagrams capped below TCP's rate that all crossed test no limit: neither.
    let result = seg(&mut observations, "A", "B");
    for checks in [&mut result.forward, &mut result.reverse] {
        let udp = &mut checks.small_udp.as_mut().unwrap().summary;
        udp.sent_bps = 20e6;
        udp.received_bps = 20e6;
    }
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert!(
        suspect.cause == Cause::RateLimit
            && suspect
                .evidence
                .iter()
                .all(|e| e.metric != "frame_rate_share"),
        "{diagnosis:#?}"
    );
}

#[test]
fn a_lower_path_mtu_on_one_segment_is_tunnel_overhead_both_ways() {
    let mut observations = healthy_path();
    for (from, to) in [("A", "B"), ("A", "C")] {
        let result = seg(&mut observations, from, to);
        for checks in [&mut result.forward, &mut result.reverse] {
            tcp(checks).summary.tcp.as_mut().unwrap().path_mtu_bytes = Some(1400);
            tcp(checks).summary.received_bps = 880e6;
        }
    }
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::TunnelOverhead, "A – B", PathDirection::Both),
        "{diagnosis:#?}"
    );
    // 1 − 1348 / 1448 of every packet's payload.
    let lost = suspect
        .evidence
        .iter()
        .find(|e| e.metric == "payload_lost_ratio")
        .unwrap();
    assert!((lost.value - 100.0 / 1448.0).abs() < 1e-9, "{}", lost.value);
}

#[test]
fn full_segments_that_never_cross_are_an_mtu_black_hole() {
    let mut observations = healthy_path();
    tcp(&mut seg(&mut observations, "B", "C").forward)
        .summary
        .received_bps = 0.0;
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::Mtu, "B – C", PathDirection::Forward),
        "{diagnosis:#?}"
    );
}

#[test]
fn rtt_under_load_is_graded_bufferbloat() {
    let mut observations = healthy_path();
    let result = seg(&mut observations, "B", "C");
    result
        .reverse
        .loaded
        .as_mut()
        .unwrap()
        .rtt_us
        .as_mut()
        .unwrap()
        .median = 151_000.0;
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::Bufferbloat, "B – C", PathDirection::Reverse),
        "{diagnosis:#?}"
    );
    // +150 ms: grade C, weight 150 / 200.
    assert!(suspect.fix.contains("grade C"), "{}", suspect.fix);
    assert!((suspect.evidence[0].weight - 0.75).abs() < 1e-9);
    assert_eq!(bloat_grade(4.9), "A+");
    assert_eq!(bloat_grade(450.0), "F");
}

fn trace(hops: &[(&str, f64)]) -> TraceResult {
    let hops: Vec<_> = hops
        .iter()
        .enumerate()
        .map(|(k, (address, rtt_us))| {
            json!({"ttl": k + 1, "address": address, "addresses": [address], "probes": [],
                   "rtt_us": {"min": rtt_us, "median": rtt_us, "mean": rtt_us, "p95": rtt_us,
                              "p99": rtt_us, "max": rtt_us, "stddev": 0.0},
                   "sent": 3, "answered": 3})
        })
        .collect();
    serde_json::from_value(json!({
        "test": "trace", "spec": {"target": "10.0.0.3", "port": null, "protocol": "udp",
        "first_ttl": 1, "max_ttl": 30, "queries": 3, "timeout_us": 1000000, "flow_id": null},
        "target": "10.0.0.3", "target_addr": "10.0.0.3", "protocol": "udp",
        "method": "udp_datagram", "flow": {"source_addr": null, "source_port": null,
        "destination_port": 33434, "icmp_identifier": null, "icmp_checksum": null},
        "start_time": "2026-11-26T09:42:46Z", "end_time": "2026-11-26T09:42:46Z",
        "hops": hops, "destination_reached": true, "stop_reason": "destination_reached",
        "hop_count": hops.len()
    }))
    .unwrap()
}

#[test]
fn a_new_hop_since_the_last_trace_is_a_path_change_between_the_points_around_it() {
    let mut observations = healthy_path();
    observations.agent_addresses = [("10.0.0.2", "B"), ("10.0.1.3", "C")]
        .into_iter()
        .map(|(a, n)| (a.to_string(), n.to_string()))
        .collect();
    observations.previous_trace = Some(Traced {
        run_id: "run-before".to_string(),
        result: trace(&[("10.0.0.2", 500.0), ("10.0.1.3", 2_500.0)]),
    });
    observations.trace = Some(Traced {
        run_id: "run-now".to_string(),
        result: trace(&[
            ("10.0.0.2", 500.0),
            ("10.0.9.1", 4_500.0),
            ("10.0.1.3", 8_500.0),
        ]),
    });
    let diagnosis = diagnose(&observations);
    let suspect = first(&diagnosis);
    assert_eq!(
        (suspect.cause, suspect.segment.as_str(), suspect.direction),
        (Cause::PathChange, "B – C", PathDirection::Forward),
        "{diagnosis:#?}"
    );
    let hops = suspect
        .evidence
        .iter()
        .find(|e| e.metric == "hop_count")
        .unwrap();
    assert_eq!(hops.value, 3.0);
    assert!(hops.expected.contains("run-before"));
    // The same trace twice: no change.
    observations.previous_trace = observations.trace.clone();
    assert!(diagnose(&observations).suspects.is_empty());
}

#[test]
fn two_causes_at_once_are_both_named() {
    let mut observations = healthy_path();
    small_window_at_c(&mut observations);
    duplex_mismatch_on_a_b(&mut observations);
    let diagnosis = diagnose(&observations);
    let window = named(&diagnosis, Cause::ReceiveWindow);
    let loss = named(&diagnosis, Cause::OneWayLoss);
    assert_eq!(
        (window.segment.as_str(), loss.segment.as_str()),
        ("C", "A – B")
    );
    assert!(window.confidence >= DEGRADED_CONFIDENCE && loss.confidence >= DEGRADED_CONFIDENCE);
}

#[test]
fn a_measuring_thread_at_a_middle_point_is_probe_limited_and_at_an_end_host_cpu() {
    let mut observations = healthy_path();
    let forward = tcp(&mut seg(&mut observations, "B", "C").forward);
    forward.limited_by = LimitedBy::Cpu;
    forward.evidence.sender_max_thread_cpu_demand_ratio = Some(0.99);
    forward.evidence.receiver_max_thread_cpu_demand_ratio = Some(0.3);
    forward.summary.received_bps = 300e6;
    let reverse = tcp(&mut seg(&mut observations, "A", "C").reverse);
    reverse.limited_by = LimitedBy::Cpu;
    reverse.evidence.sender_max_thread_cpu_demand_ratio = Some(0.2);
    reverse.evidence.receiver_max_thread_cpu_demand_ratio = Some(0.97);
    reverse.summary.received_bps = 300e6;
    let diagnosis = diagnose(&observations);
    let probe = named(&diagnosis, Cause::ProbeLimited);
    assert_eq!(
        (probe.segment.as_str(), probe.direction),
        ("B", PathDirection::Forward)
    );
    let host = named(&diagnosis, Cause::HostCpu);
    assert_eq!(
        (host.segment.as_str(), host.direction),
        ("A", PathDirection::Reverse)
    );
}

#[test]
fn a_target_states_its_window_and_loss_budget_and_whether_it_is_met() {
    let mut observations = healthy_path();
    observations.request.target_rate_bps = Some(200_000_000);
    observations.request.target_rtt_us = Some(30_000);
    let diagnosis = diagnose(&observations);
    // 200 Mbit/s × 30 ms = 750 000 B; (1.2247 · 1448 · 8 / (0.03 s · 200 Mbit/s))² = 5.59e-6.
    assert!((diagnosis.target.needs["window_bytes"] - 750_000.0).abs() < 1e-6);
    let budget = diagnosis.target.needs["max_loss_ratio"];
    assert!((budget - 5.59e-6).abs() < 0.01e-6, "{budget}");
    assert_eq!(diagnosis.target.met, Some(true));
    assert_eq!(diagnosis.verdict, Verdict::Healthy);
    // A target above what the path carries is not met: degraded.
    observations.request.target_rate_bps = Some(2_000_000_000);
    let diagnosis = diagnose(&observations);
    assert_eq!(
        (diagnosis.target.met, diagnosis.verdict),
        (Some(false), Verdict::Degraded)
    );
}

#[test]
fn a_destination_that_answers_nothing_is_unreachable() {
    let mut observations = healthy_path();
    let result = seg(&mut observations, "A", "C");
    result.idle.as_mut().unwrap().received = 0;
    result.forward.tcp = None;
    result.reverse.tcp = None;
    assert_eq!(diagnose(&observations).verdict, Verdict::Unreachable);
}

#[test]
fn a_transfer_that_carried_nothing_gives_no_ratio_and_the_diagnosis_stays_json() {
    let mut observations = healthy_path();
    let result = seg(&mut observations, "A", "B");
    for checks in [&mut result.forward, &mut result.reverse] {
        // A segment so impaired that TCP delivered nothing while datagrams crossed.
        tcp(checks).summary.received_bps = 0.0;
        let udp = &mut checks.small_udp.as_mut().unwrap().summary;
        udp.sent_bps = 60e6;
        udp.received_bps = 1e6;
    }
    let diagnosis = diagnose(&observations);
    let evidence: Vec<&Evidence> = diagnosis
        .suspects
        .iter()
        .flat_map(|s| &s.evidence)
        .collect();
    assert!(!evidence.is_empty(), "{diagnosis:#?}");
    assert!(
        evidence.iter().all(|e| e.value.is_finite()),
        "{diagnosis:#?}"
    );
    assert!(
        evidence.iter().all(|e| e.metric != "frame_rate_share"),
        "{diagnosis:#?}"
    );
    // What the server stores, the client reads back.
    let stored = serde_json::to_string(&diagnosis).unwrap();
    let read: Diagnosis = serde_json::from_str(&stored).unwrap();
    assert_eq!(read.suspects.len(), diagnosis.suspects.len());
}
