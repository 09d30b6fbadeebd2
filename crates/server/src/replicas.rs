//! Replicas that act as one (PostgreSQL): each replica listens on its archive's channels
//! ([`crate::notices`]) and publishes to its own subscribers what the others stored and
//! published, and tells the others the events published here. A subscriber then sees
//! every result, app metric, alert, verdict and diagnosis step whichever replica it is
//! connected to, each once.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgNotification};
use tokio::sync::{mpsc, watch, Mutex};

use crate::archive::Replicas;
use crate::events::Event;
use crate::notices::{StoredNotice, MAX_PAYLOAD_BYTES};
use crate::state::ServerState;

/// Events published here and not yet told to the other replicas; more are dropped (and
/// counted) rather than held without bound while the database is unreachable.
pub const OUTBOUND_QUEUE: usize = 4096;
/// The pause after the listener's connection failed, before it reconnects.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// An event one replica published, as the others hear it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EventNotice {
    origin: String,
    event: Event,
}

/// Connects a listener to the archive's channels. Done before the server answers, so
/// nothing stored by another replica after this server is up goes unheard.
pub async fn listen(replicas: &Replicas) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(&replicas.url).await?;
    listener
        .listen_all([
            replicas.channels.stored.as_str(),
            replicas.channels.events.as_str(),
        ])
        .await?;
    Ok(listener)
}

/// Relays events between this replica and the others until the server stops. A restart
/// (after a panic) connects a new listener; `first` is the one [`listen`] made at start.
pub async fn run(
    state: Arc<ServerState>,
    first: Arc<Mutex<Option<PgListener>>>,
    outbound: Arc<Mutex<mpsc::Receiver<Event>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let Some(replicas) = state.archive.replicas().cloned() else {
        return;
    };
    let mut listener = match first.lock().await.take() {
        Some(listener) => listener,
        None => loop {
            match listen(&replicas).await {
                Ok(listener) => break listener,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for the other replicas' events; retrying");
                    tokio::select! {
                        _ = stopped.changed() => return,
                        _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
                    }
                }
            }
        },
    };
    let mut outbound = outbound.lock().await;
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            heard = listener.recv() => match heard {
                Ok(notification) => hear(&state, &replicas, &notification).await,
                Err(error) => {
                    // The listener reconnects on the next receive; what was told meanwhile
                    // is not heard (PostgreSQL keeps no notifications for a listener away).
                    tracing::warn!(%error, "lost the connection that hears the other replicas; reconnecting");
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
            },
            Some(event) = outbound.recv() => tell(&state, &replicas, event).await,
        }
    }
}

/// Publishes here what another replica stored or published.
async fn hear(state: &ServerState, replicas: &Replicas, notification: &PgNotification) {
    let payload = notification.payload();
    if notification.channel() == replicas.channels.stored {
        let notice: StoredNotice = match serde_json::from_str(payload) {
            Ok(notice) => notice,
            Err(error) => {
                tracing::warn!(%error, "ignored a malformed notice of stored results");
                return;
            }
        };
        if notice.origin == replicas.origin {
            return;
        }
        let results = match state.archive.results_by_run_ids(&notice.run_ids).await {
            Ok(results) => results,
            Err(error) => {
                tracing::warn!(%error, "cannot read results another replica stored; their events are lost here");
                return;
            }
        };
        // Agents that registered with another replica: their tags are read once.
        let agents = results
            .iter()
            .flat_map(|r| [r.client.as_str(), r.server.as_str()]);
        if !state.events.knows_agents(agents) {
            if let Err(error) = state.refresh_agent_tags().await {
                tracing::warn!(%error, "cannot read agent tags");
            }
        }
        for result in results {
            state.events.publish_here(state.events.result_event(result));
        }
    } else {
        match serde_json::from_str::<EventNotice>(payload) {
            Ok(notice) if notice.origin != replicas.origin => {
                state.events.publish_here(notice.event)
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "ignored a malformed event notice"),
        }
    }
}

/// Tells the other replicas an event published here.
async fn tell(state: &ServerState, replicas: &Replicas, event: Event) {
    let notice = EventNotice {
        origin: replicas.origin.clone(),
        event,
    };
    let payload = serde_json::to_string(&notice).expect("an event serialises");
    if payload.len() > MAX_PAYLOAD_BYTES {
        tracing::warn!(
            kind = notice.event.kind(),
            bytes = payload.len(),
            limit = MAX_PAYLOAD_BYTES,
            "an event too large to tell the other replicas: their subscribers miss it"
        );
        return;
    }
    if let Err(error) = state
        .archive
        .notify(&replicas.channels.events, &payload)
        .await
    {
        tracing::warn!(%error, "cannot tell the other replicas an event; their subscribers miss it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Alert;
    use std::collections::BTreeMap;

    #[test]
    fn an_event_notice_reads_back_as_the_event() {
        let event = Event::Alert(Alert {
            severity: "warning".into(),
            message: "campaign does not fit".into(),
            agents: vec!["a".into()],
            tags: BTreeMap::from([("site".into(), "x".into())]),
            time: chrono::Utc::now(),
        });
        let notice = EventNotice {
            origin: "r1".into(),
            event: event.clone(),
        };
        let back: EventNotice =
            serde_json::from_str(&serde_json::to_string(&notice).unwrap()).unwrap();
        assert_eq!((back.origin.as_str(), back.event), ("r1", event));
    }
}
