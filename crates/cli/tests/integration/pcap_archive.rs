//! `vantage pcap FILE --server`: a capture's flow records stored in the archive as a
//! completed capture run of the host that took it, read back through the results API
//! exactly as `vantage pcap --json` printed them; the same capture sent again is stored
//! once; refusals say what and where. On SQLite and on PostgreSQL.

use crate::common;

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use common::{Api, Kind, TestDb};
use serde_json::Value;
use support::capture::{pcap, udp_frame};
use support::vantage_bin;
use vantage_server::planner::PlannerOptions;

/// 2026-09-21T14:13:20Z, so the stored run sits at a plausible time.
const EPOCH_US: u64 = 1_790_000_000_000_000;

/// Runs `vantage ARGS` off the runtime's threads (the server runs on them).
async fn vantage(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(vantage_bin())
            .args(&args)
            .output()
            .expect("run vantage")
    })
    .await
    .unwrap()
}

fn args(file: &Path, extra: &[&str]) -> Vec<String> {
    ["pcap", file.to_str().unwrap()]
        .iter()
        .chain(extra)
        .map(|arg| arg.to_string())
        .collect()
}

/// `vantage pcap FILE --server URL --token TOKEN --agent AGENT`, then `extra`.
async fn store(file: &Path, url: &str, token: &str, agent: &str, extra: &[&str]) -> Output {
    let mut options = vec!["--server", url, "--token", token, "--agent", agent];
    options.extend(extra);
    vantage(args(file, &options)).await
}

/// Two UDP flows: 6 datagrams of 1000 payload bytes to port 5004, 3 of 200 to 5005.
fn two_flows() -> Vec<u8> {
    let mut records: Vec<(u64, Vec<u8>)> = (0..6)
        .map(|index| {
            (
                EPOCH_US + index * 100_000,
                udp_frame([10, 1, 0, 1], [10, 1, 0, 2], 5004, 1042),
            )
        })
        .collect();
    records.extend((0..3).map(|index| {
        (
            EPOCH_US + 50_000 + index * 200_000,
            udp_frame([10, 1, 0, 3], [10, 1, 0, 2], 5005, 242),
        )
    }));
    records.sort_by_key(|(time_us, _)| *time_us);
    pcap(&records)
}

async fn stored_captures(admin: &Api, client: &str) -> Vec<Value> {
    let (status, body) = admin
        .get(&format!(
            "/api/v1/results?test=capture&client={client}&raw=true"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    body["results"].as_array().unwrap().clone()
}

async fn stores_flow_records_once(kind: Kind) {
    let db = TestDb::new(kind, "pcap_import").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let url = server.url();
    let admin = Api::new(&url, &server.admin_token);
    let agent_token = admin.token("edge-1", "agent").await;
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("two-flows.pcap");
    std::fs::write(&file, two_flows()).unwrap();

    let alone = vantage(args(&file, &["--json"])).await;
    assert!(alone.status.success(), "{alone:?}");
    let printed: Value = serde_json::from_slice(&alone.stdout).unwrap();
    let stored = store(&file, &url, &agent_token, "edge-1", &["--json"]).await;
    let stderr = String::from_utf8_lossy(&stored.stderr);
    assert!(stored.status.success(), "{stderr}");
    // Storing changes nothing in what is printed.
    assert_eq!(stored.stdout, alone.stdout);
    assert!(
        stderr.contains(&format!("stored 2 flow records in {url} as run import-")),
        "{stderr}"
    );
    assert!(stderr.contains(" of edge-1"), "{stderr}");

    let results = stored_captures(&admin, "edge-1").await;
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    let run_id = result["run_id"].as_str().unwrap().to_string();
    assert_eq!(result["outcome"], "completed");
    assert_eq!(result["server"], "edge-1");
    assert_eq!(
        result["start_time"].as_str().unwrap(),
        "2026-09-21T14:13:20Z",
        "the run starts at the capture's first frame"
    );
    // The last frame is 0.5 s after the first.
    assert_eq!(
        result["end_time"].as_str().unwrap(),
        "2026-09-21T14:13:20.500Z"
    );
    let document = &result["result"];
    for part in ["capture", "flows", "bandwidth_ecdf"] {
        assert_eq!(
            document[part], printed[part],
            "stored {part} differs from the printed"
        );
    }
    assert_eq!(document["import"]["file"], "two-flows.pcap");
    assert_eq!(document["import"]["imported_by"], "edge-1");
    assert_eq!(document["summary"]["flows"], 2);
    assert_eq!(document["summary"]["payload_bytes"], 6 * 1000 + 3 * 200);
    let metrics = &result["metrics"];
    assert_eq!(metrics["capture_flows"], 2.0);
    assert_eq!(metrics["capture_packets"], 9.0);
    assert_eq!(metrics["capture_payload_bytes"], 6600.0);
    assert_eq!(metrics["capture_retransmits"], 0.0);
    assert_eq!(metrics["capture_truncated_frames"], 0.0);

    let (status, runs) = admin
        .get("/api/v1/runs?from=2026-09-21T14:00:00Z&to=2026-09-21T15:00:00Z")
        .await;
    assert_eq!(status, 200, "{runs}");
    let run = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("run {run_id} listed: {runs}"));
    assert_eq!(run["task"], "import:capture");
    assert_eq!(run["state"], "completed");

    // The same capture again, under another file name: acknowledged, stored once.
    let copy = directory.path().join("copy.pcap");
    std::fs::copy(&file, &copy).unwrap();
    let again = store(&copy, &url, &agent_token, "edge-1", &[]).await;
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{url} already holds this capture as run {run_id}; nothing changed"
        )),
        "{stderr}"
    );
    assert_eq!(stored_captures(&admin, "edge-1").await.len(), 1);

    // An agent's token stores only that agent's captures; the report is still printed.
    let refused = store(&file, &url, &agent_token, "router-3", &[]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("2 flows"),
        "{refused:?}"
    );
    assert!(
        stderr.contains("not stored:")
            && stderr.contains("403 Forbidden")
            && stderr.contains("cannot act as agent 'router-3'"),
        "{stderr}"
    );
    // An admin stores any host's: another host's capture is another run.
    let by_admin = store(&file, &url, &server.admin_token, "router-3", &[]).await;
    assert!(by_admin.status.success(), "{by_admin:?}");
    let router = stored_captures(&admin, "router-3").await;
    assert_eq!(router.len(), 1);
    assert_ne!(router[0]["run_id"], run_id.as_str());

    // Refusals: what and where, nothing stored.
    let bad_name = store(&file, &url, &server.admin_token, "../etc", &[]).await;
    let stderr = String::from_utf8_lossy(&bad_name.stderr);
    assert!(!bad_name.status.success());
    assert!(
        stderr.contains("422 Unprocessable Entity: field 'agent': invalid name '../etc'"),
        "{stderr}"
    );
    let empty = directory.path().join("empty.pcap");
    std::fs::write(&empty, pcap(&[])).unwrap();
    let refused = store(&empty, &url, &agent_token, "edge-1", &[]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("field 'report.capture': the capture holds no frame"),
        "{stderr}"
    );
    let no_agent = vantage(args(&file, &["--server", &url, "--token", &agent_token])).await;
    assert!(!no_agent.status.success());
    assert!(
        String::from_utf8_lossy(&no_agent.stderr)
            .contains("--server needs --agent NAME, the host the capture was taken on"),
        "{no_agent:?}"
    );
    assert_eq!(stored_captures(&admin, "edge-1").await.len(), 1);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pcap_stores_flow_records_once_on_sqlite() {
    stores_flow_records_once(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pcap_stores_flow_records_once_on_postgres() {
    stores_flow_records_once(Kind::Postgres).await;
}
