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

/// `--server` with its token and CA, for a command that works alone and talks to a
/// server only when given one; the command says what for with `mut_arg`.
#[derive(Args, Debug)]
pub struct OptionalServer {
    /// Server URL.
    #[arg(long, value_name = "URL", requires = "token")]
    pub server: Option<String>,
    /// Bearer token for `--server`.
    #[arg(long, env = "VANTAGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate(s) (PEM) to trust for an https:// server.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

impl OptionalServer {
    /// The connection, when `--server` was given (clap has checked the token is there).
    pub fn connection(&self) -> Option<ServerConnection> {
        self.server.as_ref().map(|server| ServerConnection {
            server: server.clone(),
            token: self.token.clone().unwrap_or_default(),
            ca_cert: self.ca_cert.clone(),
        })
    }
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
