//! Sandwich probing (Chard et al., FGCS 2015, after Coates et al.): per round a small packet A,
//! then — a gap d after A — a large (MTU-sized) packet L immediately followed by a
//! small packet B. B queues behind L wherever L's serialisation or queueing delays
//! it, so the arrival gap d' exceeds d by that delay: d' - d.
//!
//! All three are TWAMP-Light test packets, so any RFC 5357 light reflector serves.
//! d is measured on our clock from A's send to the start of L's send — the moment B
//! would have left without L in front of it, so the time L occupies our own link is
//! part of d' - d, as in the method; d' comes from the reflector's receive stamps
//! of A and B. Each difference is taken on one clock: no synchronisation is needed.

use std::time::{Duration, Instant};

use vantage_model::latency::{
    SandwichResult, SandwichRound, SandwichSpec, SandwichSummary, TimestampSource, Timestamping,
    TransmitStamp,
};
use vantage_stats::distribution;

use crate::latency::udp::{Reply, SentPacket, TwampClient};
use crate::latency::{resolve_target, LatencyError, Progress};
use crate::mtu::{ip_header_bytes, UDP_HEADER_BYTES};
use crate::pacing::sleep_until;
use crate::twamp::{self, SENDER_HEADER_LEN};

/// Spin for the last stretch before a send deadline: sleep granularity (~50-100 µs)
/// would blur a gap of a millisecond or less.
const SPIN_BEFORE: Duration = Duration::from_micros(300);

fn wait_precisely(until: Instant) {
    sleep_until(until.checked_sub(SPIN_BEFORE).unwrap_or(until));
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Runs the rounds `spec` describes.
pub fn run_sandwich(
    spec: &SandwichSpec,
    progress: &mut dyn FnMut(Progress),
) -> Result<SandwichResult, LatencyError> {
    if spec.count == 0 {
        return Err(LatencyError::InvalidSpec(
            "--count must be at least 1".into(),
        ));
    }
    if spec.dscp > 63 {
        return Err(LatencyError::InvalidSpec(format!(
            "--dscp {} is out of range 0..=63",
            spec.dscp
        )));
    }
    if (spec.small_size_bytes as usize) < SENDER_HEADER_LEN {
        return Err(LatencyError::InvalidSpec(format!(
            "small packet size {} is below the TWAMP sender header ({SENDER_HEADER_LEN} bytes)",
            spec.small_size_bytes
        )));
    }
    let target = resolve_target(&spec.target, spec.port)?;
    let start_time = chrono::Utc::now();
    // Three packets a round.
    let packets = spec.count.saturating_mul(3);
    let mut client = TwampClient::connect(target, spec.dscp, TransmitStamp::Kernel, packets)?;
    let path_mtu_bytes = client.check_size(spec.small_size_bytes, false)?;
    let headers = ip_header_bytes(target.ip()) + UDP_HEADER_BYTES;
    // Loopback's 64 KiB MTU exceeds what one UDP datagram can carry: cap there.
    let large_size_bytes = spec.large_size_bytes.unwrap_or(
        path_mtu_bytes
            .saturating_sub(headers)
            .min(twamp::MAX_PACKET_LEN as u32),
    );
    if large_size_bytes <= spec.small_size_bytes {
        return Err(LatencyError::InvalidSpec(format!(
            "large packet size {large_size_bytes} must exceed the small size {}",
            spec.small_size_bytes
        )));
    }
    client.check_size(large_size_bytes, spec.allow_fragmentation)?;

    let gap = Duration::from_micros(spec.gap_us);
    let interval = Duration::from_micros(spec.interval_us).max(gap);
    let timeout = Duration::from_micros(spec.timeout_us);
    let small = spec.small_size_bytes as usize;
    let start = Instant::now();
    for round in 0..spec.count {
        let due = start + interval * round;
        client.receive_until(due, &mut |_| false)?;
        sleep_until(due);
        let a_seq = 3 * round;
        client.send(a_seq, small)?;
        let a_sent_at = client.sent.last().map_or(due, |s| s.sent_at);
        wait_precisely(a_sent_at + gap);
        client.send(a_seq + 1, large_size_bytes as usize)?;
        client.send(a_seq + 2, small)?;
        let answered = client.replies.iter().flatten().count() as u32 / 3;
        progress(Progress {
            sent: round + 1,
            answered,
            total: spec.count,
        });
    }
    let last_deadline = client.sent.last().map_or(start, |s| s.sent_at) + timeout;
    client.receive_until(last_deadline, &mut |c| {
        c.replies.iter().all(Option::is_some)
    })?;
    if client.refused && client.replies.iter().all(Option::is_none) {
        return Err(LatencyError::Refused {
            addr: target,
            detail: "ICMP port unreachable: nothing listens on that UDP port".into(),
        });
    }
    client.collect_tx_stamps();
    std::thread::sleep(Duration::from_millis(2));
    client.collect_tx_stamps();

    let packet = |seq: u32| -> (Option<&SentPacket>, Option<Reply>) {
        let sent = client.sent.iter().find(|s| s.sender_seq == seq);
        (sent, sent.and_then(|s| client.reply_within(s, timeout)))
    };
    let rounds: Vec<SandwichRound> = (0..spec.count)
        .map(|round| {
            let (a_sent, a_reply) = packet(3 * round);
            let (l_sent, l_reply) = packet(3 * round + 1);
            let (_, b_reply) = packet(3 * round + 2);
            // d: from A's send to the moment L's send began — when B would have left
            // had L not been in front of it. Both user stamps, so syscall costs cancel.
            let sent_gap_us = a_sent
                .zip(l_sent)
                .map(|(a, l)| (l.user_tx_ns - a.user_tx_ns) as f64 / 1e3);
            let arrival_gap_us = match (a_reply, b_reply) {
                (Some(a), Some(b)) => Some(
                    (b.packet.receive_timestamp.to_unix_nanos()
                        - a.packet.receive_timestamp.to_unix_nanos()) as f64
                        / 1e3,
                ),
                _ => None,
            };
            SandwichRound {
                round,
                sent_gap_us,
                arrival_gap_us,
                queuing_delay_us: sent_gap_us
                    .zip(arrival_gap_us)
                    .map(|(d, d_prime)| d_prime - d),
                complete: arrival_gap_us.is_some(),
                large_returned: l_reply.is_some(),
            }
        })
        .collect();
    let queuing: Vec<f64> = rounds.iter().filter_map(|r| r.queuing_delay_us).collect();
    let sent_gaps: Vec<f64> = rounds.iter().filter_map(|r| r.sent_gap_us).collect();
    let completed_rounds = rounds.iter().filter(|r| r.complete).count() as u64;
    Ok(SandwichResult {
        test: "sandwich".into(),
        tool: "native".into(),
        spec: SandwichSpec {
            port: target.port(),
            ..spec.clone()
        },
        target_addr: target.to_string(),
        start_time,
        end_time: chrono::Utc::now(),
        timestamping: Timestamping {
            transmit: client.timestamping(timeout, 0..=u32::MAX).transmit,
            // d' comes from the reflector's receive stamps.
            receive: TimestampSource::Remote,
        },
        summary: SandwichSummary {
            rounds: u64::from(spec.count),
            completed_rounds,
            lost_rounds: u64::from(spec.count) - completed_rounds,
            large_size_bytes,
            path_mtu_bytes,
            queuing_delay_us: distribution(&queuing),
            sent_gap_us: distribution(&sent_gaps),
        },
        rounds,
    })
}
