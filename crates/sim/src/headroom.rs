//! The static and dynamic headroom services for elephant flows (SH/DH; Alali, PhD
//! dissertation, University of Virginia, 2019, ch. 3): elephant flows re-marked to a
//! scavenger class fill the headroom the provider's links leave.
//!
//! - [`mg1`]: one link's headroom as an M/G/1 queue of flows sharing it (Eqs. 3.1–3.3).
//! - [`simulate_headroom`]: the flow-level comparison on six routers, SH on default
//!   routes and DH routing each new flow on the path whose busiest link has the fewest
//!   elephant flows (min–max), with uniform (w = 0) to concentrated (w = 1) traffic.

use serde::Serialize;

use crate::distributions::{exponential, pareto, run_rng, SimRng};
use crate::flow_sim::{simulate, DefaultRoutes, FlowArrival, Router};
use crate::topology::{Path, Topology};
use crate::{check, positive, SimError};

/// Bits in a gigabyte, as the dissertation counts (10⁹ bytes).
pub const BITS_PER_GB: f64 = 8e9;

/// Inputs of the M/G/1 headroom model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mg1Input {
    /// Elephant flows arriving per second (Poisson).
    pub arrival_rate_per_s: f64,
    /// Pareto shape α of the flow sizes; the variance needs α > 2.
    pub pareto_shape: f64,
    /// Pareto scale x_m, the smallest flow, in bytes.
    pub pareto_scale_bytes: f64,
    /// The headroom C_hr the flows share, in bit/s.
    pub headroom_bps: f64,
}

impl Mg1Input {
    /// The dissertation's check case: λ = 0.034/s, α = 4, x_m = 1.5 GB, C_hr = 600 Mbit/s.
    pub const CHECK_CASE: Mg1Input = Mg1Input {
        arrival_rate_per_s: 0.034,
        pareto_shape: 4.0,
        pareto_scale_bytes: 1.5e9,
        headroom_bps: 600e6,
    };
}

/// The model's answer for one link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mg1 {
    /// E[N], the mean number of elephant flows sharing the headroom.
    pub expected_flows: f64,
    /// The mean throughput of one flow: C_hr / E[N], or C_hr when E[N] ≤ 1.
    pub per_flow_bps: f64,
    /// ρ = λ/μ, the share of the headroom the flows' bytes need.
    pub load_ratio: f64,
    /// 1/μ, the mean time a flow would take alone.
    pub mean_service_s: f64,
    /// σ², the variance of that time.
    pub service_variance_s2: f64,
}

/// Eqs. 3.1–3.3: 1/μ = α·x_m / ((α−1)·C_hr), σ² = x_m²·α / ((α−1)²(α−2)·C_hr²),
/// E[N] = ρ/2 + (ρ + λ²σ²) / (2(1−ρ)) (the Pollaczek–Khinchine mean), and a flow's
/// throughput C_hr/E[N] as flows share the headroom under TCP.
pub fn mg1(input: &Mg1Input) -> Result<Mg1, SimError> {
    positive("arrival_rate_per_s", input.arrival_rate_per_s)?;
    pareto_shape_above(input.pareto_shape, 2.0, "α above 2, for a finite variance")?;
    positive("pareto_scale_bytes", input.pareto_scale_bytes)?;
    positive("headroom_bps", input.headroom_bps)?;
    let (lambda, alpha) = (input.arrival_rate_per_s, input.pareto_shape);
    let scale_s = input.pareto_scale_bytes * 8.0 / input.headroom_bps;
    let mean_service_s = alpha * scale_s / (alpha - 1.0);
    let service_variance_s2 = scale_s * scale_s * alpha / ((alpha - 1.0).powi(2) * (alpha - 2.0));
    let load_ratio = lambda * mean_service_s;
    if load_ratio >= 1.0 {
        return Err(SimError::Unstable { load_ratio });
    }
    let expected_flows = load_ratio / 2.0
        + (load_ratio + lambda * lambda * service_variance_s2) / (2.0 * (1.0 - load_ratio));
    let per_flow_bps = if expected_flows > 1.0 {
        input.headroom_bps / expected_flows
    } else {
        input.headroom_bps
    };
    Ok(Mg1 {
        expected_flows,
        per_flow_bps,
        load_ratio,
        mean_service_s,
        service_variance_s2,
    })
}

fn pareto_shape_above(shape: f64, floor: f64, rule: &'static str) -> Result<(), SimError> {
    check(
        "pareto_shape",
        shape,
        shape.is_finite() && shape > floor,
        rule,
    )
}

/// The two services compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// Static headroom: elephant flows stay on default IP routes.
    Sh,
    /// Dynamic headroom: each flow on the path whose busiest link has the fewest
    /// elephant flows.
    Dh,
}

/// The six-router flow simulation's set-up (defaults: the dissertation's Fig. 3.7).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadroomSimConfig {
    /// Elephant flows per second over the whole network.
    pub arrival_rate_per_s: f64,
    /// w: 0 spreads flows evenly over the 30 ordered pairs; 1 sends them all between B
    /// and C (each of B→C, C→B with probability (1 + 14w)/30, the others (1 − w)/30).
    pub concentration: f64,
    pub pareto_shape: f64,
    pub pareto_scale_bytes: f64,
    /// Flows per run.
    pub flows: usize,
    pub runs: usize,
    pub seed: u64,
}

impl Default for HeadroomSimConfig {
    fn default() -> Self {
        HeadroomSimConfig {
            arrival_rate_per_s: 0.1,
            concentration: 0.0,
            pareto_shape: 4.0,
            pareto_scale_bytes: 15e9,
            flows: 100_000,
            runs: 30,
            seed: 1,
        }
    }
}

impl HeadroomSimConfig {
    fn validate(&self) -> Result<(), SimError> {
        positive("arrival_rate_per_s", self.arrival_rate_per_s)?;
        let w = self.concentration;
        check(
            "concentration",
            w,
            (0.0..=1.0).contains(&w),
            "w from 0 to 1",
        )?;
        pareto_shape_above(self.pareto_shape, 1.0, "α above 1, for a finite mean")?;
        positive("pareto_scale_bytes", self.pareto_scale_bytes)?;
        check(
            "flows",
            self.flows as f64,
            self.flows > 0,
            "at least one flow",
        )?;
        check("runs", self.runs as f64, self.runs > 0, "at least one run")
    }
}

/// Mean elephant-flow throughput under one service, over the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceThroughput {
    pub service: Service,
    /// The mean over runs of each run's mean flow throughput (size / time in the network).
    pub mean_flow_bps: f64,
    /// Half the width of the 95 % interval over runs (normal approximation); absent for one run.
    pub ci95_bps: Option<f64>,
    pub run_means_bps: Vec<f64>,
}

/// The offered flows of one run: Poisson arrivals, Pareto sizes, pairs drawn by w.
fn offered_flows(
    config: &HeadroomSimConfig,
    topology: &Topology,
    rng: &mut SimRng,
) -> Vec<FlowArrival> {
    let n = topology.nodes.len();
    let pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|from| {
            (0..n)
                .filter(move |&to| to != from)
                .map(move |to| (from, to))
        })
        .collect();
    let (b, c) = (1, 2);
    let w = config.concentration;
    let weights: Vec<f64> = pairs
        .iter()
        .map(|&pair| {
            if pair == (b, c) || pair == (c, b) {
                (1.0 + 14.0 * w) / 30.0
            } else {
                (1.0 - w) / 30.0
            }
        })
        .collect();
    let total: f64 = weights.iter().sum();
    let mut at_s = 0.0;
    (0..config.flows)
        .map(|_| {
            at_s += exponential(rng, 1.0 / config.arrival_rate_per_s);
            let mut pick = rand::Rng::gen::<f64>(rng) * total;
            let mut chosen = pairs[pairs.len() - 1];
            for (pair, weight) in pairs.iter().zip(&weights) {
                if pick < *weight {
                    chosen = *pair;
                    break;
                }
                pick -= weight;
            }
            FlowArrival {
                at_s,
                size_bits: pareto(rng, config.pareto_shape, config.pareto_scale_bytes) * 8.0,
                from: chosen.0,
                to: chosen.1,
            }
        })
        .collect()
}

/// DH's controller: counts the elephant flows on each link and gives a new flow the
/// candidate path minimising the largest count on it (fewer hops on a tie, then the
/// lower-numbered links). Candidates: every loop-free path of at most 4 hops.
struct MinMaxRoutes {
    candidates: Vec<Vec<Vec<Path>>>,
}

impl MinMaxRoutes {
    const MAX_HOPS: usize = 4;

    fn new(topology: &Topology) -> Self {
        let n = topology.nodes.len();
        let candidates = (0..n)
            .map(|from| {
                (0..n)
                    .map(|to| topology.simple_paths(from, to, Self::MAX_HOPS))
                    .collect()
            })
            .collect();
        MinMaxRoutes { candidates }
    }
}

impl Router for MinMaxRoutes {
    fn route(&mut self, from: usize, to: usize, flows_on_link: &[u32]) -> Path {
        // Candidates are ordered by hops then link numbers, so min_by_key keeps the first.
        self.candidates[from][to]
            .iter()
            .min_by_key(|path| path.iter().map(|&link| flows_on_link[link]).max())
            .cloned()
            .unwrap_or_default()
    }
}

/// SH and DH on the six routers with the same offered flows in each run.
pub fn simulate_headroom(
    config: &HeadroomSimConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<[ServiceThroughput; 2], SimError> {
    config.validate()?;
    let topology = Topology::six_router();
    let mut sh = DefaultRoutes(topology.shortest_paths()?);
    let mut dh = MinMaxRoutes::new(&topology);
    let mut means = [Vec::new(), Vec::new()];
    let mut finished = 0;
    for run in 0..config.runs {
        let offered = offered_flows(config, &topology, &mut run_rng(config.seed, run as u64));
        for (service, router) in [&mut sh as &mut dyn Router, &mut dh]
            .into_iter()
            .enumerate()
        {
            let outcomes = simulate(&topology, &offered, router, &mut |done| {
                progress(finished + done)
            });
            finished += outcomes.len();
            let mean =
                outcomes.iter().map(|o| o.throughput_bps()).sum::<f64>() / outcomes.len() as f64;
            means[service].push(mean);
        }
    }
    let [sh_means, dh_means] = means;
    Ok([
        summarise(Service::Sh, sh_means),
        summarise(Service::Dh, dh_means),
    ])
}

fn summarise(service: Service, run_means_bps: Vec<f64>) -> ServiceThroughput {
    let n = run_means_bps.len() as f64;
    let mean = run_means_bps.iter().sum::<f64>() / n;
    let ci95_bps = (run_means_bps.len() > 1).then(|| {
        let variance = run_means_bps
            .iter()
            .map(|m| (m - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        1.96 * (variance / n).sqrt()
    });
    ServiceThroughput {
        service,
        mean_flow_bps: mean,
        ci95_bps,
        run_means_bps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dissertation's check: E[N] = 5.86 and 102.4 Mbit/s (its ρ = 0.92 is 0.907 here,
    /// as the arithmetic gives).
    #[test]
    fn the_check_case_gives_the_dissertations_figures() {
        let m = mg1(&Mg1Input::CHECK_CASE).unwrap();
        assert!((m.expected_flows - 5.86).abs() < 0.005, "{m:?}");
        assert!((m.per_flow_bps / 1e6 - 102.4).abs() < 0.05, "{m:?}");
        assert!((m.load_ratio - 0.9067).abs() < 0.0005, "{m:?}");
        assert!((m.mean_service_s - 26.667).abs() < 0.001, "{m:?}");
    }

    #[test]
    fn a_light_load_leaves_each_flow_the_whole_headroom() {
        let light = Mg1Input {
            pareto_scale_bytes: 0.15e9,
            ..Mg1Input::CHECK_CASE
        };
        let m = mg1(&light).unwrap();
        assert!(m.expected_flows < 1.0 && m.per_flow_bps == 600e6, "{m:?}");
    }

    #[test]
    fn an_overloaded_link_and_a_heavy_tail_are_refused_with_the_reason() {
        let over = Mg1Input {
            arrival_rate_per_s: 0.04,
            ..Mg1Input::CHECK_CASE
        };
        assert!(matches!(mg1(&over), Err(SimError::Unstable { .. })));
        let heavy = Mg1Input {
            pareto_shape: 2.0,
            ..Mg1Input::CHECK_CASE
        };
        let message = mg1(&heavy).unwrap_err().to_string();
        assert!(message.starts_with("pareto_shape: 2"), "{message}");
    }

    /// With every flow between B and C, DH spreads them over link-disjoint paths and
    /// beats SH, which keeps them on the direct links; the same seed gives the same figures.
    #[test]
    fn concentrated_traffic_gains_from_dynamic_routes_and_runs_are_reproducible() {
        let config = HeadroomSimConfig {
            concentration: 1.0,
            flows: 3000,
            runs: 2,
            ..HeadroomSimConfig::default()
        };
        let [sh, dh] = simulate_headroom(&config, &mut |_| {}).unwrap();
        assert!(dh.mean_flow_bps > 1.5 * sh.mean_flow_bps, "{sh:?} {dh:?}");
        let [again, _] = simulate_headroom(&config, &mut |_| {}).unwrap();
        assert_eq!(sh, again);
    }
}
