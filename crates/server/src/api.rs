//! REST + JSON API (docs/api.md). Every error is `{"error": "..."}` with a status
//! that says whose fault it was; every route but `/healthz` and `/openapi.json`
//! needs a bearer token whose role allows it.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::StreamExt;
use vantage_model::control::{
    AgentRegistration, AppMetric, AssignedRun, AssignedRuns, ResultAck, ResultUpload, Role,
    RunRequest,
};
use vantage_model::units::parse_duration;

use crate::archive::{
    from_us, now_us, to_us, Archive, ArchiveError, Ingest, IngestRefusal, ResultFilter, RunRecord,
    METRICS,
};
use crate::archivers::{ArchiverQueue, Delivery};
use crate::events::{Alert, Event, Subscription};
use crate::{openapi, openmetrics};

/// Shared by all handlers and the scheduler loop.
pub struct ServerState {
    pub archive: Archive,
    pub events: broadcast::Sender<Event>,
    /// Woken when new runs are stored, so long-polling agents answer at once.
    pub runs_stored: Notify,
    /// Agent tags by name, for tagging result events; refreshed on registration.
    agent_tags: RwLock<HashMap<String, BTreeMap<String, String>>>,
    /// Known tokens by value; tokens are never revoked, so caching them is safe.
    token_cache: RwLock<HashMap<String, (String, Role)>>,
    /// Turns true when the server stops: ends event streams and long polls.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// Applies a configuration document: validates and stores it (see `planner`).
    pub config_validator: fn(&serde_json::Value) -> Result<(), Vec<String>>,
    /// Results on their way to file and HTTP archivers (see `archivers`).
    pub archivers: ArchiverQueue,
}

impl ServerState {
    /// The state and the receiving end of its archiver queue (for `archivers::run`).
    pub async fn new(
        archive: Archive,
        config_validator: fn(&serde_json::Value) -> Result<(), Vec<String>>,
    ) -> Result<(Arc<ServerState>, mpsc::Receiver<Delivery>), ArchiveError> {
        let (events, _) = broadcast::channel(4096);
        let (archivers, deliveries) = ArchiverQueue::new();
        let state = Arc::new(ServerState {
            archive,
            events,
            runs_stored: Notify::new(),
            agent_tags: RwLock::new(HashMap::new()),
            token_cache: RwLock::new(HashMap::new()),
            stopping: tokio::sync::watch::channel(false).0,
            config_validator,
            archivers,
        });
        state.refresh_agent_tags().await?;
        Ok((state, deliveries))
    }

    pub async fn refresh_agent_tags(&self) -> Result<(), ArchiveError> {
        let agents = self.archive.agents().await?;
        let mut tags = self.agent_tags.write().expect("tag cache lock");
        tags.clear();
        for agent in agents {
            tags.insert(agent.registration.name, agent.registration.tags);
        }
        Ok(())
    }

    /// Publishes an event; having no subscriber is fine.
    pub fn publish(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn pair_tags(&self, client: &str, server: &str) -> BTreeMap<String, String> {
        let tags = self.agent_tags.read().expect("tag cache lock");
        let mut merged = tags.get(client).cloned().unwrap_or_default();
        merged.extend(tags.get(server).cloned().unwrap_or_default());
        merged
    }
}

type AppState = Arc<ServerState>;

/// An API error: its status and a message naming the problem.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

impl From<ArchiveError> for ApiError {
    fn from(error: ArchiveError) -> ApiError {
        tracing::error!("{error}");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The caller, authenticated by `Authorization: Bearer TOKEN`.
pub struct Caller {
    pub name: String,
    pub role: Role,
}

impl Caller {
    fn require(&self, allowed: &[Role]) -> ApiResult<()> {
        if self.role == Role::Admin || allowed.contains(&self.role) {
            Ok(())
        } else {
            let names: Vec<&str> = allowed.iter().map(|role| role.as_str()).collect();
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "token '{}' has role '{}'; this call needs {} or admin",
                    self.name,
                    self.role.as_str(),
                    names.join(" or ")
                ),
            ))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Caller> {
        let header = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing 'Authorization: Bearer TOKEN' header",
            )
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Authorization header is not 'Bearer TOKEN'",
                )
            })?;
        if let Some((name, role)) = state
            .token_cache
            .read()
            .expect("token cache lock")
            .get(token)
        {
            return Ok(Caller {
                name: name.clone(),
                role: *role,
            });
        }
        let (name, role) = state
            .archive
            .token(token)
            .await?
            .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unknown bearer token"))?;
        state
            .token_cache
            .write()
            .expect("token cache lock")
            .insert(token.to_string(), (name.clone(), role));
        Ok(Caller { name, role })
    }
}

/// Parses a JSON body, naming the path of a bad field.
fn parse_body<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = error.path().to_string();
        ApiError::bad_request(format!("invalid JSON body at '{path}': {}", error.inner()))
    })
}

fn parse_query<T: DeserializeOwned>(uri: &Uri) -> ApiResult<T> {
    let query = uri.query().unwrap_or("");
    serde_urlencoded::from_str(query)
        .map_err(|error| ApiError::bad_request(format!("invalid query string: {error}")))
}

fn parse_time(name: &str, text: Option<&str>) -> ApiResult<Option<i64>> {
    text.map(|text| {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|time| to_us(time.with_timezone(&chrono::Utc)))
            .map_err(|error| {
                ApiError::bad_request(format!(
                    "query parameter '{name}': '{text}' is not RFC 3339 ({error})"
                ))
            })
    })
    .transpose()
}

/// Every route as (method, path); `/openapi.json` documents exactly these (tested).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/openapi.json"),
    ("get", "/metrics"),
    ("post", "/api/v1/tokens"),
    ("get", "/api/v1/agents"),
    ("post", "/api/v1/agents"),
    ("post", "/api/v1/agents/{name}/heartbeat"),
    ("get", "/api/v1/agents/{name}/runs"),
    ("post", "/api/v1/results"),
    ("post", "/api/v1/results/batch"),
    ("get", "/api/v1/results"),
    ("get", "/api/v1/series"),
    ("get", "/api/v1/runs"),
    ("get", "/api/v1/config"),
    ("put", "/api/v1/config"),
    ("post", "/api/v1/requests"),
    ("get", "/api/v1/app-metrics"),
    ("post", "/api/v1/app-metrics"),
    ("post", "/api/v1/alerts"),
    ("get", "/api/v1/subscribe"),
    ("post", "/api/v1/retention"),
];

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/openapi.json",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    openapi::DOCUMENT,
                )
            }),
        )
        .route("/metrics", get(metrics))
        .route("/api/v1/tokens", post(create_token))
        .route("/api/v1/agents", get(list_agents).post(register_agent))
        .route("/api/v1/agents/{name}/heartbeat", post(heartbeat))
        .route("/api/v1/agents/{name}/runs", get(assigned_runs))
        .route("/api/v1/results", post(upload_result).get(query_results))
        .route("/api/v1/results/batch", post(upload_batch))
        .route("/api/v1/series", get(query_series))
        .route("/api/v1/runs", get(query_runs))
        .route("/api/v1/config", get(get_config).put(put_config))
        .route("/api/v1/requests", post(request_run))
        .route(
            "/api/v1/app-metrics",
            get(query_app_metrics).post(publish_app_metrics),
        )
        .route("/api/v1/alerts", post(publish_alert))
        .route("/api/v1/subscribe", get(subscribe))
        .route("/api/v1/retention", post(retention))
        .fallback(|uri: Uri| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no route for '{}'; see /openapi.json", uri.path()),
            )
        })
        .method_not_allowed_fallback(|uri: Uri| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method not allowed on '{}'; see /openapi.json", uri.path()),
            )
        })
        .with_state(state)
}

async fn metrics(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let latest = state.archive.latest_per_pair().await?;
    Ok((
        [(header::CONTENT_TYPE, openmetrics::CONTENT_TYPE)],
        openmetrics::render(&latest, &state.archivers.counts()),
    )
        .into_response())
}

#[derive(Deserialize)]
struct NewToken {
    name: String,
    role: String,
}

async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let request: NewToken = parse_body(&body)?;
    let role = Role::parse(&request.role).ok_or_else(|| {
        ApiError::bad_request(format!(
            "field 'role': '{}' is not one of admin, agent, publisher, reader",
            request.role
        ))
    })?;
    let token = crate::new_token();
    state.archive.add_token(&token, &request.name, role).await?;
    Ok(Json(
        serde_json::json!({ "token": token, "name": request.name, "role": role }),
    ))
}

async fn list_agents(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let agents = state.archive.agents().await?;
    Ok(Json(serde_json::json!({ "agents": agents })))
}

async fn register_agent(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Agent])?;
    let registration: AgentRegistration = parse_body(&body)?;
    if registration.name.trim().is_empty() {
        return Err(ApiError::bad_request("field 'name': must not be empty"));
    }
    if registration.addresses.is_empty() {
        return Err(ApiError::bad_request(
            "field 'addresses': at least one address is needed",
        ));
    }
    state.archive.register_agent(&registration).await?;
    state.refresh_agent_tags().await?;
    tracing::info!(agent = %registration.name, "agent registered");
    Ok(Json(
        serde_json::json!({ "name": registration.name, "registered": true }),
    ))
}

async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Agent])?;
    if !state.archive.touch_agent(&name).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("agent '{name}' is not registered"),
        ));
    }
    Ok(Json(
        serde_json::json!({ "name": name, "time": chrono::Utc::now() }),
    ))
}

#[derive(Deserialize)]
struct RunsQuery {
    /// Long-poll: wait up to this many seconds for a run.
    #[serde(default)]
    wait_s: u64,
    /// Hand out runs starting within this many seconds.
    #[serde(default = "default_horizon_s")]
    horizon_s: u64,
    /// Also return runs already handed out (an agent asks this after a restart).
    #[serde(default)]
    include_dispatched: bool,
}

fn default_horizon_s() -> u64 {
    60
}

/// Longest long-poll a client may ask for.
const MAX_WAIT_S: u64 = 60;

async fn assigned_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    uri: Uri,
) -> ApiResult<Json<AssignedRuns>> {
    caller.require(&[Role::Agent])?;
    let query: RunsQuery = parse_query(&uri)?;
    let agents = state.archive.agents().await?;
    if !agents.iter().any(|agent| agent.registration.name == name) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("agent '{name}' is not registered"),
        ));
    }
    state.archive.touch_agent(&name).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(query.wait_s.min(MAX_WAIT_S));
    let mut stopping = state.stopping.subscribe();
    loop {
        let horizon_us =
            now_us() + i64::try_from(query.horizon_s.min(3600)).unwrap_or(60) * 1_000_000;
        let runs = state
            .archive
            .take_runs_for(&name, horizon_us, query.include_dispatched)
            .await?;
        if !runs.is_empty() || tokio::time::Instant::now() >= deadline || *stopping.borrow() {
            let agents = state.archive.agents().await?;
            let assigned = runs
                .into_iter()
                .filter_map(|run| assign(run, &agents))
                .collect();
            return Ok(Json(AssignedRuns { runs: assigned }));
        }
        // Re-check every second as well: another replica may have stored the runs.
        tokio::select! {
            _ = state.runs_stored.notified() => {}
            _ = stopping.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1).min(deadline - tokio::time::Instant::now())) => {}
        }
    }
}

/// Resolves a stored run into what the client agent needs; a run whose server agent
/// is unknown cannot be executed and is left for the missed-run sweep to record.
fn assign(run: RunRecord, agents: &[crate::archive::AgentRecord]) -> Option<AssignedRun> {
    let server = agents
        .iter()
        .find(|agent| agent.registration.name == run.server)?;
    Some(AssignedRun {
        reverse: run.reverse,
        run_id: run.id,
        task: run.task,
        test: run.test,
        client: run.client,
        server: run.server,
        server_address: server.registration.addresses.first().cloned()?,
        server_port: server.registration.endpoint_port,
        spec: run.spec,
        planned_start: from_us(run.planned_start_us),
        planned_end: from_us(run.planned_end_us),
    })
}

fn check_uploader(caller: &Caller, upload: &ResultUpload) -> ApiResult<()> {
    // Agent tokens may be shared by a fleet, so the upload names its agent; admins may
    // upload on an agent's behalf (replays, imports).
    if caller.role == Role::Agent || caller.role == Role::Admin {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "token '{}' may not upload results for agent '{}'",
                caller.name, upload.agent
            ),
        ))
    }
}

fn refusal(error: IngestRefusal) -> ApiError {
    match error {
        IngestRefusal::Archive(error) => error.into(),
        IngestRefusal::UnknownRun(_) => ApiError::new(StatusCode::NOT_FOUND, error.to_string()),
        other => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, other.to_string()),
    }
}

fn announce(state: &ServerState, ingest: Ingest, run: &RunRecord, upload: &ResultUpload) {
    if ingest == Ingest::Duplicate {
        return;
    }
    let metrics = upload
        .result
        .as_ref()
        .map(crate::archive::summary_metrics)
        .unwrap_or([None; 8]);
    let result = crate::archive::StoredResult {
        run_id: run.id.clone(),
        test: run.test.clone(),
        client: run.client.clone(),
        server: run.server.clone(),
        start_time: upload.actual_start,
        end_time: upload.actual_end,
        outcome: run.state.as_str().to_string(),
        error: upload.error.clone(),
        metrics: METRICS
            .iter()
            .zip(metrics)
            .filter_map(|(name, value)| value.map(|value| (name.to_string(), value)))
            .collect(),
        // Subscribers get the summary; the raw document is queried by run id.
        result: None,
    };
    state.archivers.offer(Delivery {
        task: run.task.clone(),
        result: crate::archive::StoredResult {
            result: upload.result.clone(),
            ..result.clone()
        },
    });
    state.publish(Event::Result {
        agent_tags: state.pair_tags(&run.client, &run.server),
        result,
    });
}

async fn upload_result(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<ResultAck>> {
    caller.require(&[Role::Agent])?;
    let upload: ResultUpload = parse_body(&body)?;
    check_uploader(&caller, &upload)?;
    let (ingest, run) = state.archive.ingest(&upload).await.map_err(refusal)?;
    announce(&state, ingest, &run, &upload);
    Ok(Json(ResultAck {
        run_id: upload.run_id,
        duplicate: ingest == Ingest::Duplicate,
    }))
}

/// Largest batch one call may carry.
const MAX_BATCH: usize = 10_000;

async fn upload_batch(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Agent])?;
    let uploads: Vec<ResultUpload> = parse_body(&body)?;
    if uploads.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "batch of {} results exceeds the limit of {MAX_BATCH}",
                uploads.len()
            ),
        ));
    }
    for upload in &uploads {
        check_uploader(&caller, upload)?;
    }
    let outcomes = state.archive.ingest_batch(&uploads).await?;
    let mut acks = Vec::with_capacity(outcomes.len());
    for (upload, outcome) in uploads.iter().zip(outcomes) {
        acks.push(match outcome {
            Ok((ingest, run)) => {
                announce(&state, ingest, &run, upload);
                serde_json::json!({ "run_id": upload.run_id, "duplicate": ingest == Ingest::Duplicate })
            }
            Err(error) => serde_json::json!({ "run_id": upload.run_id, "error": error.to_string() }),
        });
    }
    Ok(Json(serde_json::json!({ "results": acks })))
}

#[derive(Deserialize)]
struct ResultsQuery {
    client: Option<String>,
    server: Option<String>,
    test: Option<String>,
    from: Option<String>,
    to: Option<String>,
    metric: Option<String>,
    buckets: Option<i64>,
    limit: Option<i64>,
    #[serde(default)]
    raw: bool,
}

impl ResultsQuery {
    fn filter(&self) -> ApiResult<ResultFilter> {
        Ok(ResultFilter {
            client: self.client.clone(),
            server: self.server.clone(),
            test: self.test.clone(),
            from_us: parse_time("from", self.from.as_deref())?,
            to_us: parse_time("to", self.to.as_deref())?,
            limit: self.limit.unwrap_or(1000).clamp(1, 100_000),
            include_raw: self.raw,
        })
    }
}

async fn query_results(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: ResultsQuery = parse_query(&uri)?;
    let results = state.archive.results(&query.filter()?).await?;
    Ok(Json(serde_json::json!({ "results": results })))
}

async fn query_series(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: ResultsQuery = parse_query(&uri)?;
    let metric = query.metric.as_deref().ok_or_else(|| {
        ApiError::bad_request(format!(
            "query parameter 'metric' is required (one of {})",
            METRICS.join(", ")
        ))
    })?;
    if !METRICS.contains(&metric) {
        return Err(ApiError::bad_request(format!(
            "query parameter 'metric': unknown metric '{metric}' (one of {})",
            METRICS.join(", ")
        )));
    }
    let mut filter = query.filter()?;
    let to_us = filter.to_us.unwrap_or_else(now_us);
    let from_us = filter.from_us.unwrap_or(to_us - 86_400_000_000);
    if from_us >= to_us {
        return Err(ApiError::bad_request(
            "query parameters 'from'/'to': 'from' must be before 'to'",
        ));
    }
    filter.from_us = Some(from_us);
    filter.to_us = Some(to_us);
    let buckets = query.buckets.unwrap_or(200).clamp(1, 10_000);
    let bucket_us = ((to_us - from_us) + buckets - 1) / buckets;
    let series = state.archive.series(&filter, metric, bucket_us).await?;
    Ok(Json(serde_json::json!({
        "metric": metric,
        "from": from_us_json(from_us),
        "to": from_us_json(to_us),
        "bucket_us": bucket_us,
        "buckets": series,
    })))
}

fn from_us_json(time_us: i64) -> serde_json::Value {
    serde_json::json!(from_us(time_us))
}

#[derive(Deserialize)]
struct RunsRange {
    from: Option<String>,
    to: Option<String>,
}

async fn query_runs(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: RunsRange = parse_query(&uri)?;
    let to_us = parse_time("to", query.to.as_deref())?.unwrap_or(i64::MAX);
    let from_us = parse_time("from", query.from.as_deref())?.unwrap_or(0);
    let runs = state.archive.runs_between(from_us, to_us).await?;
    Ok(Json(serde_json::json!({ "runs": runs })))
}

async fn get_config(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    match state.archive.current_config().await? {
        Some((version, document)) => Ok(Json(
            serde_json::json!({ "version": version, "config": document }),
        )),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no configuration has been applied yet",
        )),
    }
}

async fn put_config(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let document: serde_json::Value = parse_body(&body)?;
    if let Err(problems) = (state.config_validator)(&document) {
        return Err(ApiError::bad_request(format!(
            "invalid configuration: {}",
            problems.join("; ")
        )));
    }
    let version = state.archive.store_config(&document).await?;
    state.runs_stored.notify_waiters();
    tracing::info!(version, "configuration applied");
    Ok(Json(serde_json::json!({ "version": version })))
}

async fn request_run(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let request: RunRequest = parse_body(&body)?;
    if let (Some(not_before), Some(not_after)) = (request.not_before, request.not_after) {
        if not_after < not_before {
            return Err(ApiError::bad_request(
                "field 'not_after': must not be before 'not_before'",
            ));
        }
    }
    let agents = state.archive.agents().await?;
    for (field, name) in [("client", &request.client), ("server", &request.server)] {
        if !agents.iter().any(|agent| &agent.registration.name == name) {
            return Err(ApiError::bad_request(format!(
                "field '{field}': agent '{name}' is not registered"
            )));
        }
    }
    let config = crate::planner::current_config(&state).await?;
    crate::planner::request_test(&request, config.as_ref().map(|(_, config)| config))
        .map_err(ApiError::bad_request)?;
    let id = format!("req-{}", crate::new_token().get(..16).unwrap_or_default());
    let document = serde_json::to_value(&request).expect("request serialises");
    state.archive.add_request(&id, &document).await?;
    Ok(Json(
        serde_json::json!({ "request_id": id, "task": vantage_scheduler::ON_DEMAND_TASK, "run_id": id }),
    ))
}

#[derive(Deserialize)]
struct AppMetricsBatch {
    metrics: Vec<AppMetric>,
}

async fn publish_app_metrics(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let batch: AppMetricsBatch = parse_body(&body)?;
    if batch.metrics.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "batch of {} metrics exceeds the limit of {MAX_BATCH}",
                batch.metrics.len()
            ),
        ));
    }
    for (index, metric) in batch.metrics.iter().enumerate() {
        if metric.name.trim().is_empty() {
            return Err(ApiError::bad_request(format!(
                "metrics[{index}].name: must not be empty"
            )));
        }
        if !metric.value.is_finite() {
            return Err(ApiError::bad_request(format!(
                "metrics[{index}].value: must be a finite number"
            )));
        }
    }
    state
        .archive
        .add_app_metrics(&batch.metrics, &caller.name)
        .await?;
    for metric in batch.metrics.iter().cloned() {
        state.publish(Event::AppMetric {
            metric,
            publisher: caller.name.clone(),
        });
    }
    Ok(Json(serde_json::json!({ "stored": batch.metrics.len() })))
}

async fn query_app_metrics(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let params: BTreeMap<String, String> = parse_query(&uri)?;
    let mut tags = BTreeMap::new();
    for (key, value) in &params {
        match key.as_str() {
            "name" | "from" | "to" | "limit" => {}
            _ => match key.strip_prefix("tag.") {
                Some(tag) => {
                    tags.insert(tag.to_string(), value.clone());
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "unknown query parameter '{key}' (name, from, to, limit, tag.KEY)"
                    )))
                }
            },
        }
    }
    let from_us = parse_time("from", params.get("from").map(String::as_str))?.unwrap_or(0);
    let to_us = parse_time("to", params.get("to").map(String::as_str))?.unwrap_or(i64::MAX);
    let limit = match params.get("limit") {
        Some(text) => text.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "query parameter 'limit': '{text}' is not an integer"
            ))
        })?,
        None => 10_000,
    };
    let metrics = state
        .archive
        .app_metrics(
            params.get("name").map(String::as_str),
            from_us,
            to_us,
            &tags,
            limit.clamp(1, 100_000),
        )
        .await?;
    Ok(Json(serde_json::json!({ "metrics": metrics })))
}

async fn publish_alert(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let alert: Alert = parse_body(&body)?;
    if !["info", "warning", "critical"].contains(&alert.severity.as_str()) {
        return Err(ApiError::bad_request(format!(
            "field 'severity': '{}' is not one of info, warning, critical",
            alert.severity
        )));
    }
    state.publish(Event::Alert(alert));
    Ok(Json(serde_json::json!({ "published": true })))
}

#[derive(Deserialize)]
struct SubscribeQuery {
    kinds: Option<String>,
    agents: Option<String>,
    tags: Option<String>,
}

async fn subscribe(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: SubscribeQuery = parse_query(&uri)?;
    let subscription = Subscription::parse(
        query.kinds.as_deref(),
        query.agents.as_deref(),
        query.tags.as_deref(),
    )
    .map_err(ApiError::bad_request)?;
    let mut stopping = state.stopping.subscribe();
    let stream =
        BroadcastStream::new(state.events.subscribe()).filter_map(move |received| match received {
            Ok(event) if subscription.matches(&event) => {
                let data = serde_json::to_string(&event).expect("events serialise");
                let kind = match &event {
                    Event::Result { .. } => "result",
                    Event::AppMetric { .. } => "app_metric",
                    Event::Alert(_) => "alert",
                };
                Some(Ok(SseEvent::default().event(kind).data(data)))
            }
            Ok(_) => None,
            // A slow subscriber skipped events; tell it rather than pretend nothing happened.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(skipped)) => {
                Some(Ok(SseEvent::default().event("lagged").data(
                    serde_json::json!({ "skipped_events": skipped }).to_string(),
                )))
            }
        });
    // End the stream when the server stops, so graceful shutdown does not wait on it.
    let stream = futures_util::StreamExt::take_until(stream, async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[derive(Deserialize)]
struct RetentionRequest {
    /// Keep data newer than this duration (e.g. `720h`).
    keep: String,
}

async fn retention(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let request: RetentionRequest = parse_body(&body)?;
    let keep = parse_duration(&request.keep)
        .map_err(|error| ApiError::bad_request(format!("field 'keep': {error}")))?;
    let cutoff_us = now_us() - i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let report = state.archive.apply_retention(cutoff_us).await?;
    Ok(Json(
        serde_json::json!({ "deleted": report, "cutoff": from_us(cutoff_us) }),
    ))
}
