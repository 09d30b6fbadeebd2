//! How commands that talk to a server find it: its URL, a token, the CA to trust.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct ServerConnection {
    /// Server URL, e.g. http://server:8470 or https://server:8470.
    #[arg(long)]
    pub server: String,
    /// Bearer token (`config apply` needs role admin; queries any role).
    #[arg(long, env = "VANTAGE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// CA certificate(s) (PEM) to trust for an https:// server, e.g. a private CA's.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

impl ServerConnection {
    /// The full URL of an API path such as `/api/v1/config`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.trim_end_matches('/'))
    }

    /// An HTTP client trusting the system's roots and `--ca-cert`.
    pub fn client(&self) -> Result<reqwest::Client, String> {
        vantage_agent::client::http_client(self.ca_cert.as_deref()).map_err(|e| e.to_string())
    }

    /// Sends `request` (to `url`) with the token; the JSON answer, or the server's
    /// reason for refusing.
    pub async fn call(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<serde_json::Value, String> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|error| format!("cannot reach {url}: {error}"))?;
        let status = response.status();
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|error| format!("unreadable answer from {url}: {error}"))?;
        if !status.is_success() {
            return Err(format!(
                "{url}: {status}: {}",
                body["error"].as_str().unwrap_or("no reason given")
            ));
        }
        Ok(body)
    }
}
