//! The endpoint's side of test tickets ([`vantage_model::ticket`]): an agent's endpoint
//! serves throughput tests (native, capacity, iperf3) only under a valid ticket from
//! its server, for itself, within the test time the ticket covers.
//!
//! Native tests carry the ticket in their request. iperf3 has no field for one, so the
//! client presents it first over the native protocol (`authorize`); the listener then
//! serves one iperf3 test from that address under it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use vantage_model::ticket::{TestTicket, TicketClaims, TicketVerifier};

/// Runs (and presenting addresses) remembered at once; tickets are short-lived, so
/// expired entries make room.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Presented {
    claims: TicketClaims,
}

#[derive(Debug, Default)]
struct GateState {
    /// Test time used per run id, with the ticket's expiry.
    used_ms: HashMap<String, (u64, i64)>,
    /// Tickets presented for an iperf3 test, by the presenting address.
    presented: HashMap<IpAddr, Presented>,
}

/// Which tickets the endpoint accepts, and what each run has used.
#[derive(Debug)]
pub struct TicketGate {
    /// The name tickets must carry as their `server`.
    name: String,
    /// The endpoint and the issuer it trusts, as refusals name them.
    label: String,
    issuer: &'static str,
    verifier: RwLock<Option<TicketVerifier>>,
    state: Mutex<GateState>,
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl TicketGate {
    /// A gate for the endpoint of agent `agent`; it refuses every test until
    /// [`TicketGate::trust`] gives it the server's key.
    pub fn new(agent: &str) -> Self {
        Self {
            name: agent.to_string(),
            label: format!("agent '{agent}'"),
            issuer: "its vantage server",
            verifier: RwLock::new(None),
            state: Mutex::new(GateState::default()),
        }
    }

    /// A gate for a standalone endpoint named `name` (`vantage endpoint --name`) that
    /// accepts tickets signed by the keys of its authorized-keys file.
    pub fn standalone(name: &str, verifier: TicketVerifier) -> Self {
        Self {
            name: name.to_string(),
            label: format!("standalone endpoint '{name}'"),
            issuer: "a key in its --authorized-keys",
            verifier: RwLock::new(Some(verifier)),
            state: Mutex::new(GateState::default()),
        }
    }

    /// The keys whose tickets are accepted from now on (the server's, learnt at
    /// registration).
    pub fn trust(&self, verifier: TicketVerifier) {
        *self
            .verifier
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(verifier);
    }

    /// The claims of a ticket valid for a throughput test at this endpoint now.
    pub fn check(&self, ticket: Option<&TestTicket>) -> Result<TicketClaims, String> {
        let claims = self.verify(ticket)?;
        let bulk = vantage_model::kinds::find(&claims.test).is_some_and(|kind| kind.bulk_transfer);
        if !bulk {
            return Err(format!(
                "the ticket is for a {} test, not a throughput test",
                claims.test
            ));
        }
        Ok(claims)
    }

    /// The claims of a ticket valid for a deadline transfer to this endpoint now.
    pub fn check_transfer(&self, ticket: &TestTicket) -> Result<TicketClaims, String> {
        let claims = self.verify(Some(ticket))?;
        if claims.test != vantage_model::transfers::TRANSFER_TEST {
            return Err(format!(
                "the ticket is for a {} test, not a deadline transfer",
                claims.test
            ));
        }
        Ok(claims)
    }

    /// A ticket's claims, signed by a trusted key, unexpired and for this endpoint.
    fn verify(&self, ticket: Option<&TestTicket>) -> Result<TicketClaims, String> {
        let ticket = ticket.ok_or_else(|| {
            format!(
                "{} serves throughput tests only with a ticket from {}",
                self.label, self.issuer
            )
        })?;
        let claims = {
            let verifier = self
                .verifier
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let verifier = verifier.as_ref().ok_or_else(|| {
                format!("{} has not yet learnt its server's ticket key", self.label)
            })?;
            verifier
                .verify(ticket, now_us())
                .map_err(|err| err.to_string())?
        };
        if claims.server != self.name {
            return Err(format!(
                "the ticket is for '{}', not for {}",
                claims.server, self.label
            ));
        }
        Ok(claims)
    }

    /// Charges `duration` of test time to the ticket's run, or refuses when the run
    /// would exceed what its ticket covers.
    pub fn charge(&self, claims: &TicketClaims, duration: Duration) -> Result<(), String> {
        let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let mut state = self.lock();
        let now = now_us();
        if !state.used_ms.contains_key(&claims.run_id) && state.used_ms.len() >= MAX_TRACKED {
            state
                .used_ms
                .retain(|_, (_, not_after_us)| *not_after_us >= now);
            if state.used_ms.len() >= MAX_TRACKED {
                return Err("too many ticketed runs in progress; retry later".into());
            }
        }
        let (used_ms, _) = state
            .used_ms
            .entry(claims.run_id.clone())
            .or_insert((0, claims.not_after_us));
        if used_ms.saturating_add(duration_ms) > claims.max_duration_ms {
            return Err(format!(
                "run '{}' has used {} ms of the {} ms its ticket covers; {duration_ms} ms more is too much",
                claims.run_id, used_ms, claims.max_duration_ms
            ));
        }
        *used_ms += duration_ms;
        Ok(())
    }

    /// Records `ticket`, presented from `peer`, for the iperf3 test that address runs next.
    pub fn present(&self, ticket: &TestTicket, peer: IpAddr) -> Result<(), String> {
        let claims = self.check(Some(ticket))?;
        let mut state = self.lock();
        let peer = peer.to_canonical();
        if !state.presented.contains_key(&peer) && state.presented.len() >= MAX_TRACKED {
            let now = now_us();
            state
                .presented
                .retain(|_, presented| presented.claims.not_after_us >= now);
            if state.presented.len() >= MAX_TRACKED {
                return Err("too many presented tickets; retry later".into());
            }
        }
        state.presented.insert(peer, Presented { claims });
        Ok(())
    }

    /// Admits one iperf3 test of `duration` from `peer` under the ticket that address
    /// presented (used up by this test), charging the ticket's run.
    pub fn admit_presented(&self, peer: IpAddr, duration: Duration) -> Result<(), String> {
        let presented = self.lock().presented.remove(&peer.to_canonical());
        let Some(Presented { claims }) = presented else {
            return Err(format!(
                "{} serves iperf3 clients only after they present a ticket from {} \
                 (vantage throughput --tool iperf3 --ticket FILE presents it)",
                self.label, self.issuer
            ));
        };
        if now_us() > claims.not_after_us {
            return Err(format!(
                "the ticket for run '{}' has expired",
                claims.run_id
            ));
        }
        self.charge(&claims, duration)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vantage_model::ticket::TicketSigner;

    fn signer() -> TicketSigner {
        TicketSigner::from_secret([3; 32])
    }

    fn claims(server: &str, test: &str, max_duration_ms: u64) -> TicketClaims {
        TicketClaims {
            run_id: "tput/1/a>b".into(),
            test: test.into(),
            client: "a".into(),
            server: server.into(),
            max_duration_ms,
            not_after_us: now_us() + 60_000_000,
        }
    }

    fn gate() -> TicketGate {
        let gate = TicketGate::new("b");
        gate.trust(TicketVerifier::from_hex_keys([signer().public_key_hex().as_str()]).unwrap());
        gate
    }

    #[test]
    fn refuses_until_the_key_is_known_and_without_a_ticket() {
        let gate = TicketGate::new("b");
        let ticket = signer().sign(&claims("b", "throughput", 5_000));
        assert!(gate
            .check(Some(&ticket))
            .unwrap_err()
            .contains("not yet learnt its server's ticket key"));
        let gate = self::gate();
        assert!(gate
            .check(None)
            .unwrap_err()
            .contains("agent 'b' serves throughput tests only with a ticket"));
        assert!(gate.check(Some(&ticket)).is_ok());
    }

    #[test]
    fn refuses_other_agents_kinds_and_keys() {
        let gate = gate();
        let for_c = signer().sign(&claims("c", "throughput", 5_000));
        assert_eq!(
            gate.check(Some(&for_c)).unwrap_err(),
            "the ticket is for 'c', not for agent 'b'"
        );
        let latency = signer().sign(&claims("b", "latency", 5_000));
        assert!(gate
            .check(Some(&latency))
            .unwrap_err()
            .contains("latency test"));
        let forged = TicketSigner::from_secret([4; 32]).sign(&claims("b", "throughput", 5_000));
        assert!(gate.check(Some(&forged)).unwrap_err().contains("signature"));
    }

    #[test]
    fn a_run_gets_the_test_time_its_ticket_covers() {
        let gate = gate();
        let claims = claims("b", "capacity", 5_000);
        gate.charge(&claims, Duration::from_secs(3)).unwrap();
        gate.charge(&claims, Duration::from_secs(2)).unwrap();
        assert!(gate
            .charge(&claims, Duration::from_millis(1))
            .unwrap_err()
            .contains("has used 5000 ms of the 5000 ms"));
    }

    #[test]
    fn a_presented_ticket_admits_one_iperf3_test_from_its_address() {
        let gate = gate();
        let ticket = signer().sign(&claims("b", "throughput", 5_000));
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(gate
            .admit_presented(client, Duration::from_secs(1))
            .is_err());
        gate.present(&ticket, "::ffff:192.0.2.1".parse().unwrap())
            .unwrap();
        assert!(gate
            .admit_presented("192.0.2.2".parse().unwrap(), Duration::from_secs(1))
            .is_err());
        gate.admit_presented(client, Duration::from_secs(1))
            .unwrap();
        assert!(gate
            .admit_presented(client, Duration::from_secs(1))
            .is_err());
        // Presenting again continues the same run's budget.
        gate.present(&ticket, client).unwrap();
        assert!(gate
            .admit_presented(client, Duration::from_secs(5))
            .unwrap_err()
            .contains("has used 1000 ms"));
    }
}
