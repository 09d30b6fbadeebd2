//! `vantage capacity`: the SLA verification method of Rufini et al.
//! (Fotonica 2014), end to end, over the
//! native throughput engine.
//!
//! 1. TCP bulk transfers, one stream and N streams: B_t, RTT, cwnd, peer window.
//! 2. UDP over-rate probe: the rate starts above the best TCP figure and doubles
//!    until the path drops (received < 97 % of sent in the steady part), so no
//!    starting guess matters. With BT_T the bits sent and BT_U the bits received in
//!    the steady part, B_c = (BT_U / BT_T) · B_c', B_c' the achieved sending rate.
//! 3. Verification at B_c* = B_c − ε, ε = `epsilon_ratio` · B_c: loss must stay below
//!    `loss_threshold_ratio`; if not, the rate steps down 1 % at a time (5 tries).
//! 4. The bound B_t ≤ min(cwnd, rwnd)/RTT ≤ min(B_c, rwnd/RTT) and which term binds.
//!
//! Rates are at the IP layer (UDP payload plus UDP/IP headers): what a shaper or
//! link counts. The steady part skips the first quarter of each probe (queue fill).

use vantage_model::capacity::{
    BoundCheck, CapacityResult, CapacitySpec, CapacitySummary, StreamCalibration, TcpRun, UdpProbe,
};
use vantage_model::throughput::{
    Direction, LimitedBy, ThroughputProtocol, ThroughputResult, ThroughputSpec,
};

use crate::throughput::client::{resolve, run_native, ThroughputError};

/// Received below this share of sent (steady part): the probe is over capacity.
const OVER_CAPACITY_SHARE: f64 = 0.97;
const MAX_RAMP_PROBES: usize = 12;
const MAX_PROBE_RATE_BPS: f64 = 100e9;
const VERIFY_STEP_DOWN: f64 = 0.01;
const VERIFY_TRIES: usize = 5;
/// Over-rate probes that fell short of their rate without being dropped, repeated at the same
/// rate before the sender is taken as the limit: a sender briefly without CPU is not one.
const SENDER_SHORT_RETRIES: usize = 2;
/// A probe whose achieved rate is below this share of its target was sender-limited.
const SENDER_SHORT_SHARE: f64 = 0.98;
/// Tolerance of each ≤ in the bound (RTT and windows are interval means).
const BOUND_TOLERANCE: f64 = 1.1;

/// Progress messages for a terminal.
pub type Progress<'a> = &'a mut dyn FnMut(&str);

/// A throughput spec against the capacity target, with 250 ms intervals.
fn base_spec(spec: &CapacitySpec) -> ThroughputSpec {
    let mut base = ThroughputSpec::new(&spec.target, spec.port);
    base.interval_us = 250_000;
    base.ticket = spec.ticket.clone();
    if spec.reverse {
        base.direction = Direction::Reverse;
    }
    base
}

fn tcp_run(
    spec: &CapacitySpec,
    streams: u32,
) -> Result<(TcpRun, ThroughputResult), ThroughputError> {
    let mut tcp = base_spec(spec);
    tcp.streams = streams;
    tcp.duration_us = Some(spec.tcp_duration_us);
    // Leave slow start out (a quarter of the run, at most 1 s).
    tcp.omit_us = (spec.tcp_duration_us / 4).min(1_000_000);
    let result = run_native(&tcp)?;
    let summary = &result.summary;
    let (window_rate_bps, rwnd_rate_bps) = window_rates(&result);
    Ok((
        TcpRun {
            streams,
            received_bps: summary.received_bps,
            rtt_us: summary.tcp.map(|t| t.rtt_us),
            mean_cwnd_bytes: summary.tcp.map(|t| t.mean_cwnd_bytes),
            mean_rwnd_bytes: summary.tcp.and_then(|t| t.mean_snd_wnd_bytes),
            window_rate_bps,
            rwnd_rate_bps,
            retransmits: summary.retransmits,
            limited_by: result.limited_by,
        },
        result,
    ))
}

/// Means over the summary intervals of Σ_streams min(cwnd, rwnd)/RTT and Σ rwnd/RTT,
/// pairing each window with the RTT of the same interval (pure).
pub fn window_rates(result: &ThroughputResult) -> (Option<f64>, Option<f64>) {
    let (mut window_rates, mut rwnd_rates) = (Vec::new(), Vec::new());
    for interval in result.intervals.iter().filter(|i| !i.omitted) {
        let (mut window_sum, mut rwnd_sum, mut complete) = (0.0, 0.0, true);
        for stream in &interval.streams {
            match stream.tcp.filter(|t| t.rtt_us > 0) {
                Some(tcp) => {
                    let per_s = |bytes: u64| bytes as f64 * 8.0 / (tcp.rtt_us as f64 * 1e-6);
                    let rwnd = tcp.snd_wnd_bytes.unwrap_or(u64::MAX);
                    window_sum += per_s(tcp.cwnd_bytes.min(rwnd));
                    rwnd_sum += tcp.snd_wnd_bytes.map_or(f64::NAN, per_s);
                }
                None => complete = false,
            }
        }
        if complete && !interval.streams.is_empty() {
            window_rates.push(window_sum);
            if rwnd_sum.is_finite() {
                rwnd_rates.push(rwnd_sum);
            }
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    (mean(&window_rates), mean(&rwnd_rates))
}

/// IP + UDP header bytes for the target's address family.
fn header_bytes(spec: &CapacitySpec) -> Result<u32, ThroughputError> {
    let addr = resolve(&spec.target, spec.port)?;
    Ok(crate::mtu::ip_header_bytes(addr.ip()) + crate::mtu::UDP_HEADER_BYTES)
}

/// One UDP probe at an IP-layer rate.
fn udp_probe(
    spec: &CapacitySpec,
    purpose: &str,
    ip_rate_bps: f64,
    headers: u32,
) -> Result<UdpProbe, ThroughputError> {
    let payload = spec.packet_size_bytes;
    let packet_bits = f64::from(payload + headers) * 8.0;
    let mut udp = base_spec(spec);
    udp.protocol = ThroughputProtocol::Udp;
    udp.duration_us = Some(spec.udp_probe_duration_us);
    udp.packet_size_bytes = Some(payload);
    udp.rate_bps = Some(
        (ip_rate_bps * f64::from(payload) * 8.0 / packet_bits)
            .round()
            .max(1.0) as u64,
    );
    let result = run_native(&udp)?;
    Ok(probe_figures(
        purpose,
        ip_rate_bps,
        &result,
        packet_bits,
        spec.udp_probe_duration_us as f64 / 1e6,
    ))
}

/// Steady-part rates of a UDP probe result (pure).
pub fn probe_figures(
    purpose: &str,
    target_rate_bps: f64,
    result: &ThroughputResult,
    packet_bits: f64,
    duration_s: f64,
) -> UdpProbe {
    let udp = result
        .summary
        .udp
        .unwrap_or(vantage_model::throughput::UdpSummary {
            sent_packets: 0,
            received_packets: 0,
            lost_packets: 0,
            loss_ratio: 1.0,
            duplicate_packets: 0,
            reordered_packets: 0,
            jitter_us: None,
        });
    let warmup_s = duration_s / 4.0;
    let (mut steady_packets, mut steady_s) = (0u64, 0f64);
    for interval in result
        .intervals
        .iter()
        .filter(|i| i.start_s >= warmup_s - 1e-3 && i.end_s <= duration_s + 1e-3)
    {
        steady_packets += interval
            .streams
            .iter()
            .filter_map(|s| s.udp.map(|u| u.received_packets))
            .sum::<u64>();
        steady_s += interval.end_s - interval.start_s;
    }
    let sent_bps = udp.sent_packets as f64 * packet_bits / duration_s;
    let received_bps = if steady_s > 0.0 {
        steady_packets as f64 * packet_bits / steady_s
    } else {
        udp.received_packets as f64 * packet_bits / duration_s
    };
    UdpProbe {
        purpose: purpose.to_string(),
        target_rate_bps,
        sent_bps,
        received_bps,
        sent_packets: udp.sent_packets,
        received_packets: udp.received_packets,
        loss_ratio: udp.loss_ratio,
    }
}

/// Which term of B_t ≤ min(cwnd, rwnd)/RTT ≤ min(B_c, rwnd/RTT) binds (pure).
pub fn bound_check(single: &TcpRun, capacity_bps: f64) -> BoundCheck {
    let rwnd_bps = single.rwnd_rate_bps;
    let window_bps = single.window_rate_bps;
    let tcp_bps = single.received_bps;
    let first = window_bps.map(|window| tcp_bps <= window * BOUND_TOLERANCE);
    let second = window_bps.map(|window| {
        window <= rwnd_bps.map_or(capacity_bps, |r| r.min(capacity_bps)) * BOUND_TOLERANCE
    });
    let holds = first.zip(second).map(|(a, b)| a && b);
    let cwnd_is_smaller =
        matches!((single.mean_cwnd_bytes, single.mean_rwnd_bytes), (Some(c), Some(r)) if c < r);
    let (binding, explanation) = if tcp_bps >= 0.9 * capacity_bps {
        (
            "capacity",
            format!(
                "TCP reaches {:.0} % of the capacity",
                tcp_bps / capacity_bps * 100.0
            ),
        )
    } else if let Some(rwnd) = rwnd_bps.filter(|r| !cwnd_is_smaller && tcp_bps >= 0.7 * r) {
        (
            "receive_window",
            format!(
                "TCP ({:.1} Mbit/s) is near rwnd/RTT ({:.1} Mbit/s): the receiver's window, not the line ({:.1} Mbit/s), limits it",
                tcp_bps / 1e6,
                rwnd / 1e6,
                capacity_bps / 1e6
            ),
        )
    } else if cwnd_is_smaller {
        (
            "congestion_window",
            "the congestion window is below the receive window: TCP's congestion control limits it"
                .to_string(),
        )
    } else {
        (
            "unknown",
            "no term is close to the TCP throughput".to_string(),
        )
    };
    let explanation = match (first, second) {
        (Some(false), _) => format!("{explanation}; B_t exceeds min(cwnd, rwnd)/RTT"),
        (_, Some(false)) => format!(
            "{explanation}; min(cwnd, rwnd)/RTT exceeds min(B_c, rwnd/RTT) (a queue inflates cwnd)"
        ),
        _ => explanation,
    };
    BoundCheck {
        tcp_bps,
        window_bps,
        rwnd_bps,
        capacity_bps,
        holds,
        binding: binding.to_string(),
        explanation,
    }
}

/// Several streams carrying less than this many times one stream "give no more".
const STREAM_GAIN_FLOOR: f64 = 1.1;
/// The path carries more than TCP when B_c exceeds the best TCP figure by this factor.
const PATH_HEADROOM: f64 = 1.2;

/// Single stream, then several (Miravalls-Sierra et al., 2018), read against what the
/// UDP probe showed the path carries (pure).
pub fn stream_calibration(
    single: &TcpRun,
    parallel: &TcpRun,
    capacity_bps: f64,
    over_capacity_reached: bool,
) -> StreamCalibration {
    let gain_ratio = parallel.received_bps / single.received_bps.max(1.0);
    let best_bps = single.received_bps.max(parallel.received_bps);
    let mbps = |bps: f64| bps / 1e6;
    let cpu_bound = [single, parallel]
        .iter()
        .any(|run| run.limited_by == LimitedBy::Cpu);
    let (probe_limited, reason) = if gain_ratio >= STREAM_GAIN_FLOOR {
        (
            false,
            format!(
                "{} streams carry {gain_ratio:.2} × one: the hosts carry more than one stream \
                 did, so that stream was held by its own window or congestion control",
                parallel.streams
            ),
        )
    } else if over_capacity_reached && capacity_bps > PATH_HEADROOM * best_bps {
        (
            true,
            format!(
                "{} streams carry no more than one ({:.1} vs {:.1} Mbit/s) while UDP shows the \
                 path carries {:.1} Mbit/s: the measuring hosts (CPU, NIC, bus) set the TCP figures",
                parallel.streams,
                mbps(parallel.received_bps),
                mbps(single.received_bps),
                mbps(capacity_bps)
            ),
        )
    } else if !over_capacity_reached && cpu_bound {
        (
            true,
            format!(
                "{} streams carry no more than one, the UDP sender could not over-drive the path \
                 and a TCP run was CPU-bound: the measuring hosts set every figure",
                parallel.streams
            ),
        )
    } else {
        (
            false,
            format!(
                "one stream already carries what the path gives ({:.1} of {:.1} Mbit/s)",
                mbps(single.received_bps),
                mbps(capacity_bps)
            ),
        )
    };
    StreamCalibration {
        streams: parallel.streams,
        gain_ratio,
        probe_limited,
        reason,
    }
}

/// Runs the whole method against a vantage endpoint.
pub fn run_capacity(
    spec: &CapacitySpec,
    progress: Progress,
) -> Result<CapacityResult, ThroughputError> {
    let started_at = chrono::Utc::now();
    let headers = header_bytes(spec)?;
    progress("TCP, 1 stream");
    let (tcp_single, _) = tcp_run(spec, 1)?;
    progress(&format!("TCP, {} streams", spec.tcp_streams));
    let (tcp_parallel, _) = tcp_run(spec, spec.tcp_streams)?;

    let mut probes = Vec::new();
    let mut rate = (tcp_single.received_bps.max(tcp_parallel.received_bps) * 1.25).max(1e6);
    let mut short_retries_left = SENDER_SHORT_RETRIES;
    let over = loop {
        progress(&format!("UDP over-rate probe at {:.1} Mbit/s", rate / 1e6));
        let probe = udp_probe(spec, "ramp", rate, headers)?;
        probes.push(probe.clone());
        let dropped = probe.received_bps < OVER_CAPACITY_SHARE * probe.sent_bps;
        let sender_short = probe.sent_bps < SENDER_SHORT_SHARE * rate;
        if sender_short && !dropped && short_retries_left > 0 && probes.len() < MAX_RAMP_PROBES {
            short_retries_left -= 1;
            continue;
        }
        if dropped
            || sender_short
            || probes.len() >= MAX_RAMP_PROBES
            || rate * 2.0 > MAX_PROBE_RATE_BPS
        {
            break probe;
        }
        rate *= 2.0;
    };
    if let Some(last) = probes.last_mut() {
        last.purpose = "over_rate".to_string();
    }
    // B_c = (BT_U / BT_T) · B_c' over the steady part. Only valid when the
    // over-rate probe really exceeded the path: otherwise the sender was the limit.
    let over_capacity_reached = over.received_bps < OVER_CAPACITY_SHARE * over.sent_bps;
    let over_rate_bps = over.sent_bps;
    let estimated = over.received_bps;

    let mut verify_rate = estimated * (1.0 - spec.epsilon_ratio);
    let mut verified = None;
    for _ in 0..VERIFY_TRIES {
        progress(&format!(
            "UDP verification at {:.1} Mbit/s",
            verify_rate / 1e6
        ));
        let probe = udp_probe(spec, "verify", verify_rate, headers)?;
        // A sender that fell short of the rate verified nothing: try the same rate again.
        let sender_short = probe.sent_bps < SENDER_SHORT_SHARE * verify_rate;
        let passed = !sender_short && probe.loss_ratio < spec.loss_threshold_ratio;
        let loss = probe.loss_ratio;
        probes.push(probe);
        if passed {
            verified = Some((verify_rate, loss));
            break;
        }
        if !sender_short {
            verify_rate *= 1.0 - VERIFY_STEP_DOWN;
        }
    }
    let last_loss = probes.last().map_or(1.0, |p| p.loss_ratio);
    let (capacity_bps, verified_loss_ratio, is_verified) = match verified {
        Some((rate, loss)) => (rate, loss, over_capacity_reached),
        None => (estimated, last_loss, false),
    };
    let bound = bound_check(&tcp_single, capacity_bps);
    let calibration = stream_calibration(
        &tcp_single,
        &tcp_parallel,
        capacity_bps,
        over_capacity_reached,
    );
    Ok(CapacityResult {
        test: "capacity".to_string(),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        spec: spec.clone(),
        summary: CapacitySummary {
            capacity_bps,
            tcp_bps: tcp_single.received_bps,
            tcp_parallel_bps: tcp_parallel.received_bps,
            rtt_us: tcp_single.rtt_us,
            verified_loss_ratio,
            verified: is_verified,
            over_rate_bps,
            estimated_capacity_bps: estimated,
            over_capacity_reached,
        },
        tcp_single,
        tcp_parallel,
        probes,
        bound,
        calibration: Some(calibration),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(received_bps: f64, cwnd: f64, rwnd: f64, rtt_us: f64) -> TcpRun {
        TcpRun {
            streams: 1,
            received_bps,
            rtt_us: Some(rtt_us),
            mean_cwnd_bytes: Some(cwnd),
            mean_rwnd_bytes: Some(rwnd),
            window_rate_bps: Some(cwnd.min(rwnd) * 8.0 / (rtt_us * 1e-6)),
            rwnd_rate_bps: Some(rwnd * 8.0 / (rtt_us * 1e-6)),
            retransmits: Some(0),
            limited_by: LimitedBy::Unknown,
        }
    }

    #[test]
    fn a_64_kb_window_over_5_ms_binds_on_the_receive_window() {
        // 64 KB window, 5 ms RTT: 105 Mbit/s at most; 85 measured on a 1 Gbit/s line.
        let check = bound_check(&single(85e6, 200_000.0, 65_536.0, 5_000.0), 1e9);
        assert_eq!(check.binding, "receive_window");
        assert!((check.rwnd_bps.unwrap() - 104.9e6).abs() < 1e6);
        assert_eq!(check.holds, Some(true));
    }

    fn streams(streams: u32, received_bps: f64, limited_by: LimitedBy) -> TcpRun {
        TcpRun {
            streams,
            limited_by,
            ..single(received_bps, 1e6, 1e6, 1_000.0)
        }
    }

    #[test]
    fn four_windows_carry_four_times_one_and_clear_the_probe() {
        // A 64 KB window per stream: 4 streams ≈ 4 × 85 Mbit/s on a 1 Gbit/s path.
        let calibration = stream_calibration(
            &streams(1, 85e6, LimitedBy::ReceiveWindow),
            &streams(4, 330e6, LimitedBy::ReceiveWindow),
            950e6,
            true,
        );
        assert!(!calibration.probe_limited, "{calibration:?}");
        assert!((calibration.gain_ratio - 330.0 / 85.0).abs() < 1e-9);
    }

    #[test]
    fn streams_that_add_nothing_below_the_path_blame_the_probe() {
        // 1 and 4 streams both 2 Gbit/s while UDP delivered 9 Gbit/s.
        let calibration = stream_calibration(
            &streams(1, 2.0e9, LimitedBy::Cpu),
            &streams(4, 2.1e9, LimitedBy::Cpu),
            9e9,
            true,
        );
        assert!(calibration.probe_limited, "{calibration:?}");
        assert!(
            calibration.reason.contains("9000.0 Mbit/s"),
            "{calibration:?}"
        );
        // The UDP sender could not over-drive the path either, and TCP was CPU-bound.
        let calibration = stream_calibration(
            &streams(1, 2.0e9, LimitedBy::Cpu),
            &streams(4, 2.0e9, LimitedBy::Cpu),
            2.2e9,
            false,
        );
        assert!(calibration.probe_limited, "{calibration:?}");
    }

    #[test]
    fn one_stream_filling_the_line_is_not_the_probe() {
        let calibration = stream_calibration(
            &streams(1, 95e6, LimitedBy::Network),
            &streams(4, 96e6, LimitedBy::Network),
            100e6,
            true,
        );
        assert!(!calibration.probe_limited, "{calibration:?}");
        assert!(calibration.reason.starts_with("one stream already carries"));
    }

    #[test]
    fn tcp_at_line_rate_binds_on_capacity() {
        let check = bound_check(&single(97e6, 150_000.0, 3e6, 10_000.0), 100e6);
        assert_eq!(check.binding, "capacity");
    }
}
