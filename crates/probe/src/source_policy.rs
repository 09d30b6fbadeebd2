//! Which source addresses the endpoint serves, and how much of it each may take: an
//! allow-list of networks, TCP connections per address, and throughput-test time per
//! address per hour. The same kind of limits pScheduler keeps in its limit files and
//! iperf3 approaches with authorised users, kept here as plain numbers with defaults
//! that leave a standalone `vantage endpoint` as convenient as `iperf3 -s`.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use ipnet::IpNet;

/// TCP connections one address may hold at once: one test of the most streams
/// (control plus 128 data connections) with room to spare, so one source cannot take
/// every connection slot of the endpoint.
pub const DEFAULT_CONNECTIONS_PER_SOURCE: usize = 160;
/// Throughput-test time one address may use per hour: half of it, so a single source
/// cannot keep the endpoint's exclusive test slot to itself.
pub const DEFAULT_TEST_TIME_PER_HOUR: Duration = Duration::from_secs(30 * 60);
/// The window test time is counted over.
pub const QUOTA_WINDOW: Duration = Duration::from_secs(3600);
/// Addresses whose test time is remembered; beyond it the oldest window is forgotten.
const MAX_TRACKED_SOURCES: usize = 10_000;

#[derive(Debug, Clone, PartialEq)]
pub struct SourceLimits {
    /// Networks served (TCP services, the iperf3 listener and the UDP reflector);
    /// empty = every address.
    pub allow: Vec<IpNet>,
    /// TCP connections one address may hold at once; 0 = unlimited.
    pub connections_per_source: usize,
    /// Throughput-test time one address may use per [`QUOTA_WINDOW`]; `None` = unlimited.
    pub test_time_per_hour: Option<Duration>,
}

impl SourceLimits {
    /// No limits at all (library use and tests that drive one service directly).
    pub fn unlimited() -> Self {
        Self {
            allow: Vec::new(),
            connections_per_source: 0,
            test_time_per_hour: None,
        }
    }
}

impl Default for SourceLimits {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            connections_per_source: DEFAULT_CONNECTIONS_PER_SOURCE,
            test_time_per_hour: Some(DEFAULT_TEST_TIME_PER_HOUR),
        }
    }
}

/// Why a source was not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRefusal {
    NotAllowed(IpAddr),
    TooManyConnections {
        source: IpAddr,
        limit: usize,
    },
    QuotaUsed {
        source: IpAddr,
        used: Duration,
        quota: Duration,
        retry_after: Duration,
    },
}

impl fmt::Display for SourceRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAllowed(source) => {
                write!(f, "{source} is not in this endpoint's --allow list")
            }
            Self::TooManyConnections { source, limit } => {
                write!(f, "{source} already holds {limit} connections")
            }
            Self::QuotaUsed {
                source,
                used,
                quota,
                retry_after,
            } => write!(
                f,
                "{source} has used {:.0} s of its {:.0} s of test time per hour; retry in {:.0} s",
                used.as_secs_f64(),
                quota.as_secs_f64(),
                retry_after.as_secs_f64().ceil()
            ),
        }
    }
}

/// Whether `source` is in `allow` (empty: everyone); an IPv4-mapped IPv6 address, as
/// a dual-stack socket reports IPv4 peers, counts as the IPv4 address it carries.
pub(crate) fn allowed(allow: &[IpNet], source: IpAddr) -> bool {
    let source = source.to_canonical();
    allow.is_empty() || allow.iter().any(|net| net.contains(&source))
}

struct Usage {
    window_start: Instant,
    used: Duration,
}

#[derive(Default)]
struct State {
    connections: HashMap<IpAddr, usize>,
    usage: HashMap<IpAddr, Usage>,
}

/// The live policy: the limits and what each address currently holds and has used.
pub struct SourcePolicy {
    limits: SourceLimits,
    state: Mutex<State>,
}

/// One admitted connection; its address's count drops when this is dropped.
pub struct AdmittedConnection {
    policy: Arc<SourcePolicy>,
    source: IpAddr,
}

impl Drop for AdmittedConnection {
    fn drop(&mut self) {
        if let Ok(mut state) = self.policy.state.lock() {
            if let Some(count) = state.connections.get_mut(&self.source) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    state.connections.remove(&self.source);
                }
            }
        }
    }
}

impl SourcePolicy {
    pub fn new(limits: SourceLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    pub fn limits(&self) -> &SourceLimits {
        &self.limits
    }

    /// Whether `source` is in the allow-list.
    pub fn allows(&self, source: IpAddr) -> bool {
        allowed(&self.limits.allow, source)
    }

    /// Admits one TCP connection from `source`, or says why not.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<AdmittedConnection, SourceRefusal> {
        let source = source.to_canonical();
        if !self.allows(source) {
            return Err(SourceRefusal::NotAllowed(source));
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = state.connections.entry(source).or_insert(0);
        let limit = self.limits.connections_per_source;
        if limit > 0 && *count >= limit {
            return Err(SourceRefusal::TooManyConnections { source, limit });
        }
        *count += 1;
        Ok(AdmittedConnection {
            policy: Arc::clone(self),
            source,
        })
    }

    /// Charges a test of `duration` to `source`'s hourly quota, or refuses it when the
    /// test would take the address past the quota.
    pub fn charge(&self, source: IpAddr, duration: Duration) -> Result<(), SourceRefusal> {
        self.charge_at(source, duration, Instant::now())
    }

    fn charge_at(
        &self,
        source: IpAddr,
        duration: Duration,
        now: Instant,
    ) -> Result<(), SourceRefusal> {
        let Some(quota) = self.limits.test_time_per_hour else {
            return Ok(());
        };
        let source = source.to_canonical();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !state.usage.contains_key(&source) && state.usage.len() >= MAX_TRACKED_SOURCES {
            state
                .usage
                .retain(|_, usage| now.duration_since(usage.window_start) < QUOTA_WINDOW);
            if state.usage.len() >= MAX_TRACKED_SOURCES {
                let oldest = state
                    .usage
                    .iter()
                    .min_by_key(|(_, usage)| usage.window_start)
                    .map(|(address, _)| *address);
                if let Some(oldest) = oldest {
                    state.usage.remove(&oldest);
                }
            }
        }
        let usage = state.usage.entry(source).or_insert(Usage {
            window_start: now,
            used: Duration::ZERO,
        });
        if now.duration_since(usage.window_start) >= QUOTA_WINDOW {
            *usage = Usage {
                window_start: now,
                used: Duration::ZERO,
            };
        }
        if usage.used + duration > quota {
            return Err(SourceRefusal::QuotaUsed {
                source,
                used: usage.used,
                quota,
                retry_after: QUOTA_WINDOW.saturating_sub(now.duration_since(usage.window_start)),
            });
        }
        usage.used += duration;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_allow_list_matches_networks_and_mapped_addresses() {
        let policy = SourcePolicy::new(SourceLimits {
            allow: vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            ..SourceLimits::default()
        });
        assert!(policy.allows(ip("10.1.2.3")));
        assert!(policy.allows(ip("::ffff:10.1.2.3")));
        assert!(policy.allows(ip("::1")));
        assert!(!policy.allows(ip("192.0.2.1")));
        assert_eq!(
            policy.admit(ip("192.0.2.1")).err(),
            Some(SourceRefusal::NotAllowed(ip("192.0.2.1")))
        );
        assert!(SourcePolicy::new(SourceLimits::default()).allows(ip("192.0.2.1")));
    }

    #[test]
    fn connections_per_source_are_counted_until_dropped() {
        let policy = SourcePolicy::new(SourceLimits {
            connections_per_source: 2,
            ..SourceLimits::default()
        });
        let first = policy.admit(ip("192.0.2.1")).unwrap();
        let _second = policy.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert!(matches!(
            policy.admit(ip("192.0.2.1")),
            Err(SourceRefusal::TooManyConnections { limit: 2, .. })
        ));
        // Another address has its own count.
        let _other = policy.admit(ip("192.0.2.2")).unwrap();
        drop(first);
        assert!(policy.admit(ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn test_time_is_charged_per_source_and_window() {
        let policy = SourcePolicy::new(SourceLimits {
            test_time_per_hour: Some(Duration::from_secs(100)),
            ..SourceLimits::default()
        });
        let start = Instant::now();
        let source = ip("192.0.2.1");
        let sixty = Duration::from_secs(60);
        policy.charge_at(source, sixty, start).unwrap();
        let refused = policy
            .charge_at(source, sixty, start + Duration::from_secs(600))
            .unwrap_err();
        assert_eq!(
            refused,
            SourceRefusal::QuotaUsed {
                source,
                used: sixty,
                quota: Duration::from_secs(100),
                retry_after: Duration::from_secs(3000),
            }
        );
        assert_eq!(
            refused.to_string(),
            "192.0.2.1 has used 60 s of its 100 s of test time per hour; retry in 3000 s"
        );
        // What is left still fits; another source is not affected; the next hour is new.
        policy
            .charge_at(
                source,
                Duration::from_secs(40),
                start + Duration::from_secs(601),
            )
            .unwrap();
        policy.charge_at(ip("192.0.2.2"), sixty, start).unwrap();
        policy
            .charge_at(source, sixty, start + QUOTA_WINDOW)
            .unwrap();
    }

    #[test]
    fn remembered_sources_stay_bounded() {
        let policy = SourcePolicy::new(SourceLimits::default());
        let start = Instant::now();
        for n in 0..(MAX_TRACKED_SOURCES as u32 + 50) {
            let source = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            policy
                .charge_at(source, Duration::from_secs(1), start)
                .unwrap();
        }
        assert!(policy.state.lock().unwrap().usage.len() <= MAX_TRACKED_SOURCES);
    }
}
