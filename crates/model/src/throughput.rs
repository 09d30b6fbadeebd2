//! Throughput test specification and result (`vantage throughput`).
//!
//! Field names are the JSON contract of PRODUCT.md (`summary.sent_bps`,
//! `summary.received_bps`, `summary.retransmits`, `intervals[]`, `host.cpu_ratio`,
//! `limited_by`); every field carries its unit. Documented in `docs/json-schema.md`.

use serde::{Deserialize, Serialize};

/// How the test traffic is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputProtocol {
    Tcp,
    Udp,
}

/// Which side sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client sends to the target (upload).
    Forward,
    /// Target sends to the client (download, `--reverse`).
    Reverse,
    /// Both at once (`--bidir`): one set of streams each way.
    Bidir,
}

/// The protocol implementation used to talk to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputTool {
    /// vantage's own control protocol against `vantage endpoint`.
    Native,
    /// The iperf3 wire protocol, against a stock `iperf3 -s` (or the endpoint's iperf3 port).
    Iperf3,
}

/// What a throughput run was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSpec {
    pub target: String,
    pub port: u16,
    pub tool: ThroughputTool,
    pub protocol: ThroughputProtocol,
    pub direction: Direction,
    pub streams: u32,
    /// Sending time; absent when the run is bounded by `bytes` instead.
    pub duration_us: Option<u64>,
    /// Total bytes to send (over all streams of one direction), instead of a duration.
    pub bytes: Option<u64>,
    pub interval_us: u64,
    /// Leading time excluded from the summary (slow start, buffer fill).
    pub omit_us: u64,
    /// SO_SNDBUF / SO_RCVBUF requested on the data sockets of both ends.
    pub window_bytes: Option<u64>,
    pub congestion: Option<String>,
    pub mss_bytes: Option<u32>,
    /// SO_MAX_PACING_RATE per TCP stream.
    pub pacing_rate_bps: Option<u64>,
    pub dscp: u8,
    /// UDP: target sending rate over all streams of one direction.
    pub rate_bps: Option<u64>,
    /// UDP: payload bytes per datagram.
    pub packet_size_bytes: Option<u32>,
    /// CPU cores the measuring threads were pinned to (round-robin), empty when unpinned.
    pub affinity: Vec<usize>,
    /// The server's ticket for a scheduled run towards an agent; a credential, so
    /// never written into results.
    #[serde(skip)]
    pub ticket: Option<crate::ticket::TestTicket>,
}

impl ThroughputSpec {
    /// A 10 s, one-stream, forward native TCP test with 1 s intervals.
    pub fn new(target: &str, port: u16) -> Self {
        Self {
            target: target.to_string(),
            port,
            tool: ThroughputTool::Native,
            protocol: ThroughputProtocol::Tcp,
            direction: Direction::Forward,
            streams: 1,
            duration_us: Some(10_000_000),
            bytes: None,
            interval_us: 1_000_000,
            omit_us: 0,
            window_bytes: None,
            congestion: None,
            mss_bytes: None,
            pacing_rate_bps: None,
            dscp: 0,
            rate_bps: None,
            packet_size_bytes: None,
            affinity: Vec::new(),
            ticket: None,
        }
    }
}

/// Kernel TCP_INFO figures of one stream's sending socket at the end of an interval.
/// Counters (`*_us`, `retransmits`) are the increase during the interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpIntervalInfo {
    pub cwnd_bytes: u64,
    pub rtt_us: u64,
    pub rttvar_us: u64,
    /// Segments retransmitted during the interval.
    pub retransmits: u64,
    /// The kernel's delivery-rate estimate (most recent sample).
    pub delivery_rate_bps: u64,
    /// Time with data outstanding (tcpi_busy_time), during the interval.
    pub busy_us: u64,
    /// Part of the busy time limited by the peer's receive window.
    pub rwnd_limited_us: u64,
    /// Part of the busy time limited by the local send buffer.
    pub sndbuf_limited_us: u64,
    /// The peer's advertised receive window (tcpi_snd_wnd), when the kernel reports it.
    pub snd_wnd_bytes: Option<u64>,
}

/// Receiver-side UDP accounting of one stream during an interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpIntervalInfo {
    pub received_packets: u64,
    pub lost_packets: u64,
    pub duplicate_packets: u64,
    pub reordered_packets: u64,
    /// RFC 3550 jitter of the interval's transit times.
    pub jitter_us: Option<f64>,
}

/// One stream during one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    /// Stream number, from 1.
    pub stream: u32,
    /// `forward` (client to target) or `reverse`.
    pub direction: Direction,
    /// Bytes the receiver got during the interval.
    pub bytes: u64,
    pub bps: f64,
    /// TCP: the sender's TCP_INFO (absent for the iperf3 tool when the peer sends).
    pub tcp: Option<TcpIntervalInfo>,
    /// UDP: receiver-side loss, duplicates, reordering and jitter.
    pub udp: Option<UdpIntervalInfo>,
}

/// One reporting interval; times are seconds since the test start (receiver's clock).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
    /// Received bits per second over all streams (of both directions under `--bidir`).
    pub bps: f64,
    /// True inside `--omit`: not part of the summary.
    pub omitted: bool,
    pub streams: Vec<StreamInterval>,
}

/// UDP totals of one direction, counted at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpSummary {
    pub sent_packets: u64,
    pub received_packets: u64,
    pub lost_packets: u64,
    pub loss_ratio: f64,
    pub duplicate_packets: u64,
    pub reordered_packets: u64,
    /// Mean of the per-interval RFC 3550 jitter values.
    pub jitter_us: Option<f64>,
}

/// TCP figures of one direction over the summary period (sender's TCP_INFO).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpSummary {
    /// Mean of the per-interval smoothed RTTs.
    pub rtt_us: f64,
    pub rttvar_us: f64,
    /// Largest congestion window seen.
    pub max_cwnd_bytes: u64,
    /// Mean congestion window.
    pub mean_cwnd_bytes: f64,
    /// Smallest peer advertised window seen, when reported.
    pub min_snd_wnd_bytes: Option<u64>,
    pub mean_snd_wnd_bytes: Option<f64>,
    /// Smallest path MTU the sender's sockets sent with (after path MTU discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_mtu_bytes: Option<u32>,
}

/// Totals of one direction (`summary`, and `reverse_summary` under `--bidir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSummary {
    pub direction: Direction,
    /// Seconds of sending counted (the summary period, after `--omit`).
    pub duration_s: f64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub sent_bps: f64,
    pub received_bps: f64,
    /// TCP segments retransmitted by the sender (absent for UDP or when the sender can't tell).
    pub retransmits: Option<u64>,
    pub tcp: Option<TcpSummary>,
    pub udp: Option<UdpSummary>,
}

/// Per-stream totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    pub stream: u32,
    pub direction: Direction,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub received_bps: f64,
    pub retransmits: Option<u64>,
}

/// A value measured on the sending host and on the receiving host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct SenderReceiver {
    pub sender: Option<f64>,
    pub receiver: Option<f64>,
}

/// Probe self-check (Miravalls-Sierra et al., 2018): did the measuring hosts have the CPU to measure?
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct HostCheck {
    /// CPU time of the test's threads / (wall time × online cores): 0..1 of the host.
    pub cpu_ratio: SenderReceiver,
    /// The busiest measuring thread's CPU time / wall time: 1.0 is a full core.
    pub max_thread_cpu_ratio: SenderReceiver,
    /// The busiest measuring thread's (CPU + run-queue wait) / wall time: near 1.0
    /// means it wanted a full core, even if it was starved of it by other work.
    pub max_thread_cpu_demand_ratio: SenderReceiver,
    /// The largest share of the wall time a measuring thread spent runnable but
    /// waiting for a core (CPU contention on the host).
    pub max_thread_runqueue_wait_ratio: SenderReceiver,
}

/// What limited the throughput (PRODUCT.md `limited_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    Network,
    ReceiveWindow,
    SendBuffer,
    Cpu,
    RateCap,
    Unknown,
}

impl LimitedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitedBy::Network => "network",
            LimitedBy::ReceiveWindow => "receive_window",
            LimitedBy::SendBuffer => "send_buffer",
            LimitedBy::Cpu => "cpu",
            LimitedBy::RateCap => "rate_cap",
            LimitedBy::Unknown => "unknown",
        }
    }
}

/// The numbers behind `limited_by`. Absent fields were not measurable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LimitEvidence {
    /// Σ rwnd_limited / Σ busy time of the senders' sockets.
    pub rwnd_limited_ratio: Option<f64>,
    /// Σ sndbuf_limited / Σ busy time.
    pub sndbuf_limited_ratio: Option<f64>,
    /// Busy time limited by neither (congestion window, i.e. the network).
    pub cwnd_limited_ratio: Option<f64>,
    /// Mean peer advertised window (per stream).
    pub peer_window_bytes: Option<f64>,
    /// Mean smoothed RTT.
    pub rtt_us: Option<f64>,
    /// peer window / RTT, summed over the streams: the most a receive-window-limited
    /// transfer can carry.
    pub window_rate_bps: Option<f64>,
    /// received rate × RTT: the bytes in flight the achieved rate needed.
    pub bdp_bytes: Option<f64>,
    pub sender_max_thread_cpu_demand_ratio: Option<f64>,
    pub receiver_max_thread_cpu_demand_ratio: Option<f64>,
    pub sender_max_thread_runqueue_wait_ratio: Option<f64>,
    pub receiver_max_thread_runqueue_wait_ratio: Option<f64>,
    /// A configured cap (UDP rate, pacing rate or the endpoint's maximum).
    pub rate_cap_bps: Option<f64>,
    pub retransmits: Option<u64>,
    /// UDP loss ratio at the receiver.
    pub loss_ratio: Option<f64>,
    /// One sentence saying why the verdict was chosen.
    pub reason: String,
}

/// Result of one throughput run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputResult {
    /// Always `throughput`.
    pub test: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub spec: ThroughputSpec,
    /// The primary direction: forward, or reverse under `--reverse`.
    pub summary: ThroughputSummary,
    /// Under `--bidir`: the target-to-client direction.
    pub reverse_summary: Option<ThroughputSummary>,
    pub intervals: Vec<Interval>,
    pub streams: Vec<StreamSummary>,
    pub host: HostCheck,
    pub limited_by: LimitedBy,
    pub evidence: LimitEvidence,
}
