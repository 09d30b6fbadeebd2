//! Per-direction impairments of a link and the per-packet decisions they imply.
//!
//! Rate and queue are enforced by the kernel (`tbf` on the emulator's egress
//! interface); everything else (delay, jitter, loss, duplication, reordering,
//! corruption) is decided here and carried out by the user-space forwarder,
//! because this platform's kernels may lack `sch_netem`. The semantics follow
//! netem's documented behaviour where they overlap (see docs/lab.md).

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use vantage_model::units::{parse_bytes, parse_duration, parse_rate_bps};

/// Shape of the jitter added to the configured delay; `jitter_us` is its scale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterDistribution {
    /// Uniform in `[-jitter, +jitter]`.
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
    /// Heavy right tail: Pareto (shape 3) scaled by `jitter`, shifted to mean zero.
    Pareto,
}

/// Gilbert–Elliott two-state loss model (bursty loss).
/// Each packet first moves the chain (`good→bad` with `p`, `bad→good` with `r`),
/// then is lost with the loss probability of the state it is in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GilbertElliott {
    pub p_ratio: f64,
    pub r_ratio: f64,
    pub bad_loss_ratio: f64,
    pub good_loss_ratio: f64,
}

impl GilbertElliott {
    /// A chain that never enters the bad state and never loses in the good one drops nothing.
    pub fn is_active(&self) -> bool {
        self.p_ratio > 0.0 || self.good_loss_ratio > 0.0
    }

    /// Long-run loss ratio of the chain: stationary bad share π_B = p/(p+r).
    pub fn mean_loss_ratio(&self) -> f64 {
        if self.p_ratio + self.r_ratio == 0.0 {
            return self.good_loss_ratio;
        }
        let bad_share = self.p_ratio / (self.p_ratio + self.r_ratio);
        bad_share * self.bad_loss_ratio + (1.0 - bad_share) * self.good_loss_ratio
    }
}

/// Everything that can be impaired in one direction of a link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Impairment {
    pub delay_us: u64,
    pub jitter_us: u64,
    pub jitter_distribution: JitterDistribution,
    pub loss_ratio: f64,
    pub gilbert_elliott: Option<GilbertElliott>,
    pub duplicate_ratio: f64,
    pub reorder_ratio: f64,
    pub corrupt_ratio: f64,
    /// Kernel `tbf` rate cap; `None` = unlimited.
    pub rate_bps: Option<u64>,
    /// `tbf` queue limit; `None` = 50 ms worth of the rate (at least 64 KiB).
    pub queue_bytes: Option<u64>,
    /// A CPU-bound forwarding host on this link (see [`CpuCost`]); `None` = line rate.
    #[serde(default)]
    pub cpu: Option<CpuCost>,
}

/// The cost of forwarding on a host whose CPU is the bottleneck, as a software VPN router
/// that encrypts every packet: each packet takes `per_packet_us` plus its frame's bits at
/// `rate_bps` of CPU time, one packet at a time for both directions of the link, while at most
/// `backlog_packets` wait; more are dropped. Offered load beyond what the CPU sustains therefore
/// queues (RTT grows) and is lost (loss grows with the load), unlike a rate cap's fixed queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuCost {
    pub per_packet_us: u64,
    pub rate_bps: u64,
    pub backlog_packets: u32,
}

impl CpuCost {
    /// Packets waiting for the CPU unless `cpu_backlog` says otherwise: a driver's receive ring.
    pub const DEFAULT_BACKLOG_PACKETS: u32 = 256;

    /// CPU time to forward one frame of `frame_bytes`.
    pub fn service_ns(&self, frame_bytes: usize) -> u64 {
        self.per_packet_us * 1_000 + frame_bytes as u64 * 8 * 1_000_000_000 / self.rate_bps
    }
}

/// The keys `lab set` and a topology's direction tables accept.
pub const IMPAIRMENT_KEYS: &[&str] = &[
    "delay",
    "jitter",
    "jitter_distribution",
    "loss",
    "ge",
    "ge_p",
    "ge_r",
    "ge_bad_loss",
    "ge_good_loss",
    "duplicate",
    "reorder",
    "corrupt",
    "rate",
    "queue",
    "cpu_packet",
    "cpu_rate",
    "cpu_backlog",
];

/// Parses `"1%"` / `"0.1%"` into a ratio 0..1. The `%` is required so `0.01` cannot be misread.
pub fn parse_percent_ratio(input: &str) -> Result<f64, String> {
    let not_percentage = || format!("\"{input}\" is not a percentage (e.g. 1%, 0.1%)");
    let number = input.trim().strip_suffix('%').ok_or_else(not_percentage)?;
    let value: f64 = number.trim().parse().map_err(|_| not_percentage())?;
    if !(0.0..=100.0).contains(&value) {
        return Err(format!("\"{input}\" is outside 0%..100%"));
    }
    Ok(value / 100.0)
}

fn parse_us(input: &str) -> Result<u64, String> {
    let duration = parse_duration(input).map_err(|e| e.to_string())?;
    if duration.as_secs() > 60 {
        return Err(format!(
            "\"{input}\" is longer than the 60 s this emulator supports"
        ));
    }
    Ok(duration.as_micros() as u64)
}

fn is_off(value: &str) -> bool {
    matches!(value.trim(), "off" | "none" | "unlimited")
}

impl Impairment {
    /// Applies one `KEY=VALUE` setting. The error names what was wrong with the value;
    /// the caller prefixes it with where the value came from.
    pub fn apply_setting(&mut self, key: &str, value: &str) -> Result<(), String> {
        let ge = || GilbertElliott {
            p_ratio: 0.0,
            r_ratio: 1.0,
            bad_loss_ratio: 1.0,
            good_loss_ratio: 0.0,
        };
        match key {
            "delay" => self.delay_us = parse_us(value)?,
            "jitter" => self.jitter_us = parse_us(value)?,
            "jitter_distribution" => {
                self.jitter_distribution = match value.trim() {
                    "uniform" => JitterDistribution::Uniform,
                    "normal" => JitterDistribution::Normal,
                    "pareto" => JitterDistribution::Pareto,
                    other => {
                        return Err(format!(
                            "\"{other}\" is not a distribution (uniform, normal or pareto)"
                        ))
                    }
                }
            }
            "loss" => self.loss_ratio = parse_percent_ratio(value)?,
            "ge" if is_off(value) => self.gilbert_elliott = None,
            "ge" => {
                return Err(format!(
                "\"{value}\": only ge=off is accepted; set ge_p, ge_r, ge_bad_loss, ge_good_loss"
            ))
            }
            "ge_p" => {
                self.gilbert_elliott.get_or_insert_with(ge).p_ratio = parse_percent_ratio(value)?
            }
            "ge_r" => {
                self.gilbert_elliott.get_or_insert_with(ge).r_ratio = parse_percent_ratio(value)?
            }
            "ge_bad_loss" => {
                self.gilbert_elliott.get_or_insert_with(ge).bad_loss_ratio =
                    parse_percent_ratio(value)?
            }
            "ge_good_loss" => {
                self.gilbert_elliott.get_or_insert_with(ge).good_loss_ratio =
                    parse_percent_ratio(value)?
            }
            "duplicate" => self.duplicate_ratio = parse_percent_ratio(value)?,
            "reorder" => self.reorder_ratio = parse_percent_ratio(value)?,
            "corrupt" => self.corrupt_ratio = parse_percent_ratio(value)?,
            "rate" if is_off(value) => self.rate_bps = None,
            "rate" => {
                let bps = parse_rate_bps(value).map_err(|e| e.to_string())?;
                if bps < 8_000 {
                    return Err(format!("\"{value}\" is below the 8 kbit/s minimum"));
                }
                self.rate_bps = Some(bps)
            }
            "cpu_packet" | "cpu_rate" | "cpu_backlog" if is_off(value) => self.cpu = None,
            "cpu_packet" | "cpu_rate" | "cpu_backlog" => {
                let cpu = self.cpu.get_or_insert(CpuCost {
                    per_packet_us: 0,
                    rate_bps: u64::MAX,
                    backlog_packets: CpuCost::DEFAULT_BACKLOG_PACKETS,
                });
                match key {
                    "cpu_packet" => cpu.per_packet_us = parse_us(value)?,
                    "cpu_rate" => {
                        let bps = parse_rate_bps(value).map_err(|e| e.to_string())?;
                        if bps < 8_000 {
                            return Err(format!("\"{value}\" is below the 8 kbit/s minimum"));
                        }
                        cpu.rate_bps = bps
                    }
                    _ => {
                        cpu.backlog_packets = value
                            .trim()
                            .parse()
                            .ok()
                            .filter(|packets| (1..=100_000).contains(packets))
                            .ok_or_else(|| {
                                format!("\"{value}\" is not a packet count from 1 to 100000")
                            })?
                    }
                }
            }
            "queue" if is_off(value) => self.queue_bytes = None,
            "queue" => {
                let bytes = parse_bytes(value).map_err(|e| e.to_string())?;
                if bytes < 2048 {
                    return Err(format!("\"{value}\" is below the 2K minimum queue"));
                }
                self.queue_bytes = Some(bytes)
            }
            other => {
                return Err(format!(
                    "unknown impairment \"{other}\" (known: {})",
                    IMPAIRMENT_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// True when the user-space engine has nothing to do (the forwarder's floor case).
    pub fn is_transparent(&self) -> bool {
        self.delay_us == 0 && !self.is_per_packet()
    }

    /// True when packets must cross the forwarder one by one: each is lost, delayed by its own
    /// jitter sample, duplicated, reordered, corrupted or served by a CPU-bound host on its
    /// own. Delay and rate alone treat every packet alike, so a segmentation-offloaded frame
    /// may stay whole.
    pub fn is_per_packet(&self) -> bool {
        self.jitter_us > 0
            || self.loss_ratio > 0.0
            || self.gilbert_elliott.is_some_and(|ge| ge.is_active())
            || self.duplicate_ratio > 0.0
            || self.reorder_ratio > 0.0
            || self.corrupt_ratio > 0.0
            || self.cpu.is_some()
    }

    /// The queue limit handed to `tbf`: explicit, or 50 ms worth of the rate, at least 64 KiB.
    pub fn effective_queue_bytes(&self, rate_bps: u64) -> u64 {
        self.queue_bytes
            .unwrap_or_else(|| (rate_bps / 8 / 20).max(64 * 1024))
    }

    /// Short human summary, e.g. `delay=20ms loss=1% rate=100M`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let percent = |ratio: f64| format!("{}%", (ratio * 100.0 * 1e6).round() / 1e6);
        let millis = |us: u64| format!("{}ms", us as f64 / 1000.0);
        if self.delay_us > 0 {
            parts.push(format!("delay={}", millis(self.delay_us)));
        }
        if self.jitter_us > 0 {
            parts.push(format!(
                "jitter={}({:?})",
                millis(self.jitter_us),
                self.jitter_distribution
            ));
        }
        if self.loss_ratio > 0.0 {
            parts.push(format!("loss={}", percent(self.loss_ratio)));
        }
        if let Some(ge) = &self.gilbert_elliott {
            parts.push(format!(
                "ge(p={} r={} bad={} good={})",
                percent(ge.p_ratio),
                percent(ge.r_ratio),
                percent(ge.bad_loss_ratio),
                percent(ge.good_loss_ratio)
            ));
        }
        for (name, ratio) in [
            ("duplicate", self.duplicate_ratio),
            ("reorder", self.reorder_ratio),
            ("corrupt", self.corrupt_ratio),
        ] {
            if ratio > 0.0 {
                parts.push(format!("{name}={}", percent(ratio)));
            }
        }
        if let Some(rate) = self.rate_bps {
            parts.push(format!(
                "rate={} queue={}B",
                vantage_model::units::format_rate_bps(rate as f64),
                self.effective_queue_bytes(rate)
            ));
        }
        if let Some(cpu) = &self.cpu {
            parts.push(format!(
                "cpu({}us/packet + frame at {}, backlog {})",
                cpu.per_packet_us,
                vantage_model::units::format_rate_bps(cpu.rate_bps as f64),
                cpu.backlog_packets
            ));
        }
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(" ")
        }
    }
}

/// Why the engine dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    RandomLoss,
    BurstLoss,
}

/// What to do with one arriving packet.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Drop(DropReason),
    Forward {
        /// Monotonic-clock release time of the packet, in nanoseconds.
        release_ns: u64,
        /// Release time of a duplicate copy, if the packet is duplicated.
        duplicate_release_ns: Option<u64>,
        /// Bit index flipped (counted from the start of the network-layer header).
        corrupted_bit: Option<usize>,
        /// The packet skipped the delay queue (reordering).
        reordered: bool,
    },
}

/// Per-direction decision state: the random source, the Gilbert–Elliott state and the
/// last release time (to keep FIFO order when jitter is on and reordering is not asked).
pub struct ImpairmentEngine<R: RngCore> {
    rng: R,
    in_bad_state: bool,
    last_release_ns: u64,
}

impl<R: RngCore> ImpairmentEngine<R> {
    pub fn new(rng: R) -> Self {
        Self {
            rng,
            in_bad_state: false,
            last_release_ns: 0,
        }
    }

    fn chance(&mut self, ratio: f64) -> bool {
        ratio > 0.0 && self.rng.gen::<f64>() < ratio
    }

    /// Jitter sample in nanoseconds (may be negative); see [`JitterDistribution`].
    fn jitter_ns(&mut self, jitter_us: u64, distribution: JitterDistribution) -> i64 {
        if jitter_us == 0 {
            return 0;
        }
        let scale_ns = jitter_us as f64 * 1000.0;
        let sample = match distribution {
            JitterDistribution::Uniform => self.rng.gen_range(-1.0..=1.0) * scale_ns,
            JitterDistribution::Normal => {
                // Box–Muller transform.
                let u1: f64 = 1.0 - self.rng.gen::<f64>();
                let u2: f64 = self.rng.gen();
                (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos() * scale_ns
            }
            JitterDistribution::Pareto => {
                // Pareto with shape 3 and scale 1 has mean 1.5; subtract it for mean zero.
                const SHAPE: f64 = 3.0;
                let u: f64 = 1.0 - self.rng.gen::<f64>();
                (u.powf(-1.0 / SHAPE) - SHAPE / (SHAPE - 1.0)) * scale_ns
            }
        };
        sample as i64
    }

    /// Decides the fate of a packet that arrived at `arrival_ns` (monotonic) and, when it is
    /// corrupted, flips one bit of `network_packet` (the frame after its Ethernet header).
    pub fn decide(
        &mut self,
        impairment: &Impairment,
        arrival_ns: u64,
        network_packet: &mut [u8],
    ) -> Decision {
        if let Some(ge) = impairment.gilbert_elliott {
            let flip = if self.in_bad_state {
                ge.r_ratio
            } else {
                ge.p_ratio
            };
            if self.chance(flip) {
                self.in_bad_state = !self.in_bad_state;
            }
            let state_loss = if self.in_bad_state {
                ge.bad_loss_ratio
            } else {
                ge.good_loss_ratio
            };
            if self.chance(state_loss) {
                return Decision::Drop(DropReason::BurstLoss);
            }
        }
        if self.chance(impairment.loss_ratio) {
            return Decision::Drop(DropReason::RandomLoss);
        }
        let corrupted_bit = if !network_packet.is_empty() && self.chance(impairment.corrupt_ratio) {
            let bit = self.rng.gen_range(0..network_packet.len() * 8);
            network_packet[bit / 8] ^= 1 << (bit % 8);
            Some(bit)
        } else {
            None
        };
        let reordered = self.chance(impairment.reorder_ratio);
        let release_ns = if reordered {
            // Netem-style reordering: this packet is sent at once, overtaking queued ones.
            arrival_ns
        } else {
            let jitter = self.jitter_ns(impairment.jitter_us, impairment.jitter_distribution);
            let delay_ns = (impairment.delay_us as i64 * 1000 + jitter).max(0) as u64;
            // FIFO: never release before the previous packet unless reordering was asked.
            let release = (arrival_ns + delay_ns).max(self.last_release_ns);
            self.last_release_ns = release;
            release
        };
        let duplicate_release_ns = self
            .chance(impairment.duplicate_ratio)
            .then_some(release_ns);
        Decision::Forward {
            release_ns,
            duplicate_release_ns,
            corrupted_bit,
            reordered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn engine() -> ImpairmentEngine<StdRng> {
        ImpairmentEngine::new(StdRng::seed_from_u64(7))
    }

    fn with(settings: &[(&str, &str)]) -> Impairment {
        let mut impairment = Impairment::default();
        for (key, value) in settings {
            impairment.apply_setting(key, value).unwrap();
        }
        impairment
    }

    #[test]
    fn settings_parse_and_reject_with_reason() {
        let impairment = with(&[("delay", "20ms"), ("loss", "1%"), ("rate", "100M")]);
        assert_eq!(impairment.delay_us, 20_000);
        assert!((impairment.loss_ratio - 0.01).abs() < 1e-12);
        assert_eq!(impairment.rate_bps, Some(100_000_000));
        let mut impairment = Impairment::default();
        assert_eq!(
            impairment.apply_setting("loss", "5x").unwrap_err(),
            "\"5x\" is not a percentage (e.g. 1%, 0.1%)"
        );
        assert!(impairment.apply_setting("loss", "0.05").is_err());
        assert!(impairment
            .apply_setting("loss", "150%")
            .unwrap_err()
            .contains("outside"));
        assert!(impairment
            .apply_setting("delay", "20")
            .unwrap_err()
            .contains("missing unit"));
        assert!(impairment
            .apply_setting("latency", "20ms")
            .unwrap_err()
            .contains("unknown impairment"));
        assert!(impairment
            .apply_setting("jitter_distribution", "cauchy")
            .is_err());
        impairment.apply_setting("rate", "off").unwrap();
        assert_eq!(impairment.rate_bps, None);
    }

    #[test]
    fn cpu_cost_parses_and_prices_a_frame() {
        let impairment = with(&[("cpu_packet", "46us"), ("cpu_rate", "56M")]);
        let cpu = impairment.cpu.unwrap();
        assert_eq!(cpu.backlog_packets, CpuCost::DEFAULT_BACKLOG_PACKETS);
        // 46 µs + 1514 × 8 bits at 56 Mbit/s (216.3 µs).
        assert_eq!(cpu.service_ns(1514), 46_000 + 216_285);
        assert!(impairment.is_per_packet());
        let mut impairment = impairment;
        assert!(impairment.apply_setting("cpu_backlog", "0").is_err());
        impairment.apply_setting("cpu_backlog", "64").unwrap();
        assert_eq!(impairment.cpu.unwrap().backlog_packets, 64);
        impairment.apply_setting("cpu_packet", "off").unwrap();
        assert_eq!(impairment.cpu, None);
    }

    #[test]
    fn transparent_engine_releases_at_arrival_in_order() {
        let mut engine = engine();
        let impairment = Impairment::default();
        assert!(impairment.is_transparent());
        let mut packet = [0u8; 64];
        for arrival in [1_000, 2_000, 3_000] {
            assert_eq!(
                engine.decide(&impairment, arrival, &mut packet),
                Decision::Forward {
                    release_ns: arrival,
                    duplicate_release_ns: None,
                    corrupted_bit: None,
                    reordered: false
                }
            );
        }
        assert_eq!(packet, [0u8; 64]);
    }

    #[test]
    fn jitter_keeps_fifo_order_without_reordering() {
        let mut engine = engine();
        let impairment = with(&[
            ("delay", "10ms"),
            ("jitter", "5ms"),
            ("jitter_distribution", "normal"),
        ]);
        let mut last = 0;
        let mut delays_ns = Vec::new();
        for i in 0..10_000u64 {
            // 20 ms apart: the FIFO clamp rarely bites, so the mean delay shows through.
            let arrival = i * 20_000_000;
            match engine.decide(&impairment, arrival, &mut []) {
                Decision::Forward { release_ns, .. } => {
                    assert!(release_ns >= last, "packet {i} overtook its predecessor");
                    last = release_ns;
                    delays_ns.push((release_ns - arrival) as f64);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let mean_ms = delays_ns.iter().sum::<f64>() / delays_ns.len() as f64 / 1e6;
        assert!((9.8..10.6).contains(&mean_ms), "mean delay {mean_ms} ms");
        // 0.1 ms apart, far denser than the jitter: order still holds, the clamp raises delays.
        let mut engine = ImpairmentEngine::new(StdRng::seed_from_u64(8));
        let mut last = 0;
        for i in 0..10_000u64 {
            if let Decision::Forward { release_ns, .. } =
                engine.decide(&impairment, i * 100_000, &mut [])
            {
                assert!(
                    release_ns >= last,
                    "dense packet {i} overtook its predecessor"
                );
                last = release_ns;
            }
        }
    }

    #[test]
    fn random_loss_matches_configured_ratio() {
        let mut engine = engine();
        let impairment = with(&[("loss", "5%")]);
        let lost = (0..100_000)
            .filter(|&i| matches!(engine.decide(&impairment, i, &mut []), Decision::Drop(_)))
            .count();
        // 99.9 % binomial interval of n=100000, p=0.05 is about ±0.23 %.
        assert!((4_770..=5_230).contains(&lost), "lost {lost}");
    }

    #[test]
    fn gilbert_elliott_loss_is_bursty_with_the_stationary_mean() {
        let mut engine = engine();
        // Settings in any order build the same chain (TOML tables come sorted by key).
        let impairment = with(&[("ge_bad_loss", "90%"), ("ge_r", "20%"), ("ge_p", "1%")]);
        assert_eq!(impairment.gilbert_elliott.unwrap().bad_loss_ratio, 0.9);
        let expected = impairment.gilbert_elliott.unwrap().mean_loss_ratio();
        let lost: Vec<bool> = (0..200_000)
            .map(|i| matches!(engine.decide(&impairment, i, &mut []), Decision::Drop(_)))
            .collect();
        let loss_ratio = lost.iter().filter(|&&l| l).count() as f64 / lost.len() as f64;
        assert!(
            (loss_ratio - expected).abs() < 0.01,
            "{loss_ratio} vs {expected}"
        );
        // The bad state lasts 1/r = 5 packets on average; random loss would give runs of ~1.05.
        let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean_burst = lost.iter().filter(|&&l| l).count() as f64 / bursts;
        assert!(mean_burst > 2.5, "mean burst {mean_burst}");
    }

    #[test]
    fn corruption_flips_exactly_one_bit_and_duplicates_share_release() {
        let mut engine = engine();
        let impairment = with(&[("corrupt", "100%"), ("duplicate", "100%"), ("delay", "1ms")]);
        let mut packet = [0u8; 100];
        match engine.decide(&impairment, 5, &mut packet) {
            Decision::Forward {
                release_ns,
                duplicate_release_ns,
                corrupted_bit: Some(bit),
                ..
            } => {
                assert_eq!(release_ns, 1_000_005);
                assert_eq!(duplicate_release_ns, Some(release_ns));
                assert_eq!(packet.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
                assert_eq!(packet[bit / 8], 1 << (bit % 8));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn reordered_packets_overtake_delayed_ones() {
        let mut engine = engine();
        let impairment = with(&[("delay", "10ms"), ("reorder", "100%")]);
        match engine.decide(&impairment, 42, &mut []) {
            Decision::Forward {
                release_ns,
                reordered,
                ..
            } => {
                assert!(reordered);
                assert_eq!(release_ns, 42);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
