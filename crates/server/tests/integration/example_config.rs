//! `docs/examples/mesh.toml` uses every test kind; planned over a fleet whose agents
//! advertise what the agent really runs (`vantage_agent::execute::capabilities`),
//! no run may be a non-start for want of an engine.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use vantage_model::config::load_config;
use vantage_scheduler::{plan, AgentInfo, PlanWindow};

#[test]
fn the_example_plans_every_kind_without_unsupported_tests() {
    let (_, config) = load_config(
        "mesh.toml",
        include_str!("../../../../docs/examples/mesh.toml"),
    )
    .expect("the example is valid");
    let capabilities = Some(vantage_agent::execute::capabilities().into_iter().collect());
    let agent = |name: &str, site: &str, inbound: bool| AgentInfo {
        name: name.to_string(),
        tags: BTreeMap::from([("site".to_string(), site.to_string())]),
        accepts_inbound: inbound,
        capabilities: Clone::clone(&capabilities),
        iperf3_listener: true,
    };
    let fleet = vec![
        agent("campus-1", "campus", true),
        agent("campus-2", "campus", true),
        agent("home-1", "home", false),
        agent("home-2", "home", false),
        agent("worker-1", "dc", true),
        agent("worker-2", "dc", true),
        agent("file-server", "dc", true),
    ];
    let start: DateTime<Utc> =
        DateTime::from_timestamp(1_800_000_000 - 1_800_000_000 % 21_600, 0).unwrap();
    let window = PlanWindow {
        start,
        end: start + chrono::Duration::hours(6),
    };
    let planned = plan(&config, &fleet, window, &[], 1);
    let unsupported: Vec<_> = planned
        .non_starts
        .iter()
        .filter(|non_start| non_start.reason.contains("does not offer"))
        .collect();
    assert!(unsupported.is_empty(), "{unsupported:#?}");
    let kinds: std::collections::BTreeSet<&str> =
        planned.runs.iter().map(|run| run.kind.as_str()).collect();
    assert_eq!(kinds, vantage_model::kinds::names().into_iter().collect());
    assert!(planned.runs.iter().any(|run| run.external));
}
