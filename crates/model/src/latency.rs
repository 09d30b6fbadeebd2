//! Latency test specification and result (`vantage latency`, `vantage sandwich`).
//!
//! Field names are the JSON contract of PRODUCT.md; units are in the names.

use serde::{Deserialize, Serialize};

/// How the probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyProtocol {
    /// TWAMP-Light (RFC 5357 unauthenticated) or STAMP (RFC 8762) test packets over
    /// UDP, see `LatencySpec::udp_mode`.
    Udp,
    /// TCP connect time plus small request/response round trips inside the connection.
    Tcp,
    /// ICMP echo (unprivileged datagram socket, else raw socket).
    Icmp,
}

/// What a latency run was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySpec {
    pub target: String,
    pub port: u16,
    pub protocol: LatencyProtocol,
    pub count: u32,
    pub interval_us: u64,
    pub timeout_us: u64,
    /// Probe size: UDP payload (TWAMP test packet incl. padding), ICMP payload or TCP request size.
    pub size_bytes: u32,
    /// DSCP code point (0..=63) set on probes.
    pub dscp: u8,
    pub allow_fragmentation: bool,
    /// Where the transmit stamp t1 comes from: `kernel` (default; the software stamp
    /// the kernel takes as the packet leaves the socket layer, falling back to the
    /// user clock when none arrives) or `user` (read just before the send system
    /// call, as `ping` does — for like-for-like comparisons with such tools).
    #[serde(default)]
    pub tx_timestamp: TransmitStamp,
    /// UDP only: which test packets are sent — `twamp_light` (default, RFC 5357) or
    /// `stamp` (RFC 8762 with RFC 8972's SSID and Extra Padding TLV). Ignored by TCP
    /// and ICMP.
    #[serde(default)]
    pub udp_mode: UdpMode,
}

/// Test-packet format of UDP latency runs (see `LatencySpec::udp_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpMode {
    /// TWAMP-Light sender packets (RFC 5357 §4.1.2, unauthenticated).
    #[default]
    TwampLight,
    /// STAMP Session-Sender packets (RFC 8762 §4.2.1, unauthenticated), 44 bytes or
    /// longer with an RFC 8972 Extra Padding TLV.
    Stamp,
}

/// UDP only: what the reflector's replies said about the reflector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReflectorReport {
    /// Counted replies that carried no Sender TTL: shorter than RFC 5357's 41-byte
    /// reflector header (some TWAMP-Light responders send 38 bytes plus padding), or
    /// a TTL byte of 0, which no received packet can have had.
    pub replies_without_ttl: u64,
    /// Of those, the replies shorter than 41 bytes.
    pub short_replies: u64,
    /// Smallest and largest Sender TTL returned (the probes' IP TTL / hop limit as the
    /// reflector received them); absent when no reply carried one.
    pub sender_ttl_min: Option<u8>,
    pub sender_ttl_max: Option<u8>,
    /// STAMP mode only: true when the replies carried our SSID back (an RFC 8972
    /// STAMP reflector), false when they carried 0 (a TWAMP-Light or RFC 8762-only
    /// reflector, which still measures correctly, RFC 8762 §4.6); absent in
    /// TWAMP-Light mode or when nothing came back.
    pub ssid_echoed: Option<bool>,
}

/// Which clock a run asks for its transmit stamps (see `LatencySpec::tx_timestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransmitStamp {
    #[default]
    Kernel,
    User,
}

/// Five-number-plus summary of a set of samples, in the unit its field name carries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub stddev: f64,
}

/// Jitter computed three ways (Miravalls-Sierra et al., 2018): the RFC 3550 filter, mean and median of |Δ|.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Jitter {
    pub rfc3550: f64,
    pub mean_abs_delta: f64,
    pub median_abs_delta: f64,
}

/// Where a timestamp came from; results say which clock they used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampSource {
    /// Kernel software timestamp (SO_TIMESTAMPING / SO_TIMESTAMPNS).
    Kernel,
    /// Read in user space right before send / after receive.
    User,
    /// Stamped by the remote reflector (its own source is not known to us).
    Remote,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timestamping {
    pub transmit: TimestampSource,
    pub receive: TimestampSource,
}

/// Synchronisation state of one host's clock, as its kernel reports it (adjtimex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockSync {
    /// False when the kernel says the clock is unsynchronised (STA_UNSYNC) or nothing is known.
    pub synchronized: bool,
    /// The kernel's estimated error (`esterror`), if reported.
    pub estimated_error_us: Option<u64>,
    /// The kernel's maximum error (`maxerror`), if reported.
    pub max_error_us: Option<u64>,
    /// Where this came from: `adjtimex`, `twamp_error_estimate`, `unknown`.
    pub source: String,
}

/// One-way delays. Values are only present when both clocks are synchronised;
/// `error_bound_us` then bounds how wrong each one-way value can be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneWay {
    pub local_clock: ClockSync,
    pub remote_clock: ClockSync,
    /// True only when both clocks report synchronisation.
    pub valid: bool,
    /// Why one-way values are missing, when they are.
    pub reason: Option<String>,
    pub error_bound_us: Option<f64>,
    pub forward_delay_us: Option<Distribution>,
    pub reverse_delay_us: Option<Distribution>,
}

/// Counts and distributions over a latency run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    /// Probes that never reached the reflector (its sequence numbers skip them).
    pub forward_lost: u64,
    /// Probes the reflector answered whose answer never came back.
    pub reverse_lost: u64,
    /// Lost probes whose direction cannot be told (e.g. trailing losses, ICMP).
    pub unknown_direction_lost: u64,
    pub forward_loss_ratio: f64,
    pub reverse_loss_ratio: f64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Absent when no probe came back.
    pub rtt_us: Option<Distribution>,
    pub jitter_us: Option<Jitter>,
    /// Distribution of IPDV (RFC 3393, consecutive received probes) of the RTT.
    pub ipdv_us: Option<Distribution>,
    /// TCP only: connection establishment time.
    pub connect_us: Option<Distribution>,
    pub one_way: Option<OneWay>,
    /// UDP only: Sender TTL and SSID as the reflector returned them.
    #[serde(default)]
    pub reflector: Option<ReflectorReport>,
}

/// Outcome of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    Received,
    ForwardLost,
    ReverseLost,
    Lost,
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSample {
    pub seq: u32,
    /// Offset of the send from the start of the run.
    pub sent_offset_us: f64,
    pub status: ProbeStatus,
    pub rtt_us: Option<f64>,
    pub forward_us: Option<f64>,
    pub reverse_us: Option<f64>,
    /// The reflector's own sequence number, when it reported one.
    pub reflector_seq: Option<u32>,
    /// TCP only: connection establishment time of this probe.
    #[serde(default)]
    pub connect_us: Option<f64>,
}

/// The whole result of `vantage latency --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyResult {
    /// Always `"latency"`.
    pub test: String,
    /// `native` (vantage endpoint or any TWAMP-Light / STAMP reflector for UDP).
    pub tool: String,
    pub spec: LatencySpec,
    /// The resolved address probed.
    pub target_addr: String,
    pub start_time: chrono::DateTime<chrono::Utc>,
    pub end_time: chrono::DateTime<chrono::Utc>,
    pub timestamping: Timestamping,
    pub summary: LatencySummary,
    pub samples: Vec<ProbeSample>,
    /// The probe's own CPU during the run; absent in results archived before it existed.
    #[serde(default)]
    pub probe_cpu: Option<ProbeCpu>,
}

/// Probe self-check of a latency run (Miravalls-Sierra et al., 2018): a probe host near
/// CPU saturation over-reports delay, so the result says whether it was.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeCpu {
    /// Share of all cores busy during the run (/proc/stat), 0..1.
    pub host_busy_ratio: Option<f64>,
    /// The probing thread's CPU time / wall time (1.0 = a full core).
    pub thread_cpu_ratio: f64,
    /// Share of the run the probing thread was runnable but waited for a core.
    pub thread_runqueue_wait_ratio: Option<f64>,
    /// The host was at least 90 % busy, or the probing thread waited for a core at
    /// least 10 % of the time: its timestamps and sends may run late.
    pub saturated: bool,
}

impl ProbeCpu {
    pub const HOST_BUSY_LIMIT_RATIO: f64 = 0.9;
    pub const RUNQUEUE_WAIT_LIMIT_RATIO: f64 = 0.1;

    /// The check from its measurements.
    pub fn judge(
        host_busy_ratio: Option<f64>,
        thread_cpu_ratio: f64,
        thread_runqueue_wait_ratio: Option<f64>,
    ) -> Self {
        let saturated = host_busy_ratio.is_some_and(|busy| busy >= Self::HOST_BUSY_LIMIT_RATIO)
            || thread_runqueue_wait_ratio
                .is_some_and(|wait| wait >= Self::RUNQUEUE_WAIT_LIMIT_RATIO);
        Self {
            host_busy_ratio,
            thread_cpu_ratio,
            thread_runqueue_wait_ratio,
            saturated,
        }
    }
}

/// What a sandwich-probing run was asked to do (Chard et al., FGCS 2015).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandwichSpec {
    pub target: String,
    pub port: u16,
    /// Rounds (sandwiches) sent.
    pub count: u32,
    /// Intended gap d between the sends of the two small packets.
    pub gap_us: u64,
    /// Pause between the starts of consecutive rounds.
    pub interval_us: u64,
    pub timeout_us: u64,
    /// Size of the two small packets (UDP payload).
    pub small_size_bytes: u32,
    /// Size of the large packet sent right before the second small one (UDP payload);
    /// `None` = the path MTU minus IP and UDP headers.
    pub large_size_bytes: Option<u32>,
    pub dscp: u8,
    pub allow_fragmentation: bool,
}

/// One sandwich: small A, then after the gap large L immediately followed by small B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandwichRound {
    pub round: u32,
    /// Measured gap d: from A's send to the start of L's send, i.e. when B would have
    /// left without L ahead of it (local clock).
    pub sent_gap_us: Option<f64>,
    /// Gap d' between the arrivals of A and B (the reflector's receive stamps).
    pub arrival_gap_us: Option<f64>,
    /// d' - d: the delay the large packet added to B. Absent when A or B was lost.
    pub queuing_delay_us: Option<f64>,
    /// False when A's or B's reply never came back (within the timeout).
    pub complete: bool,
    /// Whether the large packet's reply came back (informational).
    pub large_returned: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandwichSummary {
    pub rounds: u64,
    pub completed_rounds: u64,
    pub lost_rounds: u64,
    /// Size of the large packet actually sent (UDP payload).
    pub large_size_bytes: u32,
    /// Path MTU the kernel reported towards the target.
    pub path_mtu_bytes: u32,
    /// Distribution of d' - d over completed rounds.
    pub queuing_delay_us: Option<Distribution>,
    /// Distribution of the measured send gaps d.
    pub sent_gap_us: Option<Distribution>,
}

/// The whole result of `vantage sandwich --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandwichResult {
    /// Always `"sandwich"`.
    pub test: String,
    pub tool: String,
    pub spec: SandwichSpec,
    pub target_addr: String,
    pub start_time: chrono::DateTime<chrono::Utc>,
    pub end_time: chrono::DateTime<chrono::Utc>,
    pub timestamping: Timestamping,
    pub summary: SandwichSummary,
    pub rounds: Vec<SandwichRound>,
}
