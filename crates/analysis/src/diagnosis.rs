//! Diagnosis: which suspect, which segment, which direction — from the `diagnose`
//! bundles a path's measurement points ran end to end and segment by segment, and
//! from its traces. Pure: the server gathers the observations, this weighs them.
//!
//! Methods: pathdiag's section-by-section testing and its target-driven budgets
//! (Mathis et al., PAM 2008); the loss-limited TCP rate MSS / RTT · √(3/2p) (Mathis et
//! al., CCR 1997); the three intertwined causes of the PTaaS study — a half-duplex
//! port (loss one way, rising with load), a CPU-bound VPN router, a 64 KB receive
//! window (Bazan-Antequera et al.); the kernel's own account of what limited a TCP
//! sender (`TCP_INFO`); RTT under load against idle, graded as the Waveform
//! bufferbloat test does.
//!
//! Every suspect carries the evidence for it and against it, each with a weight;
//! its confidence is Σ for / (Σ for + Σ against + [`DOUBT`]). No single rule decides.

use std::collections::BTreeMap;

use vantage_model::diagnosis::{
    Cause, DiagnoseRequest, Diagnosis, DiagnosticDirection, DiagnosticResult, Evidence,
    PathDirection, Suspect, TargetAssessment, TestRun, Verdict,
};
use vantage_model::throughput::{LimitedBy, ThroughputResult};
use vantage_model::trace::{compare_paths, TraceResult};

/// Weight every confidence is discounted by: one weak fact alone stays unsure.
pub const DOUBT: f64 = 0.25;
/// A suspect this confident makes the path degraded.
pub const DEGRADED_CONFIDENCE: f64 = 0.5;
/// Suspects less confident than this are left out of the answer.
pub const LISTED_CONFIDENCE: f64 = 0.2;
/// A direction's TCP rate below this share of the reference falls short.
pub const SHORTFALL_SHARE: f64 = 0.8;
/// A segment below this share of the best segment is a bottleneck.
pub const BOTTLENECK_SHARE: f64 = 0.5;
/// Loss that counts: at least this ratio, and at least two probes.
pub const LOSS_RATIO: f64 = 0.01;
/// Ethernet's MTU: what a path without tunnels carries.
pub const ETHERNET_MTU_BYTES: u32 = 1500;
/// IPv4 + TCP headers with timestamps, and an Ethernet header.
const TCP_OVERHEAD_BYTES: f64 = 52.0;
const ETHERNET_HEADER_BYTES: f64 = 14.0;
/// IPv4 + UDP headers.
const UDP_OVERHEAD_BYTES: f64 = 28.0;
/// √(3/2): the constant of the loss-limited TCP rate (Mathis et al., 1997).
const MATHIS_C: f64 = 1.224_744_871;
/// Increase of the median RTT under load (ms) at which each bufferbloat grade ends
/// (Waveform's grades: A+, A, B, C, D; beyond is F).
const BLOAT_GRADES_MS: [(f64, &str); 5] = [
    (5.0, "A+"),
    (30.0, "A"),
    (60.0, "B"),
    (200.0, "C"),
    (400.0, "D"),
];

/// One `diagnose` run between two measurement points on the path.
#[derive(Debug, Clone)]
pub struct SegmentObservation {
    /// Nearer the source.
    pub from: String,
    pub to: String,
    pub end_to_end: bool,
    pub run_id: Option<String>,
    pub result: DiagnosticResult,
}

/// A trace with the run it came from.
#[derive(Debug, Clone)]
pub struct Traced {
    pub run_id: String,
    pub result: TraceResult,
}

/// Everything a diagnosis weighs.
#[derive(Debug, Clone)]
pub struct Observations {
    pub request: DiagnoseRequest,
    /// Measurement points the path crosses, source first.
    pub path: Vec<String>,
    pub segments: Vec<SegmentObservation>,
    pub trace: Option<Traced>,
    /// The newest earlier trace of the same pair, for path changes.
    pub previous_trace: Option<Traced>,
    /// Which agent answers at which address (trace hops to measurement points).
    pub agent_addresses: BTreeMap<String, String>,
    pub tests_run: Vec<TestRun>,
}

/// One direction of one segment.
struct Leg<'a> {
    segment: &'a SegmentObservation,
    direction: PathDirection,
    checks: &'a DiagnosticDirection,
}

impl Leg<'_> {
    fn sender(&self) -> &str {
        match self.direction {
            PathDirection::Reverse => &self.segment.to,
            _ => &self.segment.from,
        }
    }

    fn receiver(&self) -> &str {
        match self.direction {
            PathDirection::Reverse => &self.segment.from,
            _ => &self.segment.to,
        }
    }

    fn name(&self) -> String {
        format!("{}→{}", self.sender(), self.receiver())
    }

    fn segment_name(&self) -> String {
        segment_name(&self.segment.from, &self.segment.to)
    }

    fn tcp(&self) -> Option<&ThroughputResult> {
        self.checks.tcp.as_ref()
    }

    fn tcp_bps(&self) -> Option<f64> {
        self.tcp().map(|tcp| tcp.summary.received_bps)
    }

    fn path_mtu(&self) -> Option<u32> {
        self.tcp()
            .and_then(|tcp| tcp.summary.tcp)
            .and_then(|t| t.path_mtu_bytes)
    }

    /// Idle probes lost this way, and sent.
    fn idle_loss(&self) -> Option<(u64, u64)> {
        let idle = self.segment.result.idle.as_ref()?;
        let lost = match self.direction {
            PathDirection::Reverse => idle.reverse_lost,
            _ => idle.forward_lost,
        };
        Some((lost, idle.sent))
    }

    /// Idle probes lost the other way (where this direction's ACKs go), and sent.
    fn ack_path_loss(&self) -> Option<(u64, u64)> {
        let idle = self.segment.result.idle.as_ref()?;
        let lost = match self.direction {
            PathDirection::Reverse => idle.forward_lost,
            _ => idle.reverse_lost,
        };
        Some((lost, idle.sent))
    }

    /// Probes lost this way while this direction's TCP transfer ran, and sent.
    fn loaded_loss(&self) -> Option<(u64, u64)> {
        let loaded = self.checks.loaded.as_ref()?;
        let lost = match self.direction {
            PathDirection::Reverse => loaded.reverse_lost,
            _ => loaded.forward_lost,
        };
        Some((lost, loaded.sent))
    }

    fn evidence(&self, test: &str, metric: &str, value: f64, expected: String) -> Fact {
        Fact {
            test: format!("{test} {}", self.name()),
            metric: metric.to_string(),
            value,
            expected,
            run_id: self.segment.run_id.clone(),
        }
    }
}

/// A measured value before it is weighed.
struct Fact {
    test: String,
    metric: String,
    value: f64,
    expected: String,
    run_id: Option<String>,
}

impl Fact {
    fn weigh(self, supports: bool, weight: f64) -> Evidence {
        Evidence {
            test: self.test,
            metric: self.metric,
            value: self.value,
            expected: self.expected,
            run_id: self.run_id,
            supports,
            weight: weight.clamp(0.0, 1.0),
        }
    }
}

/// A suspect before merging and scoring.
struct Candidate {
    cause: Cause,
    segment: String,
    direction: PathDirection,
    evidence: Vec<Evidence>,
    fix: String,
}

fn segment_name(from: &str, to: &str) -> String {
    format!("{from} – {to}")
}

fn ratio(lost: u64, sent: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        lost as f64 / sent as f64
    }
}

fn lossy((lost, sent): (u64, u64)) -> bool {
    lost >= 2 && ratio(lost, sent) >= LOSS_RATIO
}

fn mbps(bps: f64) -> String {
    format!("{:.1} Mbit/s", bps / 1e6)
}

fn legs(observations: &Observations) -> Vec<Leg<'_>> {
    observations
        .segments
        .iter()
        .flat_map(|segment| {
            [
                (PathDirection::Forward, &segment.result.forward),
                (PathDirection::Reverse, &segment.result.reverse),
            ]
            .into_iter()
            .map(move |(direction, checks)| Leg {
                segment,
                direction,
                checks,
            })
        })
        .collect()
}

/// The legs that localise a fault: the segments' when there are any, else the end
/// to end ones (a diagnosis from one host to one endpoint).
fn localising<'a, 'b>(legs: &'b [Leg<'a>]) -> Vec<&'b Leg<'a>> {
    let segmented = legs.iter().any(|leg| !leg.segment.end_to_end);
    legs.iter()
        .filter(|leg| !(segmented && leg.segment.end_to_end))
        .collect()
}

/// The best TCP rate any leg of this path carried.
fn best_bps(legs: &[Leg<'_>]) -> Option<f64> {
    legs.iter()
        .filter_map(Leg::tcp_bps)
        .fold(None, |best: Option<f64>, bps| {
            Some(best.map_or(bps, |b| b.max(bps)))
        })
}

fn falls_short(leg: &Leg<'_>, reference_bps: Option<f64>) -> bool {
    match (leg.tcp_bps(), reference_bps) {
        (Some(bps), Some(reference)) => bps < SHORTFALL_SHARE * reference,
        _ => false,
    }
}

/// A host limit counts only where the leg fell short of what the path should carry:
/// one that binds once the line is full anyway costs nothing. For with
/// `weight_if_short`, else against with full weight.
fn shortfall(leg: &Leg<'_>, reference_bps: Option<f64>, weight_if_short: f64) -> Evidence {
    let bps = leg.tcp_bps().unwrap_or(0.0);
    let short = falls_short(leg, reference_bps);
    leg.evidence(
        "tcp",
        "received_bps",
        bps,
        format!("≥ {}", mbps(SHORTFALL_SHARE * reference_bps.unwrap_or(bps))),
    )
    .weigh(short, if short { weight_if_short } else { 1.0 })
}

/// The host whose socket buffer the kernel blamed: the receiver for the window,
/// the sender for the send buffer.
fn window_candidates(legs: &[Leg<'_>], reference_bps: Option<f64>) -> Vec<Candidate> {
    let mut found = Vec::new();
    for leg in legs {
        let Some(tcp) = leg.tcp() else { continue };
        let (cause, host, share, fix) = match tcp.limited_by {
            LimitedBy::ReceiveWindow => (
                Cause::ReceiveWindow,
                leg.receiver(),
                tcp.evidence.rwnd_limited_ratio,
                "raise the receiver's largest TCP receive buffer (net.ipv4.tcp_rmem, or the application's SO_RCVBUF) to at least twice the bandwidth-delay product",
            ),
            LimitedBy::SendBuffer => (
                Cause::SendBuffer,
                leg.sender(),
                tcp.evidence.sndbuf_limited_ratio,
                "raise the sender's largest TCP send buffer (net.ipv4.tcp_wmem, or the application's SO_SNDBUF) to at least twice the bandwidth-delay product",
            ),
            _ => continue,
        };
        let bps = tcp.summary.received_bps;
        let mut evidence = vec![leg
            .evidence(
                "tcp",
                "limited_share",
                share.unwrap_or(0.0),
                "below 0.5 of the sender's busy time".to_string(),
            )
            .weigh(true, 0.6)];
        if let (Some(window), Some(rtt_us)) = (tcp.evidence.peer_window_bytes, tcp.evidence.rtt_us)
        {
            let needed = reference_bps.unwrap_or(bps) / 8.0 * rtt_us * 1e-6;
            evidence.push(
                leg.evidence(
                    "tcp",
                    "window_bytes",
                    window,
                    format!(
                        "≥ {needed:.0} B (the bandwidth-delay product of {})",
                        mbps(reference_bps.unwrap_or(bps))
                    ),
                )
                .weigh(window < needed, 0.3),
            );
        }
        evidence.push(shortfall(leg, reference_bps, 0.5));
        found.push(Candidate {
            cause,
            segment: host.to_string(),
            direction: leg.direction,
            evidence,
            fix: fix.to_string(),
        });
    }
    found
}

/// A measuring thread that needed a whole core: at the path's ends the host itself
/// limits the application (`host_cpu`); at a measurement point in between only the
/// measurement is limited (`probe_limited`, Miravalls-Sierra et al., 2018).
fn cpu_candidates(
    observations: &Observations,
    legs: &[Leg<'_>],
    reference_bps: Option<f64>,
) -> Vec<Candidate> {
    let ends = [
        &observations.request.source,
        &observations.request.destination,
    ];
    let mut found = Vec::new();
    for leg in legs {
        let Some(tcp) = leg.tcp() else { continue };
        if tcp.limited_by != LimitedBy::Cpu {
            continue;
        }
        let sender = tcp
            .evidence
            .sender_max_thread_cpu_demand_ratio
            .unwrap_or(0.0);
        let receiver = tcp
            .evidence
            .receiver_max_thread_cpu_demand_ratio
            .unwrap_or(0.0);
        let (host, demand) = if sender >= receiver {
            (leg.sender(), sender)
        } else {
            (leg.receiver(), receiver)
        };
        let at_end = ends.iter().any(|end| end.as_str() == host);
        let (cause, fix) = if at_end {
            (Cause::HostCpu, "give the application host more CPU, or spread the transfer over cores (several streams, interrupt affinity)")
        } else {
            (Cause::ProbeLimited, "this measurement point cannot measure the segment at full rate: use a faster measurement host, or trust the segments around it")
        };
        found.push(Candidate {
            cause,
            segment: host.to_string(),
            direction: leg.direction,
            evidence: vec![
                leg.evidence(
                    "tcp",
                    "max_thread_cpu_demand_ratio",
                    demand,
                    "below 0.9 of a core".to_string(),
                )
                .weigh(true, 0.8),
                shortfall(leg, reference_bps, 0.3),
            ],
            fix: fix.to_string(),
        });
    }
    found
}

/// Loss in one direction of a segment while the other stays clean; rising with the
/// load it is a half-duplex port's signature (duplex mismatch).
fn loss_candidates(legs: &[Leg<'_>]) -> Vec<Candidate> {
    let mut found = Vec::new();
    for leg in localising(legs) {
        let Some(idle) = leg.idle_loss() else {
            continue;
        };
        let loaded = leg.loaded_loss();
        if !lossy(idle) && !loaded.is_some_and(lossy) {
            continue;
        }
        let other = legs.iter().find(|other| {
            std::ptr::eq(other.segment, leg.segment) && other.direction != leg.direction
        });
        let other_idle = other.and_then(Leg::idle_loss);
        let idle_ratio = ratio(idle.0, idle.1);
        let mut evidence = vec![leg
            .evidence(
                "idle probes",
                "loss_ratio",
                idle_ratio,
                "< 0.01".to_string(),
            )
            .weigh(lossy(idle), if lossy(idle) { 0.8 } else { 0.3 })];
        if let (Some(other), Some(other_idle)) = (other, other_idle) {
            let clean = ratio(other_idle.0, other_idle.1) < idle_ratio.max(LOSS_RATIO) / 4.0;
            evidence.push(
                other
                    .evidence(
                        "idle probes",
                        "loss_ratio",
                        ratio(other_idle.0, other_idle.1),
                        "the other direction: clean if the loss is one-way".to_string(),
                    )
                    .weigh(clean, 0.4),
            );
        }
        if let Some(loaded) = loaded {
            let rises = ratio(loaded.0, loaded.1) > 1.5 * idle_ratio && lossy(loaded);
            evidence.push(
                leg.evidence(
                    "probes under tcp",
                    "loss_ratio",
                    ratio(loaded.0, loaded.1),
                    format!(
                        "≈ {idle_ratio:.3} (the idle loss); rising with load: a half-duplex port"
                    ),
                )
                .weigh(true, if rises { 0.4 } else { 0.2 }),
            );
        }
        if let Some(tcp) = leg.tcp() {
            let retransmits = tcp.summary.retransmits.unwrap_or(0) as f64;
            evidence.push(
                leg.evidence("tcp", "retransmits", retransmits, "≈ 0".to_string())
                    .weigh(retransmits > 0.0, 0.2),
            );
        }
        found.push(Candidate {
            cause: Cause::OneWayLoss,
            segment: leg.segment_name(),
            direction: leg.direction,
            evidence,
            fix: "check the ports of this segment for a duplex mismatch (one end half duplex: loss one way that rises with load), errors and faulty optics or cabling".to_string(),
        });
    }
    found
}

/// Frame bit rates of a leg: TCP's, and its small datagrams' as sent and as received.
struct FrameRates {
    tcp_bps: f64,
    udp_sent_bps: f64,
    udp_received_bps: f64,
}

/// A bit-rate limit carries the same frame bits in small datagrams as in full TCP
/// segments, a host that spends CPU per packet far fewer, and a path that is not the
/// limit more than TCP got — when the datagrams were offered faster than TCP went.
fn frame_rates(leg: &Leg<'_>) -> Option<FrameRates> {
    // A transfer that carried nothing gives no rate to compare the datagrams with.
    let tcp_bps = leg.tcp_bps().filter(|bps| *bps > 0.0)?;
    let mtu = f64::from(leg.path_mtu().unwrap_or(ETHERNET_MTU_BYTES));
    let udp = leg.checks.small_udp.as_ref()?;
    let payload = f64::from(udp.spec.packet_size_bytes.filter(|bytes| *bytes > 0)?);
    let udp_frame =
        |bps: f64| bps * (payload + UDP_OVERHEAD_BYTES + ETHERNET_HEADER_BYTES) / payload;
    Some(FrameRates {
        tcp_bps: tcp_bps * (mtu + ETHERNET_HEADER_BYTES) / (mtu - TCP_OVERHEAD_BYTES),
        udp_sent_bps: udp_frame(udp.summary.sent_bps),
        udp_received_bps: udp_frame(udp.summary.received_bps),
    })
}

/// A segment that carries far less than the path's other segments: a rate limit
/// (shaper, policer, slower line) or a host on it that spends CPU per packet.
fn bottleneck_candidates(
    legs: &[Leg<'_>],
    best_bps: f64,
    reference_bps: Option<f64>,
) -> Vec<Candidate> {
    let mut found = Vec::new();
    for leg in localising(legs) {
        let Some(bps) = leg.tcp_bps() else { continue };
        if bps >= BOTTLENECK_SHARE * best_bps || !falls_short(leg, reference_bps) {
            continue;
        }
        let mut evidence = vec![leg
            .evidence(
                "tcp",
                "received_bps",
                bps,
                format!("≈ {} (the best segment)", mbps(best_bps)),
            )
            .weigh(true, 0.5)];
        if let Some(tcp) = leg.tcp() {
            if matches!(
                tcp.limited_by,
                LimitedBy::ReceiveWindow | LimitedBy::SendBuffer | LimitedBy::Cpu
            ) {
                evidence.push(
                    leg.evidence(
                        "tcp",
                        "limited_by_host",
                        1.0,
                        "the network (congestion window)".to_string(),
                    )
                    .weigh(false, 0.8),
                );
            }
        }
        if let Some(idle) = leg.idle_loss().filter(|idle| lossy(*idle)) {
            evidence.push(
                leg.evidence(
                    "idle probes",
                    "loss_ratio",
                    ratio(idle.0, idle.1),
                    "< 0.01: a limit does not lose packets at low load".to_string(),
                )
                .weigh(false, 0.8),
            );
        }
        if let Some(acks) = leg.ack_path_loss().filter(|acks| lossy(*acks)) {
            evidence.push(
                leg.evidence(
                    "idle probes",
                    "ack_path_loss_ratio",
                    ratio(acks.0, acks.1),
                    "< 0.01: TCP also slows when its ACKs are lost".to_string(),
                )
                .weigh(false, 0.6),
            );
        }
        let mut cause = Cause::RateLimit;
        if let Some(rates) = frame_rates(leg) {
            let share = rates.udp_received_bps / rates.tcp_bps;
            let offered_share = rates.udp_sent_bps / rates.tcp_bps;
            let all_crossed = rates.udp_received_bps >= 0.9 * rates.udp_sent_bps;
            let fact = leg.evidence(
                "small udp",
                "frame_rate_share",
                share,
                "≈ 1 under a bit-rate limit; far below 1 when a host spends CPU per packet; above 1.3 when the segment is not the limit".to_string(),
            );
            if share > 1.3 {
                evidence.push(fact.weigh(false, 0.8));
            } else if all_crossed || offered_share < 1.2 {
                // Offered no faster than TCP went, or all of it crossed: no test of a limit.
            } else if share < 0.7 {
                cause = Cause::HostCpu;
                evidence.push(fact.weigh(true, 0.8));
            } else {
                evidence.push(fact.weigh(true, 0.6));
            }
        }
        let fix = if cause == Cause::HostCpu {
            "a host on this segment forwards too few packets per second (a software VPN router or firewall encrypting every packet): give it CPU or crypto offload, or bypass it".to_string()
        } else {
            format!(
                "this segment carries {} where the others carry {}: look for a shaper or policer, a slower or negotiated-down line, or a contract below the path's rate",
                mbps(bps),
                mbps(best_bps)
            )
        };
        found.push(Candidate {
            cause,
            segment: leg.segment_name(),
            direction: leg.direction,
            evidence,
            fix,
        });
    }
    found
}

/// A path MTU below the rest of the path's (a tunnel's encapsulation), or a
/// segment where full-sized TCP segments do not cross at all (an MTU black hole).
fn mtu_candidates(legs: &[Leg<'_>], reference_bps: Option<f64>) -> Vec<Candidate> {
    let expected = legs
        .iter()
        .filter_map(Leg::path_mtu)
        .fold(ETHERNET_MTU_BYTES, u32::max);
    let mut found = Vec::new();
    for leg in localising(legs) {
        // A black hole drops large packets only: small probes cross cleanly both ways.
        let probes_pass = leg.idle_loss().is_some_and(|loss| !lossy(loss))
            && leg.ack_path_loss().is_some_and(|loss| !lossy(loss));
        if let (Some(bps), Some(reference), true) = (leg.tcp_bps(), reference_bps, probes_pass) {
            if bps < 0.01 * reference {
                found.push(Candidate {
                    cause: Cause::Mtu,
                    segment: leg.segment_name(),
                    direction: leg.direction,
                    evidence: vec![
                        leg.evidence("tcp", "received_bps", bps, format!("≥ {}", mbps(SHORTFALL_SHARE * reference)))
                            .weigh(true, 0.6),
                        leg.evidence("idle probes", "answered_ratio", 1.0, "small packets cross: only large ones are lost".to_string())
                            .weigh(true, 0.4),
                    ],
                    fix: "full-sized packets are lost without an ICMP 'fragmentation needed' (a path MTU black hole): let ICMP type 3 code 4 through, clamp the TCP MSS at the tunnel, or lower the MTU at the ends".to_string(),
                });
                continue;
            }
        }
        let Some(mtu) = leg.path_mtu() else { continue };
        if mtu >= expected {
            continue;
        }
        let overhead = 1.0
            - (f64::from(mtu) - TCP_OVERHEAD_BYTES) / (f64::from(expected) - TCP_OVERHEAD_BYTES);
        found.push(Candidate {
            cause: Cause::TunnelOverhead,
            segment: leg.segment_name(),
            direction: leg.direction,
            evidence: vec![
                leg.evidence("tcp", "path_mtu_bytes", f64::from(mtu), format!("{expected} B like the rest of the path"))
                    .weigh(true, 0.7),
                leg.evidence("tcp", "payload_lost_ratio", overhead, "0: every packet carries a full payload".to_string())
                    .weigh(true, 0.3),
            ],
            fix: format!(
                "a tunnel or encapsulation on this segment leaves an MTU of {mtu} B: each packet carries {:.1} % less payload; raise the underlay's MTU (jumbo frames) so the tunnel carries {expected} B, or use an encapsulation with less overhead",
                overhead * 100.0
            ),
        });
    }
    found
}

fn bloat_grade(increase_ms: f64) -> &'static str {
    BLOAT_GRADES_MS
        .iter()
        .find(|(limit, _)| increase_ms < *limit)
        .map_or("F", |(_, grade)| grade)
}

/// RTT under a TCP transfer against idle: a queue that fills under load.
fn bloat_candidates(legs: &[Leg<'_>]) -> Vec<Candidate> {
    let mut found = Vec::new();
    for leg in localising(legs) {
        let idle = leg
            .segment
            .result
            .idle
            .as_ref()
            .and_then(|s| s.rtt_us.as_ref());
        let loaded = leg.checks.loaded.as_ref().and_then(|s| s.rtt_us.as_ref());
        let (Some(idle), Some(loaded)) = (idle, loaded) else {
            continue;
        };
        let increase_ms = (loaded.median - idle.median) / 1e3;
        let grade = bloat_grade(increase_ms);
        if increase_ms < BLOAT_GRADES_MS[1].0 {
            continue;
        }
        found.push(Candidate {
            cause: Cause::Bufferbloat,
            segment: leg.segment_name(),
            direction: leg.direction,
            evidence: vec![leg
                .evidence(
                    "probes under tcp",
                    "rtt_increase_ms",
                    increase_ms,
                    format!("< 5 ms (grade A+); measured grade {grade}"),
                )
                .weigh(true, (increase_ms / 200.0).min(0.9))],
            fix: format!(
                "a queue on this segment holds {increase_ms:.0} ms under load (bufferbloat grade {grade}): enable an AQM (fq_codel, CAKE) at the bottleneck or shrink its buffer"
            ),
        });
    }
    found
}

/// The agent nearest before and after a TTL on the traced path.
fn around(
    trace: &TraceResult,
    ttl: u8,
    agents: &BTreeMap<String, String>,
    observations: &Observations,
) -> (String, String) {
    let agent_at = |hop: &vantage_model::trace::TraceHop| {
        hop.addresses
            .iter()
            .find_map(|address| agents.get(address).cloned())
    };
    let before = trace
        .hops
        .iter()
        .filter(|hop| hop.ttl < ttl)
        .filter_map(agent_at)
        .next_back()
        .unwrap_or_else(|| observations.request.source.clone());
    let after = trace
        .hops
        .iter()
        .filter(|hop| hop.ttl >= ttl)
        .find_map(agent_at)
        .unwrap_or_else(|| observations.request.destination.clone());
    (before, after)
}

/// A route that changed since the newest earlier trace of the pair.
fn path_change_candidates(observations: &Observations) -> Vec<Candidate> {
    let (Some(current), Some(previous)) = (&observations.trace, &observations.previous_trace)
    else {
        return Vec::new();
    };
    let comparison = compare_paths(&previous.result, &current.result);
    if !comparison.changed {
        return Vec::new();
    }
    let ttl = comparison.first_difference_ttl.unwrap_or(1);
    let (before, after) = around(
        &current.result,
        ttl,
        &observations.agent_addresses,
        observations,
    );
    let hops = |trace: &TraceResult| f64::from(trace.destination_ttl().unwrap_or(trace.hop_count));
    let mut evidence = vec![
        Fact {
            test: "trace".to_string(),
            metric: "hop_count".to_string(),
            value: hops(&current.result),
            expected: format!(
                "{} as on the earlier trace (run {})",
                hops(&previous.result),
                previous.run_id
            ),
            run_id: Some(current.run_id.clone()),
        }
        .weigh(hops(&current.result) != hops(&previous.result), 0.5),
        Fact {
            test: "trace".to_string(),
            metric: "hops_added".to_string(),
            value: comparison.added.len() as f64,
            expected: format!("0 (added: {})", comparison.added.join(", ")),
            run_id: Some(current.run_id.clone()),
        }
        .weigh(!comparison.added.is_empty(), 0.5),
    ];
    let rtt_at = |trace: &TraceResult| {
        trace
            .hops
            .iter()
            .filter(|hop| hop.ttl >= ttl)
            .find_map(|hop| hop.rtt_us.as_ref().map(|d| d.median))
    };
    if let (Some(now), Some(then)) = (rtt_at(&current.result), rtt_at(&previous.result)) {
        evidence.push(
            Fact {
                test: "trace".to_string(),
                metric: "rtt_us_at_first_difference".to_string(),
                value: now,
                expected: format!("≈ {then:.0} µs as before"),
                run_id: Some(current.run_id.clone()),
            }
            .weigh(now > then + 500.0, 0.3),
        );
    }
    vec![Candidate {
        cause: Cause::PathChange,
        segment: segment_name(&before, &after),
        direction: PathDirection::Forward,
        evidence,
        fix: "the route between these measurement points changed: check routing (IGP costs, BGP) for the new hop; it adds delay even when it carries the rate".to_string(),
    }]
}

fn confidence(evidence: &[Evidence]) -> f64 {
    let (support, against) = evidence.iter().fold((0.0, 0.0), |(s, a), e| {
        if e.supports {
            (s + e.weight, a)
        } else {
            (s, a + e.weight)
        }
    });
    support / (support + against + DOUBT)
}

/// One suspect per cause and segment: both directions merge into `both`.
fn merge(candidates: Vec<Candidate>) -> Vec<Suspect> {
    let mut merged: BTreeMap<(Cause, String), Candidate> = BTreeMap::new();
    for mut candidate in candidates {
        // A ratio over nothing is no measurement (JSON would carry it as null).
        candidate
            .evidence
            .retain(|evidence| evidence.value.is_finite());
        match merged.get_mut(&(candidate.cause, candidate.segment.clone())) {
            Some(existing) => {
                if existing.direction != candidate.direction {
                    existing.direction = PathDirection::Both;
                }
                existing.evidence.extend(candidate.evidence);
            }
            None => {
                merged.insert((candidate.cause, candidate.segment.clone()), candidate);
            }
        }
    }
    let mut suspects: Vec<Suspect> = merged
        .into_values()
        .map(|candidate| {
            // Directions folded together weigh like one: scores stay comparable.
            let confidence = confidence(&candidate.evidence);
            Suspect {
                cause: candidate.cause,
                segment: candidate.segment,
                direction: candidate.direction,
                confidence,
                evidence: candidate.evidence,
                fix: candidate.fix,
            }
        })
        .filter(|suspect| suspect.confidence >= LISTED_CONFIDENCE)
        .collect();
    suspects.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    suspects
}

/// The stated target against the end-to-end measurement, and what it needs of TCP:
/// window = rate × RTT; the largest loss ratio that still allows the rate,
/// p = (C · MSS / (RTT · rate))² (Mathis et al., 1997).
fn assess_target(observations: &Observations) -> TargetAssessment {
    let request = &observations.request;
    let end_to_end = observations.segments.iter().find(|s| s.end_to_end);
    let rate = |checks: &DiagnosticDirection| checks.tcp.as_ref().map(|t| t.summary.received_bps);
    let forward_bps = end_to_end.and_then(|s| rate(&s.result.forward));
    let reverse_bps = end_to_end.and_then(|s| rate(&s.result.reverse));
    let rtt_us = end_to_end
        .and_then(|s| s.result.idle.as_ref())
        .and_then(|idle| idle.rtt_us.as_ref())
        .map(|rtt| rtt.median);
    let mut needs = BTreeMap::new();
    if let Some(target_bps) = request.target_rate_bps.map(|r| r as f64) {
        let rtt_s = request
            .target_rtt_us
            .map(|r| r as f64)
            .or(rtt_us)
            .map(|us| us * 1e-6);
        if let Some(rtt_s) = rtt_s.filter(|rtt| *rtt > 0.0) {
            needs.insert("window_bytes".to_string(), target_bps / 8.0 * rtt_s);
            let mss_bits = (f64::from(ETHERNET_MTU_BYTES) - TCP_OVERHEAD_BYTES) * 8.0;
            needs.insert(
                "max_loss_ratio".to_string(),
                (MATHIS_C * mss_bits / (rtt_s * target_bps))
                    .powi(2)
                    .min(1.0),
            );
        }
    }
    let rate_met = request
        .target_rate_bps
        .map(|target| forward_bps.is_some_and(|bps| bps >= target as f64));
    let rtt_met = request
        .target_rtt_us
        .map(|target| rtt_us.is_some_and(|rtt| rtt <= target as f64));
    let met = match (rate_met, rtt_met) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(true) && b.unwrap_or(true)),
    };
    TargetAssessment {
        source: request.source.clone(),
        destination: request.destination.clone(),
        path: observations.path.clone(),
        app: request.app.clone(),
        target_rate_bps: request.target_rate_bps,
        target_rtt_us: request.target_rtt_us,
        forward_bps,
        reverse_bps,
        rtt_us,
        met,
        needs,
    }
}

fn unreachable(observations: &Observations) -> bool {
    let Some(end_to_end) = observations.segments.iter().find(|s| s.end_to_end) else {
        return true;
    };
    let result = &end_to_end.result;
    let answered = result.idle.as_ref().is_some_and(|idle| idle.received > 0);
    !answered && result.forward.tcp.is_none() && result.reverse.tcp.is_none()
}

/// Weighs the observations: the verdict, the ranked suspects, the target.
pub fn diagnose(observations: &Observations) -> Diagnosis {
    let target = assess_target(observations);
    let tests_run = observations.tests_run.clone();
    if unreachable(observations) {
        return Diagnosis {
            verdict: Verdict::Unreachable,
            target,
            suspects: Vec::new(),
            tests_run,
        };
    }
    let legs = legs(observations);
    let best = best_bps(&legs);
    // What a healthy leg should carry: the stated target rate, else the best any leg
    // of this path carried (the segments share one kind of line).
    let reference = observations
        .request
        .target_rate_bps
        .map(|rate| rate as f64)
        .or(best);
    let mut candidates = window_candidates(&legs, reference);
    candidates.extend(cpu_candidates(observations, &legs, reference));
    candidates.extend(loss_candidates(&legs));
    candidates.extend(bottleneck_candidates(&legs, best.unwrap_or(0.0), reference));
    candidates.extend(mtu_candidates(&legs, reference));
    candidates.extend(bloat_candidates(&legs));
    candidates.extend(path_change_candidates(observations));
    let suspects = merge(candidates);
    let degraded =
        suspects.iter().any(|s| s.confidence >= DEGRADED_CONFIDENCE) || target.met == Some(false);
    Diagnosis {
        verdict: if degraded {
            Verdict::Degraded
        } else {
            Verdict::Healthy
        },
        target,
        suspects,
        tests_run,
    }
}

#[cfg(test)]
mod tests;

pub mod apps;
