//! SLA contracts: each contract's pairs with their latest verdict and compliance,
//! and the verdicts themselves (Rufini et al., Fotonica 2014).

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Deserialize;
use vantage_model::control::Role;

use super::common::{
    current_config, limit_param, parse_query, parse_time, ApiError, ApiResult, AppState, Caller,
};
use crate::archive::SlaFilter;
use crate::sla;

/// Most verdicts one `/api/v1/sla/verdicts` answer holds.
const MAX_VERDICTS: i64 = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComplianceQuery {
    contract: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

pub(super) async fn compliance(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: ComplianceQuery = parse_query(&uri)?;
    let contracts = current_config(&state)
        .await?
        .map(|config| config.contracts)
        .unwrap_or_default();
    let selected: Vec<_> = contracts
        .into_iter()
        .filter(|contract| {
            query
                .contract
                .as_ref()
                .is_none_or(|name| &contract.name == name)
        })
        .collect();
    if let (Some(name), true) = (&query.contract, selected.is_empty()) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no contract named '{name}' in the current configuration"),
        ));
    }
    let answer = sla::compliance(
        &state.archive,
        &selected,
        parse_time("from", query.from.as_deref())?,
        parse_time("to", query.to.as_deref())?,
    )
    .await?;
    Ok(Json(serde_json::json!({ "contracts": answer })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictQuery {
    contract: Option<String>,
    client: Option<String>,
    server: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<i64>,
}

pub(super) async fn verdicts(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: VerdictQuery = parse_query(&uri)?;
    let limit = limit_param(query.limit, 1_000, MAX_VERDICTS)?;
    let verdicts = state
        .archive
        .sla_verdicts(&SlaFilter {
            from_us: parse_time("from", query.from.as_deref())?,
            to_us: parse_time("to", query.to.as_deref())?,
            contract: query.contract,
            client: query.client,
            server: query.server,
            limit,
        })
        .await?;
    Ok(Json(serde_json::json!({ "verdicts": verdicts })))
}
