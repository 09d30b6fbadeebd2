//! Alerts, whoever raises them (the planner, the ingest analyses, apps): stored for
//! the dashboard's alert list and `GET /api/v1/alerts`, then published to subscribers.

use crate::archive::{Archive, ArchiveError};
use crate::events::{Alert, Event, EventBus};

/// Stores `alert`, then publishes it.
pub async fn raise(archive: &Archive, events: &EventBus, alert: Alert) -> Result<(), ArchiveError> {
    raise_all(archive, events, vec![alert]).await
}

/// Stores `alerts` in one transaction, then publishes each.
pub async fn raise_all(
    archive: &Archive,
    events: &EventBus,
    alerts: Vec<Alert>,
) -> Result<(), ArchiveError> {
    if alerts.is_empty() {
        return Ok(());
    }
    archive.add_alerts(&alerts).await?;
    for alert in alerts {
        events.publish(Event::Alert(alert));
    }
    Ok(())
}
