//! Properties of the planner over random fleets and configurations.

use std::collections::BTreeSet;

use chrono::DateTime;
use proptest::prelude::*;
use vantage_model::config::{load_config, ValidatedConfig};
use vantage_scheduler::{
    find_overlaps, place_request, plan, plan_reserved, reserved_reach, AgentInfo, LightTasks,
    Occupancy, OnDemandRequest, Plan, PlanWindow, RequestOutcome,
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
                ids.insert(format!("lat/{k}/{a}>{b}"));
            }
        }
        for k in occurrences(self.throughput_every_s as i64) {
            for (a, b) in &throughput_flows {
                ids.insert(format!("tp/{k}/{a}>{b}"));
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
            .map(|campaign| format!("tp/{}/", campaign.occurrence))
            .collect();
        let of_sampled = |id: &String| sampled.iter().any(|prefix| id.starts_with(prefix.as_str()));
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
                let flow = flow.split_once('/').unwrap().1.to_string();
                prop_assert!(flows.insert(flow.clone()), "{} measured twice in a cycle of {}", flow, cycle);
            }
        }
        let expected: BTreeSet<String> = scenario
            .expected_run_ids(occurrences(1))
            .iter()
            .filter_map(|id| id.strip_prefix("tp/"))
            .map(|flow| flow.split_once('/').unwrap().1.to_string())
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
    fn reserved_runs_and_each_clients_light_runs_are_the_full_plan(scenario in scenario()) {
        let (config, fleet, window) = (scenario.config(), scenario.fleet(), scenario.window());
        let full = run_plan(&scenario);
        let light = LightTasks::new(&config, &fleet);
        // The latency mesh is light unless the throughput task outranks it.
        let expected_light: Vec<&str> = if scenario.throughput_priority >= 0 { vec!["lat"] } else { vec![] };
        prop_assert_eq!(light.task_names().collect::<Vec<_>>(), expected_light);
        let reserved = plan_reserved(&config, &fleet, window, &[], scenario.seed, &light, window.start);
        // A pass needs the stored runs only as far as what it places can reach.
        match reserved_reach(&config, window) {
            Some(reach) => prop_assert!(
                reserved.runs.iter().all(|run| run.end <= reach),
                "a run ends after the reach {}: {:?}", reach, reserved.runs.iter().max_by_key(|run| run.end)
            ),
            None => prop_assert!(reserved.runs.is_empty()),
        }
        let (mut runs, mut non_starts) = (reserved.runs.clone(), reserved.non_starts.clone());
        for agent in &fleet {
            let mine = light.runs_for(&agent.name, window, &reserved.runs, scenario.seed);
            prop_assert!(mine.runs.iter().all(|run| run.client == agent.name));
            // A fetch that finds no light run due skips reading what is in the way.
            if !light.has_runs_in(&agent.name, window) {
                prop_assert!(mine.runs.is_empty() && mine.non_starts.is_empty());
            }
            runs.extend(mine.runs);
            non_starts.extend(mine.non_starts);
        }
        let by_id = |mut plan: Plan| {
            plan.runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
            plan.non_starts.sort_by(|a, b| a.run_id.cmp(&b.run_id));
            plan
        };
        let (full, split) = (by_id(full), by_id(Plan { runs, non_starts, campaigns: reserved.campaigns }));
        prop_assert_eq!(&split.runs, &full.runs);
        prop_assert_eq!(&split.non_starts, &full.non_starts);
        prop_assert_eq!(&split.campaigns, &full.campaigns);
    }

    #[test]
    fn no_exclusive_run_starts_before_the_light_runs_handed_out(scenario in scenario(), frontier_s in 0..300i64) {
        let (config, fleet, window) = (scenario.config(), scenario.fleet(), scenario.window());
        let light = LightTasks::new(&config, &fleet);
        let not_before = window.start + chrono::Duration::seconds(frontier_s);
        let reserved = plan_reserved(&config, &fleet, window, &[], scenario.seed, &light, not_before);
        for run in reserved.runs.iter().filter(|run| run.task == "tp") {
            prop_assert!(run.start >= not_before, "{} starts at {} before {}", run.run_id, run.start, not_before);
        }
        let occupancies: Vec<Occupancy> = reserved.runs.iter().map(Occupancy::from).collect();
        let overlaps = find_overlaps(&occupancies);
        prop_assert!(overlaps.is_empty(), "{:?}", overlaps.first());
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

/// A thousand agents for a shortened horizon, planned the way the server does at
/// scale: the exclusive runs reserved ahead, each agent's light runs placed when it
/// fetches them. Every light flow is placed or a non-start exactly once, and no
/// conflicting runs overlap: conflicts need an exclusive claim, and every exclusive
/// run is reserved, so checking the reserved runs with each agent's light runs
/// checks every pair that could conflict.
#[test]
fn a_thousand_agents_plan_without_overlaps() {
    let fleet: Vec<AgentInfo> = (0..1000)
        .map(|index| AgentInfo {
            name: format!("agent-{index:04}"),
            tags: [("site".to_string(), SITES[index % 3].to_string())]
                .into_iter()
                .collect(),
            accepts_inbound: index % 10 != 0,
            capabilities: None,
            iperf3_listener: true,
        })
        .collect();
    let config = load_config(
        "thousand.toml",
        r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "rtt"
type = "latency"
spec = { count = 10, interval = "100ms", timeout = "1s" }

[[tests]]
name = "bulk"
type = "throughput"
spec = { duration = "10s" }

[[tasks]]
name = "lat"
test = "rtt"
group = "all"
every = "60s"
slip = "50s"
directions = "both"

[[tasks]]
name = "tp"
test = "bulk"
group = "all"
every = "1h"
round_gap = "3s"

[[segments]]
name = "up"
members = ["site=campus"]
"#,
    )
    .unwrap_or_else(|errors| panic!("{errors:?}"))
    .1;
    // The first minute of an hour: the throughput campaign and one latency occurrence.
    let start = DateTime::from_timestamp(1_900_000_000 / 3600 * 3600, 0).unwrap();
    let window = PlanWindow {
        start,
        end: start + chrono::Duration::seconds(60),
    };
    let light = LightTasks::new(&config, &fleet);
    assert_eq!(light.flow_count(), 1000 * 999);
    let reserved = plan_reserved(&config, &fleet, window, &[], 7, &light, window.start);
    let campaign = &reserved.campaigns[0];
    assert!(campaign.overload.is_some() && campaign.runs_planned > 0);
    // What the server passes in: the reserved runs that may overlap the light runs.
    let light_end = window.end + chrono::Duration::from_std(light.tail()).unwrap();
    let in_the_way: Vec<_> = reserved
        .runs
        .iter()
        .filter(|run| run.end > window.start && run.start < light_end)
        .cloned()
        .collect();
    // NAT agents cannot serve each other: those pairs are the planner's non-starts.
    let mut accounted = reserved
        .non_starts
        .iter()
        .filter(|n| n.task == "lat")
        .count();
    assert_eq!(accounted, 100 * 99);
    let mut ids = BTreeSet::new();
    for agent in &fleet {
        let mine = light.runs_for(&agent.name, window, &in_the_way, 7);
        accounted += mine.runs.len() + mine.non_starts.len();
        for id in mine
            .runs
            .iter()
            .map(|r| &r.run_id)
            .chain(mine.non_starts.iter().map(|n| &n.run_id))
        {
            assert!(ids.insert(id.clone()), "{id} placed twice");
        }
        let occupancies: Vec<Occupancy> = in_the_way
            .iter()
            .chain(&mine.runs)
            .map(Occupancy::from)
            .collect();
        let overlaps = find_overlaps(&occupancies);
        assert!(overlaps.is_empty(), "{:?}", overlaps.first());
    }
    assert_eq!(accounted, 1000 * 999);
}
