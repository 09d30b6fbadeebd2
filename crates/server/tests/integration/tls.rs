//! HTTPS with a private CA end to end: the server serves TLS with a certificate the
//! test's own CA signed, two agents trusting that CA (`--ca-cert`) register, run a
//! scheduled latency task and upload its results; a client that does not trust the
//! CA, and a plain-HTTP client, get nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Api, Kind, TestDb};
use serde_json::json;
use vantage_server::archive::{now_us, RunState};
use vantage_server::tls::{TlsError, TlsFiles};

/// A private CA and a server certificate for 127.0.0.1 and localhost it signed.
struct PrivateCa {
    ca_cert: PathBuf,
    server: TlsFiles,
    _dir: tempfile::TempDir,
}

fn private_ca() -> PrivateCa {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "vantage test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let server_cert = server_params.signed_by(&server_key, &ca).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    PrivateCa {
        ca_cert: write("ca.pem", ca.pem()),
        server: TlsFiles {
            cert: write("server.pem", server_cert.pem()),
            key: write("server.key", server_key.serialize_pem()),
        },
        _dir: dir,
    }
}

fn https_api(base: &str, token: &str, ca_cert: &Path) -> Api {
    Api {
        base: base.to_string(),
        token: token.to_string(),
        http: vantage_agent::client::http_client(Some(ca_cert)).unwrap(),
    }
}

#[tokio::test]
async fn agents_measure_and_upload_over_https_with_a_private_ca() {
    let ca = private_ca();
    let db = TestDb::new(Kind::Sqlite, "tls").await;
    let mut options = common::options(
        &db,
        vantage_server::planner::PlannerOptions {
            tick: Duration::from_millis(500),
            horizon: Duration::from_secs(10),
            miss_grace: Duration::from_secs(10),
            ..Default::default()
        },
    );
    options.tls = Some(ca.server.clone());
    let server = vantage_server::service::start(options).await.unwrap();
    let url = server.url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let admin = https_api(&url, &server.admin_token, &ca.ca_cert);

    // Without the CA the certificate is not trusted; plain HTTP gets no answer.
    let untrusted = reqwest::Client::new()
        .get(format!("{url}/healthz"))
        .send()
        .await
        .expect_err("a client without the CA refuses the certificate");
    assert!(
        format!("{untrusted:?}").contains("UnknownIssuer"),
        "{untrusted:?}"
    );
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", server.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    let (status, _) = admin.get("/healthz").await;
    assert_eq!(status, 200);

    let spool = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut agents = Vec::new();
    for name in ["tls-a", "tls-b"] {
        agents.push(
            common::spawn_agent(&admin, &url, name, spool.path(), &stopped, |options| {
                options.ca_cert = Some(ca.ca_cert.clone());
                options.iperf3_port = None;
            })
            .await,
        );
    }
    let config = json!({
        "groups": [{"name": "pair", "kind": "mesh", "members": ["tls-a", "tls-b"]}],
        "tests": [{"name": "rtt", "type": "latency", "spec": {"count": 5, "interval": "10ms", "timeout": "500ms"}}],
        "tasks": [{"name": "lat", "test": "rtt", "group": "pair", "every": "2s", "directions": "both"}]
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");

    // Bounded wait for results uploaded over HTTPS, in both directions.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let completed = loop {
        let runs = server
            .state
            .archive
            .runs_between(0, now_us())
            .await
            .unwrap();
        let completed: Vec<_> = runs
            .into_iter()
            .filter(|run| run.state == RunState::Completed)
            .collect();
        let clients: std::collections::BTreeSet<_> =
            completed.iter().map(|run| run.client.clone()).collect();
        if clients.len() == 2 || tokio::time::Instant::now() > deadline {
            break completed;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = stop.send(true);
    for agent in agents {
        agent.await.unwrap().expect("agent ran without error");
    }
    assert!(
        completed.iter().any(|run| run.client == "tls-a")
            && completed.iter().any(|run| run.client == "tls-b"),
        "completed runs: {completed:?}"
    );
    let (status, body) = admin.get("/api/v1/results?limit=5").await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn certificate_problems_name_the_file() {
    let ca = private_ca();
    let missing = TlsFiles {
        cert: ca.server.cert.with_file_name("absent.pem"),
        key: ca.server.key.clone(),
    };
    let Err(error) = vantage_server::tls::acceptor(&missing) else {
        panic!("a missing certificate file is refused");
    };
    assert!(matches!(error, TlsError::Certificates { .. }), "{error}");
    assert!(error.to_string().contains("absent.pem"), "{error}");

    // A key that belongs to another certificate.
    let other_key = rcgen::KeyPair::generate().unwrap();
    let other_key_path = ca.server.key.with_file_name("other.key");
    std::fs::write(&other_key_path, other_key.serialize_pem()).unwrap();
    let mismatched = TlsFiles {
        cert: ca.server.cert.clone(),
        key: other_key_path,
    };
    let Err(error) = vantage_server::tls::acceptor(&mismatched) else {
        panic!("a key of another certificate is refused");
    };
    assert!(matches!(error, TlsError::Mismatch { .. }), "{error}");

    // A CA file that is not PEM is refused by the agent's client with its path.
    let error = vantage_agent::client::http_client(Some(&ca.server.key))
        .map(|_| ())
        .unwrap_err();
    assert!(error.to_string().contains("server.key"), "{error}");
}
