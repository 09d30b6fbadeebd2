//! Alerts, whoever raises them (the planner, the ingest analyses, apps): stored for
//! the dashboard's alert list and `GET /api/v1/alerts`, then published to subscribers.

use crate::archive::{Archive, ArchiveError};
use crate::events::{Alert, Event, EventBus};

/// Stores `alert`, then publishes it.
pub async fn raise(archive: &Archive, events: &EventBus, alert: Alert) -> Result<(), ArchiveError> {
    archive.add_alert(&alert).await?;
    events.publish(Event::Alert(alert));
    Ok(())
}
