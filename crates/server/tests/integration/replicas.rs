//! Two replicas on one PostgreSQL database act as one for subscribers: a subscriber of
//! either sees every result stored through either replica, every app metric and alert
//! published to either, each once.

use crate::common;
use crate::fixtures;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Api, Kind, TestDb};
use fixtures::{run_record, upload};
use serde_json::json;
use vantage_server::archive::now_us;
use vantage_server::planner::PlannerOptions;

const RESULTS: usize = 40;

/// An open event stream and what it carried so far.
struct Subscriber {
    stream: reqwest::Response,
    text: String,
}

impl Subscriber {
    async fn open(api: &Api) -> Subscriber {
        let stream = api
            .http
            .get(format!(
                "{}/api/v1/subscribe?kinds=result,app_metric,alert",
                api.base
            ))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        Subscriber {
            stream,
            text: String::new(),
        }
    }

    /// The events seen, as (kind, data) in order.
    fn events(&self) -> Vec<(String, serde_json::Value)> {
        self.text
            .split("\n\n")
            .filter_map(|block| {
                let kind = block.lines().find_map(|l| l.strip_prefix("event: "))?;
                let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
                Some((kind.to_string(), serde_json::from_str(data).ok()?))
            })
            .collect()
    }

    /// Reads until `done` holds for the events seen, for at most 20 s.
    async fn read_until(&mut self, done: impl Fn(&[(String, serde_json::Value)]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !done(&self.events()) {
            let chunk = tokio::time::timeout_at(deadline, self.stream.chunk())
                .await
                .unwrap_or_else(|_| panic!("events missing after 20 s; seen: {}", self.text))
                .expect("stream readable")
                .expect("stream open");
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads what arrives within `quiet`.
    async fn drain(&mut self, quiet: Duration) {
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout(quiet, self.stream.chunk()).await {
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn counts(events: &[(String, serde_json::Value)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (kind, data) in events {
        let key = match kind.as_str() {
            "result" => format!("result {}", data["run_id"].as_str().unwrap_or("?")),
            "app_metric" => format!("app_metric {}", data["name"].as_str().unwrap_or("?")),
            "alert" => format!("alert {}", data["message"].as_str().unwrap_or("?")),
            other => other.to_string(),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_either_replica_sees_every_event_once() {
    let db = TestDb::new(Kind::Postgres, "replicas").await;
    let first = common::start(&db, PlannerOptions::default()).await;
    let second = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&first.url(), &first.admin_token);
    let agent_token = admin.token("a", "agent").await;
    let publisher_token = admin.token("app", "publisher").await;
    let reader_token = admin.token("grafana", "reader").await;
    let on = |server: &vantage_server::service::RunningServer, token: &str| {
        Api::new(&server.url(), token)
    };
    // Agent a registers with the first replica only: the second learns its tags from
    // the database.
    for name in ["a", "b"] {
        let token = if name == "a" {
            agent_token.clone()
        } else {
            admin.token("b", "agent").await
        };
        let (status, body) = on(&first, &token)
            .post("/api/v1/agents", json!({"name": name, "addresses": ["127.0.0.1"], "endpoint_port": 9, "tags": {"site": name}, "accepts_inbound": true}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut subscribers = [
        Subscriber::open(&on(&first, &reader_token)).await,
        Subscriber::open(&on(&second, &reader_token)).await,
    ];

    let start = now_us() + 1_000_000;
    let runs: Vec<_> = (0..RESULTS)
        .map(|i| run_record(&format!("r{i}"), "a", "b", start + i as i64))
        .collect();
    first.state.archive.insert_runs(&runs).await.unwrap();
    // Half through each replica, singly and in a batch; the batch's first upload twice.
    for i in 0..RESULTS / 2 {
        let (status, body) = on(&first, &agent_token)
            .post("/api/v1/results", upload(&format!("r{i}"), "a", 100.0))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut batch: Vec<_> = (RESULTS / 2..RESULTS)
        .map(|i| upload(&format!("r{i}"), "a", 100.0))
        .collect();
    batch.push(batch[0].clone());
    let (status, body) = on(&second, &agent_token)
        .post("/api/v1/results/batch", json!(batch))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = on(&second, &publisher_token)
        .post(
            "/api/v1/app-metrics",
            json!({"metrics": [{"name": "mos", "value": 4.2, "unit": "mos", "timestamp": chrono::Utc::now()}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = on(&first, &publisher_token)
        .post(
            "/api/v1/alerts",
            json!({"severity": "warning", "message": "stream stalled", "agents": ["a"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let mut expected: BTreeMap<String, usize> =
        (0..RESULTS).map(|i| (format!("result r{i}"), 1)).collect();
    expected.insert("app_metric mos".into(), 1);
    expected.insert("alert stream stalled".into(), 1);
    for (index, subscriber) in subscribers.iter_mut().enumerate() {
        subscriber
            .read_until(|events| counts(events).len() >= expected.len())
            .await;
        // Anything told twice would arrive right behind the first.
        subscriber.drain(Duration::from_millis(500)).await;
        assert_eq!(
            counts(&subscriber.events()),
            expected,
            "subscriber of replica {index}"
        );
        // Results carry the agents' tags on both replicas.
        let (_, result) = subscriber
            .events()
            .into_iter()
            .find(|(kind, _)| kind == "result")
            .unwrap();
        assert_eq!(
            result["agent_tags"],
            json!({"site": "b"}),
            "subscriber of replica {index}: {result}"
        );
    }
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}
