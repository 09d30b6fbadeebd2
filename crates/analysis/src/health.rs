//! The network health system of Chard, Bubendorfer and Ng ("Network health and
//! e-Science in commercial clouds", FGCS 2015): indicators (the `health` bundle's
//! result) → markers (binary alerts against the previous rounds) and metrics
//! (normalised against the other peers a host probed) → the health score per pair
//! and per host, and the healthiest subset of hosts relative to a reference.
//!
//! Orientation: every metric and score here is **higher = healthier**, in [0, 1].
//! The paper's Eq. 1 grows with delay; vantage uses 1 − x for delay-like terms
//! (RTTs, connect time, sandwich delay, throughput variation) and x for the
//! throughput total. Formulas, defaults and a worked example: `docs/health.md`.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use serde::Serialize;
use vantage_model::health::{HealthResult, RttIndicator};

// ---- markers ----------------------------------------------------------------

/// The five markers of the paper, one per indicator family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// More than one indicator agrees the peer did not answer within the timeout.
    Timeout,
    Icmp,
    /// UDP RTTs against the previous round, or the sandwich delay up by half.
    Udp,
    Tcp,
    /// The throughput total fell below the long-term threshold.
    Throughput,
}

impl MarkerKind {
    pub const ALL: [MarkerKind; 5] = [
        MarkerKind::Timeout,
        MarkerKind::Icmp,
        MarkerKind::Udp,
        MarkerKind::Tcp,
        MarkerKind::Throughput,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MarkerKind::Timeout => "timeout",
            MarkerKind::Icmp => "icmp",
            MarkerKind::Udp => "udp",
            MarkerKind::Tcp => "tcp",
            MarkerKind::Throughput => "throughput",
        }
    }

    /// The derived metric the archive stores this marker's state under (0 or 1).
    pub fn metric_name(self) -> &'static str {
        match self {
            MarkerKind::Timeout => "health_marker_timeout",
            MarkerKind::Icmp => "health_marker_icmp",
            MarkerKind::Udp => "health_marker_udp",
            MarkerKind::Tcp => "health_marker_tcp",
            MarkerKind::Throughput => "health_marker_throughput",
        }
    }
}

/// One marker's verdict on a round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerVerdict {
    pub kind: MarkerKind,
    pub fired: bool,
    /// What was compared, for the alert and the API.
    pub detail: String,
}

/// Marker trigger points. The paper's values, plus floors it did not need on
/// AWS: ten probes on a quiet path can have a standard deviation of a few
/// microseconds, and a marker that fires on that noise is useless.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerSettings {
    /// Share of this round's probes beyond the previous mean + σ that fires the
    /// ICMP, UDP and TCP markers (the paper: 20 %).
    pub beyond_share: f64,
    /// The σ used is at least this many microseconds...
    pub sigma_floor_us: f64,
    /// ...and at least this fraction of the previous mean.
    pub sigma_floor_ratio: f64,
    /// Relative increase of the mean sandwich delay that fires the UDP marker (50 %).
    pub sandwich_increase: f64,
    /// The sandwich increase must also be at least this many microseconds.
    pub sandwich_floor_us: f64,
    /// The throughput marker fires below (1 − this) × the long-term median.
    pub throughput_drop: f64,
    /// How many previous rounds make the long-term throughput median.
    pub long_term_rounds: usize,
}

impl Default for MarkerSettings {
    fn default() -> Self {
        MarkerSettings {
            beyond_share: 0.2,
            sigma_floor_us: 500.0,
            sigma_floor_ratio: 0.25,
            sandwich_increase: 0.5,
            sandwich_floor_us: 500.0,
            throughput_drop: 0.25,
            long_term_rounds: 24,
        }
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Sample standard deviation (n − 1); `None` below two values.
fn stddev(values: &[f64]) -> Option<f64> {
    let m = mean(values)?;
    (values.len() >= 2).then(|| {
        (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
    })
}

/// Counts this round's probes beyond the previous round's mean + σ (σ floored);
/// an unanswered probe counts as beyond. Returns (beyond, total, what was compared).
struct Beyond {
    beyond: u64,
    total: u64,
    compared: Vec<String>,
}

impl Beyond {
    fn new() -> Beyond {
        Beyond {
            beyond: 0,
            total: 0,
            compared: Vec::new(),
        }
    }

    fn add(
        &mut self,
        label: &str,
        sent: u64,
        current: &[f64],
        previous: &[f64],
        settings: &MarkerSettings,
    ) {
        let (Some(previous_mean), Some(previous_sigma)) = (mean(previous), stddev(previous)) else {
            return;
        };
        let sigma = previous_sigma
            .max(settings.sigma_floor_us)
            .max(settings.sigma_floor_ratio * previous_mean);
        let threshold = previous_mean + sigma;
        let answered_beyond = current.iter().filter(|&&v| v > threshold).count() as u64;
        let unanswered = sent.saturating_sub(current.len() as u64);
        self.beyond += answered_beyond + unanswered;
        self.total += sent.max(current.len() as u64);
        self.compared.push(format!(
            "{label}: {} of {} beyond {threshold:.0} µs",
            answered_beyond + unanswered,
            sent.max(current.len() as u64)
        ));
    }

    fn verdict(self, kind: MarkerKind, settings: &MarkerSettings) -> Option<MarkerVerdict> {
        if self.total == 0 {
            return None;
        }
        let share = self.beyond as f64 / self.total as f64;
        Some(MarkerVerdict {
            kind,
            fired: share >= settings.beyond_share,
            detail: format!(
                "{:.0} % of probes beyond the previous mean + σ ({})",
                share * 100.0,
                self.compared.join("; ")
            ),
        })
    }
}

fn add_sizes(
    beyond: &mut Beyond,
    family: &str,
    current: &[RttIndicator],
    previous: &[RttIndicator],
    settings: &MarkerSettings,
) {
    for part in current.iter().filter(|part| part.error.is_none()) {
        if let Some(before) = previous.iter().find(|p| p.size_bytes == part.size_bytes) {
            beyond.add(
                &format!("{family} {} B", part.size_bytes),
                part.sent,
                &part.rtt_us,
                &before.rtt_us,
                settings,
            );
        }
    }
}

/// The markers of one round (`current`) of a pair against the previous round of
/// the same pair and the pair's throughput history (mean rates of earlier rounds,
/// newest first). A marker that has nothing to compare with is left out.
pub fn markers(
    current: &HealthResult,
    previous: Option<&HealthResult>,
    throughput_history_bps: &[f64],
    settings: &MarkerSettings,
) -> Vec<MarkerVerdict> {
    let mut verdicts = Vec::new();
    let timed_out = current.timed_out_indicators();
    verdicts.push(MarkerVerdict {
        kind: MarkerKind::Timeout,
        fired: timed_out.len() > 1,
        detail: if timed_out.is_empty() {
            "every indicator was answered".to_string()
        } else {
            format!(
                "no answer within {} s from: {}",
                current.timeout_us as f64 / 1e6,
                timed_out.join(", ")
            )
        },
    });
    if let Some(previous) = previous {
        let mut icmp = Beyond::new();
        add_sizes(&mut icmp, "ICMP", &current.icmp, &previous.icmp, settings);
        verdicts.extend(icmp.verdict(MarkerKind::Icmp, settings));

        let mut udp = Beyond::new();
        add_sizes(&mut udp, "UDP", &current.udp, &previous.udp, settings);
        let sandwich = match (&current.sandwich, &previous.sandwich) {
            (Some(now), Some(before)) => mean(&now.delay_us).zip(mean(&before.delay_us)),
            _ => None,
        };
        match (udp.verdict(MarkerKind::Udp, settings), sandwich) {
            (rtt, Some((now, before))) => {
                let increase = now - before;
                let sandwich_fired = increase
                    > (settings.sandwich_increase * before.abs()).max(settings.sandwich_floor_us);
                let sandwich_detail =
                    format!("sandwich delay {now:.0} µs, previous round {before:.0} µs");
                verdicts.push(match rtt {
                    Some(rtt) => MarkerVerdict {
                        kind: MarkerKind::Udp,
                        fired: rtt.fired || sandwich_fired,
                        detail: format!("{}; {sandwich_detail}", rtt.detail),
                    },
                    None => MarkerVerdict {
                        kind: MarkerKind::Udp,
                        fired: sandwich_fired,
                        detail: sandwich_detail,
                    },
                });
            }
            (Some(rtt), None) => verdicts.push(rtt),
            (None, None) => {}
        }

        if let (Some(now), Some(before)) = (&current.tcp, &previous.tcp) {
            if now.error.is_none() {
                let mut tcp = Beyond::new();
                tcp.add(
                    "TCP connect",
                    now.sent,
                    &now.connect_us,
                    &before.connect_us,
                    settings,
                );
                tcp.add("TCP RTT", now.sent, &now.rtt_us, &before.rtt_us, settings);
                verdicts.extend(tcp.verdict(MarkerKind::Tcp, settings));
            }
        }
    }
    if let Some(throughput) = &current.throughput {
        let history: Vec<f64> = throughput_history_bps
            .iter()
            .take(settings.long_term_rounds)
            .copied()
            .collect();
        if let Some(long_term) = vantage_stats::spread(&history).map(|spread| spread.median) {
            let threshold = (1.0 - settings.throughput_drop) * long_term;
            verdicts.push(MarkerVerdict {
                kind: MarkerKind::Throughput,
                fired: throughput.mean_bps < threshold,
                detail: format!(
                    "{:.1} Mbit/s against a threshold of {:.1} Mbit/s ({:.0} % of the median of {} earlier rounds)",
                    throughput.mean_bps / 1e6,
                    threshold / 1e6,
                    (1.0 - settings.throughput_drop) * 100.0,
                    history.len()
                ),
            });
        }
    }
    verdicts
}

// ---- metrics and score ------------------------------------------------------

/// Weights of H_ALL (Eq. 3); the paper's are the default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Weights {
    pub throughput: f64,
    pub icmp: f64,
    pub udp: f64,
    pub tcp: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            throughput: 0.4,
            icmp: 0.2,
            udp: 0.2,
            tcp: 0.2,
        }
    }
}

/// The four health metrics of a pair, each in [0, 1], higher = healthier; a part
/// the round did not measure (off for every peer of the host) is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Parts {
    pub icmp: Option<f64>,
    pub udp: Option<f64>,
    pub tcp: Option<f64>,
    pub throughput: Option<f64>,
}

impl Parts {
    /// H_ALL: the weighted sum over the measured parts, divided by their weights'
    /// sum (so dropping throughput leaves the other three in proportion); `None`
    /// when no part was measured.
    pub fn score(&self, weights: &Weights) -> Option<f64> {
        let terms = [
            (self.throughput, weights.throughput),
            (self.icmp, weights.icmp),
            (self.udp, weights.udp),
            (self.tcp, weights.tcp),
        ];
        let (sum, weight) = terms
            .iter()
            .filter_map(|(value, weight)| value.map(|v| (v * weight, *weight)))
            .fold((0.0, 0.0), |(s, w), (v, weight)| (s + v, w + weight));
        (weight > 0.0).then(|| sum / weight)
    }
}

/// Which way a feature is good.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Better {
    Lower,
    Higher,
}

/// The metric family a feature belongs to: one of the score's four parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    Icmp,
    Udp,
    Tcp,
    Throughput,
}

impl Family {
    const ALL: [Family; 4] = [Family::Icmp, Family::Udp, Family::Tcp, Family::Throughput];
}

/// Which feature of its family: a probe size, or a named quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    SizeBytes(u32),
    Sandwich,
    Connect,
    Rtt,
    Bytes,
    Variation,
}

/// One feature of a pair's round, as Eq. 1 normalises it.
#[derive(Debug, Clone, PartialEq)]
struct Feature {
    family: Family,
    label: Label,
    better: Better,
    /// Weight inside its family.
    weight: f64,
    /// `None` when the peer never answered this part (it then counts as the worst).
    value: Option<f64>,
}

/// What Eq. 1 needs of one round: a handful of features (means, totals, a
/// variation), a few hundred bytes where the round's document holds every probe.
/// The health matrix keeps these per pair instead of the documents.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundFeatures(Vec<Feature>);

/// Rank weights for sizes: larger probes get more influence (1, 2, 3, … over their sum).
fn size_weights(sizes: &[u32]) -> BTreeMap<u32, f64> {
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let total: f64 = (1..=sorted.len()).map(|r| r as f64).sum();
    sorted
        .into_iter()
        .enumerate()
        .map(|(rank, size)| (size, (rank + 1) as f64 / total))
        .collect()
}

fn rtt_features(family: Family, parts: &[RttIndicator], share: f64, features: &mut Vec<Feature>) {
    let sizes: Vec<u32> = parts.iter().map(|part| part.size_bytes).collect();
    let weights = size_weights(&sizes);
    for part in parts.iter().filter(|part| part.sent > 0) {
        features.push(Feature {
            family,
            label: Label::SizeBytes(part.size_bytes),
            better: Better::Lower,
            weight: share * weights[&part.size_bytes],
            value: mean(&part.rtt_us),
        });
    }
}

/// Per-second variation of a throughput test: the coefficient of variation
/// (σ / mean), so a faster path is not penalised for larger absolute swings.
fn variation(per_second_bps: &[f64]) -> Option<f64> {
    let m = mean(per_second_bps)?;
    let sigma = stddev(per_second_bps)?;
    (m > 0.0).then(|| sigma / m)
}

impl RoundFeatures {
    pub fn of(result: &HealthResult) -> RoundFeatures {
        let mut features = Vec::new();
        rtt_features(Family::Icmp, &result.icmp, 1.0, &mut features);
        let sandwich = result
            .sandwich
            .as_ref()
            .filter(|part| part.rounds > 0 && part.error.is_none());
        // The sandwich delay weighs as much as the two RTTs together.
        let rtt_share = if sandwich.is_some() { 0.5 } else { 1.0 };
        rtt_features(Family::Udp, &result.udp, rtt_share, &mut features);
        if let Some(part) = sandwich {
            features.push(Feature {
                family: Family::Udp,
                label: Label::Sandwich,
                better: Better::Lower,
                weight: 0.5,
                value: mean(&part.delay_us),
            });
        }
        if let Some(tcp) = result.tcp.as_ref().filter(|part| part.sent > 0) {
            for (label, values) in [(Label::Connect, &tcp.connect_us), (Label::Rtt, &tcp.rtt_us)] {
                features.push(Feature {
                    family: Family::Tcp,
                    label,
                    better: Better::Lower,
                    weight: 0.5,
                    value: mean(values),
                });
            }
        }
        if let Some(throughput) = &result.throughput {
            let answered = !throughput.timed_out();
            features.push(Feature {
                family: Family::Throughput,
                label: Label::Bytes,
                better: Better::Higher,
                weight: 0.5,
                value: answered.then_some(throughput.received_bytes as f64),
            });
            features.push(Feature {
                family: Family::Throughput,
                label: Label::Variation,
                better: Better::Lower,
                weight: 0.5,
                value: if answered {
                    variation(&throughput.per_second_bps)
                } else {
                    None
                },
            });
        }
        RoundFeatures(features)
    }
}

/// Eq. 1's normalisation, oriented: (v − min) / (max − min) over the host's peers,
/// then 1 − x where lower is better. A feature equal for every peer is 1 (no peer
/// did better); a peer that did not answer gets 0.
fn normalised(value: Option<f64>, min: f64, max: f64, better: Better) -> f64 {
    let Some(value) = value else {
        return 0.0;
    };
    if max - min <= f64::EPSILON * max.abs().max(1.0) {
        return 1.0;
    }
    let x = ((value - min) / (max - min)).clamp(0.0, 1.0);
    match better {
        Better::Lower => 1.0 - x,
        Better::Higher => x,
    }
}

/// Each feature's (min, max) over a host's peers.
type Ranges = Vec<((Family, Label), (f64, f64))>;

/// The (min, max) of feature `key`; rounds of one bundle list their features in the
/// same order, so the feature's own position is tried first.
fn range_of(ranges: &mut Ranges, position: usize, key: (Family, Label)) -> Option<&mut (f64, f64)> {
    let found = match ranges.get(position) {
        Some((known, _)) if *known == key => Some(position),
        _ => ranges.iter().position(|(known, _)| *known == key),
    };
    found.map(|at| &mut ranges[at].1)
}

/// The metrics of every peer one host probed in a round, normalised against each
/// other (Eq. 1 family): one `Parts` per entry of `rounds` (each peer's features),
/// in the same order.
pub fn metrics_for_host(rounds: &[&RoundFeatures]) -> Vec<Parts> {
    // Range of each (family, label) over the peers that answered it: a round has a
    // dozen features, so a short list beats a map.
    let mut ranges: Ranges = Vec::new();
    for features in rounds {
        for (position, feature) in features.0.iter().enumerate() {
            let Some(value) = feature.value else {
                continue;
            };
            let key = (feature.family, feature.label);
            match range_of(&mut ranges, position, key) {
                Some(range) => *range = (range.0.min(value), range.1.max(value)),
                None => ranges.push((key, (value, value))),
            }
        }
    }
    rounds
        .iter()
        .map(|features| {
            // (weighted sum, weight) per family, in Family::ALL order.
            let mut sums = [(0.0, 0.0); 4];
            for (position, feature) in features.0.iter().enumerate() {
                let key = (feature.family, feature.label);
                // A feature no peer answered says nothing relative; skip it.
                let Some(&mut (min, max)) = range_of(&mut ranges, position, key) else {
                    continue;
                };
                let sum = &mut sums[feature.family as usize];
                sum.0 += feature.weight * normalised(feature.value, min, max, feature.better);
                sum.1 += feature.weight;
            }
            let [icmp, udp, tcp, throughput] = Family::ALL.map(|family| {
                let (sum, weight) = sums[family as usize];
                (weight > 0.0).then(|| sum / weight)
            });
            Parts {
                icmp,
                udp,
                tcp,
                throughput,
            }
        })
        .collect()
}

// ---- the matrix ---------------------------------------------------------------

/// One pair's latest round, as the archive holds it.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub client: &'a str,
    pub server: &'a str,
    pub run_id: &'a str,
    /// When the round started (µs since the Unix epoch).
    pub start_us: i64,
    pub features: &'a RoundFeatures,
    /// Markers that fired on this round.
    pub markers: &'a [MarkerKind],
}

/// A host of the matrix, with the zone it is grouped by, if tagged.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
    pub zone: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairState {
    /// Measured recently and no marker fired on the latest round.
    Healthy,
    /// A marker fired on the latest round (a timeout makes the score 0).
    Degraded,
    /// Never measured, or the latest round is older than the age limit.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairHealth {
    pub client: String,
    pub server: String,
    /// H_ALL in [0, 1], higher = healthier; absent when unknown.
    pub score: Option<f64>,
    pub state: PairState,
    pub markers: Vec<MarkerKind>,
    pub parts: Parts,
    /// Age of the latest round at `computed_at`, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Peers the client's metrics were normalised over (1: the metrics say
    /// nothing relative, every part is 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostHealth {
    pub name: String,
    /// Mean score of the host's known pairs, both as client and as server.
    pub score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Known pairs the score averages.
    pub pairs: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matrix {
    /// Every ordered pair of hosts, sorted by client, then server.
    pub pairs: Vec<PairHealth>,
    pub hosts: Vec<HostHealth>,
}

impl Matrix {
    /// The known score of client → server, if any (`pairs` is sorted by client,
    /// then server).
    pub fn score(&self, client: &str, server: &str) -> Option<f64> {
        self.pairs
            .binary_search_by(|pair| {
                (pair.client.as_str(), pair.server.as_str()).cmp(&(client, server))
            })
            .ok()
            .and_then(|index| self.pairs[index].score)
    }
}

/// A measured pair of a [`Scored`] matrix; it borrows from the observations.
#[derive(Debug, Clone)]
pub struct ScoredPair<'a> {
    pub score: Option<f64>,
    pub state: PairState,
    pub markers: &'a [MarkerKind],
    pub parts: Parts,
    pub age_s: f64,
    pub run_id: &'a str,
    pub peers: usize,
}

/// The matrix with hosts numbered: what [`matrix`] computes before it names every
/// pair, for answers that name hosts once (at 300 hosts there are 89 700 pairs).
#[derive(Debug, Clone)]
pub struct Scored<'a> {
    /// Host names, sorted; pairs refer to them by position.
    pub names: Vec<&'a str>,
    /// Row-major, `names.len()` squared: client `c` → server `s` at `c * n + s`;
    /// `None` where unknown (and on the diagonal).
    pub cells: Vec<Option<ScoredPair<'a>>>,
    /// One per name, in the same order.
    pub hosts: Vec<HostHealth>,
}

impl Scored<'_> {
    /// Every ordered pair by name, unknown where unmeasured, sorted by client then
    /// server.
    pub fn into_matrix(self) -> Matrix {
        let n = self.names.len();
        let mut pairs = Vec::with_capacity(n * n.saturating_sub(1));
        for (position, cell) in self.cells.into_iter().enumerate() {
            let (client, server) = (position / n, position % n);
            if client == server {
                continue;
            }
            let (client, server) = (
                self.names[client].to_string(),
                self.names[server].to_string(),
            );
            pairs.push(match cell {
                Some(pair) => PairHealth {
                    client,
                    server,
                    score: pair.score,
                    state: pair.state,
                    markers: pair.markers.to_vec(),
                    parts: pair.parts,
                    age_s: Some(pair.age_s),
                    run_id: Some(pair.run_id.to_string()),
                    peers: Some(pair.peers),
                },
                None => PairHealth {
                    client,
                    server,
                    score: None,
                    state: PairState::Unknown,
                    markers: Vec::new(),
                    parts: Parts::default(),
                    age_s: None,
                    run_id: None,
                    peers: None,
                },
            });
        }
        Matrix {
            pairs,
            hosts: self.hosts,
        }
    }
}

/// The health matrix over `hosts` (every ordered pair, unknown where unmeasured)
/// from each pair's latest round; rounds that started more than `max_age_us`
/// before `now_us` are stale and count as unknown.
pub fn matrix(
    hosts: &[Host],
    observations: &[Observation<'_>],
    weights: &Weights,
    now_us: i64,
    max_age_us: i64,
) -> Matrix {
    scored(hosts, observations, weights, now_us, max_age_us).into_matrix()
}

/// Sorts `names` and numbers each observation's client and server by them; an
/// observation naming a host not in `names` is left out.
fn locate<'a, 'o>(
    names: &mut Vec<&'a str>,
    observations: &[&'o Observation<'a>],
) -> Vec<(usize, usize, &'o Observation<'a>)> {
    names.sort_unstable();
    names.dedup();
    let index: FxHashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(position, name)| (*name, position))
        .collect();
    observations
        .iter()
        .filter_map(|observation| {
            Some((
                *index.get(observation.client)?,
                *index.get(observation.server)?,
                *observation,
            ))
        })
        .collect()
}

/// [`matrix`] with hosts numbered.
pub fn scored<'a>(
    hosts: &'a [Host],
    observations: &[Observation<'a>],
    weights: &Weights,
    now_us: i64,
    max_age_us: i64,
) -> Scored<'a> {
    let fresh: Vec<&Observation<'a>> = observations
        .iter()
        .filter(|o| now_us - o.start_us <= max_age_us)
        .collect();
    let mut names: Vec<&str> = hosts.iter().map(|host| host.name.as_str()).collect();
    let mut located = locate(&mut names, &fresh);
    if located.len() < fresh.len() {
        // A pair measured by a host no longer listed still shows: number it too.
        let mut seen: FxHashSet<&str> = names.iter().copied().collect();
        for observation in &fresh {
            for name in [observation.client, observation.server] {
                if seen.insert(name) {
                    names.push(name);
                }
            }
        }
        located = locate(&mut names, &fresh);
    }
    let n = names.len();
    // Each client's latest round per server (a later observation of a pair wins).
    let mut by_client: Vec<Vec<(usize, &Observation<'a>)>> = vec![Vec::new(); n];
    for (client, server, observation) in located {
        by_client[client].push((server, observation));
    }
    for row in &mut by_client {
        // Newest listed first within a server (the sort is stable), then one per server.
        row.reverse();
        row.sort_by_key(|(server, _)| *server);
        row.dedup_by_key(|(server, _)| *server);
    }
    let mut cells: Vec<Option<ScoredPair<'a>>> = vec![None; n * n];
    // Each host's score: the mean over its known pairs, both as client and as server.
    let mut totals = vec![(0.0, 0_usize); n];
    for (client, peers) in by_client.iter().enumerate() {
        let features: Vec<&RoundFeatures> = peers.iter().map(|(_, o)| o.features).collect();
        let metrics = metrics_for_host(&features);
        for ((server, observation), parts) in peers.iter().zip(metrics) {
            let timeout = observation.markers.contains(&MarkerKind::Timeout);
            let score = if timeout {
                Some(0.0)
            } else {
                parts.score(weights)
            };
            if let Some(score) = score {
                for host in [client, *server] {
                    totals[host].0 += score;
                    totals[host].1 += 1;
                }
            }
            cells[client * n + server] = Some(ScoredPair {
                score,
                state: if observation.markers.is_empty() && score.is_some() {
                    PairState::Healthy
                } else {
                    PairState::Degraded
                },
                markers: observation.markers,
                parts,
                age_s: (now_us - observation.start_us) as f64 / 1e6,
                run_id: observation.run_id,
                peers: peers.len(),
            });
        }
    }
    let zones: FxHashMap<&str, &Option<String>> = hosts
        .iter()
        .map(|host| (host.name.as_str(), &host.zone))
        .collect();
    let hosts = names
        .iter()
        .zip(totals)
        .map(|(name, (sum, count))| HostHealth {
            name: name.to_string(),
            score: (count > 0).then(|| sum / count as f64),
            zone: zones.get(name).and_then(|zone| (*zone).clone()),
            pairs: count,
        })
        .collect();
    Scored {
        names,
        cells,
        hosts,
    }
}

// ---- selection ----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Selection {
    /// The chosen hosts, in the order they were chosen (the reference not included).
    pub selected: Vec<String>,
    /// Each chosen host's worst pairwise score within the selection and to the
    /// reference, when it was chosen.
    pub scores: BTreeMap<String, f64>,
    /// The next best hosts, best first, with their worst score against the selection.
    pub runners_up: Vec<(String, f64)>,
    pub reasons: Vec<String>,
}

/// How many runners-up a selection lists.
pub const RUNNERS_UP: usize = 5;

/// Health between two hosts: the mean of the known directions.
fn between(matrix: &Matrix, a: &str, b: &str) -> Option<f64> {
    let scores: Vec<f64> = [matrix.score(a, b), matrix.score(b, a)]
        .into_iter()
        .flatten()
        .collect();
    mean(&scores)
}

/// The paper's healthy cluster: `k` hosts chosen greedily so that the worst score
/// among them and to `reference` stays as high as possible. Hosts with no known
/// score to the reference are not candidates; an unmeasured pair inside the
/// selection counts as 0 (unknown is not healthy).
pub fn select(matrix: &Matrix, reference: &str, k: usize) -> Selection {
    let mut reasons = Vec::new();
    let mut candidates: Vec<(&str, f64)> = Vec::new();
    for host in &matrix.hosts {
        if host.name == reference {
            continue;
        }
        match between(matrix, &host.name, reference) {
            Some(score) => candidates.push((&host.name, score)),
            None => reasons.push(format!(
                "{}: no recent health round with {reference}, not a candidate",
                host.name
            )),
        }
    }
    let mut selected: Vec<String> = Vec::new();
    let mut scores = BTreeMap::new();
    let worst = |name: &str, to_reference: f64, selected: &[String]| {
        selected
            .iter()
            .map(|other| between(matrix, name, other).unwrap_or(0.0))
            .fold(to_reference, f64::min)
    };
    while selected.len() < k {
        let best = candidates
            .iter()
            .filter(|(name, _)| !selected.iter().any(|s| s == name))
            .map(|&(name, to_reference)| (name, worst(name, to_reference, &selected), to_reference))
            // Highest worst score, then the closer to the reference, then by name.
            .max_by(|a, b| {
                a.1.total_cmp(&b.1)
                    .then(a.2.total_cmp(&b.2))
                    .then(b.0.cmp(a.0))
            });
        let Some((name, score, _)) = best else {
            reasons.push(format!(
                "only {} hosts have health data with {reference}; asked for {k}",
                selected.len()
            ));
            break;
        };
        for other in &selected {
            if between(matrix, name, other).is_none() {
                reasons.push(format!(
                    "{name} and {other} have no recent round: counted as 0"
                ));
            }
        }
        scores.insert(name.to_string(), score);
        selected.push(name.to_string());
    }
    let mut runners_up: Vec<(String, f64)> = candidates
        .iter()
        .filter(|(name, _)| !selected.iter().any(|s| s == name))
        .map(|&(name, to_reference)| (name.to_string(), worst(name, to_reference, &selected)))
        .collect();
    runners_up.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    runners_up.truncate(RUNNERS_UP);
    Selection {
        selected,
        scores,
        runners_up,
        reasons,
    }
}

// ---- weight refitting ------------------------------------------------------------

/// One archived round of a pair, for refitting the weights.
#[derive(Debug, Clone)]
pub struct Archived<'a> {
    pub client: &'a str,
    pub server: &'a str,
    pub start_us: i64,
    pub result: &'a HealthResult,
}

/// The regression table of Eq. 2: one row per pair and round with a known target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitTable {
    /// Metric names with a value in every row (`H_TP`, `H_ICMP`, `H_UDP`, `H_TCP`).
    pub names: Vec<&'static str>,
    /// One column per name.
    pub columns: Vec<Vec<f64>>,
    /// The target of each row: the pair's throughput in its next round, bit/s.
    pub target: Vec<f64>,
    /// Rounds found, and rows left out because a part or the next round was missing.
    pub rounds: usize,
    pub incomplete_rows: usize,
}

/// Groups each client's results into rounds: a round starts with a result and takes
/// every later one within `round_span_us`, one per peer.
fn rounds_of<'a>(archived: &[Archived<'a>], round_span_us: i64) -> Vec<Vec<Archived<'a>>> {
    let mut by_client: BTreeMap<&str, Vec<&Archived<'a>>> = BTreeMap::new();
    for item in archived {
        by_client.entry(item.client).or_default().push(item);
    }
    let mut rounds = Vec::new();
    for (_, mut items) in by_client {
        items.sort_by_key(|item| item.start_us);
        let mut current: Vec<Archived<'a>> = Vec::new();
        for item in items {
            let starts_new = current.first().is_some_and(|first| {
                item.start_us - first.start_us > round_span_us
                    || current.iter().any(|other| other.server == item.server)
            });
            if starts_new {
                rounds.push(std::mem::take(&mut current));
            }
            current.push(item.clone());
        }
        if !current.is_empty() {
            rounds.push(current);
        }
    }
    rounds
}

/// When a pair's round started (µs) and its throughput then (bit/s), if measured.
type RoundThroughput = (i64, Option<f64>);

/// The table to refit H_ALL's weights on: each pair's metrics in a round against
/// the throughput it got in its next round (the paper regressed on the score; a
/// target the user cares about says more about which metrics predict it).
pub fn fit_table(archived: &[Archived<'_>], round_span_us: i64) -> FitTable {
    let rounds = rounds_of(archived, round_span_us);
    // The next round's throughput of each pair, by the round's start.
    let mut by_pair: BTreeMap<(&str, &str), Vec<RoundThroughput>> = BTreeMap::new();
    for item in archived {
        let throughput = item
            .result
            .throughput
            .as_ref()
            .filter(|part| !part.timed_out())
            .map(|part| part.mean_bps);
        by_pair
            .entry((item.client, item.server))
            .or_default()
            .push((item.start_us, throughput));
    }
    for series in by_pair.values_mut() {
        series.sort_by_key(|(start_us, _)| *start_us);
    }
    let next_throughput = |client: &str, server: &str, start_us: i64| {
        by_pair
            .get(&(client, server))?
            .iter()
            .find(|(start, _)| *start > start_us)
            .and_then(|(_, throughput)| *throughput)
    };
    let mut rows: Vec<([Option<f64>; 4], f64)> = Vec::new();
    let mut incomplete_rows = 0;
    for round in &rounds {
        let features: Vec<RoundFeatures> = round
            .iter()
            .map(|item| RoundFeatures::of(item.result))
            .collect();
        let metrics = metrics_for_host(&features.iter().collect::<Vec<_>>());
        for (item, parts) in round.iter().zip(metrics) {
            match next_throughput(item.client, item.server, item.start_us) {
                Some(target) => {
                    rows.push(([parts.throughput, parts.icmp, parts.udp, parts.tcp], target))
                }
                None => incomplete_rows += 1,
            }
        }
    }
    const NAMES: [&str; 4] = ["H_TP", "H_ICMP", "H_UDP", "H_TCP"];
    // A metric absent from most rows (a part dropped) is left out rather than
    // costing every row.
    let present: Vec<usize> = (0..4)
        .filter(|&index| {
            let with = rows
                .iter()
                .filter(|(values, _)| values[index].is_some())
                .count();
            with * 2 > rows.len()
        })
        .collect();
    let mut columns = vec![Vec::new(); present.len()];
    let mut target = Vec::new();
    for (values, goal) in rows {
        if present.iter().all(|&index| values[index].is_some()) {
            for (column, &index) in columns.iter_mut().zip(&present) {
                column.push(values[index].expect("checked"));
            }
            target.push(goal);
        } else {
            incomplete_rows += 1;
        }
    }
    FitTable {
        names: present.iter().map(|&index| NAMES[index]).collect(),
        columns,
        target,
        rounds: rounds.len(),
        incomplete_rows,
    }
}

#[cfg(test)]
mod tests;
