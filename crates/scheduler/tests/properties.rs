//! Properties of the planner over random fleets and configurations.

use std::collections::BTreeSet;

use chrono::DateTime;
use proptest::prelude::*;
use vantage_model::config::{load_config, ValidatedConfig};
use vantage_scheduler::{
    find_overlaps, place_request, plan, AgentInfo, Occupancy, OnDemandRequest, Plan, PlanWindow,
    RequestOutcome,
};

const SITES: [&str; 3] = ["campus", "home", "dc"];

#[derive(Debug, Clone)]
struct Scenario {
    /// (accepts_inbound, site index) per agent `a0`, `a1`, …
    agents: Vec<(bool, usize)>,
    latency_every_s: u64,
    latency_slip_s: u64,
    throughput_every_s: u64,
    throughput_slip_s: u64,
    throughput_gap_s: u64,
    throughput_bipartite: bool,
    throughput_both: bool,
    throughput_priority: i32,
    with_segments: bool,
    window_start_s: i64,
    window_len_s: i64,
    seed: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (
            prop::collection::vec((prop::bool::weighted(0.7), 0..3usize), 2..9),
            prop::sample::select(vec![10u64, 30, 60]),
            0..100u64,
            prop::sample::select(vec![60u64, 120, 300]),
            0..100u64,
            0..5u64,
        ),
        any::<bool>(),
        any::<bool>(),
        -2..3i32,
        any::<bool>(),
        0..3600i64,
        30..600i64,
        any::<u64>(),
    )
        .prop_map(
            |(
                (
                    agents,
                    latency_every_s,
                    latency_slip_pct,
                    throughput_every_s,
                    throughput_slip_pct,
                    throughput_gap_s,
                ),
                throughput_bipartite,
                throughput_both,
                throughput_priority,
                with_segments,
                window_start_s,
                window_len_s,
                seed,
            )| Scenario {
                agents,
                latency_every_s,
                latency_slip_s: latency_every_s * latency_slip_pct / 100,
                throughput_every_s,
                throughput_slip_s: throughput_every_s * throughput_slip_pct / 200,
                throughput_gap_s,
                throughput_bipartite,
                throughput_both,
                throughput_priority,
                with_segments,
                window_start_s,
                window_len_s,
                seed,
            },
        )
}

impl Scenario {
    fn fleet(&self) -> Vec<AgentInfo> {
        self.agents
            .iter()
            .enumerate()
            .map(|(index, &(accepts_inbound, site))| AgentInfo {
                name: format!("a{index}"),
                tags: [("site".to_string(), SITES[site].to_string())]
                    .into_iter()
                    .collect(),
                accepts_inbound,
                capabilities: None,
                iperf3_listener: true,
            })
            .collect()
    }

    fn config(&self) -> ValidatedConfig {
        let throughput_group = if self.throughput_bipartite {
            "campus-home"
        } else {
            "all"
        };
        let mut text = format!(
            r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[groups]]
name = "campus-home"
kind = "disjoint"
a = ["site=campus"]
b = ["site=home"]

[[tests]]
name = "rtt"
type = "latency"
spec = {{ count = 5, interval = "200ms" }}

[[tests]]
name = "bulk"
type = "throughput"
spec = {{ duration = "5s" }}

[[tasks]]
name = "lat"
test = "rtt"
group = "all"
every = "{}s"
slip = "{}s"

[[tasks]]
name = "tp"
test = "bulk"
group = "{throughput_group}"
every = "{}s"
slip = "{}s"
round_gap = "{}s"
priority = {}
directions = "{}"
"#,
            self.latency_every_s,
            self.latency_slip_s,
            self.throughput_every_s,
            self.throughput_slip_s,
            self.throughput_gap_s,
            self.throughput_priority,
            if self.throughput_both { "both" } else { "one" },
        );
        if self.with_segments {
            text.push_str(
                "[[segments]]\nname = \"up\"\nmembers = [\"site=campus\"]\n\n\
                 [[segments]]\nname = \"lan\"\nkind = \"shared\"\nmembers = [\"site=dc\"]\n",
            );
        }
        load_config("scenario.toml", &text)
            .unwrap_or_else(|errors| panic!("{errors:?}"))
            .1
    }

    fn window(&self) -> PlanWindow {
        let start = 1_900_000_000 + self.window_start_s;
        PlanWindow {
            start: DateTime::from_timestamp(start, 0).unwrap(),
            end: DateTime::from_timestamp(start + self.window_len_s, 0).unwrap(),
        }
    }

    /// Run ids the configuration asks for in `window`, derived independently of the planner.
    fn expected_run_ids(&self, window: PlanWindow) -> BTreeSet<String> {
        let names: Vec<String> = (0..self.agents.len()).map(|i| format!("a{i}")).collect();
        let mut sorted = names.clone();
        sorted.sort();
        let site_of = |name: &str| {
            let index: usize = name[1..].parse().unwrap();
            SITES[self.agents[index].1]
        };
        let mesh: Vec<(String, String)> = sorted
            .iter()
            .enumerate()
            .flat_map(|(i, a)| sorted[i + 1..].iter().map(move |b| (a.clone(), b.clone())))
            .collect();
        let bipartite: Vec<(String, String)> = sorted
            .iter()
            .filter(|a| site_of(a) == "campus")
            .flat_map(|a| {
                sorted
                    .iter()
                    .filter(|b| site_of(b) == "home")
                    .map(move |b| (a.clone(), b.clone()))
            })
            .collect();
        let mut throughput_flows = if self.throughput_bipartite {
            bipartite
        } else {
            mesh.clone()
        };
        if self.throughput_both {
            let reversed: Vec<_> = throughput_flows
                .iter()
                .map(|(a, b)| (b.clone(), a.clone()))
                .collect();
            throughput_flows.extend(reversed);
        }
        let occurrences = |every_s: i64| {
            let (start, end) = (window.start.timestamp(), window.end.timestamp());
            (start.div_euclid(every_s)..=end.div_euclid(every_s))
                .filter(move |k| (start..end).contains(&(k * every_s)))
        };
        let mut ids = BTreeSet::new();
        for k in occurrences(self.latency_every_s as i64) {
            for (a, b) in &mesh {
                ids.insert(format!("lat/{a}>{b}/{k}"));
            }
        }
        for k in occurrences(self.throughput_every_s as i64) {
            for (a, b) in &throughput_flows {
                ids.insert(format!("tp/{a}>{b}/{k}"));
            }
        }
        ids
    }
}

fn run_plan(scenario: &Scenario) -> Plan {
    plan(
        &scenario.config(),
        &scenario.fleet(),
        scenario.window(),
        &[],
        scenario.seed,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_conflicting_runs_ever_overlap(scenario in scenario()) {
        let plan = run_plan(&scenario);
        let occupancies: Vec<Occupancy> = plan.runs.iter().map(Occupancy::from).collect();
        let overlaps = find_overlaps(&occupancies);
        prop_assert!(overlaps.is_empty(), "{:?}", overlaps.first());
    }

    #[test]
    fn every_requested_run_is_planned_or_a_non_start_exactly_once(scenario in scenario()) {
        let plan = run_plan(&scenario);
        let mut seen = BTreeSet::new();
        for id in plan.runs.iter().map(|r| &r.run_id).chain(plan.non_starts.iter().map(|n| &n.run_id)) {
            prop_assert!(seen.insert(id.clone()), "{} appears twice", id);
        }
        // A campaign that cannot fit its period runs a sample of its rounds (checked
        // over whole cycles below); every other occurrence asks for all its runs.
        let sampled: BTreeSet<String> = plan
            .campaigns
            .iter()
            .filter(|campaign| campaign.overload.is_some())
            .map(|campaign| format!("/{}", campaign.occurrence))
            .collect();
        let of_sampled = |id: &String| id.starts_with("tp/") && sampled.iter().any(|suffix| id.ends_with(suffix.as_str()));
        let expected = scenario.expected_run_ids(scenario.window());
        let (seen_sampled, seen_rest): (BTreeSet<String>, BTreeSet<String>) = seen.into_iter().partition(of_sampled);
        let (expected_sampled, expected_rest): (BTreeSet<String>, BTreeSet<String>) = expected.into_iter().partition(of_sampled);
        prop_assert_eq!(seen_rest, expected_rest);
        prop_assert!(seen_sampled.is_subset(&expected_sampled), "{:?}", seen_sampled.difference(&expected_sampled).next());
        prop_assert!(plan.non_starts.iter().all(|n| !n.reason.is_empty()));
    }

    #[test]
    fn a_campaign_measures_every_pair_once_per_cycle(scenario in scenario()) {
        // Whole occurrences of the throughput task from the window's start on: one
        // when its campaign fits the period, `cycle` when it runs a sample.
        let every_s = scenario.throughput_every_s as i64;
        let first = scenario.window().start.timestamp().div_euclid(every_s) + 1;
        let occurrences = |count: i64| PlanWindow {
            start: DateTime::from_timestamp(first * every_s, 0).unwrap(),
            end: DateTime::from_timestamp((first + count) * every_s, 0).unwrap(),
        };
        let (config, fleet) = (scenario.config(), scenario.fleet());
        let one = plan(&config, &fleet, occurrences(1), &[], scenario.seed);
        let cycle = one.campaigns.first().and_then(|c| c.overload.as_ref()).map_or(1, |o| i64::from(o.cycle));
        let whole = plan(&config, &fleet, occurrences(cycle), &[], scenario.seed);
        let mut flows = BTreeSet::new();
        for id in whole.runs.iter().map(|r| &r.run_id).chain(whole.non_starts.iter().map(|n| &n.run_id)) {
            if let Some(flow) = id.strip_prefix("tp/") {
                let flow = flow.rsplit_once('/').unwrap().0.to_string();
                prop_assert!(flows.insert(flow.clone()), "{} measured twice in a cycle of {}", flow, cycle);
            }
        }
        let expected: BTreeSet<String> = scenario
            .expected_run_ids(occurrences(1))
            .iter()
            .filter_map(|id| id.strip_prefix("tp/"))
            .map(|flow| flow.rsplit_once('/').unwrap().0.to_string())
            .collect();
        prop_assert_eq!(flows, expected);
        prop_assert!(whole.campaigns.iter().all(|c| c.overload.as_ref().map_or(1, |o| i64::from(o.cycle)) == cycle));
    }

    #[test]
    fn nat_agents_are_only_clients(scenario in scenario()) {
        let plan = run_plan(&scenario);
        let fleet = scenario.fleet();
        let accepts = |name: &str| fleet.iter().find(|a| a.name == name).unwrap().accepts_inbound;
        for run in &plan.runs {
            prop_assert!(accepts(&run.server), "{} is behind NAT but serves {}", run.server, run.run_id);
        }
        for non_start in &plan.non_starts {
            if !accepts(&non_start.from) && !accepts(&non_start.to) {
                prop_assert!(non_start.reason.contains("accepts inbound"));
            }
        }
    }

    #[test]
    fn planning_is_deterministic_and_idempotent(scenario in scenario()) {
        let first = run_plan(&scenario);
        prop_assert_eq!(&first, &run_plan(&scenario));
        let replan = plan(&scenario.config(), &scenario.fleet(), scenario.window(), &first.runs, scenario.seed);
        prop_assert!(replan.runs.is_empty());
    }

    #[test]
    fn on_demand_runs_fit_or_preempt_only_what_they_may(
        scenario in scenario(),
        pair in (0..9usize, 0..9usize),
        now_offset_s in 0..600i64,
        window_len_s in 0..120i64,
        priority in -3..4i32,
        exclusive in any::<bool>(),
    ) {
        let plan = run_plan(&scenario);
        let config = scenario.config();
        let fleet = scenario.fleet();
        let (from, to) = (pair.0 % fleet.len(), pair.1 % fleet.len());
        prop_assume!(from != to);
        let now = scenario.window().start + chrono::Duration::seconds(now_offset_s);
        let request = OnDemandRequest {
            run_id: "request-1".to_string(),
            test: config.test(if exclusive { "bulk" } else { "rtt" }).unwrap().clone(),
            from: fleet[from].name.clone(),
            to: fleet[to].name.clone(),
            not_before: now,
            not_after: now + chrono::Duration::seconds(window_len_s),
            priority,
        };
        match place_request(now, &request, &fleet, &config.segments, &plan.runs) {
            RequestOutcome::Placed(placement) => {
                prop_assert!(placement.run.start >= now && placement.run.start <= request.not_after);
                let server = fleet.iter().find(|a| a.name == placement.run.server).unwrap();
                prop_assert!(server.accepts_inbound);
                for victim in &placement.preempted {
                    let original = plan.runs.iter().find(|r| r.run_id == victim.run_id).unwrap();
                    prop_assert!(original.priority < priority && original.start > now);
                }
                let mut kept: Vec<Occupancy> = plan
                    .runs
                    .iter()
                    .filter(|run| placement.preempted.iter().all(|victim| victim.run_id != run.run_id))
                    .map(Occupancy::from)
                    .collect();
                kept.push(Occupancy::from(&placement.run));
                let overlaps = find_overlaps(&kept);
                prop_assert!(overlaps.is_empty(), "{:?}", overlaps.first());
            }
            RequestOutcome::NonStart(non_start) => prop_assert!(!non_start.reason.is_empty()),
        }
    }
}
