//! What replicas sharing one PostgreSQL database tell each other (`NOTIFY`), so that a
//! subscriber connected to any replica sees every event: which results were stored (run
//! ids only, sent inside the storing transaction, so a committed result is always told
//! and a rolled-back one never), and the other events (alerts, app metrics, verdicts)
//! as they are published. Pure: the payloads and their limits, no database.

use serde::{Deserialize, Serialize};

/// PostgreSQL refuses a `NOTIFY` payload of 8 000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7_900;

/// The channels of one archive. Notifications are per database, not per schema, so
/// the schema is part of the name: deployments (and tests) sharing a database in
/// schemas of their own do not hear each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channels {
    pub stored: String,
    pub events: String,
}

impl Channels {
    pub fn for_schema(schema: &str) -> Channels {
        // Channel names are identifiers: at most 63 bytes.
        let schema: String = schema
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        Channels {
            stored: format!("vantage_stored_{schema}"),
            events: format!("vantage_events_{schema}"),
        }
    }
}

/// Results one replica stored, by run id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredNotice {
    /// The replica that stored them (it has published them itself).
    pub origin: String,
    pub run_ids: Vec<String>,
}

/// The payloads that tell `run_ids` (in order), as few as fit [`MAX_PAYLOAD_BYTES`]. A run
/// id too long to fit alone cannot exist (ids are bounded far below) and is left out.
pub fn stored_payloads(origin: &str, run_ids: &[&str]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut notice = StoredNotice {
        origin: origin.to_string(),
        run_ids: Vec::new(),
    };
    let empty_bytes = encode(&notice).len();
    let mut bytes = empty_bytes;
    for run_id in run_ids {
        // A run id costs its JSON string and a comma.
        let cost = serde_json::to_string(run_id).map_or(usize::MAX, |s| s.len()) + 1;
        if empty_bytes + cost > MAX_PAYLOAD_BYTES {
            continue;
        }
        if bytes + cost > MAX_PAYLOAD_BYTES {
            payloads.push(encode(&notice));
            notice.run_ids.clear();
            bytes = empty_bytes;
        }
        notice.run_ids.push(run_id.to_string());
        bytes += cost;
    }
    if !notice.run_ids.is_empty() {
        payloads.push(encode(&notice));
    }
    payloads
}

fn encode<T: Serialize>(notice: &T) -> String {
    serde_json::to_string(notice).expect("a notice serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_run_ids_are_split_into_payloads_that_fit() {
        let ids: Vec<String> = (0..1_000)
            .map(|i| format!("latency-mesh/agent-{i:04}>agent-{:04}/{i}", 999 - i))
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let payloads = stored_payloads("replica-a", &refs);
        assert!(payloads.len() > 1, "{} payloads", payloads.len());
        let mut told = Vec::new();
        for payload in &payloads {
            assert!(
                payload.len() <= MAX_PAYLOAD_BYTES,
                "{} bytes",
                payload.len()
            );
            let notice: StoredNotice = serde_json::from_str(payload).unwrap();
            assert_eq!(notice.origin, "replica-a");
            told.extend(notice.run_ids);
        }
        assert_eq!(told, ids, "every id once, in order");
        assert!(stored_payloads("replica-a", &[]).is_empty());
    }

    #[test]
    fn channels_are_identifiers_named_after_the_schema() {
        let channels = Channels::for_schema("vt_api_123");
        assert_eq!(channels.stored, "vantage_stored_vt_api_123");
        assert_eq!(channels.events, "vantage_events_vt_api_123");
        let odd = Channels::for_schema(&format!("Odd-\"schema\"{}", "x".repeat(100)));
        assert!(
            odd.events.len() <= 63 && !odd.events.contains('"'),
            "{odd:?}"
        );
    }
}
