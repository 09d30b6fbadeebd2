//! A discrete-event flow-level simulator: flows arrive, take a path, share every link
//! max-min fairly with the flows present, and leave when their last bit is sent. Rates
//! change only at arrivals and completions, so the simulation jumps from one to the next.

use crate::fair_share::max_min_rates;
use crate::topology::{Path, Topology};

/// A flow offered to the network.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowArrival {
    pub at_s: f64,
    pub size_bits: f64,
    pub from: usize,
    pub to: usize,
}

/// How a flow fared: its throughput is `size_bits / (finish_s - arrival_s)`.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowOutcome {
    pub arrival_s: f64,
    pub finish_s: f64,
    pub size_bits: f64,
    pub path: Path,
}

impl FlowOutcome {
    pub fn throughput_bps(&self) -> f64 {
        self.size_bits / (self.finish_s - self.arrival_s)
    }
}

/// Chooses a new flow's path from the number of flows now on each link.
pub trait Router {
    fn route(&mut self, from: usize, to: usize, flows_on_link: &[u32]) -> Path;
}

struct Active {
    arrival: usize,
    path: Path,
    remaining_bits: f64,
    rate_bps: f64,
}

/// Runs `arrivals` (in time order) to completion. `progress` is called with the number of
/// flows finished so far, every 1 000 flows.
pub fn simulate(
    topology: &Topology,
    arrivals: &[FlowArrival],
    router: &mut dyn Router,
    progress: &mut dyn FnMut(usize),
) -> Vec<FlowOutcome> {
    let capacity_bps: Vec<f64> = topology
        .links
        .iter()
        .map(|link| link.capacity_bps)
        .collect();
    let mut flows_on_link = vec![0u32; capacity_bps.len()];
    let mut active: Vec<Active> = Vec::new();
    let mut outcomes = Vec::with_capacity(arrivals.len());
    let mut now_s = 0.0;
    let mut next_arrival = 0;
    while next_arrival < arrivals.len() || !active.is_empty() {
        let (first_done, done_in_s) = active
            .iter()
            .enumerate()
            .map(|(i, flow)| (i, flow.remaining_bits / flow.rate_bps))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or((None, f64::INFINITY), |(i, dt)| (Some(i), dt));
        let arrival_in_s = arrivals
            .get(next_arrival)
            .map_or(f64::INFINITY, |flow| (flow.at_s - now_s).max(0.0));
        let step_s = done_in_s.min(arrival_in_s);
        now_s += step_s;
        for flow in &mut active {
            flow.remaining_bits -= flow.rate_bps * step_s;
        }
        if arrival_in_s < done_in_s {
            let offered = &arrivals[next_arrival];
            let path = router.route(offered.from, offered.to, &flows_on_link);
            for &link in &path {
                flows_on_link[link] += 1;
            }
            active.push(Active {
                arrival: next_arrival,
                path,
                remaining_bits: offered.size_bits,
                rate_bps: 0.0,
            });
            next_arrival += 1;
        } else if let Some(first_done) = first_done {
            // The flow that set the step is done exactly; others within rounding with it.
            active[first_done].remaining_bits = 0.0;
            let mut index = 0;
            while index < active.len() {
                let flow = &active[index];
                let size = arrivals[flow.arrival].size_bits;
                if flow.remaining_bits <= size * 1e-12 {
                    let flow = active.swap_remove(index);
                    for &link in &flow.path {
                        flows_on_link[link] -= 1;
                    }
                    outcomes.push(FlowOutcome {
                        arrival_s: arrivals[flow.arrival].at_s,
                        finish_s: now_s,
                        size_bits: size,
                        path: flow.path,
                    });
                    if outcomes.len() % 1000 == 0 {
                        progress(outcomes.len());
                    }
                } else {
                    index += 1;
                }
            }
        }
        let paths: Vec<&[usize]> = active.iter().map(|flow| flow.path.as_slice()).collect();
        let rates = max_min_rates(&paths, &capacity_bps, None);
        for (flow, rate) in active.iter_mut().zip(rates) {
            flow.rate_bps = rate;
        }
    }
    progress(outcomes.len());
    outcomes
}

/// Routes every flow on the topology's default (fewest-hop) path.
pub struct DefaultRoutes(pub Vec<Vec<Path>>);

impl Router for DefaultRoutes {
    fn route(&mut self, from: usize, to: usize, _: &[u32]) -> Path {
        self.0[from][to].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_link() -> Topology {
        Topology::full_duplex(&["a", "b"], &[(0, 1)], 10.0)
    }

    fn run(arrivals: &[FlowArrival]) -> Vec<FlowOutcome> {
        let topology = one_link();
        let mut routes = DefaultRoutes(topology.shortest_paths().unwrap());
        let mut outcomes = simulate(&topology, arrivals, &mut routes, &mut |_| {});
        outcomes.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        outcomes
    }

    fn flow(at_s: f64, size_bits: f64) -> FlowArrival {
        FlowArrival {
            at_s,
            size_bits,
            from: 0,
            to: 1,
        }
    }

    /// 10 bit/s link. Flow 1 (100 bits) starts alone at t = 0; flow 2 (20 bits) joins at
    /// t = 4 when flow 1 has 60 left. Each gets 5 bit/s: flow 2 ends at t = 8 (20/5),
    /// flow 1 has 40 left and ends alone at t = 12.
    #[test]
    fn two_flows_on_one_link_finish_when_worked_by_hand() {
        let outcomes = run(&[flow(0.0, 100.0), flow(4.0, 20.0)]);
        assert!((outcomes[0].finish_s - 12.0).abs() < 1e-9, "{outcomes:?}");
        assert!((outcomes[1].finish_s - 8.0).abs() < 1e-9, "{outcomes:?}");
        assert!((outcomes[1].throughput_bps() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_lone_flow_runs_at_line_rate_and_flows_in_both_directions_do_not_meet() {
        let topology = one_link();
        let mut routes = DefaultRoutes(topology.shortest_paths().unwrap());
        let back = FlowArrival {
            at_s: 0.0,
            size_bits: 50.0,
            from: 1,
            to: 0,
        };
        let outcomes = simulate(
            &topology,
            &[flow(0.0, 50.0), back],
            &mut routes,
            &mut |_| {},
        );
        assert!(
            outcomes.iter().all(|o| (o.finish_s - 5.0).abs() < 1e-9),
            "{outcomes:?}"
        );
    }
}
