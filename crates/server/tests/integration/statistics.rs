//! PostgreSQL's statistics about `runs` follow what the planner stores: searches for an
//! agent's waiting runs are planned by them.

use vantage_scheduler::{Claim, ClaimMode};
use vantage_server::archive::{Archive, RunRecord, RunState};

use crate::common::{Kind, TestDb};

fn scheduled_run(index: usize) -> RunRecord {
    let client = format!("agent-{}", index % 10);
    RunRecord {
        id: format!("throughput-mesh/{client}>peer/{index}"),
        task: "throughput-mesh".into(),
        test: "throughput".into(),
        test_name: "bulk".into(),
        client: client.clone(),
        server: "peer".into(),
        target: None,
        spec: serde_json::json!({"duration": "10s"}).into(),
        exclusive: true,
        reverse: false,
        priority: 0,
        claims: vec![Claim {
            resource: format!("agent:{client}"),
            mode: ClaimMode::Exclusive,
        }],
        planned_start_us: 1_000_000_000 + index as i64 * 20_000_000,
        planned_end_us: 1_000_000_000 + index as i64 * 20_000_000 + 10_000_000,
        actual_start_us: None,
        actual_end_us: None,
        state: RunState::Scheduled,
        reason: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_a_thousand_scheduled_runs_has_postgres_analyse_runs() {
    let db = TestDb::new(Kind::Postgres, "statistics").await;
    let archive = Archive::open(&db.url).await.expect("archive opens");
    let reltuples = || {
        db.postgres_value("SELECT reltuples FROM pg_class WHERE oid = 'runs'::regclass")
            .parse::<f64>()
            .expect("reltuples is a number")
    };
    let runs: Vec<RunRecord> = (0..1_000).map(scheduled_run).collect();
    assert_eq!(
        archive.insert_runs(&runs[..999]).await.expect("stored"),
        999
    );
    assert!(
        reltuples() < 1.0,
        "999 runs stored: runs is not analysed yet (reltuples {})",
        reltuples()
    );
    // The thousandth, in a store of its own: what counts is the total since the last analyse.
    assert_eq!(archive.insert_runs(&runs[999..]).await.expect("stored"), 1);
    assert_eq!(
        reltuples(),
        1_000.0,
        "a thousand runs stored as scheduled: runs is analysed"
    );
}
