//! Behaviour of the planner through its public API.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use vantage_model::config::{load_config, ValidatedConfig};
use vantage_scheduler::{
    current_run_id, find_overlaps, place_request, plan, AgentInfo, ClaimMode, Occupancy,
    OnDemandRequest, PlanWindow, PlannedRun, RequestOutcome,
};

fn config(text: &str) -> ValidatedConfig {
    match load_config("test.toml", text) {
        Ok((_, validated)) => validated,
        Err(errors) => panic!("invalid test config: {errors:?}"),
    }
}

fn agent(name: &str, accepts_inbound: bool, tags: &[(&str, &str)]) -> AgentInfo {
    AgentInfo {
        name: name.to_string(),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        accepts_inbound,
        capabilities: None,
        iperf3_listener: true,
    }
}

fn agents(names: &[&str]) -> Vec<AgentInfo> {
    names.iter().map(|name| agent(name, true, &[])).collect()
}

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
}

fn window(from_s: i64, to_s: i64) -> PlanWindow {
    PlanWindow {
        start: at(from_s),
        end: at(to_s),
    }
}

fn overlaps(runs: &[PlannedRun]) -> Vec<vantage_scheduler::Overlap> {
    find_overlaps(&runs.iter().map(Occupancy::from).collect::<Vec<_>>())
}

const MESH_LATENCY: &str = r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "rtt"
type = "latency"
spec = { interval = "100ms", timeout = "1s" }

[[tasks]]
name = "ping-mesh"
test = "rtt"
group = "all"
every = "60s"
slip = "30s"
"#;

const MESH_THROUGHPUT: &str = r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "bulk"
type = "throughput"
spec = { duration = "10s" }

[[tasks]]
name = "tp-mesh"
test = "bulk"
group = "all"
every = "1h"
"#;

/// The latency mesh and the throughput campaign over the same agents.
fn latency_and_throughput_meshes() -> String {
    format!(
        "{MESH_LATENCY}\n{}",
        &MESH_THROUGHPUT[MESH_THROUGHPUT.find("[[tests]]").unwrap()..]
    )
}

#[test]
fn latency_mesh_runs_each_unordered_pair_once_within_the_slip() {
    let config = config(MESH_LATENCY);
    let plan = plan(
        &config,
        &agents(&["d", "b", "a", "c"]),
        window(0, 60),
        &[],
        7,
    );
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    let ids: BTreeSet<&str> = plan.runs.iter().map(|run| run.run_id.as_str()).collect();
    let occurrence = at(0).timestamp() / 60;
    let expected: BTreeSet<String> = [
        ("a", "b"),
        ("a", "c"),
        ("a", "d"),
        ("b", "c"),
        ("b", "d"),
        ("c", "d"),
    ]
    .iter()
    .map(|(from, to)| format!("ping-mesh/{occurrence}/{from}>{to}"))
    .collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect());
    for run in &plan.runs {
        assert!(run.start >= at(0) && run.start <= at(30), "{run:?}");
        assert_eq!(run.end - run.start, Duration::seconds(3));
        assert!(run
            .claims
            .iter()
            .all(|claim| claim.mode == ClaimMode::Shared));
        assert_eq!(run.spec["count"], 10);
    }
    // The slips are spread, not all at the nominal time.
    let starts: BTreeSet<_> = plan.runs.iter().map(|run| run.start).collect();
    assert!(starts.len() > 1);
}

#[test]
fn throughput_mesh_is_a_campaign_of_disjoint_rounds() {
    let config = config(MESH_THROUGHPUT);
    let names = ["a", "b", "c", "d", "e", "f"];
    let plan = plan(&config, &agents(&names), window(0, 3600), &[], 1);
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    // Both directions by default for exclusive tests: 2 x (N-1) rounds.
    assert_eq!(plan.runs.len(), 30);
    let campaign = &plan.campaigns[0];
    assert_eq!(
        (campaign.rounds, campaign.min_rounds, campaign.agents),
        (10, 10, 6)
    );
    // Each round is 10 s + 1 s guard, back to back.
    assert_eq!(campaign.end - campaign.start, Duration::seconds(110));
    assert!(overlaps(&plan.runs).is_empty());
    let mut by_round: BTreeMap<u32, Vec<&PlannedRun>> = BTreeMap::new();
    for run in &plan.runs {
        by_round
            .entry(run.campaign_round.unwrap())
            .or_default()
            .push(run);
    }
    for runs in by_round.values() {
        assert_eq!(runs.len(), 3, "every agent busy in every round");
        assert!(runs.iter().all(|run| run.start == runs[0].start));
    }
    let flows: BTreeSet<(String, String)> = plan
        .runs
        .iter()
        .map(|run| (run.client.clone(), run.server.clone()))
        .collect();
    assert_eq!(flows.len(), 30, "every ordered pair exactly once");
}

#[test]
fn odd_mesh_needs_n_rounds() {
    let text = MESH_THROUGHPUT.replace("every = \"1h\"", "every = \"1h\"\ndirections = \"one\"");
    let plan = plan(
        &config(&text),
        &agents(&["a", "b", "c", "d", "e"]),
        window(0, 3600),
        &[],
        1,
    );
    assert_eq!(plan.runs.len(), 10);
    assert_eq!(plan.campaigns[0].rounds, 5);
    assert!(overlaps(&plan.runs).is_empty());
}

#[test]
fn nat_agents_are_always_clients_and_two_nat_agents_cannot_meet() {
    let config = config(MESH_THROUGHPUT);
    let fleet = vec![
        agent("home1", false, &[]),
        agent("home2", false, &[]),
        agent("server", true, &[]),
    ];
    let plan = plan(&config, &fleet, window(0, 3600), &[], 3);
    for run in &plan.runs {
        assert_eq!(run.server, "server", "{run:?}");
    }
    // server>homeN is measured by homeN as client in reverse mode.
    let reverse = plan
        .runs
        .iter()
        .find(|run| run.run_id.ends_with("/server>home1"))
        .unwrap();
    assert_eq!((reverse.client.as_str(), reverse.reverse), ("home1", true));
    let forward = plan
        .runs
        .iter()
        .find(|run| run.run_id.ends_with("/home1>server"))
        .unwrap();
    assert_eq!((forward.client.as_str(), forward.reverse), ("home1", false));
    assert_eq!(plan.non_starts.len(), 2);
    for non_start in &plan.non_starts {
        assert!(
            non_start.reason.contains("accepts inbound"),
            "{non_start:?}"
        );
        assert!(
            non_start.run_id.contains("home1>home2") || non_start.run_id.contains("home2>home1")
        );
    }
}

#[test]
fn unregistered_agents_give_non_starts_not_silence() {
    let config = config(
        r#"
[[groups]]
name = "pairs"
kind = "list"
pairs = [["a", "b"], ["a", "ghost"]]

[[tests]]
name = "rtt"
type = "latency"
spec = { interval = "100ms", timeout = "1s" }

[[tasks]]
name = "t"
test = "rtt"
group = "pairs"
every = "10s"
"#,
    );
    let plan = plan(&config, &agents(&["a", "b"]), window(0, 30), &[], 0);
    assert_eq!(plan.runs.len(), 3);
    assert_eq!(plan.non_starts.len(), 3);
    assert!(plan
        .non_starts
        .iter()
        .all(|n| n.reason == "agent 'ghost' is not registered"));
}

#[test]
fn runs_crossing_a_shared_uplink_do_not_overlap() {
    let text = format!(
        "{MESH_THROUGHPUT}\n[[segments]]\nname = \"campus-up\"\nmembers = [\"site=campus\"]\n"
    );
    let fleet = vec![
        agent("c1", true, &[("site", "campus")]),
        agent("c2", true, &[("site", "campus")]),
        agent("h1", true, &[]),
        agent("h2", true, &[]),
    ];
    let plan = plan(&config(&text), &fleet, window(0, 3600), &[], 5);
    assert!(plan.non_starts.is_empty());
    assert_eq!(plan.runs.len(), 12);
    assert!(overlaps(&plan.runs).is_empty());
    let crossing: Vec<&PlannedRun> = plan
        .runs
        .iter()
        .filter(|run| {
            run.claims
                .iter()
                .any(|claim| claim.resource == "segment:campus-up")
        })
        .collect();
    // c1-c2 and h1-h2 stay on one side; the 4 cross pairs x 2 directions cross.
    assert_eq!(crossing.len(), 8);
    // Serialised on the uplink, so the campaign is longer than its 6 rounds.
    assert!(plan.campaigns[0].end - plan.campaigns[0].start >= Duration::seconds(8 * 11));
}

#[test]
fn planning_is_deterministic_and_replanning_is_idempotent() {
    let text = latency_and_throughput_meshes();
    let config = config(&text);
    let fleet = agents(&["a", "b", "c", "d", "e"]);
    let first = plan(&config, &fleet, window(0, 600), &[], 42);
    let again = plan(&config, &fleet, window(0, 600), &[], 42);
    assert_eq!(first, again);
    let replanned = plan(&config, &fleet, window(0, 600), &first.runs, 42);
    assert!(replanned.runs.is_empty(), "{:?}", replanned.runs.first());
    assert!(overlaps(&first.runs).is_empty());
    let other_seed = plan(&config, &fleet, window(0, 600), &[], 43);
    assert_ne!(first.runs, other_seed.runs, "the seed moves the slips");
}

#[test]
fn runs_stored_under_the_earlier_id_form_are_not_planned_again() {
    let text = latency_and_throughput_meshes();
    let config = config(&text);
    let fleet = agents(&["a", "b", "c", "d", "e"]);
    let first = plan(&config, &fleet, window(0, 600), &[], 42);
    // The occurrence comes before the pair.
    for run in &first.runs {
        let occurrence = run.run_id.split('/').nth(1).unwrap();
        assert!(occurrence.parse::<i64>().is_ok(), "{}", run.run_id);
    }
    // As an earlier version stored them: `<task>/<from>><to>/<occurrence>`.
    let stored: Vec<PlannedRun> = first
        .runs
        .iter()
        .map(|run| {
            let (task, rest) = run.run_id.split_once('/').unwrap();
            let (occurrence, pair) = rest.split_once('/').unwrap();
            PlannedRun {
                run_id: format!("{task}/{pair}/{occurrence}"),
                ..run.clone()
            }
        })
        .collect();
    assert_eq!(current_run_id(&stored[0].run_id), first.runs[0].run_id);
    let replanned = plan(&config, &fleet, window(0, 600), &stored, 42);
    assert!(replanned.runs.is_empty(), "{:?}", replanned.runs.first());
    // What the stored runs leave no room for is the same, its blockers named by their
    // stored ids.
    let mut expected = plan(&config, &fleet, window(0, 600), &first.runs, 42);
    for (new, old) in first.runs.iter().zip(&stored) {
        for non_start in &mut expected.non_starts {
            non_start.reason = non_start.reason.replace(&new.run_id, &old.run_id);
        }
    }
    assert!(!expected.non_starts.is_empty());
    assert_eq!(replanned, expected);
}

#[test]
fn only_run_ids_of_the_earlier_periodic_form_are_rewritten() {
    assert_eq!(
        current_run_id("tp-mesh/a>b/29999999"),
        "tp-mesh/29999999/a>b"
    );
    assert_eq!(current_run_id("tp-mesh/a>b/-3"), "tp-mesh/-3/a>b");
    for current in [
        "tp-mesh/29999999/a>b",
        "ping/7/a>[2001:db8::1]:5201",
        "on-demand/3f2a",
        "tp-mesh/a>b/x1",
        "tp-mesh/a>b/",
        "tp-mesh/a>b/1/2",
        "tp-mesh/ab/1",
    ] {
        assert_eq!(current_run_id(current), current);
    }
}

#[test]
fn consecutive_windows_respect_runs_planned_earlier() {
    let text = latency_and_throughput_meshes().replace(
        "every = \"1h\"",
        "every = \"5m\"\nslip = \"2m\"\nround_gap = \"3s\"",
    );
    let config = config(&text);
    let fleet = agents(&["a", "b", "c", "d"]);
    let mut all_runs: Vec<PlannedRun> = Vec::new();
    for hour_start in (0..1800).step_by(300) {
        let existing: Vec<PlannedRun> = all_runs
            .iter()
            .filter(|run| run.end > at(hour_start))
            .cloned()
            .collect();
        let plan = plan(
            &config,
            &fleet,
            window(hour_start, hour_start + 300),
            &existing,
            9,
        );
        assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts.first());
        all_runs.extend(plan.runs);
    }
    assert!(overlaps(&all_runs).is_empty());
    // 6 latency runs per minute and 12 throughput runs per 5 minutes, over 30 minutes.
    assert_eq!(all_runs.len(), 30 * 6 + 6 * 12);
}

#[test]
fn latency_without_room_beside_a_campaign_is_a_non_start_with_the_blocker() {
    let text = latency_and_throughput_meshes().replace("slip = \"30s\"", "slip = \"0s\"");
    let fleet = agents(&["a", "b"]);
    let plan = plan(&config(&text), &fleet, window(0, 60), &[], 0);
    // The campaign (exclusive, placed first) holds a and b from 0 s to 22 s.
    assert_eq!(plan.runs.len(), 2);
    assert_eq!(plan.non_starts.len(), 1);
    let reason = &plan.non_starts[0].reason;
    assert!(
        reason.contains("is held by run tp-mesh/") && reason.ends_with("/a>b"),
        "{reason}"
    );
}

#[test]
fn higher_priority_tasks_are_placed_first() {
    let text = r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "bulk"
type = "throughput"
spec = { duration = "10s" }

[[tasks]]
name = "low"
test = "bulk"
group = "all"
every = "1m"
directions = "one"

[[tasks]]
name = "high"
test = "bulk"
group = "all"
every = "1m"
directions = "one"
priority = 5
"#;
    let plan = plan(&config(text), &agents(&["a", "b"]), window(0, 60), &[], 0);
    let start_of = |task: &str| plan.runs.iter().find(|run| run.task == task).unwrap().start;
    assert_eq!(start_of("high"), at(0));
    assert_eq!(start_of("low"), at(11));
}

fn bulk_test() -> vantage_model::config::TestDef {
    config(MESH_THROUGHPUT).tests[0].clone()
}

fn request(run_id: &str, not_after_s: i64, priority: i32) -> OnDemandRequest {
    OnDemandRequest {
        run_id: run_id.to_string(),
        test: bulk_test(),
        from: "a".to_string(),
        to: "b".to_string(),
        not_before: at(0),
        not_after: at(not_after_s),
        priority,
    }
}

#[test]
fn on_demand_runs_take_the_earliest_free_slot() {
    let fleet = agents(&["a", "b", "c"]);
    let existing = plan(&config(MESH_THROUGHPUT), &fleet, window(0, 3600), &[], 0).runs;
    // The campaign is 6 rounds of 11 s from 0 s; a and b are busy in 2 of them.
    let RequestOutcome::Placed(placement) =
        place_request(at(0), &request("app-1", 600, 0), &fleet, &[], &existing)
    else {
        panic!("not placed");
    };
    assert!(placement.preempted.is_empty());
    let mut all = existing.clone();
    all.push(placement.run.clone());
    assert!(overlaps(&all).is_empty());
    let busy_until = existing
        .iter()
        .filter(|run| {
            run.client == "a" || run.server == "a" || run.client == "b" || run.server == "b"
        })
        .map(|run| run.end)
        .max()
        .unwrap();
    assert!(placement.run.start <= busy_until);
    assert_eq!(placement.run.task, "on-demand");
    // Placing the same request again returns the same run.
    let RequestOutcome::Placed(again) =
        place_request(at(0), &request("app-1", 600, 0), &fleet, &[], &all)
    else {
        panic!("not placed");
    };
    assert_eq!(again.run, placement.run);
}

#[test]
fn on_demand_preempts_only_lower_priority_runs_not_yet_started() {
    let fleet = agents(&["a", "b"]);
    // A planned run a->b from 10 s to 21 s (priority 0) and one from 21 s to 32 s (priority 9).
    let existing = {
        let text = MESH_THROUGHPUT.replace("every = \"1h\"", "every = \"1h\"\noffset = \"10s\"");
        plan(&config(&text), &fleet, window(0, 3600), &[], 0).runs
    };
    let mut existing = existing;
    existing[1].priority = 9;
    // Room before the planned runs: no preemption needed.
    let mut early = request("r0", -15, 0);
    early.not_before = at(-20);
    let RequestOutcome::Placed(free) = place_request(at(-20), &early, &fleet, &[], &existing)
    else {
        panic!("not placed");
    };
    assert!(free.preempted.is_empty());
    // Must start between 5 s and 15 s: only by preempting the priority-0 run.
    let mut urgent = request("r1", 15, 5);
    urgent.not_before = at(5);
    let RequestOutcome::Placed(placement) = place_request(at(0), &urgent, &fleet, &[], &existing)
    else {
        panic!("not placed");
    };
    assert_eq!(placement.preempted.len(), 1);
    assert_eq!(placement.preempted[0].run_id, existing[0].run_id);
    assert!(placement.preempted[0]
        .reason
        .contains("preempted by on-demand run r1"));
    // Once that run has started (now = 12 s) it cannot be preempted.
    let RequestOutcome::NonStart(non_start) =
        place_request(at(12), &urgent, &fleet, &[], &existing)
    else {
        panic!("placed over a running test");
    };
    assert!(
        non_start.reason.contains("is held by run"),
        "{}",
        non_start.reason
    );
    // Nor can an equal-priority request displace the priority-9 run.
    let mut late = request("r2", 25, 9);
    late.not_before = at(21);
    assert!(matches!(
        place_request(at(0), &late, &fleet, &[], &existing),
        RequestOutcome::NonStart(_)
    ));
}

#[test]
fn sub_millisecond_boundaries_neither_shrink_reservations_nor_repeat_occurrences() {
    let latency = config(
        MESH_LATENCY
            .replace("every = \"60s\"", "every = \"10s\"")
            .replace("slip = \"30s\"", "slip = \"5s\"")
            .as_str(),
    );
    let fleet = agents(&["a", "b", "c"]);
    let split = at(30) + Duration::microseconds(500);
    let first = plan(
        &latency,
        &fleet,
        PlanWindow {
            start: at(0),
            end: split,
        },
        &[],
        1,
    );
    let second = plan(
        &latency,
        &fleet,
        PlanWindow {
            start: split,
            end: at(60),
        },
        &[],
        1,
    );
    let whole = plan(&latency, &fleet, window(0, 60), &[], 1);
    let ids = |runs: &[PlannedRun]| {
        runs.iter()
            .map(|r| r.run_id.clone())
            .collect::<BTreeSet<_>>()
    };
    let mut halves = ids(&first.runs);
    let second_ids = ids(&second.runs);
    assert!(halves.is_disjoint(&second_ids));
    halves.extend(second_ids);
    assert_eq!(halves, ids(&whole.runs));

    // An exclusive run recorded as ending 0.5 ms past a whole millisecond.
    let mut existing = plan(
        &config(MESH_THROUGHPUT),
        &agents(&["a", "b"]),
        window(0, 3600),
        &[],
        0,
    )
    .runs;
    existing.truncate(1);
    existing[0].end += Duration::microseconds(500);
    let mut request = request("r", 60, 0);
    request.not_before = existing[0].start;
    let RequestOutcome::Placed(placement) =
        place_request(at(-1), &request, &agents(&["a", "b"]), &[], &existing)
    else {
        panic!("not placed");
    };
    existing.push(placement.run);
    assert!(overlaps(&existing).is_empty(), "{:?}", overlaps(&existing));
}

#[test]
fn agents_only_get_tests_they_offer() {
    let mut fleet = agents(&["a", "b", "c"]);
    fleet[2].capabilities = Some(["latency".to_string()].into_iter().collect());
    fleet[1].capabilities = Some(
        ["latency".to_string(), "throughput".to_string()]
            .into_iter()
            .collect(),
    );
    let plan = plan(&config(MESH_THROUGHPUT), &fleet, window(0, 3600), &[], 0);
    assert_eq!(plan.runs.len(), 2, "only a<->b");
    assert_eq!(plan.non_starts.len(), 4);
    for non_start in &plan.non_starts {
        assert_eq!(
            non_start.reason,
            "agent 'c' does not offer throughput tests (it offers: latency)"
        );
    }
    let latency = plan_latency_mesh(&fleet);
    assert!(latency.non_starts.is_empty());
}

#[test]
fn iperf3_runs_need_a_listener_on_their_server() {
    let mut fleet = agents(&["a", "b", "c"]);
    fleet[2].iperf3_listener = false;
    let iperf3 = MESH_THROUGHPUT.replace(
        "spec = { duration = \"10s\" }",
        "spec = { duration = \"10s\", tool = \"iperf3\" }",
    );
    let planned = plan(&config(&iperf3), &fleet, window(0, 3600), &[], 0);
    // Both directions of each pair: c can be a client, never the server.
    let servers: Vec<&str> = planned.runs.iter().map(|run| run.server.as_str()).collect();
    assert_eq!(planned.runs.len(), 4, "{servers:?}");
    assert!(!servers.contains(&"c"), "{servers:?}");
    assert_eq!(planned.non_starts.len(), 2);
    for non_start in &planned.non_starts {
        assert_eq!(
            non_start.reason,
            "agent 'c' runs no iperf3-compatible listener (started with --no-iperf3), so it cannot be the server of a run with tool = \"iperf3\""
        );
    }
    // Native throughput needs only the endpoint, which every agent runs.
    let native = plan(&config(MESH_THROUGHPUT), &fleet, window(0, 3600), &[], 0);
    assert!(native.non_starts.is_empty(), "{:?}", native.non_starts);
}

fn plan_latency_mesh(fleet: &[AgentInfo]) -> vantage_scheduler::Plan {
    plan(&config(MESH_LATENCY), fleet, window(0, 60), &[], 0)
}

#[test]
fn a_campaign_longer_than_its_period_runs_one_round_in_a_cycle_and_says_so() {
    let text = MESH_THROUGHPUT.replace("every = \"1h\"", "every = \"60s\"");
    let fleet = agents(&["a", "b", "c", "d"]);
    // Two occurrences (nominal at 0 s and 60 s).
    let plan = plan(&config(&text), &fleet, window(0, 120), &[], 0);
    // Each agent takes part in 6 runs of 11 s (3 rounds per direction): 66 s, more
    // than the 60 s period; 5 fit, so each occurrence runs one round in two.
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    assert_eq!(plan.campaigns.len(), 2);
    let overload = plan.campaigns[0].overload.clone().expect("overloaded");
    assert_eq!(
        (overload.busiest.as_str(), overload.busiest_runs),
        ("agent:a", 6)
    );
    assert_eq!(
        (overload.needed_ms, overload.available_ms),
        (66_000, 60_000)
    );
    assert_eq!((overload.rounds_total, overload.cycle), (6, 2));
    assert!(overload.every_agent_each_time);
    assert_eq!(
        overload.describe("tp-mesh"),
        "task 'tp-mesh' does not fit its period: agent:a takes part in 6 of its runs, 0.02 h back to back, \
         but the 1m period leaves 0.02 h after its slip. Each occurrence runs 1 round in 2 \
         (about 3 of 6 rounds), so every agent takes part in every occurrence and every pair is measured once every 2 periods; \
         to measure every pair each time, set every = \"2m\" (or use fewer agents, a shorter test or round gap)"
    );
    // Every directed pair exactly once over the cycle, each occurrence within its period.
    let mut pairs = BTreeSet::new();
    for run in &plan.runs {
        assert!(
            pairs.insert((run.client.clone(), run.server.clone())),
            "{}",
            run.run_id
        );
        let nominal_s = if run
            .run_id
            .starts_with(&format!("tp-mesh/{}/", at(0).timestamp() / 60))
        {
            0
        } else {
            60
        };
        assert!(
            run.start >= at(nominal_s) && run.end <= at(nominal_s + 60),
            "{run:?}"
        );
    }
    assert_eq!(pairs.len(), 12);
    for campaign in &plan.campaigns {
        assert_eq!(
            (campaign.agents, campaign.runs_planned, campaign.rounds),
            (4, 6, 3)
        );
    }
    assert!(overlaps(&plan.runs).is_empty());
}

#[test]
fn a_campaign_run_pushed_past_its_period_by_other_runs_is_a_non_start_with_the_reason() {
    // Agent a is held for the first 29 s by a run of another task.
    let hold = config(
        r#"
[[groups]]
name = "pair"
kind = "list"
pairs = [["a", "x"]]

[[tests]]
name = "long"
type = "throughput"
spec = { duration = "28s" }

[[tasks]]
name = "hold"
test = "long"
group = "pair"
every = "60s"
directions = "one"
"#,
    );
    let mut fleet = agents(&["a", "b", "c", "d"]);
    let held = plan(&hold, &agents(&["a", "x"]), window(0, 60), &[], 0).runs;
    assert_eq!((held[0].start, held[0].end), (at(0), at(29)));
    let text = MESH_THROUGHPUT.replace("every = \"1h\"", "every = \"60s\"\ndirections = \"one\"");
    fleet.push(agent("x", true, &[]));
    let plan = plan(&config(&text), &fleet[..4], window(0, 60), &held, 0);
    // Three rounds of 11 s fit the period on their own, so nothing is sampled; but
    // a's runs start at 29 s and 40 s, and its partners' next runs wait for them.
    assert!(plan.campaigns[0].overload.is_none());
    // a's partners wait for it in turn: a>b and c>d of round 2 would start at 51 s.
    assert_eq!(plan.runs.len(), 4);
    let reasons: Vec<(&str, &str)> = plan
        .non_starts
        .iter()
        .map(|non_start| (non_start.run_id.as_str(), non_start.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    for (run_id, reason) in reasons {
        let held = if run_id.ends_with("/a>b") { "b" } else { "d" };
        assert_eq!(
            reason,
            format!(
                "campaign round 2 does not fit in the period: agent:{held} is busy with earlier runs of this campaign until {}, too late to end before the next occurrence",
                at(51).to_rfc3339()
            )
        );
    }
    assert!(plan.runs.iter().all(|run| run.end <= at(60)));
}

#[test]
fn external_targets_are_servers_and_hold_their_own_resource() {
    let config = config(
        r#"
[[groups]]
name = "to-iperf"
kind = "external"
members = ["*"]
targets = ["iperf.example.net:5201", "192.0.2.7"]

[[tests]]
name = "bulk"
type = "throughput"
spec = { tool = "iperf3", duration = "5s" }

[[tasks]]
name = "public-iperf"
test = "bulk"
group = "to-iperf"
every = "1h"
slip = "10m"
"#,
    );
    // b is behind NAT: it can still be the client of an external host.
    let fleet = vec![
        agent("a", true, &[]),
        agent("b", false, &[]),
        agent("c", true, &[]),
    ];
    let plan = plan(&config, &fleet, window(0, 3600), &[], 1);
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    // Each agent measures each host once, in one direction only.
    assert_eq!(plan.runs.len(), 6);
    for run in &plan.runs {
        assert!(run.external, "{run:?}");
        assert!(["a", "b", "c"].contains(&run.client.as_str()), "{run:?}");
        assert!(!run.reverse);
        let resources: Vec<&str> = run.claims.iter().map(|c| c.resource.as_str()).collect();
        assert_eq!(
            resources,
            vec![
                format!("agent:{}", run.client).as_str(),
                format!("target:{}", run.server).as_str()
            ]
        );
    }
    // Exclusive runs towards one iperf3 server never overlap, whichever agent runs them.
    assert!(overlaps(&plan.runs).is_empty());
    let to_first: Vec<&PlannedRun> = plan
        .runs
        .iter()
        .filter(|run| run.server == "iperf.example.net:5201")
        .collect();
    assert_eq!(to_first.len(), 3);
}

#[test]
fn external_groups_refuse_both_directions_and_bad_hosts() {
    let text = r#"
[[groups]]
name = "ext"
kind = "external"
members = ["*"]
targets = ["ok.example.net", "bad host", "h:0"]

[[tests]]
name = "bulk"
type = "throughput"

[[tasks]]
name = "t"
test = "bulk"
group = "ext"
every = "1h"
directions = "both"
"#;
    let errors = load_config("test.toml", text).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "groups[0].targets[1]",
            "groups[0].targets[2]",
            "tasks[0].directions"
        ],
        "{errors:?}"
    );
}

/// Counters on every agent of the latency mesh's group and of a list, beside the mesh.
const COUNTERS: &str = r#"
[[groups]]
name = "pairs"
kind = "list"
pairs = [["a", "b"], ["b", "c"]]

[[tests]]
name = "nics"
type = "counters"
spec = { interval = "1s", count = 5 }

[[tasks]]
name = "counters-mesh"
test = "nics"
group = "all"
every = "60s"

[[tasks]]
name = "counters-list"
test = "nics"
group = "pairs"
every = "60s"
"#;

#[test]
fn agents_measuring_alone_run_once_each_and_claim_nothing() {
    let counters_config = config(&format!("{MESH_LATENCY}{COUNTERS}"));
    let plan = plan(
        &counters_config,
        &agents(&["a", "b", "c"]),
        window(0, 60),
        &[],
        0,
    );
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    for task in ["counters-mesh", "counters-list"] {
        let runs: Vec<&PlannedRun> = plan.runs.iter().filter(|run| run.task == task).collect();
        let clients: Vec<&str> = runs.iter().map(|run| run.client.as_str()).collect();
        assert_eq!(clients, ["a", "b", "c"], "{task}");
        for run in runs {
            // The agent is its own server; a background run holds nothing, so the
            // latency mesh starts on time beside it.
            assert_eq!(run.server, run.client);
            assert!(run.claims.is_empty());
            assert_eq!(run.start, at(0));
            assert_eq!(
                run.run_id,
                format!("{task}/30000000/{}>{}", run.client, run.client)
            );
        }
    }
    assert_eq!(
        plan.runs
            .iter()
            .filter(|run| run.task == "ping-mesh")
            .count(),
        3
    );
    // Asked for between two agents, it is refused with the reason.
    let mut request = request("app-2", 600, 0);
    request.test = counters_config.test("nics").unwrap().clone();
    let RequestOutcome::NonStart(refused) =
        place_request(at(0), &request, &agents(&["a", "b"]), &[], &[])
    else {
        panic!("placed");
    };
    assert!(
        refused.reason.contains("one agent's alone"),
        "{}",
        refused.reason
    );
}

#[test]
fn a_campaign_slip_longer_than_its_room_in_the_period_is_drawn_within_the_room() {
    // 4 s tests (5 s reserved with the guard) every 8 s: a start at most 3 s late still
    // ends before the next occurrence, whatever the 6 s slip allows.
    let config = config(
        r#"
[[groups]]
name = "pair"
kind = "list"
pairs = [["a", "b"]]

[[tests]]
name = "bulk"
type = "throughput"
spec = { duration = "4s" }

[[tasks]]
name = "often"
test = "bulk"
group = "pair"
every = "8s"
slip = "6s"
directions = "one"
"#,
    );
    let plan = plan(&config, &agents(&["a", "b"]), window(0, 800), &[], 1);
    assert!(plan.non_starts.is_empty(), "{:?}", plan.non_starts);
    assert_eq!(plan.runs.len(), 100);
    let slips: BTreeSet<i64> = plan
        .runs
        .iter()
        .map(|run| (run.start - at(0)).num_milliseconds() % 8_000)
        .collect();
    assert!(slips.iter().all(|&slip_ms| slip_ms <= 3_000), "{slips:?}");
    assert!(slips.len() > 50, "starts spread over the room: {slips:?}");
    assert!(overlaps(&plan.runs).is_empty());
}
