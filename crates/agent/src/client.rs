//! HTTP client of the server's agent API (docs/api.md). The agent always connects out.

use std::path::Path;
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

#[derive(Clone)]
pub struct ServerClient {
    http: reqwest::Client,
    base: String,
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
    pub fn new(
        base_url: &str,
        token: &str,
        ca_cert: Option<&Path>,
    ) -> anyhow::Result<ServerClient> {
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            anyhow::bail!("--server '{base_url}' must start with http:// or https://");
        }
        let http = http_client(ca_cert)?;
        Ok(ServerClient {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
        })
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
        let request = self
            .http
            .post(format!("{}/api/v1/agents", self.base))
            .json(registration);
        self.send::<RegistrationAck>(request, Duration::from_secs(10))
            .await
    }

    pub async fn heartbeat(&self, name: &str) -> Result<HeartbeatAck, CallError> {
        let request = self
            .http
            .post(format!("{}/api/v1/agents/{name}/heartbeat", self.base));
        self.send(request, Duration::from_secs(10)).await
    }

    /// Long-polls for runs starting within `horizon` not fetched before (with
    /// `include_dispatched`, also those fetched before, as after a restart).
    pub async fn fetch_runs(
        &self,
        name: &str,
        wait: Duration,
        horizon: Duration,
        include_dispatched: bool,
    ) -> Result<Vec<AssignedRun>, CallError> {
        let request = self.http.get(format!(
            "{}/api/v1/agents/{name}/runs?wait_s={}&horizon_s={}&include_dispatched={include_dispatched}",
            self.base,
            wait.as_secs(),
            horizon.as_secs()
        ));
        let runs: AssignedRuns = self.send(request, wait + Duration::from_secs(10)).await?;
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
        let request = self.http.get(format!(
            "{}/api/v1/agents/{name}/transfers?wait_s={}{since}",
            self.base,
            wait.as_secs()
        ));
        self.send(request, wait + Duration::from_secs(10)).await
    }

    pub async fn report_transfer(
        &self,
        name: &str,
        id: &str,
        progress: &TransferProgress,
    ) -> Result<TransferRecord, CallError> {
        let request = self
            .http
            .post(format!(
                "{}/api/v1/agents/{name}/transfers/{id}/progress",
                self.base
            ))
            .json(progress);
        self.send(request, Duration::from_secs(10)).await
    }

    /// Uploads several results in one request; the answer has one element per upload.
    pub async fn upload_batch(&self, uploads: &[ResultUpload]) -> Result<BatchAck, CallError> {
        let request = self
            .http
            .post(format!("{}/api/v1/results/batch", self.base))
            .json(uploads);
        self.send(request, Duration::from_secs(60)).await
    }

    pub async fn upload(&self, upload: &ResultUpload) -> Result<ResultAck, CallError> {
        let request = self
            .http
            .post(format!("{}/api/v1/results", self.base))
            .json(upload);
        self.send(request, Duration::from_secs(30)).await
    }
}
