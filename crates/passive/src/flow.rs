//! Flow records: packets grouped by 5-tuple, each direction counted, TCP connections
//! analysed, throughput kept per interval.

use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use crate::decode::{Packet, Transport};
use crate::tcp::TcpConnection;

/// A flow's identity regardless of direction: the two endpoints in sorted order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    transport: Transport,
    low: SocketAddr,
    high: SocketAddr,
}

/// One direction's counts.
#[derive(Debug, Default, Clone)]
pub struct DirectionCounts {
    pub packets: u64,
    pub payload_bytes: u64,
    /// Payload bytes per throughput interval, from the flow's first packet.
    pub bytes_per_interval: Vec<u64>,
    /// Segments whose payload exceeded the MSS the peer announced: the capture saw
    /// them before segmentation offload split them or after receive offload merged them.
    pub oversized_segments: u64,
    pub largest_payload: u32,
    /// First and last packet carrying payload: the span a throughput figure covers.
    pub first_payload_ns: Option<i64>,
    pub last_payload_ns: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Flow {
    pub transport: Transport,
    /// The SYN's sender for TCP (when the capture holds the SYN), else the first sender.
    pub client: SocketAddr,
    pub server: SocketAddr,
    /// Whether the client was identified by a SYN.
    pub client_by_syn: bool,
    pub first_ns: i64,
    pub last_ns: i64,
    /// [client to server, server to client].
    pub directions: [DirectionCounts; 2],
    pub tcp: Option<TcpConnection>,
    pub truncated_packets: u64,
}

/// Flows in the order their first packet appeared.
pub struct FlowTable {
    interval_ns: i64,
    max_flows: usize,
    index: FxHashMap<FlowKey, usize>,
    pub flows: Vec<Flow>,
    /// Packets not counted because the table was full.
    pub packets_beyond_flow_limit: u64,
}

/// Intervals kept per direction: a day at one second. Longer captures keep their totals
/// but stop extending the series.
const MAX_INTERVALS: usize = 86_400;

impl FlowTable {
    pub fn new(interval_ns: i64, max_flows: usize) -> Self {
        Self {
            interval_ns: interval_ns.max(1),
            max_flows,
            index: FxHashMap::default(),
            flows: Vec::new(),
            packets_beyond_flow_limit: 0,
        }
    }

    pub fn interval_ns(&self) -> i64 {
        self.interval_ns
    }

    pub fn add(&mut self, time_ns: i64, packet: &Packet) {
        let (low, high) = if packet.source <= packet.destination {
            (packet.source, packet.destination)
        } else {
            (packet.destination, packet.source)
        };
        let key = FlowKey {
            transport: packet.transport,
            low,
            high,
        };
        let index = match self.index.get(&key) {
            Some(&index) => index,
            None => {
                if self.flows.len() == self.max_flows {
                    self.packets_beyond_flow_limit += 1;
                    return;
                }
                let by_syn = packet.tcp.is_some_and(|tcp| tcp.flags.syn);
                let (client, server) = match packet.tcp {
                    // A SYN-ACK first: its receiver is the client.
                    Some(tcp) if tcp.flags.syn && tcp.flags.ack => {
                        (packet.destination, packet.source)
                    }
                    _ => (packet.source, packet.destination),
                };
                self.flows.push(Flow {
                    transport: packet.transport,
                    client,
                    server,
                    client_by_syn: by_syn,
                    first_ns: time_ns,
                    last_ns: time_ns,
                    directions: Default::default(),
                    tcp: packet.tcp.map(|_| TcpConnection::default()),
                    truncated_packets: 0,
                });
                self.index.insert(key, self.flows.len() - 1);
                self.flows.len() - 1
            }
        };
        let interval_ns = self.interval_ns;
        let flow = &mut self.flows[index];
        let side = usize::from(packet.source != flow.client);
        flow.last_ns = flow.last_ns.max(time_ns);
        if packet.truncated {
            flow.truncated_packets += 1;
        }
        let peer_mss = flow
            .tcp
            .as_ref()
            .and_then(|tcp| tcp.sides[1 - side].announced_mss);
        let counts = &mut flow.directions[side];
        counts.packets += 1;
        counts.payload_bytes += u64::from(packet.payload_len);
        counts.largest_payload = counts.largest_payload.max(packet.payload_len);
        if packet.payload_len > 0 {
            counts.first_payload_ns.get_or_insert(time_ns);
            counts.last_payload_ns = Some(time_ns);
        }
        if peer_mss.is_some_and(|mss| packet.payload_len > u32::from(mss)) {
            counts.oversized_segments += 1;
        }
        let slot = ((time_ns - flow.first_ns).max(0) / interval_ns) as usize;
        if slot < MAX_INTERVALS {
            if counts.bytes_per_interval.len() <= slot {
                counts.bytes_per_interval.resize(slot + 1, 0);
            }
            counts.bytes_per_interval[slot] += u64::from(packet.payload_len);
        }
        if let (Some(connection), Some(segment)) = (flow.tcp.as_mut(), packet.tcp.as_ref()) {
            connection.segment(side, time_ns, segment, packet.payload_len);
        }
    }
}
