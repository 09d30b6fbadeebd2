//! Passive analysis of packet captures: what the flows in a pcap or pcapng file did.
//!
//! One record per TCP or UDP flow: packets and payload bytes each way, retransmissions
//! by kind (classified as Wireshark's TCP analysis does), zero windows, the handshake
//! RTT (Miravalls-Sierra et al., 2018: `t_ACK − t_SYN` near the server,
//! `t_SYNACK − t_SYN` near the client), RTT through the flow from TCP timestamps, the
//! share of the transfer limited by the receive window, by congestion and by the
//! application, and a throughput series; and per-flow and per-port bandwidth ECDFs
//! (Bazan-Antequera et al., Narada Metrics). And a thin client's display update times
//! (VD-DUT, Alali 2019, ch. 5) from its capture ([`display`]). Pure functions over
//! bytes: no sockets.

pub mod capture;
pub mod decode;
pub mod display;
pub mod flow;
pub mod tcp;

use std::collections::BTreeMap;
use std::io::Read;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vantage_model::latency::Distribution;

use crate::decode::{Skipped, Transport};
use crate::flow::{DirectionCounts, Flow, FlowTable};

#[derive(Debug, thiserror::Error)]
pub enum PassiveError {
    #[error("{0}")]
    Format(String),
    #[error("reading the capture: {0}")]
    Io(#[from] std::io::Error),
}

/// Where the capture was taken, relative to a TCP connection's ends (declared with the
/// `capture` test kind, whose spec names it).
pub use vantage_model::kinds::capture::CaptureSide;

#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Throughput series interval.
    pub interval_ns: i64,
    /// The capture side when known; detected per connection from its handshake otherwise.
    pub side: Option<CaptureSide>,
    /// Flows kept; packets of further flows are counted as beyond the limit.
    pub max_flows: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            interval_ns: 1_000_000_000,
            side: None,
            max_flows: 1_000_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureReport {
    pub capture: CaptureSummary,
    pub flows: Vec<FlowRecord>,
    pub bandwidth_ecdf: BandwidthEcdf,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CaptureSummary {
    /// `pcap` or `pcapng`.
    pub format: String,
    pub frames: u64,
    /// Frames decoded as TCP or UDP.
    pub packets: u64,
    pub skipped: SkippedFrames,
    pub snaplen: Option<u32>,
    /// Frames the snapshot length cut short. Their payload is counted from the IP
    /// header's length; what lay beyond the cut (TCP options included) is not read.
    pub truncated_frames: u64,
    /// Drops the capturing interface reported (pcapng statistics); `null` when the file
    /// does not say (a pcap file never does).
    pub dropped_by_interface: Option<u64>,
    /// TCP segments larger than the MSS their receiver announced: captured above
    /// segmentation or receive offload (TSO/GRO), so packet counts are of super-segments.
    pub oversized_segments: u64,
    pub start_time: Option<String>,
    pub duration_s: f64,
    pub packets_beyond_flow_limit: u64,
    /// What limits the figures, in words; empty for a clean capture.
    pub quality: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SkippedFrames {
    pub not_ip: u64,
    pub not_tcp_or_udp: u64,
    pub fragments: u64,
    pub header_truncated: u64,
    pub malformed: u64,
    pub unknown_link_type: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowRecord {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// ADDR:PORT of the SYN's sender (TCP) or of the first sender.
    pub client: String,
    pub server: String,
    /// `syn` when the capture holds the connection's SYN, `first_packet` otherwise.
    pub client_identified_by: String,
    pub start_time: String,
    pub duration_s: f64,
    pub client_to_server: DirectionRecord,
    pub server_to_client: DirectionRecord,
    /// Handshake RTT by the capture side's formula; `null` without a complete handshake.
    pub handshake_rtt_us: Option<f64>,
    pub handshake: Option<HandshakeTimes>,
    /// The side the handshake RTT assumed, and whether it was given or detected.
    pub capture_side: Option<CaptureSide>,
    pub capture_side_source: Option<String>,
    /// RTT through the flow from TCP timestamps (passive ping).
    pub timestamp_rtt: Option<TimestampRtt>,
    /// Which direction carried the data (`client_to_server` or `server_to_client`).
    pub data_direction: Option<String>,
    /// Shares of the data sender's active time limited by each cause; sums to 1.
    pub limited_by_share: Option<LimitedByShare>,
    pub throughput_series: ThroughputSeries,
    pub truncated_packets: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DirectionRecord {
    pub packets: u64,
    pub payload_bytes: u64,
    /// Payload bits per second from the first to the last payload-carrying packet;
    /// `null` with fewer than two such packets.
    pub throughput_bps: Option<f64>,
    /// Retransmissions as Wireshark's `tcp.analysis.retransmission` counts them.
    pub retransmits: u64,
    pub retransmits_by_kind: RetransmitsByKind,
    /// Segments below the highest sequence sent that were reordered, not resent.
    pub out_of_order: u64,
    pub zero_windows: u64,
    pub oversized_segments: u64,
    pub largest_payload_bytes: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RetransmitsByKind {
    pub plain: u64,
    pub fast: u64,
    pub spurious: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandshakeTimes {
    pub syn_to_syn_ack_us: f64,
    pub syn_ack_to_ack_us: f64,
    pub syn_to_ack_us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimestampRtt {
    /// Capture point to the server and back.
    pub to_server_us: Option<Distribution>,
    pub to_server_samples: usize,
    /// Capture point to the client and back.
    pub to_client_us: Option<Distribution>,
    pub to_client_samples: usize,
    /// The two medians added: the end-to-end RTT.
    pub path_median_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LimitedByShare {
    pub receive_window: f64,
    pub congestion: f64,
    pub application: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThroughputSeries {
    pub interval_s: f64,
    pub client_to_server_bps: Vec<f64>,
    pub server_to_client_bps: Vec<f64>,
}

/// Per-interval bandwidth distributions, as the Narada Metrics study plots per stream
/// (Bazan-Antequera et al., Fig. 3): percentiles 0, 5, …, 100 of the interval rates.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BandwidthEcdf {
    pub percentiles: Vec<f64>,
    pub per_flow: Vec<EcdfRow>,
    pub per_port: Vec<EcdfRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EcdfRow {
    /// The flow's `client -> server`, or the server port with its protocol (`tcp/5201`).
    pub key: String,
    pub intervals: u64,
    pub rates_bps: Vec<f64>,
}

/// A capture's flows added up, for a summary line and the archive's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowTotals {
    pub flows: u64,
    pub tcp_flows: u64,
    pub udp_flows: u64,
    /// Payload bytes, both ways.
    pub payload_bytes: u64,
    /// TCP retransmissions, both ways.
    pub retransmits: u64,
}

impl CaptureReport {
    pub fn totals(&self) -> FlowTotals {
        self.flows
            .iter()
            .fold(FlowTotals::default(), |mut totals, flow| {
                totals.flows += 1;
                if flow.protocol == "tcp" {
                    totals.tcp_flows += 1;
                } else {
                    totals.udp_flows += 1;
                }
                for direction in [&flow.client_to_server, &flow.server_to_client] {
                    totals.payload_bytes += direction.payload_bytes;
                    totals.retransmits += direction.retransmits;
                }
                totals
            })
    }
}

/// Reads a capture and analyses every flow in it.
pub fn analyse<R: Read + Send>(input: R, options: &Options) -> Result<CaptureReport, PassiveError> {
    let mut table = FlowTable::new(options.interval_ns, options.max_flows);
    let mut summary = CaptureSummary::default();
    let mut first_ns: Option<i64> = None;
    let mut last_ns = 0i64;
    let facts = capture::read_frames(input, |frame| {
        summary.frames += 1;
        first_ns.get_or_insert(frame.time_ns);
        last_ns = last_ns.max(frame.time_ns);
        if (frame.data.len() as u64) < u64::from(frame.original_len) {
            summary.truncated_frames += 1;
        }
        match decode::decode(frame.link_type, frame.data, frame.original_len) {
            Ok(packet) => {
                summary.packets += 1;
                table.add(frame.time_ns, &packet);
            }
            Err(reason) => {
                let skipped = &mut summary.skipped;
                match reason {
                    Skipped::NotIp => skipped.not_ip += 1,
                    Skipped::NotTcpOrUdp => skipped.not_tcp_or_udp += 1,
                    Skipped::Fragment => skipped.fragments += 1,
                    Skipped::HeaderTruncated => skipped.header_truncated += 1,
                    Skipped::Malformed => skipped.malformed += 1,
                    Skipped::UnknownLinkType => skipped.unknown_link_type += 1,
                }
            }
        }
        Ok(())
    })?;
    summary.format = facts.format.to_string();
    summary.snaplen = facts.snaplen;
    summary.dropped_by_interface = facts.dropped_by_interface;
    summary.start_time = first_ns.map(format_time);
    summary.duration_s = first_ns.map_or(0.0, |first| (last_ns - first) as f64 / 1e9);
    summary.packets_beyond_flow_limit = table.packets_beyond_flow_limit;
    let interval_s = table.interval_ns() as f64 / 1e9;
    let flows: Vec<FlowRecord> = table
        .flows
        .iter()
        .map(|flow| flow_record(flow, interval_s, options.side))
        .collect();
    summary.oversized_segments = flows
        .iter()
        .map(|flow| {
            flow.client_to_server.oversized_segments + flow.server_to_client.oversized_segments
        })
        .sum();
    summary.quality = quality_notes(&summary);
    let bandwidth_ecdf = bandwidth_ecdf(&table.flows, &flows, table.interval_ns());
    Ok(CaptureReport {
        capture: summary,
        flows,
        bandwidth_ecdf,
    })
}

fn quality_notes(summary: &CaptureSummary) -> Vec<String> {
    let mut notes = Vec::new();
    if summary.truncated_frames > 0 {
        notes.push(format!(
            "{} frames cut by the snapshot length ({} bytes): payload counted from IP lengths",
            summary.truncated_frames,
            summary
                .snaplen
                .map_or("unknown".to_string(), |len| len.to_string())
        ));
    }
    if let Some(dropped) = summary.dropped_by_interface.filter(|&dropped| dropped > 0) {
        notes.push(format!(
            "the capturing interface dropped {dropped} packets: counts are lower bounds"
        ));
    }
    if summary.oversized_segments > 0 {
        notes.push(format!(
            "{} TCP segments exceed their receiver's MSS: captured above segmentation or \
             receive offload (TSO/GRO), so packet counts are of super-segments",
            summary.oversized_segments
        ));
    }
    if summary.skipped.header_truncated > 0 {
        notes.push(format!(
            "{} frames cut inside their transport header's first 20 bytes were not analysed",
            summary.skipped.header_truncated
        ));
    }
    if summary.packets_beyond_flow_limit > 0 {
        notes.push(format!(
            "the flow limit was reached: {} packets of further flows not analysed",
            summary.packets_beyond_flow_limit
        ));
    }
    notes
}

pub(crate) fn format_time(time_ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(time_ns)
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn flow_record(flow: &Flow, interval_s: f64, side: Option<CaptureSide>) -> FlowRecord {
    let tcp = flow.tcp.as_ref();
    let direction = |index: usize| {
        let counts = &flow.directions[index];
        let sender = tcp.map(|connection| &connection.sides[index]);
        DirectionRecord {
            packets: counts.packets,
            payload_bytes: counts.payload_bytes,
            throughput_bps: throughput_bps(counts),
            retransmits: sender.map_or(0, |state| state.retransmits()),
            retransmits_by_kind: RetransmitsByKind {
                plain: sender.map_or(0, |state| state.retransmits_plain),
                fast: sender.map_or(0, |state| state.retransmits_fast),
                spurious: sender.map_or(0, |state| state.retransmits_spurious),
            },
            out_of_order: sender.map_or(0, |state| state.out_of_order),
            zero_windows: sender.map_or(0, |state| state.zero_windows),
            oversized_segments: counts.oversized_segments,
            largest_payload_bytes: counts.largest_payload,
        }
    };
    let handshake = tcp.and_then(|connection| {
        let times = connection.handshake;
        let syn = times.syn_ns?;
        let syn_ack = times.syn_ack_ns?;
        let ack = times.ack_ns?;
        Some(HandshakeTimes {
            syn_to_syn_ack_us: (syn_ack - syn) as f64 / 1e3,
            syn_ack_to_ack_us: (ack - syn_ack) as f64 / 1e3,
            syn_to_ack_us: (ack - syn) as f64 / 1e3,
        })
    });
    // Near the server the SYN-ACK leaves right after the SYN arrives; near the client the
    // ACK leaves right after the SYN-ACK arrives.
    let (capture_side, capture_side_source) = match (&handshake, side) {
        (Some(_), Some(given)) => (Some(given), Some("given".to_string())),
        (Some(times), None) => {
            let detected = if times.syn_to_syn_ack_us < times.syn_ack_to_ack_us {
                CaptureSide::Server
            } else {
                CaptureSide::Client
            };
            (Some(detected), Some("detected".to_string()))
        }
        (None, _) => (None, None),
    };
    let handshake_rtt_us = handshake
        .as_ref()
        .zip(capture_side)
        .map(|(times, side)| match side {
            CaptureSide::Server => times.syn_to_ack_us,
            CaptureSide::Client => times.syn_to_syn_ack_us,
        });
    let timestamp_rtt = tcp.and_then(|connection| {
        let [client, server] = &connection.sides;
        if client.echo_rtt_us.is_empty() && server.echo_rtt_us.is_empty() {
            return None;
        }
        let to_server_us = vantage_stats::distribution(&client.echo_rtt_us);
        let to_client_us = vantage_stats::distribution(&server.echo_rtt_us);
        Some(TimestampRtt {
            path_median_us: to_server_us
                .as_ref()
                .zip(to_client_us.as_ref())
                .map(|(to_server, to_client)| to_server.median + to_client.median),
            to_server_samples: client.echo_rtt_us.len(),
            to_client_samples: server.echo_rtt_us.len(),
            to_server_us,
            to_client_us,
        })
    });
    let data_side = (flow.directions[1].payload_bytes > flow.directions[0].payload_bytes) as usize;
    let has_data = flow.directions[data_side].payload_bytes > 0;
    let limited_by_share = tcp.filter(|_| has_data).and_then(|connection| {
        let time = connection.limit_time(data_side);
        let total_ns = time.receive_window_ns + time.congestion_ns + time.application_ns;
        (total_ns > 0).then(|| LimitedByShare {
            receive_window: time.receive_window_ns as f64 / total_ns as f64,
            congestion: time.congestion_ns as f64 / total_ns as f64,
            application: time.application_ns as f64 / total_ns as f64,
        })
    });
    let rates = |counts: &DirectionCounts| -> Vec<f64> {
        counts
            .bytes_per_interval
            .iter()
            .map(|&bytes| bytes as f64 * 8.0 / interval_s)
            .collect()
    };
    FlowRecord {
        protocol: match flow.transport {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
        .to_string(),
        client: flow.client.to_string(),
        server: flow.server.to_string(),
        client_identified_by: if flow.client_by_syn {
            "syn"
        } else {
            "first_packet"
        }
        .to_string(),
        start_time: format_time(flow.first_ns),
        duration_s: (flow.last_ns - flow.first_ns) as f64 / 1e9,
        client_to_server: direction(0),
        server_to_client: direction(1),
        handshake_rtt_us,
        handshake,
        capture_side,
        capture_side_source,
        timestamp_rtt,
        data_direction: has_data.then(|| {
            if data_side == 0 {
                "client_to_server"
            } else {
                "server_to_client"
            }
            .to_string()
        }),
        limited_by_share,
        throughput_series: ThroughputSeries {
            interval_s,
            client_to_server_bps: rates(&flow.directions[0]),
            server_to_client_bps: rates(&flow.directions[1]),
        },
        truncated_packets: flow.truncated_packets,
    }
}

fn throughput_bps(counts: &DirectionCounts) -> Option<f64> {
    let span_ns = counts.last_payload_ns? - counts.first_payload_ns?;
    (span_ns > 0).then(|| counts.payload_bytes as f64 * 8.0 / (span_ns as f64 / 1e9))
}

const ECDF_PERCENTILES: [f64; 21] = [
    0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 65.0, 70.0, 75.0,
    80.0, 85.0, 90.0, 95.0, 100.0,
];

/// The ECDF percentiles of `rates` and `zeros` more intervals of rate 0, by the
/// definition of `vantage_stats::percentile` (Hyndman and Fan's type 7), without
/// materialising the zeros: a port's flows can lie years apart in one capture.
fn percentile_rates(mut rates: Vec<f64>, zeros: u64) -> Vec<f64> {
    rates.sort_by(f64::total_cmp);
    let count = rates.len() as u64 + zeros;
    if count == 0 {
        return Vec::new();
    }
    // Rates are never negative, so the zeros come first in sorted order.
    let value = |rank: u64| {
        if rank < zeros {
            0.0
        } else {
            rates[(rank - zeros) as usize]
        }
    };
    ECDF_PERCENTILES
        .iter()
        .map(|&percent| {
            let rank = (count - 1) as f64 * percent / 100.0;
            let lower = rank.floor() as u64;
            let upper = (lower + 1).min(count - 1);
            let (low, high) = (value(lower), value(upper));
            (low + (rank - lower as f64) * (high - low)).clamp(low, high)
        })
        .collect()
}

/// Interval rates of both directions added, per flow and per server port (a port's
/// flows added interval by interval on the capture's clock).
fn bandwidth_ecdf(flows: &[Flow], records: &[FlowRecord], interval_ns: i64) -> BandwidthEcdf {
    let interval_s = interval_ns as f64 / 1e9;
    let capture_start_ns = flows.iter().map(|flow| flow.first_ns).min().unwrap_or(0);
    let mut per_port: BTreeMap<(Transport, u16), FxHashMap<i64, u64>> = BTreeMap::new();
    let mut per_flow = Vec::with_capacity(flows.len());
    for (flow, record) in flows.iter().zip(records) {
        let [forward, reverse] = &flow.directions;
        let length = forward
            .bytes_per_interval
            .len()
            .max(reverse.bytes_per_interval.len());
        let totals: Vec<u64> = (0..length)
            .map(|slot| {
                forward.bytes_per_interval.get(slot).copied().unwrap_or(0)
                    + reverse.bytes_per_interval.get(slot).copied().unwrap_or(0)
            })
            .collect();
        let port = per_port
            .entry((flow.transport, flow.server.port()))
            .or_default();
        let offset = (flow.first_ns - capture_start_ns) / interval_ns;
        for (slot, &bytes) in totals.iter().enumerate() {
            *port.entry(offset + slot as i64).or_default() += bytes;
        }
        per_flow.push(EcdfRow {
            key: format!("{} {} -> {}", record.protocol, record.client, record.server),
            intervals: totals.len() as u64,
            rates_bps: percentile_rates(
                totals
                    .iter()
                    .map(|&bytes| bytes as f64 * 8.0 / interval_s)
                    .collect(),
                0,
            ),
        });
    }
    let per_port = per_port
        .into_iter()
        .map(|((transport, port), slots)| {
            let first = slots.keys().min().copied().unwrap_or(0);
            let last = slots.keys().max().copied().unwrap_or(0);
            // Intervals inside the port's span with no traffic count as zero rate.
            let span = (last - first) as u64 + 1;
            let silent = span - slots.len() as u64;
            let rates: Vec<f64> = slots
                .values()
                .map(|&bytes| bytes as f64 * 8.0 / interval_s)
                .collect();
            let protocol = match transport {
                Transport::Tcp => "tcp",
                Transport::Udp => "udp",
            };
            EcdfRow {
                key: format!("{protocol}/{port}"),
                intervals: span,
                rates_bps: percentile_rates(rates, silent),
            }
        })
        .collect();
    BandwidthEcdf {
        percentiles: ECDF_PERCENTILES.to_vec(),
        per_flow,
        per_port,
    }
}
