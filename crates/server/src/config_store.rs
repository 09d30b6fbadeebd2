//! The applied measurement configuration: checked, stored as a new version, and
//! read back validated by the planner, the archivers, SLA verdicts and on-demand
//! requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long [`CachedConfig`] reuses the applied configuration before reading it again.
const CONFIG_REFRESH: Duration = Duration::from_secs(2);

/// The applied configuration as ingest consumers see it: read from the archive at
/// most every [`CONFIG_REFRESH`], so a result burst does not read it per result.
#[derive(Clone)]
pub struct CachedConfig {
    archive: Archive,
    cache: Arc<tokio::sync::Mutex<ConfigCopy>>,
}

/// When the configuration was last read, and what it was.
#[derive(Default)]
struct ConfigCopy {
    read_at: Option<Instant>,
    config: Option<Arc<ValidatedConfig>>,
}

impl CachedConfig {
    pub fn new(archive: Archive) -> CachedConfig {
        CachedConfig {
            archive,
            cache: Arc::default(),
        }
    }

    pub async fn get(&self) -> Option<Arc<ValidatedConfig>> {
        let mut copy = self.cache.lock().await;
        if copy
            .read_at
            .is_none_or(|read_at| read_at.elapsed() >= CONFIG_REFRESH)
        {
            match current(&self.archive).await {
                Ok(current) => copy.config = current.map(|(_, validated)| Arc::new(validated)),
                Err(error) => tracing::warn!("cannot read the applied configuration: {error}"),
            }
            copy.read_at = Some(Instant::now());
        }
        copy.config.clone()
    }
}
