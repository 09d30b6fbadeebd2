//! Starting and stopping a server: archive, bootstrap token, HTTP listener, scheduler loop.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use vantage_model::control::Role;

use crate::api::router;
use crate::archive::Archive;
use crate::archivers;
use crate::http::{self, HttpLimits};
use crate::planner::{self, PlannerOptions};
use crate::replicas;
use crate::state::ServerState;
use crate::supervisor::supervise;
use crate::tls::{self, TlsFiles};
use crate::transfers::TransferOptions;

/// Name of the admin token a server generates when started without one; each start
/// replaces the previous one, so restarts do not pile up admin tokens.
pub const GENERATED_ADMIN: &str = "admin (generated)";

/// Pause before a background task that panicked is started again (doubling while it
/// keeps failing).
const FIRST_RESTART_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long in-flight requests may take to finish once the server stops.
const SHUTDOWN_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `sqlite://PATH` or `postgres://…`.
    pub database_url: String,
    pub listen: SocketAddr,
    /// Admin token to install (kept across restarts); a fresh one is generated when absent.
    pub admin_token: Option<String>,
    pub planner: PlannerOptions,
    pub http: HttpLimits,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Deadline transfers' epoch and policy.
    pub transfers: TransferOptions,
}

/// A running server; dropping it does not stop it, call [`RunningServer::shutdown`].
pub struct RunningServer {
    pub addr: SocketAddr,
    /// The admin token installed at start (generated or given).
    pub admin_token: String,
    pub state: Arc<ServerState>,
    /// Whether the API is served over TLS.
    pub https: bool,
    stop: watch::Sender<bool>,
    http: JoinHandle<std::io::Result<()>>,
    planner: JoinHandle<()>,
    archivers: JoinHandle<()>,
    transfers: JoinHandle<()>,
    /// On PostgreSQL, the relay of events between replicas.
    replicas: Option<JoinHandle<()>>,
}

impl RunningServer {
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting requests, lets in-flight ones finish, stops the planner, closes the pool.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.state.stopping.send_replace(true);
        self.http.await??;
        self.planner.await?;
        self.archivers.await?;
        self.transfers.await?;
        if let Some(replicas) = self.replicas {
            replicas.await?;
        }
        self.state.archive.close().await;
        Ok(())
    }
}

/// Opens the archive, installs the admin token, binds the listener and starts serving.
pub async fn start(options: ServerOptions) -> anyhow::Result<RunningServer> {
    // Certificate trouble is reported before anything else is touched.
    let tls = options.tls.as_ref().map(tls::acceptor).transpose()?;
    let https = tls.is_some();
    let archive = Archive::open(&options.database_url).await?;
    let admin_token = match &options.admin_token {
        Some(token) => {
            archive.add_token(token, "admin", Role::Admin).await?;
            token.clone()
        }
        None => {
            let token = crate::new_token();
            archive
                .replace_tokens_named(&token, GENERATED_ADMIN, Role::Admin)
                .await?;
            token
        }
    };
    let state = ServerState::new(archive, options.transfers).await?;
    // Listening before answering: a subscriber of this replica hears every result the
    // others store from then on.
    let replica_listener = match state.archive.replicas() {
        Some(replicas_of) => Some(replicas::listen(replicas_of).await.map_err(|error| {
            anyhow::anyhow!("cannot listen for the other replicas' events: {error}")
        })?),
        None => None,
    };
    let listener = TcpListener::bind(options.listen)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on {}: {error}", options.listen))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let mut app = router(state.clone());
    if https {
        app = app.layer(axum::Extension(crate::api::Https));
    }
    let app = http::bounded(app, options.http);
    let http = tokio::spawn(http::serve(
        listener,
        app,
        options.http,
        tls,
        stopped.clone(),
        SHUTDOWN_DRAIN,
    ));
    let archivers = supervise(
        "archivers",
        Arc::clone(&state.tasks),
        stopped.clone(),
        FIRST_RESTART_PAUSE,
        {
            let (queue, stopped) = (state.archivers.clone(), stopped.clone());
            move || archivers::run(queue.clone(), stopped.clone())
        },
    );
    let transfers = supervise(
        "transfers",
        Arc::clone(&state.tasks),
        stopped.clone(),
        FIRST_RESTART_PAUSE,
        {
            let (state, stopped) = (state.clone(), stopped.clone());
            move || crate::transfers::run_epochs(state.clone(), stopped.clone())
        },
    );
    let replicas = replica_listener.map(|first| {
        let (outbound, queued) = tokio::sync::mpsc::channel(replicas::OUTBOUND_QUEUE);
        state.events.send_to_replicas(outbound);
        let (first, queued) = (
            Arc::new(tokio::sync::Mutex::new(Some(first))),
            Arc::new(tokio::sync::Mutex::new(queued)),
        );
        supervise(
            "replicas",
            Arc::clone(&state.tasks),
            stopped.clone(),
            FIRST_RESTART_PAUSE,
            {
                let (state, stopped) = (state.clone(), stopped.clone());
                move || {
                    replicas::run(
                        state.clone(),
                        Arc::clone(&first),
                        Arc::clone(&queued),
                        stopped.clone(),
                    )
                }
            },
        )
    });
    let planner = supervise(
        "planner",
        Arc::clone(&state.tasks),
        stopped.clone(),
        FIRST_RESTART_PAUSE,
        {
            let (state, planner_options) = (state.clone(), options.planner.clone());
            move || planner::run(state.clone(), planner_options.clone(), stopped.clone())
        },
    );
    tracing::info!(%addr, https, database = %redact(&options.database_url), "server listening");
    Ok(RunningServer {
        addr,
        admin_token,
        state,
        https,
        stop,
        http,
        planner,
        archivers,
        transfers,
        replicas,
    })
}

/// Hides a password in a database URL before logging it.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::redact("sqlite://x.db"), "sqlite://x.db");
    }
}
