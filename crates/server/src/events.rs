//! Live events for subscribers (Server-Sent Events) and their filters.
//!
//! Events are fanned out within one server process; with several replicas on one
//! PostgreSQL database, [`crate::replicas`] hands each replica's events to the others,
//! so a subscriber sees every event whichever replica it is connected to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
use vantage_model::control::AppMetric;
use vantage_model::sla::SlaVerdict;

use crate::archive::{AgentRecord, StoredResult};
use crate::ingest::{NewResult, ResultConsumer};

/// The live event bus of one server process, and the agent tags result events carry.
pub struct EventBus {
    sender: broadcast::Sender<Event>,
    /// Agent tags by name; refreshed on registration.
    agent_tags: RwLock<HashMap<String, BTreeMap<String, String>>>,
    /// With replicas, where events published here go to be told to the others.
    outbound: OnceLock<mpsc::Sender<Event>>,
    /// Events the other replicas were not told because that queue was full.
    outbound_dropped: AtomicU64,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(4096).0,
            agent_tags: RwLock::default(),
            outbound: OnceLock::new(),
            outbound_dropped: AtomicU64::new(0),
        }
    }
}

impl EventBus {
    /// Publishes an event raised here, and hands it on to the other replicas if there are
    /// any; having no subscriber is fine. (Result events reach the other replicas with the
    /// transaction that stored them, see [`crate::notices`].)
    pub fn publish(&self, event: Event) {
        if let Some(outbound) = self.outbound.get() {
            if !matches!(event, Event::Result { .. }) && outbound.try_send(event.clone()).is_err() {
                let dropped = self.outbound_dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        "events published faster than the other replicas can be told; \
                         subscribers of other replicas miss them"
                    );
                }
            }
        }
        self.publish_here(event);
    }

    /// Publishes an event to this process's subscribers only: one another replica raised.
    pub fn publish_here(&self, event: Event) {
        let _ = self.sender.send(event);
    }

    /// Where events published from now on go to be told to the other replicas (once).
    pub fn send_to_replicas(&self, outbound: mpsc::Sender<Event>) {
        let _ = self.outbound.set(outbound);
    }

    /// A stored result as its event, with the agents' tags.
    pub fn result_event(&self, result: StoredResult) -> Event {
        Event::Result {
            agent_tags: self.pair_tags(&result.client, &result.server),
            result,
        }
    }

    /// Whether the tags of every one of `agents` are known here.
    pub fn knows_agents<'a>(&self, mut agents: impl Iterator<Item = &'a str>) -> bool {
        let tags = self.agent_tags.read().expect("tag cache lock");
        agents.all(|agent| tags.contains_key(agent))
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    pub fn set_agents(&self, agents: &[AgentRecord]) {
        let mut tags = self.agent_tags.write().expect("tag cache lock");
        tags.clear();
        for agent in agents {
            tags.insert(
                agent.registration.name.clone(),
                agent.registration.tags.clone(),
            );
        }
    }

    /// The client's and server's tags merged (the server's win on conflict).
    fn pair_tags(&self, client: &str, server: &str) -> BTreeMap<String, String> {
        let tags = self.agent_tags.read().expect("tag cache lock");
        let mut merged = tags.get(client).cloned().unwrap_or_default();
        merged.extend(tags.get(server).cloned().unwrap_or_default());
        merged
    }
}

/// Every stored result becomes a `result` event (without the raw document).
impl ResultConsumer for std::sync::Arc<EventBus> {
    fn name(&self) -> &'static str {
        "events"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        self.publish_here(self.result_event(result.summary.clone()));
        Box::pin(std::future::ready(()))
    }
}

/// One live event; `kind` tells which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A result was stored (the raw document is left out; query it by `run_id`).
    Result {
        #[serde(flatten)]
        result: StoredResult,
        /// Tags of the client and server agents, merged (server's win on conflict).
        agent_tags: BTreeMap<String, String>,
    },
    AppMetric {
        #[serde(flatten)]
        metric: AppMetric,
        publisher: String,
    },
    Alert(Alert),
    /// A step of a diagnosis job (`POST /api/v1/diagnose`); the job document has the rest.
    Diagnosis {
        id: String,
        /// `running`, `done` or `failed`.
        state: String,
        message: String,
        /// The path's source and destination agents.
        agents: Vec<String>,
    },
    /// An SLA contract's verdict on a stored result.
    Sla(SlaVerdict),
}

/// An alert: raised by the control plane (missed runs, non-starts) or published by apps
/// and the analysis layer.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Alert {
    /// `info`, `warning` or `critical`.
    pub severity: String,
    pub message: String,
    #[serde(default)]
    pub agents: Vec<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default = "Utc::now")]
    pub time: DateTime<Utc>,
}

impl Event {
    /// The SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Result { .. } => "result",
            Event::AppMetric { .. } => "app_metric",
            Event::Alert(_) => "alert",
            Event::Diagnosis { .. } => "diagnosis",
            Event::Sla(_) => "sla",
        }
    }

    /// Agents the event concerns; `None` for app metrics, which concern no agent
    /// (an agent filter leaves them through, so one stream can carry both).
    fn agents(&self) -> Option<Vec<&str>> {
        match self {
            Event::Result { result, .. } => {
                Some(vec![result.client.as_str(), result.server.as_str()])
            }
            Event::AppMetric { .. } => None,
            Event::Alert(alert) => Some(alert.agents.iter().map(String::as_str).collect()),
            Event::Diagnosis { agents, .. } => Some(agents.iter().map(String::as_str).collect()),
            Event::Sla(verdict) => Some(vec![verdict.client.as_str(), verdict.server.as_str()]),
        }
    }

    fn tags(&self) -> &BTreeMap<String, String> {
        match self {
            Event::Result { agent_tags, .. } => agent_tags,
            Event::AppMetric { metric, .. } => &metric.tags,
            Event::Alert(alert) => &alert.tags,
            // A diagnosis or verdict concerns agents, not tags: a tag filter leaves it out.
            Event::Diagnosis { .. } | Event::Sla(_) => &NO_TAGS,
        }
    }
}

static NO_TAGS: BTreeMap<String, String> = BTreeMap::new();

/// What a subscriber wants; empty sets mean "any".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subscription {
    pub kinds: BTreeSet<String>,
    pub agents: BTreeSet<String>,
    pub tags: BTreeMap<String, String>,
}

pub const EVENT_KINDS: &[&str] = &["result", "app_metric", "alert", "diagnosis", "sla"];

impl Subscription {
    /// Parses `kinds=result,alert`, `agents=a,b`, `tags=site:x,session:42`.
    pub fn parse(
        kinds: Option<&str>,
        agents: Option<&str>,
        tags: Option<&str>,
    ) -> Result<Subscription, String> {
        let list = |text: Option<&str>| -> BTreeSet<String> {
            text.unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_string)
                .collect()
        };
        let kinds = list(kinds);
        if let Some(bad) = kinds
            .iter()
            .find(|kind| !EVENT_KINDS.contains(&kind.as_str()))
        {
            return Err(format!(
                "query parameter 'kinds': unknown kind '{bad}' (expected {})",
                EVENT_KINDS.join(", ")
            ));
        }
        let mut tag_filter = BTreeMap::new();
        for pair in list(tags) {
            let Some((key, value)) = pair.split_once(':') else {
                return Err(format!("query parameter 'tags': '{pair}' is not key:value"));
            };
            tag_filter.insert(key.to_string(), value.to_string());
        }
        Ok(Subscription {
            kinds,
            agents: list(agents),
            tags: tag_filter,
        })
    }

    pub fn matches(&self, event: &Event) -> bool {
        let kind_ok = self.kinds.is_empty() || self.kinds.contains(event.kind());
        let agents_ok = self.agents.is_empty()
            || event
                .agents()
                .is_none_or(|agents| agents.iter().any(|agent| self.agents.contains(*agent)));
        let tags = event.tags();
        let tags_ok = self
            .tags
            .iter()
            .all(|(key, value)| tags.get(key) == Some(value));
        kind_ok && agents_ok && tags_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(agents: &[&str], tags: &[(&str, &str)]) -> Event {
        Event::Alert(Alert {
            severity: "warning".into(),
            message: "m".into(),
            agents: agents.iter().map(|a| a.to_string()).collect(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            time: Utc::now(),
        })
    }

    #[test]
    fn filters_by_kind_agent_and_tag() {
        let sub = Subscription::parse(Some("alert"), Some("a,b"), Some("site:x")).unwrap();
        assert!(sub.matches(&alert(&["b"], &[("site", "x")])));
        assert!(!sub.matches(&alert(&["c"], &[("site", "x")])));
        assert!(!sub.matches(&alert(&["a"], &[("site", "y")])));
        let metric = Event::AppMetric {
            metric: AppMetric {
                name: "mos".into(),
                value: 4.0,
                unit: "mos".into(),
                timestamp: Utc::now(),
                tags: BTreeMap::new(),
            },
            publisher: "app".into(),
        };
        // The tag filter applies to app metrics, the agent filter does not.
        assert!(!sub.matches(&metric));
        assert!(Subscription::parse(None, Some("a"), None)
            .unwrap()
            .matches(&metric));
        assert!(Subscription::default().matches(&metric));
    }

    #[test]
    fn rejects_unknown_kind_and_bad_tag() {
        let err = Subscription::parse(Some("results"), None, None).unwrap_err();
        assert!(err.contains("kinds") && err.contains("results"), "{err}");
        let err = Subscription::parse(None, None, Some("site")).unwrap_err();
        assert!(err.contains("tags") && err.contains("key:value"), "{err}");
    }
}
