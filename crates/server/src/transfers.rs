//! Deadline transfers planned by Calibers (Alali, PhD dissertation, University of
//! Virginia, 2019, ch. 4): the server admits a transfer only if the declared segments it
//! crosses can carry the rate its deadline needs, paces each source agent at the rate the
//! policy allocates, hands the capacity of finished transfers on, and every epoch
//! re-plans the transfers whose measured progress fell behind. The planning itself is
//! `vantage_sim::calibers::Scheduler`, the code the simulator runs; this module keeps the
//! transfers' records and turns measured progress into its inputs.
//!
//! The links planned on are the configuration's `[[segments]]` that declare a
//! `capacity`: an uplink is two links (out of and into its members), a shared segment
//! one. The plan lives in the memory of the server that admitted the transfers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use vantage_model::config::{Segment, SegmentKind};
use vantage_model::ticket::{TestTicket, TicketClaims, TicketSigner};
use vantage_model::transfers::{
    TransferAsk, TransferAssignment, TransferAssignments, TransferProgress, TransferRecord,
    TransferState, TRANSFER_TEST,
};
use vantage_model::units::format_rate_bps;
use vantage_sim::calibers::{Policy, Refusal, Scheduler, TransferRequest};

use crate::archive::{from_us, AgentRecord};

/// Transfers planned at once; more are refused until some end.
pub const MAX_ACTIVE: usize = 1000;
/// Ended transfers kept for the API; the oldest are forgotten first.
pub const MAX_ENDED: usize = 10_000;
/// The largest transfer one request may ask for (1 PB).
pub const MAX_BYTES: u64 = 1_000_000_000_000_000;
/// The longest delivery window (30 days).
pub const MAX_WINDOW_S: f64 = 30.0 * 86_400.0;
/// The destination's endpoint takes the transfer this long past its deadline, for the
/// last acknowledgements in flight.
const TICKET_GRACE_US: i64 = 10_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferOptions {
    /// How often progress is turned into a new plan.
    pub epoch: Duration,
    pub policy: Policy,
}

impl Default for TransferOptions {
    /// One-second epochs with Global-LJF: the dissertation's best policy at that epoch.
    fn default() -> Self {
        TransferOptions {
            epoch: Duration::from_secs(1),
            policy: Policy::GlobalLjf,
        }
    }
}

/// Why a transfer request was not admitted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TransferRefusal {
    /// The request itself is wrong (a field, a deadline already past).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    UnknownAgent(String),
    /// Calibers' admission: the path cannot carry the deadline's rate, or the endpoints
    /// cannot send that fast.
    #[error("{0}")]
    NoCapacity(String),
    #[error("{0}")]
    NotFound(String),
}

/// A link the plan uses: one direction of a declared segment.
#[derive(Debug, Clone, PartialEq)]
struct PlannedLink {
    name: String,
    capacity_bps: f64,
}

struct Entry {
    record: TransferRecord,
    /// The transfer's id in the scheduler while it is planned.
    slot: Option<usize>,
    /// Where the destination's endpoint listens, and the ticket it requires.
    address: String,
    port: u16,
    ticket: TestTicket,
}

struct Desk {
    scheduler: Scheduler,
    links: Vec<PlannedLink>,
    /// The scheduler's clock starts here (Unix µs).
    origin_us: i64,
    entries: BTreeMap<String, Entry>,
    /// Ended transfers, oldest first, for forgetting.
    ended: VecDeque<String>,
    admitted: u64,
}

pub struct TransferDesk {
    options: TransferOptions,
    desk: Mutex<Desk>,
    /// Bumped whenever an allocation or the set of transfers changes: long-polling
    /// agents wake on it.
    version: tokio::sync::watch::Sender<u64>,
}

/// The name of one direction of an uplink: `out` of its members or `in`to them.
fn uplink_direction(segment: &str, direction: &str) -> String {
    format!("{segment} ({direction})")
}

/// The links a configuration declares, in order: each uplink out of and into its
/// members, each shared segment as one.
fn declared_links(segments: &[Segment]) -> Vec<PlannedLink> {
    let mut links = Vec::new();
    for segment in segments {
        let Some(capacity) = segment.capacity_bps else {
            continue;
        };
        let capacity_bps = capacity as f64;
        match segment.kind {
            SegmentKind::Uplink => {
                for direction in ["out", "in"] {
                    links.push(PlannedLink {
                        name: uplink_direction(&segment.name, direction),
                        capacity_bps,
                    });
                }
            }
            SegmentKind::Shared => links.push(PlannedLink {
                name: segment.name.clone(),
                capacity_bps,
            }),
        }
    }
    links
}

/// The names of the links a transfer from `source` to `destination` crosses.
fn crossed_links(
    segments: &[Segment],
    source: &AgentRecord,
    destination: &AgentRecord,
) -> Vec<String> {
    let member = |segment: &Segment, agent: &AgentRecord| {
        segment.contains(&agent.registration.name, &agent.registration.tags)
    };
    let mut names = Vec::new();
    for segment in segments
        .iter()
        .filter(|segment| segment.capacity_bps.is_some())
    {
        let (from, to) = (member(segment, source), member(segment, destination));
        if !segment.used_by(from, to) {
            continue;
        }
        match segment.kind {
            SegmentKind::Uplink if from => names.push(uplink_direction(&segment.name, "out")),
            SegmentKind::Uplink => names.push(uplink_direction(&segment.name, "in")),
            SegmentKind::Shared => names.push(segment.name.clone()),
        }
    }
    names
}

fn scheduler_over(links: &[PlannedLink], policy: Policy) -> Scheduler {
    Scheduler::over_links(links.iter().map(|link| link.capacity_bps).collect(), policy)
}

impl Desk {
    fn now_s(&self, now_us: i64) -> f64 {
        (now_us - self.origin_us) as f64 / 1e6
    }

    /// Copies the scheduler's allocations into the records; true when one changed.
    fn refresh_rates(&mut self) -> bool {
        let mut changed = false;
        for entry in self.entries.values_mut() {
            let rate_bps = entry
                .slot
                .and_then(|slot| self.scheduler.transfer(slot))
                .map_or(0.0, |transfer| transfer.alloc_bps);
            if rate_bps != entry.record.rate_bps {
                entry.record.rate_bps = rate_bps;
                changed = true;
            }
        }
        changed
    }

    /// Ends a transfer: out of the plan, its capacity handed on as the policy says.
    fn end(&mut self, id: &str, state: TransferState, error: Option<String>, now_us: i64) {
        let now_s = self.now_s(now_us);
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        entry.record.state = state;
        entry.record.error = error;
        entry.record.ended_at = Some(from_us(now_us));
        if let Some(slot) = entry.slot.take() {
            self.scheduler.set_remaining(slot, 0.0);
            self.scheduler.remove_completed(now_s);
        }
        self.ended.push_back(id.to_string());
        while self.ended.len() > MAX_ENDED {
            if let Some(oldest) = self.ended.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    fn active(&self) -> usize {
        self.entries.len() - self.ended.len()
    }
}

fn check_ask(ask: &TransferAsk, now_us: i64) -> Result<(f64, i64), TransferRefusal> {
    let invalid = |message: String| Err(TransferRefusal::Invalid(message));
    if ask.source == ask.destination {
        return invalid(format!(
            "field 'destination': '{}' is also the source",
            ask.destination
        ));
    }
    if !(1..=MAX_BYTES).contains(&ask.bytes) {
        return invalid(format!("field 'bytes': must be 1 to {MAX_BYTES}"));
    }
    if let Some(rate) = ask.max_rate_bps {
        if !(rate.is_finite() && rate > 0.0) {
            return invalid("field 'max_rate_bps': must be a positive number".into());
        }
    }
    let window_s = match (ask.deadline, ask.window_s) {
        (Some(deadline), None) => (deadline.timestamp_micros() - now_us) as f64 / 1e6,
        (None, Some(window_s)) => window_s,
        _ => {
            return invalid(
                "give the deadline as 'deadline' (RFC 3339) or 'window_s' (seconds from now), one of them"
                    .into(),
            )
        }
    };
    if !window_s.is_finite() || window_s <= 0.0 {
        return invalid(format!(
            "the deadline has passed (it was {:.3} s ago)",
            -window_s
        ));
    }
    if window_s > MAX_WINDOW_S {
        return invalid(format!(
            "the deadline is more than {} days away",
            MAX_WINDOW_S / 86_400.0
        ));
    }
    Ok((window_s, now_us + (window_s * 1e6) as i64))
}

impl TransferDesk {
    pub fn new(options: TransferOptions) -> TransferDesk {
        TransferDesk {
            options,
            desk: Mutex::new(Desk {
                scheduler: scheduler_over(&[], options.policy),
                links: Vec::new(),
                origin_us: crate::archive::now_us(),
                entries: BTreeMap::new(),
                ended: VecDeque::new(),
                admitted: 0,
            }),
            version: tokio::sync::watch::channel(0).0,
        }
    }

    pub fn options(&self) -> TransferOptions {
        self.options
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Desk> {
        self.desk
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bump(&self) {
        self.version.send_modify(|version| *version += 1);
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Calibers' admission of `ask` at `now_us` over the configuration's `segments`.
    pub fn admit(
        &self,
        ask: &TransferAsk,
        segments: &[Segment],
        agents: &[AgentRecord],
        signer: &TicketSigner,
        now_us: i64,
    ) -> Result<TransferRecord, TransferRefusal> {
        let (window_s, deadline_us) = check_ask(ask, now_us)?;
        let agent = |name: &str, field: &str| {
            agents
                .iter()
                .find(|agent| agent.registration.name == name)
                .ok_or_else(|| {
                    TransferRefusal::UnknownAgent(format!(
                        "field '{field}': no agent '{name}' is registered"
                    ))
                })
        };
        let source = agent(&ask.source, "source")?;
        let destination = agent(&ask.destination, "destination")?;
        if !destination.registration.accepts_inbound {
            return Err(TransferRefusal::Invalid(format!(
                "field 'destination': agent '{}' accepts no inbound connections",
                ask.destination
            )));
        }
        let address = destination
            .registration
            .addresses
            .first()
            .cloned()
            .ok_or_else(|| {
                TransferRefusal::Invalid(format!("agent '{}' has no address", ask.destination))
            })?;
        let mut desk = self.lock();
        if desk.active() >= MAX_ACTIVE {
            return Err(TransferRefusal::NoCapacity(format!(
                "{MAX_ACTIVE} transfers are planned already; retry when some have ended"
            )));
        }
        // New capacities take effect when nothing is planned on the old ones.
        let declared = declared_links(segments);
        if desk.active() == 0 && declared != desk.links {
            desk.scheduler = scheduler_over(&declared, self.options.policy);
            desk.links = declared;
        }
        let crossed = crossed_links(segments, source, destination);
        let path: Vec<usize> = crossed
            .iter()
            .filter_map(|name| desk.links.iter().position(|link| &link.name == name))
            .collect();
        if path.is_empty() {
            return Err(TransferRefusal::NoCapacity(format!(
                "no segment with a declared capacity lies between '{}' and '{}': declare the \
                 one they share ([[segments]] with a capacity) so transfers can be planned",
                ask.source, ask.destination
            )));
        }
        let max_rate_bps = ask.max_rate_bps.unwrap_or(f64::INFINITY);
        let now_s = desk.now_s(now_us);
        let request = TransferRequest {
            path: path.clone(),
            size_bits: ask.bytes as f64 * 8.0,
            window_s,
            max_rate_bps,
        };
        let slot = desk.scheduler.admit(request, now_s).map_err(|refusal| {
            let needs = |needed_bps: f64| {
                format!(
                    "{} bytes in {window_s:.3} s needs {}",
                    ask.bytes,
                    format_rate_bps(needed_bps)
                )
            };
            match refusal {
                Refusal::DeadlinePassed => {
                    TransferRefusal::Invalid("the deadline has passed".into())
                }
                Refusal::NoCapacity {
                    needed_bps,
                    link,
                    available_bps,
                } => TransferRefusal::NoCapacity(format!(
                    "refused: {}; {} can give it at most {} without making an admitted transfer miss its deadline",
                    needs(needed_bps),
                    desk.links[link].name,
                    format_rate_bps(available_bps)
                )),
                Refusal::AboveMaxRate { needed_bps } => TransferRefusal::NoCapacity(format!(
                    "refused: {}, above its max_rate_bps of {}",
                    needs(needed_bps),
                    format_rate_bps(max_rate_bps)
                )),
            }
        })?;
        desk.admitted += 1;
        let id = format!("{:x}-{}", now_us, desk.admitted);
        let rate_bps = desk.scheduler.transfer(slot).map_or(0.0, |t| t.alloc_bps);
        let deadline = from_us(deadline_us);
        let ticket = signer.sign(&TicketClaims {
            run_id: id.clone(),
            test: TRANSFER_TEST.to_string(),
            client: ask.source.clone(),
            server: ask.destination.clone(),
            max_duration_ms: ((deadline_us - now_us + TICKET_GRACE_US) / 1000) as u64,
            not_after_us: deadline_us + TICKET_GRACE_US,
        });
        let record = TransferRecord {
            id: id.clone(),
            source: ask.source.clone(),
            destination: ask.destination.clone(),
            bytes: ask.bytes,
            deadline,
            max_rate_bps: ask.max_rate_bps,
            policy: self.options.policy.name().to_string(),
            links: path
                .iter()
                .map(|&link| desk.links[link].name.clone())
                .collect(),
            state: TransferState::Admitted,
            rate_bps,
            delivered_bytes: 0,
            admitted_at: from_us(now_us),
            ended_at: None,
            replans: 0,
            at_risk: false,
            error: None,
        };
        desk.entries.insert(
            id,
            Entry {
                record: record.clone(),
                slot: Some(slot),
                address,
                port: destination.registration.endpoint_port,
                ticket,
            },
        );
        // Pacing may have slowed others to make room.
        desk.refresh_rates();
        drop(desk);
        self.bump();
        Ok(record)
    }

    /// A progress report from the source agent.
    pub fn progress(
        &self,
        agent: &str,
        id: &str,
        progress: &TransferProgress,
        now_us: i64,
    ) -> Result<TransferRecord, TransferRefusal> {
        let mut desk = self.lock();
        let entry = desk
            .entries
            .get_mut(id)
            .filter(|entry| entry.record.source == agent)
            .ok_or_else(|| {
                TransferRefusal::NotFound(format!("agent '{agent}' sends no transfer '{id}'"))
            })?;
        if !entry.record.state.is_active() {
            return Ok(entry.record.clone());
        }
        let bytes = entry.record.bytes;
        entry.record.delivered_bytes = entry
            .record
            .delivered_bytes
            .max(progress.delivered_bytes.min(bytes));
        let delivered = entry.record.delivered_bytes;
        let late = now_us > entry.record.deadline.timestamp_micros();
        if progress.done {
            let (state, error) = if delivered == bytes && !late {
                (TransferState::Completed, None)
            } else if delivered == bytes {
                (
                    TransferState::Missed,
                    Some("every byte arrived, after the deadline".to_string()),
                )
            } else {
                let reason = progress
                    .error
                    .clone()
                    .unwrap_or_else(|| "the sender stopped".into());
                (
                    TransferState::Failed,
                    Some(format!("{reason} ({delivered} of {bytes} bytes delivered)")),
                )
            };
            desk.end(id, state, error, now_us);
            desk.refresh_rates();
            let record = desk.entries.get(id).map(|entry| entry.record.clone());
            drop(desk);
            self.bump();
            return record.ok_or_else(|| TransferRefusal::NotFound(id.to_string()));
        }
        entry.record.state = TransferState::Running;
        if let Some(slot) = entry.slot {
            desk.scheduler
                .set_remaining(slot, (bytes - delivered) as f64 * 8.0);
        }
        Ok(desk.entries[id].record.clone())
    }

    /// One epoch: transfers past their deadline are stopped, those behind their plan
    /// re-planned; agents are told when an allocation changed.
    pub fn epoch(&self, now_us: i64) {
        let mut desk = self.lock();
        let now_s = desk.now_s(now_us);
        let past: Vec<String> = desk
            .entries
            .values()
            .filter(|entry| {
                entry.record.state.is_active() && entry.record.deadline.timestamp_micros() <= now_us
            })
            .map(|entry| entry.record.id.clone())
            .collect();
        let mut changed = !past.is_empty();
        for id in past {
            let (delivered, bytes) = {
                let record = &desk.entries[&id].record;
                (record.delivered_bytes, record.bytes)
            };
            let error = format!("the deadline passed with {delivered} of {bytes} bytes delivered");
            desk.end(&id, TransferState::Missed, Some(error), now_us);
        }
        let behind = desk.scheduler.behind(now_s);
        // Set every epoch, so a flag clears once its transfer has caught up.
        let short = desk.scheduler.replan(now_s);
        for entry in desk.entries.values_mut() {
            if let Some(slot) = entry.slot {
                if behind.contains(&slot) {
                    entry.record.replans += 1;
                }
                entry.record.at_risk = short.contains(&slot);
            }
        }
        changed |= desk.refresh_rates();
        drop(desk);
        if changed {
            self.bump();
        }
    }

    /// The transfers `agent` is to send now.
    pub fn assignments(&self, agent: &str) -> TransferAssignments {
        let version = *self.version.borrow();
        let desk = self.lock();
        TransferAssignments {
            version,
            transfers: desk
                .entries
                .values()
                .filter(|entry| entry.record.source == agent && entry.record.state.is_active())
                .map(|entry| TransferAssignment {
                    id: entry.record.id.clone(),
                    destination: entry.record.destination.clone(),
                    address: entry.address.clone(),
                    port: entry.port,
                    bytes: entry.record.bytes,
                    rate_bps: entry.record.rate_bps,
                    deadline: entry.record.deadline,
                    ticket: entry.ticket.clone(),
                })
                .collect(),
        }
    }

    /// Every transfer known, newest first.
    pub fn list(&self) -> Vec<TransferRecord> {
        let desk = self.lock();
        let mut records: Vec<TransferRecord> = desk
            .entries
            .values()
            .map(|entry| entry.record.clone())
            .collect();
        records.sort_by(|a, b| b.admitted_at.cmp(&a.admitted_at).then(b.id.cmp(&a.id)));
        records
    }

    pub fn get(&self, id: &str) -> Option<TransferRecord> {
        self.lock()
            .entries
            .get(id)
            .map(|entry| entry.record.clone())
    }
}

/// Runs the epochs until `stopped`.
pub async fn run_epochs(
    state: std::sync::Arc<crate::state::ServerState>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(state.transfers.options().epoch);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => state.transfers.epoch(crate::archive::now_us()),
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vantage_model::config::Selector;
    use vantage_model::control::AgentRegistration;

    use super::*;

    const T0_US: i64 = 1_800_000_000_000_000;

    fn agent(name: &str) -> AgentRecord {
        AgentRecord {
            registration: AgentRegistration {
                name: name.into(),
                addresses: vec![format!("10.0.0.{}", name.len())],
                endpoint_port: 8471,
                iperf3_port: None,
                tags: BTreeMap::new(),
                capabilities: Vec::new(),
                accepts_inbound: true,
                version: None,
            },
            registered_at: from_us(T0_US),
            last_seen_at: from_us(T0_US),
        }
    }

    /// `dst` behind an uplink of 10 Mbit/s.
    fn uplink() -> Vec<Segment> {
        vec![Segment {
            name: "wan".into(),
            kind: SegmentKind::Uplink,
            members: vec![Selector::parse("dst").unwrap()],
            capacity_bps: Some(10_000_000),
        }]
    }

    fn ask(source: &str, bytes: u64, window_s: f64) -> TransferAsk {
        TransferAsk {
            source: source.into(),
            destination: "dst".into(),
            bytes,
            deadline: None,
            window_s: Some(window_s),
            max_rate_bps: None,
        }
    }

    fn desk() -> (TransferDesk, Vec<AgentRecord>, TicketSigner) {
        let desk = TransferDesk::new(TransferOptions::default());
        desk.lock().origin_us = T0_US;
        (
            desk,
            vec![agent("a"), agent("b"), agent("dst")],
            TicketSigner::from_secret([7; 32]),
        )
    }

    /// Asks for `bytes` from `source` to `dst` within `window_s`, through [`uplink`], at T0.
    fn admit(
        (desk, agents, signer): &(TransferDesk, Vec<AgentRecord>, TicketSigner),
        source: &str,
        bytes: u64,
        window_s: f64,
    ) -> Result<TransferRecord, TransferRefusal> {
        desk.admit(
            &ask(source, bytes, window_s),
            &uplink(),
            agents,
            signer,
            T0_US,
        )
    }

    #[test]
    fn admission_paces_the_first_and_refuses_what_the_link_cannot_carry_naming_it() {
        let fixture = desk();
        let desk = &fixture.0;
        // 10 MB in 80 s needs 1 Mbit/s; alone it gets the whole 10 Mbit/s link (in).
        let loose = admit(&fixture, "a", 10_000_000, 80.0).unwrap();
        assert_eq!(loose.rate_bps, 10e6);
        assert_eq!(loose.links, vec!["wan (in)".to_string()]);
        // 6 MB in 8 s needs 6 Mbit/s: the loose one gives up its slack of 9 Mbit/s.
        let critical = admit(&fixture, "b", 6_000_000, 8.0).unwrap();
        assert_eq!(critical.rate_bps, 9e6);
        assert_eq!(desk.get(&loose.id).unwrap().rate_bps, 1e6);
        let assigned = desk.assignments("b");
        assert_eq!(assigned.transfers.len(), 1);
        assert_eq!(assigned.transfers[0].rate_bps, 9e6);
        assert_eq!(assigned.transfers[0].address, "10.0.0.3");
        // 10 MB in 8 s needs 10 Mbit/s: 0 left beyond the others' minimums.
        let refusal = admit(&fixture, "a", 10_000_000, 8.0).unwrap_err();
        assert!(
            matches!(&refusal, TransferRefusal::NoCapacity(message) if message.contains("wan (in)") && message.contains("10.0 Mbit/s")),
            "{refusal:?}"
        );
    }

    #[test]
    fn bad_requests_are_refused_with_the_field() {
        let (desk, agents, signer) = desk();
        let refuse = |ask: TransferAsk, segments: &[Segment]| {
            desk.admit(&ask, segments, &agents, &signer, T0_US)
                .unwrap_err()
                .to_string()
        };
        assert!(refuse(ask("dst", 1, 1.0), &uplink()).contains("'destination'"));
        assert!(refuse(ask("a", 0, 1.0), &uplink()).contains("'bytes'"));
        assert!(refuse(ask("a", 1, -1.0), &uplink()).contains("deadline has passed"));
        assert!(refuse(ask("nobody", 1, 1.0), &uplink()).contains("no agent 'nobody'"));
        assert!(refuse(ask("a", 1, 1.0), &[]).contains("no segment with a declared capacity"));
        let mut both = ask("a", 1, 1.0);
        both.deadline = Some(from_us(T0_US + 1_000_000));
        assert!(refuse(both, &uplink()).contains("one of them"));
    }

    #[test]
    fn a_transfer_at_risk_is_flagged_until_it_catches_up() {
        let fixture = desk();
        let desk = &fixture.0;
        // 10 MB in 10 s needs 8 Mbit/s and gets the whole 10.
        let transfer = admit(&fixture, "a", 10_000_000, 10.0).unwrap();
        let at = |delivered_bytes: u64, at_s: i64| {
            let progress = TransferProgress {
                delivered_bytes,
                done: false,
                error: None,
            };
            desk.progress("a", &transfer.id, &progress, T0_US + at_s * 1_000_000)
                .unwrap();
            desk.epoch(T0_US + at_s * 1_000_000);
            desk.get(&transfer.id).unwrap().at_risk
        };
        // At 5 s, 1 MB: the other 9 need 14.4 Mbit/s of a 10 Mbit/s link.
        assert!(at(1_000_000, 5));
        // At 6 s, 8 MB: the other 2 need 4 Mbit/s, no longer at risk.
        assert!(!at(8_000_000, 6));
    }

    #[test]
    fn progress_ends_transfers_and_a_transfer_behind_is_replanned() {
        let fixture = desk();
        let desk = &fixture.0;
        // 6 MB in 8 s (6 Mbit/s) gets the free 10; 10 MB in 80 s (1 Mbit/s) then takes
        // its slack of 4.
        let critical = admit(&fixture, "b", 6_000_000, 8.0).unwrap();
        let loose = admit(&fixture, "a", 10_000_000, 80.0).unwrap();
        assert_eq!(desk.get(&critical.id).unwrap().rate_bps, 6e6);
        assert_eq!(loose.rate_bps, 4e6);
        let report = |id: &str, agent: &str, delivered_bytes: u64, done: bool, at_s: i64| {
            let progress = TransferProgress {
                delivered_bytes,
                done,
                error: None,
            };
            desk.progress(agent, id, &progress, T0_US + at_s * 1_000_000)
        };
        // Only the sender may report.
        assert!(matches!(
            report(&critical.id, "a", 1, false, 1),
            Err(TransferRefusal::NotFound(_))
        ));
        // At 4 s the critical transfer has delivered 2 MB, not 3: it needs 8 Mbit/s for
        // the rest. The next epoch gives it the free 6 and the loose one's slack
        // (4 − 64 Mbit / 76 s).
        report(&critical.id, "b", 2_000_000, false, 4).unwrap();
        report(&loose.id, "a", 2_000_000, false, 4).unwrap();
        desk.epoch(T0_US + 4_000_000);
        let behind = desk.get(&critical.id).unwrap();
        assert_eq!(
            (behind.state, behind.replans, behind.at_risk),
            (TransferState::Running, 1, false)
        );
        let loose_min_bps = 64e6 / 76.0;
        assert!((behind.rate_bps - (10e6 - loose_min_bps)).abs() < 1e-6);
        assert!((desk.get(&loose.id).unwrap().rate_bps - loose_min_bps).abs() < 1e-6);
        // Done: its capacity goes back to the loose transfer at once.
        let done = report(&critical.id, "b", 6_000_000, true, 7).unwrap();
        assert_eq!(done.state, TransferState::Completed);
        assert_eq!(desk.get(&loose.id).unwrap().rate_bps, 10e6);
        assert!(desk.assignments("b").transfers.is_empty());
        // A transfer still running at its deadline is stopped and recorded as missed.
        desk.epoch(T0_US + 81_000_000);
        let missed = desk.get(&loose.id).unwrap();
        assert_eq!(missed.state, TransferState::Missed);
        assert!(missed.error.unwrap().contains("2000000 of 10000000 bytes"));
        assert_eq!(missed.rate_bps, 0.0);
        assert!(desk.assignments("a").transfers.is_empty());
    }
}
