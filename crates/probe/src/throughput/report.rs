//! From both sides' [`LocalRun`]s to a [`ThroughputResult`], and the `limited_by`
//! verdict. Pure functions: no I/O.
//!
//! Bytes per interval come from the receiver's samples (what arrived), TCP_INFO from
//! the sender's socket (where cwnd, busy time and the peer's window live). When one
//! side is not vantage (iperf3 tool) it has totals only, and the other side's samples
//! are used.

use chrono::{DateTime, SecondsFormat, Utc};
use vantage_model::throughput::{
    Direction, HostCheck, Interval, LimitEvidence, LimitedBy, SenderReceiver, StreamInterval,
    StreamSummary, TcpIntervalInfo, TcpSummary, ThroughputProtocol, ThroughputResult,
    ThroughputSpec, ThroughputSummary, UdpIntervalInfo, UdpSummary,
};

use super::run::{LocalRun, StreamOutcome, StreamSample};
use crate::tcp_info::TcpInfo;

/// A measuring thread at or above this share of a core (CPU + run-queue wait) set the pace.
pub const CPU_SATURATION_RATIO: f64 = 0.9;
/// A measuring thread that waited for a core this share of the time was starved:
/// the host's CPU, not the network, set the pace.
pub const CPU_STARVED_WAIT_RATIO: f64 = 0.25;
/// A limit (kernel "limited" time share) that dominates the busy time.
pub const DOMINANT_SHARE: f64 = 0.5;
/// A transfer carrying at least this share of peer window / RTT, with losses too rare
/// to hold TCP below it, used the whole window: the window, not the network, bounded
/// it. The kernel's counters alone miss this case: once cwnd has settled at the window
/// (Linux grows cwnd only while cwnd-limited), each ACK opens both by the same amount
/// and the kernel books most of the wait as cwnd-limited; BBR, which paces below its
/// cwnd, books even more so.
pub const WINDOW_FILLED_SHARE: f64 = 0.9;
/// With a filled window, the kernel must still have seen the window limit this often.
const WINDOW_FILLED_MIN_RWND_SHARE: f64 = 0.1;

/// One stream with where its samples live.
struct StreamView<'a> {
    id: u32,
    direction: Direction,
    sender: Option<&'a StreamOutcome>,
    receiver: Option<&'a StreamOutcome>,
    /// Byte series: the receiver's samples, else the sender's.
    bytes_run: Option<&'a LocalRun>,
    /// TCP_INFO series: the sender's samples.
    sender_run: Option<&'a LocalRun>,
    /// The receiver's samples, when it has them.
    receiver_run: Option<&'a LocalRun>,
}

fn sample(run: &LocalRun, k: usize, id: u32) -> Option<&StreamSample> {
    run.intervals.get(k)?.streams.iter().find(|s| s.id == id)
}

fn outcome(run: &LocalRun, id: u32) -> Option<&StreamOutcome> {
    run.streams.iter().find(|s| s.id == id)
}

fn views<'a>(client: &'a LocalRun, server: &'a LocalRun) -> Vec<StreamView<'a>> {
    let mut ids: Vec<u32> = client
        .streams
        .iter()
        .chain(&server.streams)
        .map(|s| s.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let (c, s) = (outcome(client, id), outcome(server, id));
            let client_sends = c
                .map(|o| o.sending)
                .unwrap_or_else(|| s.is_some_and(|o| !o.sending));
            let (sender_run, receiver_run) = if client_sends {
                (client, server)
            } else {
                (server, client)
            };
            let has_samples = |run: &LocalRun| sample(run, 0, id).is_some();
            StreamView {
                id,
                direction: if client_sends {
                    Direction::Forward
                } else {
                    Direction::Reverse
                },
                sender: outcome(sender_run, id),
                receiver: outcome(receiver_run, id),
                bytes_run: if has_samples(receiver_run) {
                    Some(receiver_run)
                } else if has_samples(sender_run) {
                    Some(sender_run)
                } else {
                    None
                },
                sender_run: has_samples(sender_run).then_some(sender_run),
                receiver_run: has_samples(receiver_run).then_some(receiver_run),
            }
        })
        .collect()
}

fn tcp_delta(now: &TcpInfo, before: Option<&TcpInfo>) -> TcpIntervalInfo {
    let diff = |a: Option<u64>, b: Option<u64>| a.unwrap_or(0).saturating_sub(b.unwrap_or(0));
    TcpIntervalInfo {
        cwnd_bytes: now.cwnd_bytes(),
        rtt_us: u64::from(now.rtt_us),
        rttvar_us: u64::from(now.rttvar_us),
        retransmits: u64::from(now.total_retrans)
            .saturating_sub(before.map_or(0, |b| u64::from(b.total_retrans))),
        delivery_rate_bps: now.delivery_rate_bytes_per_s.unwrap_or(0) * 8,
        busy_us: diff(now.busy_time_us, before.and_then(|b| b.busy_time_us)),
        rwnd_limited_us: diff(now.rwnd_limited_us, before.and_then(|b| b.rwnd_limited_us)),
        sndbuf_limited_us: diff(
            now.sndbuf_limited_us,
            before.and_then(|b| b.sndbuf_limited_us),
        ),
        snd_wnd_bytes: now.snd_wnd_bytes.map(u64::from),
    }
}

fn interval_count(views: &[StreamView]) -> usize {
    views
        .iter()
        .filter_map(|v| v.bytes_run.map(|r| r.intervals.len()))
        .max()
        .unwrap_or(0)
}

fn build_intervals(views: &[StreamView], omit_s: f64) -> Vec<Interval> {
    let mut intervals = Vec::new();
    for k in 0..interval_count(views) {
        let mut streams = Vec::new();
        let (mut start_s, mut end_s) = (f64::NAN, f64::NAN);
        for view in views {
            let Some(run) = view.bytes_run else { continue };
            let Some(interval) = run.intervals.get(k) else {
                continue;
            };
            if start_s.is_nan() {
                (start_s, end_s) = (interval.start_s, interval.end_s);
            }
            let cumulative = |k: usize| sample(run, k, view.id).map_or(0, |s| s.cumulative_bytes);
            let bytes = cumulative(k).saturating_sub(if k == 0 { 0 } else { cumulative(k - 1) });
            let seconds = (interval.end_s - interval.start_s).max(1e-9);
            let tcp = view.sender_run.and_then(|run| {
                let now = sample(run, k, view.id)?.tcp_info.as_ref()?;
                let before = k
                    .checked_sub(1)
                    .and_then(|p| sample(run, p, view.id)?.tcp_info.as_ref());
                Some(tcp_delta(now, before))
            });
            let udp = view
                .receiver
                .and_then(|r| r.udp_received.as_ref())
                .and_then(|received| {
                    let counts = received.intervals.get(k)?;
                    let highest_before = k
                        .checked_sub(1)
                        .and_then(|p| received.intervals.get(p))
                        .map_or(0, |c| c.highest_seen);
                    Some(UdpIntervalInfo {
                        received_packets: counts.received_packets,
                        lost_packets: (counts.highest_seen.saturating_sub(highest_before))
                            .saturating_sub(counts.received_packets),
                        duplicate_packets: counts.duplicate_packets,
                        reordered_packets: counts.reordered_packets,
                        jitter_us: counts.jitter_us,
                    })
                });
            streams.push(StreamInterval {
                stream: view.id,
                direction: view.direction,
                bytes,
                bps: bytes as f64 * 8.0 / seconds,
                tcp,
                udp,
            });
        }
        let seconds = (end_s - start_s).max(1e-9);
        let total_bytes: u64 = streams.iter().map(|s| s.bytes).sum();
        intervals.push(Interval {
            start_s,
            end_s,
            bps: total_bytes as f64 * 8.0 / seconds,
            omitted: start_s < omit_s - 1e-6,
            streams,
        });
    }
    intervals
}

/// Index of the interval whose end is the summary's starting point (`None`: from 0).
fn omit_boundary(run: &LocalRun, omit_s: f64) -> Option<usize> {
    if omit_s <= 0.0 {
        return None;
    }
    run.intervals.iter().rposition(|i| i.end_s <= omit_s + 1e-3)
}

struct DirectionTotals {
    summary: ThroughputSummary,
    evidence_inputs: EvidenceInputs,
}

/// Summed TCP_INFO of the senders over the summary period.
#[derive(Default)]
struct EvidenceInputs {
    busy_us: u64,
    rwnd_limited_us: u64,
    sndbuf_limited_us: u64,
    has_limits: bool,
    window_rate_bps: Option<f64>,
    mean_window_bytes: Option<f64>,
    mss_bytes: Option<u32>,
}

fn summarize(
    direction: Direction,
    views: &[&StreamView],
    spec: &ThroughputSpec,
) -> Option<DirectionTotals> {
    if views.is_empty() {
        return None;
    }
    let omit_s = spec.omit_us as f64 / 1e6;
    let planned_s = spec.duration_us.map(|us| us as f64 / 1e6);
    let (mut sent, mut received, mut sent_s, mut received_s) = (0u64, 0u64, 0f64, 0f64);
    let mut retransmits: Option<u64> = None;
    let mut rtts = Vec::new();
    let mut rttvars = Vec::new();
    let mut cwnds = Vec::new();
    let mut windows = Vec::new();
    let mut path_mtu_bytes: Option<u32> = None;
    let mut inputs = EvidenceInputs::default();
    let mut window_rate_bps = 0.0;
    let mut udp_totals: Option<UdpSummary> = None;
    let mut jitters = Vec::new();
    for view in views {
        let sender_base_k = view.sender_run.and_then(|run| omit_boundary(run, omit_s));
        let receiver_base_k = view.receiver_run.and_then(|run| omit_boundary(run, omit_s));
        let base_bytes = |run: Option<&LocalRun>, k: Option<usize>| {
            run.zip(k)
                .and_then(|(run, k)| sample(run, k, view.id))
                .map_or(0, |s| s.cumulative_bytes)
        };
        let base_time = |run: Option<&LocalRun>, k: Option<usize>| {
            run.zip(k)
                .and_then(|(run, k)| run.intervals.get(k))
                .map_or(0.0, |i| i.end_s)
        };
        if let Some(sender) = view.sender {
            let k = sender_base_k;
            sent += sender.bytes.saturating_sub(base_bytes(view.sender_run, k));
            let active = if sender.active_s > 0.0 {
                sender.active_s
            } else {
                planned_s.unwrap_or(0.0)
            };
            sent_s = sent_s.max(active - base_time(view.sender_run, k));
        }
        if let Some(receiver) = view.receiver {
            let k = receiver_base_k;
            received += receiver
                .bytes
                .saturating_sub(base_bytes(view.receiver_run, k));
            let active = if receiver.active_s > 0.0 {
                receiver.active_s
            } else {
                planned_s.unwrap_or(0.0)
            };
            received_s = received_s.max(active - base_time(view.receiver_run, k));
        }
        // TCP figures from the sender's samples in the summary period.
        if let Some(run) = view.sender_run {
            let first = sender_base_k.map_or(0, |k| k + 1);
            let base_info = sender_base_k.and_then(|k| sample(run, k, view.id)?.tcp_info);
            let mut last_info = None;
            let mut stream_windows = Vec::new();
            let mut stream_rtts = Vec::new();
            for k in first..run.intervals.len() {
                let Some(info) = sample(run, k, view.id).and_then(|s| s.tcp_info) else {
                    continue;
                };
                rtts.push(f64::from(info.rtt_us));
                stream_rtts.push(f64::from(info.rtt_us));
                rttvars.push(f64::from(info.rttvar_us));
                cwnds.push(info.cwnd_bytes());
                if info.path_mtu_bytes > 0 {
                    path_mtu_bytes = Some(
                        path_mtu_bytes.map_or(info.path_mtu_bytes, |m| m.min(info.path_mtu_bytes)),
                    );
                }
                if let Some(window) = info.snd_wnd_bytes {
                    windows.push(u64::from(window));
                    stream_windows.push(f64::from(window));
                }
                last_info = Some(info);
            }
            if let Some(last) = last_info {
                let delta = tcp_delta(&last, base_info.as_ref());
                *retransmits.get_or_insert(0) += delta.retransmits;
                inputs.busy_us += delta.busy_us;
                inputs.rwnd_limited_us += delta.rwnd_limited_us;
                inputs.sndbuf_limited_us += delta.sndbuf_limited_us;
                inputs.has_limits |= last.busy_time_us.is_some();
                inputs.mss_bytes = inputs.mss_bytes.max(Some(last.snd_mss_bytes));
                if let (Some(window), Some(rtt)) = (mean(&stream_windows), mean(&stream_rtts)) {
                    if rtt > 0.0 {
                        window_rate_bps += window * 8.0 / (rtt * 1e-6);
                    }
                }
            }
        } else if let Some(reported) = view.sender.and_then(|s| s.reported_retransmits) {
            *retransmits.get_or_insert(0) += reported;
        }
        if spec.protocol == ThroughputProtocol::Udp {
            let totals = udp_totals.get_or_insert(UdpSummary {
                sent_packets: 0,
                received_packets: 0,
                lost_packets: 0,
                loss_ratio: 0.0,
                duplicate_packets: 0,
                reordered_packets: 0,
                jitter_us: None,
            });
            let sent_packets = view.sender.map_or(0, |s| s.packets_sent);
            totals.sent_packets += sent_packets;
            if let Some(received) = view.receiver.and_then(|r| r.udp_received.as_ref()) {
                totals.received_packets += received.received_packets;
                totals.duplicate_packets += received.duplicate_packets;
                totals.reordered_packets += received.reordered_packets;
                let expected = if sent_packets > 0 {
                    sent_packets
                } else {
                    received.highest_seen
                };
                totals.lost_packets += expected.saturating_sub(received.received_packets);
                jitters.extend(received.intervals.iter().filter_map(|i| i.jitter_us));
            }
        }
    }
    if let Some(totals) = udp_totals.as_mut() {
        let expected = totals.received_packets + totals.lost_packets;
        totals.loss_ratio = if expected > 0 {
            totals.lost_packets as f64 / expected as f64
        } else {
            0.0
        };
        totals.jitter_us = mean(&jitters);
    }
    let tcp = mean(&rtts).map(|rtt_us| TcpSummary {
        rtt_us,
        rttvar_us: mean(&rttvars).unwrap_or(0.0),
        max_cwnd_bytes: cwnds.iter().copied().max().unwrap_or(0),
        mean_cwnd_bytes: mean(&cwnds.iter().map(|&c| c as f64).collect::<Vec<_>>()).unwrap_or(0.0),
        min_snd_wnd_bytes: windows.iter().copied().min(),
        mean_snd_wnd_bytes: mean(&windows.iter().map(|&w| w as f64).collect::<Vec<_>>()),
        path_mtu_bytes,
    });
    inputs.window_rate_bps = (window_rate_bps > 0.0).then_some(window_rate_bps);
    inputs.mean_window_bytes = tcp.and_then(|t| t.mean_snd_wnd_bytes);
    let rate = |bytes: u64, seconds: f64| {
        if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        }
    };
    Some(DirectionTotals {
        summary: ThroughputSummary {
            direction,
            duration_s: received_s.max(sent_s),
            sent_bytes: sent,
            received_bytes: received,
            sent_bps: rate(sent, sent_s),
            received_bps: rate(received, received_s),
            retransmits: if spec.protocol == ThroughputProtocol::Tcp {
                retransmits
            } else {
                None
            },
            tcp,
            udp: udp_totals,
        },
        evidence_inputs: inputs,
    })
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Everything [`verdict`] looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerdictInputs {
    pub protocol_is_udp: bool,
    pub received_bps: f64,
    pub sent_bytes: u64,
    pub mss_bytes: Option<u32>,
    pub sender_demand_ratio: Option<f64>,
    pub receiver_demand_ratio: Option<f64>,
    pub sender_wait_ratio: Option<f64>,
    pub receiver_wait_ratio: Option<f64>,
    pub rate_cap_bps: Option<f64>,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub has_tcp_limits: bool,
    pub peer_window_bytes: Option<f64>,
    pub rtt_us: Option<f64>,
    pub window_rate_bps: Option<f64>,
    pub retransmits: Option<u64>,
    pub loss_ratio: Option<f64>,
}

/// The `limited_by` verdict and its evidence. Order: a saturated measuring thread
/// first (then nothing else can be trusted), a configured cap that was reached, then
/// the sender's kernel counters (which share of the busy time the receive window,
/// the send buffer, or neither — the congestion window, i.e. the network — limited),
/// then UDP loss.
pub fn verdict(inputs: &VerdictInputs) -> (LimitedBy, LimitEvidence) {
    let share = |part: u64| {
        (inputs.has_tcp_limits && inputs.busy_us > 0).then(|| part as f64 / inputs.busy_us as f64)
    };
    let rwnd = share(inputs.rwnd_limited_us);
    let sndbuf = share(inputs.sndbuf_limited_us);
    let cwnd = share(
        inputs
            .busy_us
            .saturating_sub(inputs.rwnd_limited_us + inputs.sndbuf_limited_us),
    );
    let mut evidence = LimitEvidence {
        rwnd_limited_ratio: rwnd,
        sndbuf_limited_ratio: sndbuf,
        cwnd_limited_ratio: cwnd,
        peer_window_bytes: inputs.peer_window_bytes,
        rtt_us: inputs.rtt_us,
        window_rate_bps: inputs.window_rate_bps,
        bdp_bytes: inputs
            .rtt_us
            .map(|rtt| inputs.received_bps / 8.0 * rtt * 1e-6),
        sender_max_thread_cpu_demand_ratio: inputs.sender_demand_ratio,
        receiver_max_thread_cpu_demand_ratio: inputs.receiver_demand_ratio,
        sender_max_thread_runqueue_wait_ratio: inputs.sender_wait_ratio,
        receiver_max_thread_runqueue_wait_ratio: inputs.receiver_wait_ratio,
        rate_cap_bps: inputs.rate_cap_bps,
        retransmits: inputs.retransmits,
        loss_ratio: inputs.loss_ratio,
        reason: String::new(),
    };
    let pct = |r: f64| r * 100.0;
    let (limit, reason) = if let Some((side, ratio)) = [
        ("sender", inputs.sender_demand_ratio),
        ("receiver", inputs.receiver_demand_ratio),
    ]
    .into_iter()
    .filter_map(|(side, r)| r.map(|r| (side, r)))
    .filter(|(_, r)| *r >= CPU_SATURATION_RATIO)
    .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        (
            LimitedBy::Cpu,
            format!(
                "a {side} measuring thread wanted {:.0} % of a core (CPU + run-queue wait)",
                pct(ratio)
            ),
        )
    } else if let Some((side, ratio)) = [
        ("sender", inputs.sender_wait_ratio),
        ("receiver", inputs.receiver_wait_ratio),
    ]
    .into_iter()
    .filter_map(|(side, r)| r.map(|r| (side, r)))
    .filter(|(_, r)| *r >= CPU_STARVED_WAIT_RATIO)
    .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        (
            LimitedBy::Cpu,
            format!(
                "a {side} measuring thread waited for a core {:.0} % of the time (CPU contention)",
                pct(ratio)
            ),
        )
    } else if let Some(cap) = inputs
        .rate_cap_bps
        .filter(|cap| inputs.received_bps >= 0.9 * cap)
    {
        (
            LimitedBy::RateCap,
            format!(
                "received {:.1} Mbit/s of a {:.1} Mbit/s cap",
                inputs.received_bps / 1e6,
                cap / 1e6
            ),
        )
    } else if let (Some(rwnd), Some(sndbuf), Some(cwnd)) = (rwnd, sndbuf, cwnd) {
        let window_near = inputs
            .window_rate_bps
            .is_some_and(|w| inputs.received_bps >= 0.7 * w);
        let window_filled = losses_too_rare_to_bind(inputs)
            && rwnd >= WINDOW_FILLED_MIN_RWND_SHARE
            && inputs
                .window_rate_bps
                .is_some_and(|w| inputs.received_bps >= WINDOW_FILLED_SHARE * w);
        if rwnd >= DOMINANT_SHARE || (rwnd >= 0.3 && window_near) || window_filled {
            let window_text =
                match (
                    inputs.peer_window_bytes,
                    inputs.rtt_us,
                    inputs.window_rate_bps,
                ) {
                    (Some(w), Some(rtt), Some(rate)) => format!(
                    "; peer window {:.0} B / RTT {:.0} µs = {:.1} Mbit/s vs {:.1} Mbit/s received",
                    w, rtt, rate / 1e6, inputs.received_bps / 1e6
                ),
                    _ => String::new(),
                };
            (
                LimitedBy::ReceiveWindow,
                format!(
                    "the peer's receive window limited {:.0} % of the busy time{window_text}",
                    pct(rwnd)
                ),
            )
        } else if sndbuf >= DOMINANT_SHARE {
            (
                LimitedBy::SendBuffer,
                format!(
                    "the send buffer limited {:.0} % of the busy time",
                    pct(sndbuf)
                ),
            )
        } else if cwnd >= DOMINANT_SHARE {
            (
                LimitedBy::Network,
                format!(
                    "the congestion window limited {:.0} % of the busy time",
                    pct(cwnd)
                ),
            )
        } else {
            (
                LimitedBy::Unknown,
                "no limit dominated the sender's busy time".to_string(),
            )
        }
    } else if inputs.protocol_is_udp {
        match inputs.loss_ratio {
            Some(loss) if loss > 0.001 => (
                LimitedBy::Network,
                format!("{:.2} % of the datagrams were lost in the path", pct(loss)),
            ),
            _ => (LimitedBy::Unknown, "no loss and no cap reached".to_string()),
        }
    } else {
        (
            LimitedBy::Unknown,
            "the sender's TCP_INFO counters were not available".to_string(),
        )
    };
    evidence.reason = reason;
    (limit, evidence)
}

/// Whether the sender's retransmissions were too rare to have held TCP below the
/// window: the loss-limited rate of Mathis et al. (CCR 1997), MSS / RTT · √(3/2p),
/// with p the retransmitted share of the segments sent, lies above window / RTT.
/// A few spurious retransmissions (reordering in a loaded path) leave a window
/// verdict standing; loss that really pushed back does not.
fn losses_too_rare_to_bind(inputs: &VerdictInputs) -> bool {
    match (
        inputs.retransmits,
        inputs.mss_bytes,
        inputs.rtt_us,
        inputs.window_rate_bps,
    ) {
        (Some(0), ..) => true,
        (Some(retransmits), Some(mss), Some(rtt_us), Some(window_rate_bps))
            if mss > 0 && rtt_us > 0.0 =>
        {
            let segments_sent = (inputs.sent_bytes / u64::from(mss)).max(1) as f64;
            let loss_ratio = (retransmits as f64 / segments_sent).min(1.0);
            let mathis_bps = f64::from(mss) * 8.0 / (rtt_us * 1e-6) * (1.5 / loss_ratio).sqrt();
            mathis_bps > window_rate_bps
        }
        _ => false,
    }
}

fn sides_of(direction: Direction, client: &LocalRun, server: &LocalRun) -> Vec<(bool, f64)> {
    // (is_sender, demand) per side for this direction.
    let demand = |run: &LocalRun| run.max_thread_demand_ratio();
    match direction {
        Direction::Reverse => vec![(false, demand(client)), (true, demand(server))],
        _ => vec![(true, demand(client)), (false, demand(server))],
    }
}

/// Assembles the result of a run from the client's and the server's measurements.
pub fn assemble(
    spec: &ThroughputSpec,
    started_at: DateTime<Utc>,
    client: &LocalRun,
    server: &LocalRun,
    endpoint_rate_cap_bps: Option<f64>,
) -> ThroughputResult {
    let all_views = views(client, server);
    let omit_s = spec.omit_us as f64 / 1e6;
    let intervals = build_intervals(&all_views, omit_s);
    let of = |direction| {
        all_views
            .iter()
            .filter(|v| v.direction == direction)
            .collect::<Vec<_>>()
    };
    let forward = summarize(Direction::Forward, &of(Direction::Forward), spec);
    let reverse = summarize(Direction::Reverse, &of(Direction::Reverse), spec);
    let (primary, secondary) = match (forward, reverse) {
        (Some(f), r) if spec.direction != Direction::Reverse => (f, r),
        (f, Some(r)) => (r, f),
        (Some(f), None) => (f, None),
        (None, None) => (empty_totals(spec), None),
    };
    let primary_direction = primary.summary.direction;
    let sides = sides_of(primary_direction, client, server);
    let sender_demand = sides.iter().find(|s| s.0).map(|s| s.1);
    let receiver_demand = sides.iter().find(|s| !s.0).map(|s| s.1);
    let (sender_run, receiver_run) = if primary_direction == Direction::Reverse {
        (server, client)
    } else {
        (client, server)
    };
    let host = HostCheck {
        cpu_ratio: SenderReceiver {
            sender: Some(sender_run.cpu_ratio()),
            receiver: Some(receiver_run.cpu_ratio()),
        },
        max_thread_cpu_ratio: SenderReceiver {
            sender: Some(sender_run.max_thread_cpu_ratio()),
            receiver: Some(receiver_run.max_thread_cpu_ratio()),
        },
        max_thread_cpu_demand_ratio: SenderReceiver {
            sender: sender_demand,
            receiver: receiver_demand,
        },
        max_thread_runqueue_wait_ratio: SenderReceiver {
            sender: Some(sender_run.max_thread_runqueue_wait_ratio()),
            receiver: Some(receiver_run.max_thread_runqueue_wait_ratio()),
        },
    };
    let streams_n = f64::from(spec.streams.max(1));
    let rate_cap_bps = [
        spec.rate_bps.map(|r| r as f64),
        spec.pacing_rate_bps.map(|r| r as f64 * streams_n),
        endpoint_rate_cap_bps,
    ]
    .into_iter()
    .flatten()
    .reduce(f64::min);
    let summary = &primary.summary;
    let inputs = VerdictInputs {
        protocol_is_udp: spec.protocol == ThroughputProtocol::Udp,
        received_bps: summary.received_bps,
        sent_bytes: summary.sent_bytes,
        mss_bytes: primary.evidence_inputs.mss_bytes,
        sender_demand_ratio: sender_demand,
        receiver_demand_ratio: receiver_demand,
        sender_wait_ratio: host.max_thread_runqueue_wait_ratio.sender,
        receiver_wait_ratio: host.max_thread_runqueue_wait_ratio.receiver,
        rate_cap_bps,
        busy_us: primary.evidence_inputs.busy_us,
        rwnd_limited_us: primary.evidence_inputs.rwnd_limited_us,
        sndbuf_limited_us: primary.evidence_inputs.sndbuf_limited_us,
        has_tcp_limits: primary.evidence_inputs.has_limits,
        peer_window_bytes: primary.evidence_inputs.mean_window_bytes,
        rtt_us: summary.tcp.map(|t| t.rtt_us),
        window_rate_bps: primary.evidence_inputs.window_rate_bps,
        retransmits: summary.retransmits,
        loss_ratio: summary.udp.map(|u| u.loss_ratio),
    };
    let (limited_by, evidence) = verdict(&inputs);
    let streams = all_views
        .iter()
        .map(|view| {
            let received_bytes = view.receiver.map_or(0, |r| r.bytes);
            let active = view.receiver.map_or(0.0, |r| r.active_s);
            StreamSummary {
                stream: view.id,
                direction: view.direction,
                sent_bytes: view.sender.map_or(0, |s| s.bytes),
                received_bytes,
                received_bps: if active > 0.0 {
                    received_bytes as f64 * 8.0 / active
                } else {
                    0.0
                },
                retransmits: view
                    .sender_run
                    .and_then(|run| {
                        run.intervals
                            .last()
                            .and_then(|i| i.streams.iter().find(|s| s.id == view.id))
                    })
                    .and_then(|s| s.tcp_info)
                    .map(|info| u64::from(info.total_retrans))
                    .or(view.sender.and_then(|s| s.reported_retransmits)),
            }
        })
        .collect();
    ThroughputResult {
        test: "throughput".to_string(),
        started_at: started_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        spec: spec.clone(),
        summary: primary.summary,
        reverse_summary: secondary.map(|s| s.summary),
        intervals,
        streams,
        host,
        limited_by,
        evidence,
    }
}

fn empty_totals(spec: &ThroughputSpec) -> DirectionTotals {
    DirectionTotals {
        summary: ThroughputSummary {
            direction: spec.direction,
            duration_s: 0.0,
            sent_bytes: 0,
            received_bytes: 0,
            sent_bps: 0.0,
            received_bps: 0.0,
            retransmits: None,
            tcp: None,
            udp: None,
        },
        evidence_inputs: EvidenceInputs::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_inputs(busy: u64, rwnd: u64, sndbuf: u64) -> VerdictInputs {
        VerdictInputs {
            received_bps: 50e6,
            sender_demand_ratio: Some(0.2),
            receiver_demand_ratio: Some(0.1),
            busy_us: busy,
            rwnd_limited_us: rwnd,
            sndbuf_limited_us: sndbuf,
            has_tcp_limits: true,
            peer_window_bytes: Some(8192.0),
            rtt_us: Some(1000.0),
            window_rate_bps: Some(65.5e6),
            ..VerdictInputs::default()
        }
    }

    use crate::cpu::ThreadCpuUse;
    use crate::throughput::run::{LocalInterval, StreamOutcome};

    fn run(sending: bool, cumulative: &[u64], info: Option<TcpInfo>) -> LocalRun {
        let intervals = cumulative
            .iter()
            .enumerate()
            .map(|(k, &bytes)| LocalInterval {
                start_s: k as f64,
                end_s: k as f64 + 1.0,
                streams: vec![StreamSample {
                    id: 1,
                    cumulative_bytes: bytes,
                    tcp_info: info,
                }],
            })
            .collect();
        LocalRun {
            wall_s: cumulative.len() as f64,
            intervals,
            streams: vec![StreamOutcome {
                id: 1,
                sending,
                bytes: *cumulative.last().unwrap(),
                active_s: cumulative.len() as f64,
                packets_sent: 0,
                packets_skipped: 0,
                udp_received: None,
                cpu: ThreadCpuUse {
                    wall_s: 4.0,
                    cpu_s: 1.0,
                    runqueue_wait_s: Some(0.0),
                },
                error: None,
                reported_retransmits: None,
            }],
            online_cores: 2,
        }
    }

    #[test]
    fn omit_leaves_the_first_interval_out_of_the_summary() {
        let info = TcpInfo {
            snd_mss_bytes: 1000,
            rtt_us: 500,
            cwnd_segments: 10,
            ..TcpInfo::default()
        };
        let client = run(true, &[100, 200, 300, 400], Some(info));
        let server = run(false, &[90, 190, 290, 400], None);
        let mut spec = ThroughputSpec::new("h", 1);
        spec.duration_us = Some(4_000_000);
        spec.omit_us = 1_000_000;
        let result = assemble(&spec, Utc::now(), &client, &server, None);
        let summary = &result.summary;
        assert_eq!(summary.direction, Direction::Forward);
        assert_eq!(summary.received_bytes, 310);
        assert_eq!(summary.sent_bytes, 300);
        assert!((summary.received_bps - 310.0 * 8.0 / 3.0).abs() < 1e-6);
        assert_eq!(result.intervals.len(), 4);
        assert!(result.intervals[0].omitted && !result.intervals[1].omitted);
        // Bytes from the receiver, TCP_INFO from the sender.
        assert_eq!(result.intervals[0].streams[0].bytes, 90);
        assert_eq!(
            result.intervals[1].streams[0].tcp.unwrap().cwnd_bytes,
            10_000
        );
        assert_eq!(summary.tcp.unwrap().rtt_us, 500.0);
        assert_eq!(result.host.cpu_ratio.sender, Some(0.125));
    }

    #[test]
    fn saturated_thread_wins_over_everything() {
        let mut inputs = tcp_inputs(1000, 900, 0);
        inputs.sender_demand_ratio = Some(0.97);
        let (limit, evidence) = verdict(&inputs);
        assert_eq!(limit, LimitedBy::Cpu);
        assert!(evidence.reason.contains("sender"), "{}", evidence.reason);
    }

    #[test]
    fn kernel_counters_pick_the_dominant_limit() {
        assert_eq!(
            verdict(&tcp_inputs(1000, 800, 0)).0,
            LimitedBy::ReceiveWindow
        );
        assert_eq!(verdict(&tcp_inputs(1000, 0, 700)).0, LimitedBy::SendBuffer);
        assert_eq!(verdict(&tcp_inputs(1000, 100, 100)).0, LimitedBy::Network);
        let (limit, evidence) = verdict(&tcp_inputs(1000, 800, 0));
        assert_eq!(limit, LimitedBy::ReceiveWindow);
        assert_eq!(evidence.rwnd_limited_ratio, Some(0.8));
        // cwnd settled at the window: the counters say 25 % rwnd, but the loss-free
        // transfer carried 96 % of window / RTT.
        let mut settled = tcp_inputs(1000, 250, 0);
        settled.received_bps = 0.96 * settled.window_rate_bps.unwrap();
        settled.retransmits = Some(0);
        assert_eq!(verdict(&settled).0, LimitedBy::ReceiveWindow);
        // Two spurious retransmissions in 10 000 segments over 1 ms: Mathis et al.'s
        // loss-limited rate (MSS / RTT · √(3/2p) = 8 Mbit/s · 86.6 = 693 Mbit/s) lies far
        // above window / RTT, so the window still bounded the transfer.
        settled.mss_bytes = Some(1000);
        settled.sent_bytes = 10_000_000;
        settled.retransmits = Some(2);
        assert_eq!(verdict(&settled).0, LimitedBy::ReceiveWindow);
        // 1 200 in 10 000 (12 %): 8 Mbit/s · 3.5 = 28 Mbit/s, below the window's
        // 65.5 Mbit/s: the network pushed back.
        settled.retransmits = Some(1200);
        assert_eq!(verdict(&settled).0, LimitedBy::Network);
        // Retransmissions without the MSS to weigh them: no window claim.
        settled.retransmits = Some(2);
        settled.mss_bytes = None;
        assert_eq!(verdict(&settled).0, LimitedBy::Network);
        assert!(
            evidence.reason.contains("peer window 8192 B"),
            "{}",
            evidence.reason
        );
    }

    #[test]
    fn reached_cap_is_rate_cap_and_no_counters_is_unknown() {
        let mut inputs = tcp_inputs(1000, 0, 0);
        inputs.rate_cap_bps = Some(52e6);
        assert_eq!(verdict(&inputs).0, LimitedBy::RateCap);
        let bare = VerdictInputs {
            received_bps: 1e6,
            ..VerdictInputs::default()
        };
        assert_eq!(verdict(&bare).0, LimitedBy::Unknown);
        let lossy = VerdictInputs {
            protocol_is_udp: true,
            loss_ratio: Some(0.05),
            ..VerdictInputs::default()
        };
        assert_eq!(verdict(&lossy).0, LimitedBy::Network);
    }
}
