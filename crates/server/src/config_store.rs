//! The applied measurement configuration: checked, stored as a new version, and
//! read back validated by the planner, the archivers and on-demand requests.

use vantage_model::config::{validate, MeasurementConfig, ValidatedConfig};

use crate::archive::{Archive, ArchiveError};

/// Why a configuration was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Every problem as `path: message`.
    #[error("invalid configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Validates a configuration document (JSON form of `MeasurementConfig`); every
/// problem comes back as `path: message`.
pub fn check(document: &serde_json::Value) -> Result<(), Vec<String>> {
    let config: MeasurementConfig = serde_path_to_error::deserialize(document)
        .map_err(|error| vec![format!("{}: {}", error.path(), error.inner())])?;
    validate(&config)
        .map(drop)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect())
}

/// Checks and stores a configuration as the new current version.
pub async fn apply(archive: &Archive, document: &serde_json::Value) -> Result<i64, ApplyError> {
    check(document).map_err(ApplyError::Invalid)?;
    let version = archive.store_config(document).await?;
    tracing::info!(version, "configuration applied");
    Ok(version)
}

/// The applied configuration, validated (it was validated when applied; a document
/// that no longer validates after an upgrade is reported and ignored).
pub async fn current(archive: &Archive) -> Result<Option<(i64, ValidatedConfig)>, ArchiveError> {
    let Some((version, document)) = archive.current_config().await? else {
        return Ok(None);
    };
    let parsed: Result<MeasurementConfig, String> =
        serde_json::from_value(document).map_err(|error| error.to_string());
    match parsed.and_then(|config| validate(&config).map_err(|errors| format!("{errors:?}"))) {
        Ok(validated) => Ok(Some((version, validated))),
        Err(error) => {
            tracing::error!(
                version,
                "stored configuration is invalid, not planning: {error}"
            );
            Ok(None)
        }
    }
}
