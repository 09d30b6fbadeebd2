//! HTTP client of the server's agent API (docs/api.md). The agent always connects out,
//! to one server or to any of several replicas sharing one database.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use vantage_model::control::{
    AgentRegistration, AssignedRun, AssignedRuns, BatchAck, HeartbeatAck, RegistrationAck,
    ResultAck, ResultUpload,
};
use vantage_model::transfers::{TransferAssignments, TransferProgress, TransferRecord};

/// Why a call failed: retry later, or give up on this request.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Network trouble, timeouts, 5xx: the server may come back.
    #[error("server unreachable or failing: {0}")]
    Transient(String),
    /// The server refused the request itself (4xx); retrying the same request will not help.
    #[error("server refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
}

/// Clones share which replica answers: when one call fails over, every task follows.
#[derive(Clone)]
pub struct ServerClient {
    http: reqwest::Client,
    /// The server's URLs, as given: replicas of one server (one database).
    bases: Arc<[String]>,
    /// Index in `bases` of the replica that answered last; every call starts there.
    current: Arc<AtomicUsize>,
    token: String,
}

/// An HTTP client for the server's API that also trusts the CA certificate(s) in the
/// PEM file `ca_cert` (a private CA's, for `vantage server --tls-cert`).
pub fn http_client(ca_cert: Option<&Path>) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
    if let Some(path) = ca_cert {
        let pem = std::fs::read(path).map_err(|error| {
            anyhow::anyhow!("cannot read --ca-cert {}: {error}", path.display())
        })?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|error| {
            anyhow::anyhow!(
                "--ca-cert {} is not PEM certificates: {error}",
                path.display()
            )
        })?;
        if certificates.is_empty() {
            anyhow::bail!("--ca-cert {} holds no PEM certificate", path.display());
        }
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder
        .build()
        .map_err(|error| anyhow::anyhow!("cannot build the HTTP client: {error}"))
}

impl ServerClient {
    /// A client of the server at `base_urls`: one URL, or several replicas sharing one
    /// database, tried in order.
    pub fn new(
        base_urls: &[String],
        token: &str,
        ca_cert: Option<&Path>,
    ) -> anyhow::Result<ServerClient> {
        if base_urls.is_empty() {
            anyhow::bail!("no --server given");
        }
        for base_url in base_urls {
            if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                anyhow::bail!("--server '{base_url}' must start with http:// or https://");
            }
        }
        let http = http_client(ca_cert)?;
        Ok(ServerClient {
            http,
            bases: base_urls
                .iter()
                .map(|base_url| base_url.trim_end_matches('/').to_string())
                .collect(),
            current: Arc::new(AtomicUsize::new(0)),
            token: token.to_string(),
        })
    }

    /// Sends the request `build` makes for a server URL to the replica that answered
    /// last and, while replicas are unreachable or failing (refused or reset
    /// connections, timeouts, 5xx), to the next ones in turn: replicas share one
    /// database, so any of them can answer, and every agent call is idempotent. The
    /// replica that answers is used from then on. A refusal (4xx) is an answer.
    /// `build` is told whether an earlier replica failed this call (its answer, lost,
    /// may have changed state).
    async fn call<T: DeserializeOwned>(
        &self,
        build: impl Fn(&reqwest::Client, &str, bool) -> reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let first = self.current.load(Ordering::Relaxed) % self.bases.len();
        let mut failures = Vec::new();
        for step in 0..self.bases.len() {
            let index = (first + step) % self.bases.len();
            let base = &self.bases[index];
            match self
                .send(build(&self.http, base, !failures.is_empty()), timeout)
                .await
            {
                Err(CallError::Transient(error)) => failures.push((base, error)),
                answer => {
                    if index != first
                        && self
                            .current
                            .compare_exchange(first, index, Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok()
                    {
                        tracing::warn!(
                            "server {} unreachable or failing; using {base} from now on",
                            self.bases[first]
                        );
                    }
                    return answer;
                }
            }
        }
        Err(CallError::Transient(match failures.as_slice() {
            [(_, error)] => error.clone(),
            _ => failures
                .iter()
                .map(|(base, error)| format!("{base}: {error}"))
                .collect::<Vec<_>>()
                .join("; "),
        }))
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let response = request
            .bearer_auth(&self.token)
            .timeout(timeout)
            .send()
            .await
            .map_err(|error| CallError::Transient(error.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return response
                .json::<T>()
                .await
                .map_err(|error| CallError::Transient(format!("unreadable answer: {error}")));
        }
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|value| value["error"].as_str().map(str::to_string))
            .unwrap_or(body);
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            Err(CallError::Transient(format!("{status}: {message}")))
        } else {
            Err(CallError::Refused {
                status: status.as_u16(),
                message,
            })
        }
    }

    pub async fn register(
        &self,
        registration: &AgentRegistration,
    ) -> Result<RegistrationAck, CallError> {
        self.call(
            |http, base, _| {
                http.post(format!("{base}/api/v1/agents"))
                    .json(registration)
            },
            Duration::from_secs(10),
        )
        .await
    }

    pub async fn heartbeat(&self, name: &str) -> Result<HeartbeatAck, CallError> {
        self.call(
            |http, base, _| http.post(format!("{base}/api/v1/agents/{name}/heartbeat")),
            Duration::from_secs(10),
        )
        .await
    }

    /// Long-polls for runs starting within `horizon` not fetched before (with
    /// `include_dispatched`, also those fetched before, as after a restart; and so
    /// from the next replica when one failed, which may have handed runs out in an
    /// answer that never arrived).
    pub async fn fetch_runs(
        &self,
        name: &str,
        wait: Duration,
        horizon: Duration,
        include_dispatched: bool,
    ) -> Result<Vec<AssignedRun>, CallError> {
        let (wait_s, horizon_s) = (wait.as_secs(), horizon.as_secs());
        let runs: AssignedRuns = self
            .call(
                |http, base, failed_over| {
                    let include_dispatched = include_dispatched || failed_over;
                    http.get(format!(
                        "{base}/api/v1/agents/{name}/runs?wait_s={wait_s}&horizon_s={horizon_s}&include_dispatched={include_dispatched}"
                    ))
                },
                wait + Duration::from_secs(10),
            )
            .await?;
        Ok(runs.runs)
    }

    /// Long-polls for the transfers this agent sends, answered at once when the plan
    /// is newer than `version`.
    pub async fn transfer_assignments(
        &self,
        name: &str,
        version: Option<u64>,
        wait: Duration,
    ) -> Result<TransferAssignments, CallError> {
        let since = version.map_or(String::new(), |version| format!("&version={version}"));
        let wait_s = wait.as_secs();
        self.call(
            |http, base, _| {
                http.get(format!(
                    "{base}/api/v1/agents/{name}/transfers?wait_s={wait_s}{since}"
                ))
            },
            wait + Duration::from_secs(10),
        )
        .await
    }

    pub async fn report_transfer(
        &self,
        name: &str,
        id: &str,
        progress: &TransferProgress,
    ) -> Result<TransferRecord, CallError> {
        self.call(
            |http, base, _| {
                http.post(format!(
                    "{base}/api/v1/agents/{name}/transfers/{id}/progress"
                ))
                .json(progress)
            },
            Duration::from_secs(10),
        )
        .await
    }

    /// Uploads several results in one request; the answer has one element per upload.
    pub async fn upload_batch(&self, uploads: &[ResultUpload]) -> Result<BatchAck, CallError> {
        self.call(
            |http, base, _| {
                http.post(format!("{base}/api/v1/results/batch"))
                    .json(uploads)
            },
            Duration::from_secs(60),
        )
        .await
    }

    pub async fn upload(&self, upload: &ResultUpload) -> Result<ResultAck, CallError> {
        self.call(
            |http, base, _| http.post(format!("{base}/api/v1/results")).json(upload),
            Duration::from_secs(30),
        )
        .await
    }
}
