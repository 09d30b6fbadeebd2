//! Periodic planning: tasks × occurrences in a window → runs and non-starts.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use vantage_model::config::{
    Directions, GroupMembers, SchedulingClass, Segment, Selector, Task, TestDef, ValidatedConfig,
};

use vantage_model::kinds::{KindRef, Participants, Service};

use crate::claims::{agent_resource, segment_resource, target_resource, Claim, ClaimMode};
use crate::light::LightTasks;
use crate::rounds;
use crate::time::{from_ms, to_ms, to_ms_ceil};
use crate::timeline::{Blocker, ResourceId, Timeline};
use crate::types::{AgentInfo, CampaignOverload, CampaignSummary, NonStart, Plan, PlannedRun};

/// Occurrences whose nominal start lies in `[start, end)` are planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanWindow {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// An agent known to the planner; agents named in the configuration but not
/// registered get a slot too, so their runs become non-starts with a reason.
pub(crate) struct AgentSlot {
    pub name: String,
    pub tags: BTreeMap<String, String>,
    pub accepts_inbound: bool,
    pub capabilities: Option<BTreeSet<String>>,
    pub iperf3_listener: bool,
    pub registered: bool,
    /// An external host (a group's `targets`), not an agent: only ever a server.
    pub external: bool,
    /// Membership in each of the configuration's segments.
    pub in_segment: Vec<bool>,
    pub resource: ResourceId,
}

/// Mutable state of one planning call, shared by periodic and on-demand placement.
pub(crate) struct Planner<'a> {
    pub timeline: Timeline,
    pub agents: Vec<AgentSlot>,
    by_name: HashMap<String, usize>,
    segments: &'a [Segment],
    segment_resources: Vec<ResourceId>,
    /// Run id of every reservation owner: existing runs first, then new ones.
    pub owners: Vec<String>,
    pub runs: Vec<PlannedRun>,
    pub non_starts: Vec<NonStart>,
    /// Keyed by [`current_run_id`], so that runs stored under an earlier id form are
    /// found, not planned again.
    existing_by_id: HashMap<Cow<'a, str>, &'a PlannedRun>,
}

/// Who is client and server of a run meant to go `from` → `to`.
pub(crate) struct Orientation {
    pub client: usize,
    pub server: usize,
    pub reverse: bool,
}

impl<'a> Planner<'a> {
    /// `existing` runs that end at or before `relevant_from_ms` are ignored:
    /// nothing this planner places can start before it.
    pub fn new(
        agents: &[AgentInfo],
        segments: &'a [Segment],
        existing: &'a [PlannedRun],
        relevant_from_ms: i64,
    ) -> Planner<'a> {
        let existing: Vec<&'a PlannedRun> = existing
            .iter()
            .filter(|run| to_ms_ceil(run.end) > relevant_from_ms)
            .collect();
        let mut planner = Planner {
            timeline: Timeline::default(),
            agents: Vec::new(),
            by_name: HashMap::new(),
            segments,
            segment_resources: Vec::new(),
            owners: Vec::new(),
            runs: Vec::new(),
            non_starts: Vec::new(),
            existing_by_id: existing
                .iter()
                .map(|run| (current_run_id(&run.run_id), *run))
                .collect(),
        };
        planner.segment_resources = segments
            .iter()
            .map(|segment| planner.timeline.intern(&segment_resource(&segment.name)))
            .collect();
        let mut sorted: Vec<&AgentInfo> = agents.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        for agent in sorted {
            if !planner.by_name.contains_key(&agent.name) {
                planner.add_slot(agent, true);
            }
        }
        for run in existing {
            let claims: Vec<(ResourceId, ClaimMode)> = run
                .claims
                .iter()
                .map(|claim| (planner.timeline.intern(&claim.resource), claim.mode))
                .collect();
            let owner = planner.owners.len();
            planner.owners.push(run.run_id.clone());
            planner
                .timeline
                .reserve(&claims, to_ms(run.start), to_ms_ceil(run.end), owner);
        }
        planner
    }

    fn add_slot(&mut self, agent: &AgentInfo, registered: bool) -> usize {
        let in_segment = self
            .segments
            .iter()
            .map(|segment| registered && segment.contains(&agent.name, &agent.tags))
            .collect();
        let resource = self.timeline.intern(&agent_resource(&agent.name));
        let index = self.agents.len();
        self.agents.push(AgentSlot {
            name: agent.name.clone(),
            tags: agent.tags.clone(),
            accepts_inbound: agent.accepts_inbound,
            capabilities: agent.capabilities.clone(),
            iperf3_listener: agent.iperf3_listener,
            registered,
            external: false,
            in_segment,
            resource,
        });
        self.by_name.insert(agent.name.clone(), index);
        index
    }

    /// The slot of a named agent, creating an unregistered one when unknown.
    pub fn slot_by_name(&mut self, name: &str) -> usize {
        match self.by_name.get(name) {
            Some(&index) => index,
            None => {
                let unregistered = AgentInfo {
                    name: name.to_string(),
                    tags: BTreeMap::new(),
                    accepts_inbound: false,
                    capabilities: None,
                    iperf3_listener: false,
                };
                self.add_slot(&unregistered, false)
            }
        }
    }

    /// The slot of an external host, created on first use; it is never in a
    /// segment and holds its own resource.
    pub fn target_slot(&mut self, target: &str) -> usize {
        let key = target_resource(target);
        if let Some(&index) = self.by_name.get(&key) {
            return index;
        }
        let resource = self.timeline.intern(&key);
        let index = self.agents.len();
        self.agents.push(AgentSlot {
            name: target.to_string(),
            tags: BTreeMap::new(),
            accepts_inbound: true,
            capabilities: None,
            iperf3_listener: false,
            registered: true,
            external: true,
            in_segment: vec![false; self.segments.len()],
            resource,
        });
        self.by_name.insert(key, index);
        index
    }

    /// Registered agents matched by the selectors, plus named agents that are
    /// not registered; sorted by name.
    fn members(&mut self, selectors: &[Selector]) -> Vec<usize> {
        let mut members: BTreeSet<usize> = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, agent)| {
                agent.registered
                    && !agent.external
                    && selectors
                        .iter()
                        .any(|selector| selector.matches(&agent.name, &agent.tags))
            })
            .map(|(index, _)| index)
            .collect();
        for selector in selectors {
            if let Selector::Agent(name) = selector {
                members.insert(self.slot_by_name(name));
            }
        }
        let mut members: Vec<usize> = members.into_iter().collect();
        members.sort_by(|&a, &b| self.agents[a].name.cmp(&self.agents[b].name));
        members
    }

    /// The group's runs as rounds of agent-disjoint `(from, to)` flows.
    pub fn rounds(
        &mut self,
        members: &GroupMembers,
        directions: Directions,
    ) -> Vec<Vec<(usize, usize)>> {
        let with_reverse = |base: Vec<Vec<(usize, usize)>>| match directions {
            Directions::One => base,
            Directions::Both => {
                let reversed: Vec<Vec<(usize, usize)>> = base
                    .iter()
                    .map(|round| round.iter().map(|&(a, b)| (b, a)).collect())
                    .collect();
                base.into_iter().chain(reversed).collect()
            }
        };
        match members {
            GroupMembers::Mesh(selectors) => {
                let members = self.members(selectors);
                let base = rounds::round_robin(members.len())
                    .into_iter()
                    .map(|round| {
                        round
                            .into_iter()
                            .map(|(i, j)| (members[i], members[j]))
                            .collect()
                    })
                    .collect();
                with_reverse(base)
            }
            GroupMembers::Disjoint { a, b } => {
                let side_a = self.members(a);
                let side_b = self.members(b);
                if side_a.iter().all(|agent| !side_b.contains(agent)) {
                    with_reverse(rounds::complete_bipartite(&side_a, &side_b))
                } else {
                    let pairs: Vec<(usize, usize)> = side_a
                        .iter()
                        .flat_map(|&x| side_b.iter().map(move |&y| (x, y)))
                        .filter(|(x, y)| x != y)
                        .collect();
                    rounds::greedy(&flows_with_directions(pairs, directions))
                }
            }
            GroupMembers::List(pairs) => {
                let pairs: Vec<(usize, usize)> = pairs
                    .iter()
                    .map(|(from, to)| (self.slot_by_name(from), self.slot_by_name(to)))
                    .collect();
                rounds::greedy(&flows_with_directions(pairs, directions))
            }
            // External hosts only answer: one direction, agent to host.
            GroupMembers::External { agents, targets } => {
                let agents = self.members(agents);
                let targets: Vec<usize> = targets
                    .iter()
                    .map(|target| self.target_slot(target))
                    .collect();
                let pairs: Vec<(usize, usize)> = agents
                    .iter()
                    .flat_map(|&agent| targets.iter().map(move |&target| (agent, target)))
                    .collect();
                rounds::greedy(&pairs)
            }
        }
    }

    /// Every agent of the group once, as `(agent, agent)` flows in one round: the
    /// runs of a kind whose agents measure alone (directions mean nothing to them).
    pub fn each_agent(&mut self, members: &GroupMembers) -> Vec<Vec<(usize, usize)>> {
        let mut agents: Vec<usize> = match members {
            GroupMembers::Mesh(selectors)
            | GroupMembers::External {
                agents: selectors, ..
            } => self.members(selectors),
            GroupMembers::Disjoint { a, b } => {
                let mut agents = self.members(a);
                agents.extend(self.members(b));
                agents
            }
            GroupMembers::List(pairs) => pairs
                .iter()
                .flat_map(|(from, to)| [from, to])
                .map(|name| self.slot_by_name(name))
                .collect(),
        };
        agents.sort_by(|&a, &b| self.agents[a].name.cmp(&self.agents[b].name));
        agents.dedup();
        vec![agents.into_iter().map(|agent| (agent, agent)).collect()]
    }

    /// An agent can take part in a run of `kind`: registered, and offering it.
    fn check_agent(agent: &AgentSlot, kind: KindRef) -> Result<(), String> {
        if !agent.registered {
            return Err(format!("agent '{}' is not registered", agent.name));
        }
        if let Some(capabilities) = &agent.capabilities {
            if !capabilities.contains(kind.as_str()) {
                let offered: Vec<&str> = capabilities.iter().map(String::as_str).collect();
                return Err(format!(
                    "agent '{}' does not offer {} tests (it offers: {})",
                    agent.name,
                    kind.as_str(),
                    offered.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// An external target is always the server. Otherwise:
    /// client = the agent that cannot accept inbound connections; the test
    /// direction is kept with reverse mode where the test has one; and the server
    /// must run the service the test talks to.
    pub fn orient(&self, from: usize, to: usize, test: &TestDef) -> Result<Orientation, String> {
        let orientation = self.orient_kind(from, to, test.kind)?;
        let server = &self.agents[orientation.server];
        if !server.external
            && !server.iperf3_listener
            && test.kind.0.service_for(&test.spec) == Service::Iperf3
        {
            return Err(format!(
                "agent '{}' runs no iperf3-compatible listener (started with --no-iperf3), so it cannot be the server of a run with tool = \"iperf3\"",
                server.name
            ));
        }
        Ok(orientation)
    }

    fn orient_kind(&self, from: usize, to: usize, kind: KindRef) -> Result<Orientation, String> {
        if kind.participants == Participants::Alone {
            if from != to {
                return Err(format!(
                    "a {} run is one agent's alone: name '{}' as both its client and its server",
                    kind.as_str(),
                    self.agents[from].name
                ));
            }
            Self::check_agent(&self.agents[from], kind)?;
            return Ok(Orientation {
                client: from,
                server: from,
                reverse: false,
            });
        }
        if self.agents[to].external {
            let client = &self.agents[from];
            Self::check_agent(client, kind)?;
            return Ok(Orientation {
                client: from,
                server: to,
                reverse: false,
            });
        }
        for agent in [from, to].map(|index| &self.agents[index]) {
            Self::check_agent(agent, kind)?;
        }
        if self.agents[to].accepts_inbound {
            Ok(Orientation {
                client: from,
                server: to,
                reverse: false,
            })
        } else if self.agents[from].accepts_inbound {
            Ok(Orientation {
                client: to,
                server: from,
                reverse: kind.reversible,
            })
        } else {
            Err(format!(
                "neither '{}' nor '{}' accepts inbound connections (NAT/firewall), so neither can be the server",
                self.agents[from].name, self.agents[to].name
            ))
        }
    }

    /// Whether a run between the two agents uses any declared segment.
    fn crosses_segment(&self, first: usize, second: usize) -> bool {
        let (first, second) = (&self.agents[first], &self.agents[second]);
        self.segments.iter().enumerate().any(|(index, segment)| {
            segment.used_by(first.in_segment[index], second.in_segment[index])
        })
    }

    /// Resources a run between the two agents claims in its test's class.
    pub fn claims(
        &self,
        client: usize,
        server: usize,
        class: SchedulingClass,
    ) -> Vec<(ResourceId, ClaimMode)> {
        let mode = match class {
            SchedulingClass::Exclusive => ClaimMode::Exclusive,
            SchedulingClass::Shared => ClaimMode::Shared,
            SchedulingClass::Background => return Vec::new(),
        };
        let (client_slot, server_slot) = (&self.agents[client], &self.agents[server]);
        let mut claims = vec![(client_slot.resource, mode)];
        // An agent measuring alone holds its interface once.
        if server != client {
            claims.push((server_slot.resource, mode));
        }
        for (index, segment) in self.segments.iter().enumerate() {
            if segment.used_by(client_slot.in_segment[index], server_slot.in_segment[index]) {
                claims.push((self.segment_resources[index], mode));
            }
        }
        claims
    }

    pub fn blocker_text(&self, blocker: Option<Blocker>) -> String {
        match blocker {
            Some(blocker) => format!(
                "{} is held by run {}",
                self.timeline.name(blocker.resource),
                self.owners[blocker.owner]
            ),
            None => "the allowed start range is empty".to_string(),
        }
    }

    pub fn existing(&self, run_id: &str) -> Option<&'a PlannedRun> {
        self.existing_by_id.get(run_id).copied()
    }

    /// Records a placed run and reserves its resources.
    pub fn commit(&mut self, placement: RunPlacement<'_>) {
        let RunPlacement {
            run_id,
            task,
            test,
            priority,
            orientation,
            claims,
            start_ms,
            campaign_round,
        } = placement;
        let end_ms = start_ms + reserve_ms(test);
        let owner = self.owners.len();
        self.owners.push(run_id.clone());
        self.timeline.reserve(&claims, start_ms, end_ms, owner);
        self.runs.push(PlannedRun {
            run_id,
            task: task.to_string(),
            test: test.name.clone(),
            kind: test.kind,
            client: self.agents[orientation.client].name.clone(),
            server: self.agents[orientation.server].name.clone(),
            external: self.agents[orientation.server].external,
            reverse: orientation.reverse,
            start: from_ms(start_ms),
            end: from_ms(end_ms),
            priority,
            claims: claims
                .iter()
                .map(|&(resource, mode)| Claim {
                    resource: self.timeline.name(resource).to_string(),
                    mode,
                })
                .collect(),
            spec: test.spec.clone(),
            campaign_round,
        });
    }

    pub fn non_start(&mut self, run: RunIdentity<'_>, reason: String) {
        self.non_starts.push(NonStart {
            run_id: run.run_id,
            task: run.task.to_string(),
            test: run.test.to_string(),
            from: self.agents[run.from].name.clone(),
            to: self.agents[run.to].name.clone(),
            nominal_start: from_ms(run.nominal_ms),
            reason,
        });
    }
}

/// A run about to be committed.
pub(crate) struct RunPlacement<'t> {
    pub run_id: String,
    pub task: &'t str,
    pub test: &'t TestDef,
    pub priority: i32,
    pub orientation: Orientation,
    pub claims: Vec<(ResourceId, ClaimMode)>,
    pub start_ms: i64,
    pub campaign_round: Option<u32>,
}

/// What a non-start is about.
pub(crate) struct RunIdentity<'t> {
    pub run_id: String,
    pub task: &'t str,
    pub test: &'t str,
    pub from: usize,
    pub to: usize,
    pub nominal_ms: i64,
}

pub(crate) fn reserve_ms(test: &TestDef) -> i64 {
    i64::try_from(test.reserve.as_millis()).unwrap_or(i64::MAX / 4)
}

fn duration_ms(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Both directions when asked, without repeating a flow already listed.
fn flows_with_directions(
    pairs: Vec<(usize, usize)>,
    directions: Directions,
) -> Vec<(usize, usize)> {
    let mut seen = HashSet::new();
    let reversed: Vec<(usize, usize)> = match directions {
        Directions::One => Vec::new(),
        Directions::Both => pairs.iter().map(|&(a, b)| (b, a)).collect(),
    };
    pairs
        .into_iter()
        .chain(reversed)
        .filter(|flow| seen.insert(*flow))
        .collect()
}

/// Deterministic pseudo-random offset in `[0, slip_ms]`, drawn from the text that is
/// `key`'s parts one after another.
fn slip_offset_ms(seed: u64, key: &[&str], slip_ms: i64) -> i64 {
    if slip_ms <= 0 {
        return 0;
    }
    (stable_hash(seed, key) % (slip_ms as u64 + 1)) as i64
}

/// What a periodic run's point in its slip is drawn from: its task, pair and
/// occurrence as `<task>/<from>><to>/<occurrence>`. That is the text its id had
/// before the occurrence came first; drawing from it still means every version of
/// the planner gives a run the same preferred start, so a window planned partly
/// before an upgrade and partly after it is planned as one.
fn slip_key<'k>(task: &'k str, from: &'k str, to: &'k str, occurrence: &'k str) -> [&'k str; 7] {
    [task, "/", from, ">", to, "/", occurrence]
}

/// Stable 64-bit hash (FNV-1a with a SplitMix64 finaliser) of the text that is
/// `parts` one after another: the same across platforms and Rust versions, unlike
/// `DefaultHasher`, so slips are reproducible.
fn stable_hash(seed: u64, parts: &[&str]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for byte in parts.iter().flat_map(|part| part.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// A periodic run's id: `<task>/<occurrence>/<from>><to>`. The occurrence comes
/// before the pair so that ids, and the results stored under them, sort by time: the
/// archive's index on them is then written at its end as results arrive, not at a
/// random page for each of a thousand agents' results.
pub(crate) fn run_id(task: &str, from: &str, to: &str, occurrence: i64) -> String {
    format!("{task}/{occurrence}/{from}>{to}")
}

/// `id` in the current form of [`run_id`]: ids of earlier versions,
/// `<task>/<from>><to>/<occurrence>`, are rewritten; any other id is returned as it is.
/// Runs planned before an upgrade are matched by it, so that they are not planned again.
pub fn current_run_id(id: &str) -> Cow<'_, str> {
    let mut parts = id.split('/');
    if let (Some(task), Some(pair), Some(occurrence), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    {
        let digits = occurrence.strip_prefix('-').unwrap_or(occurrence);
        if pair.contains('>') && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Cow::Owned(format!("{task}/{occurrence}/{pair}"));
        }
    }
    Cow::Borrowed(id)
}

/// Scheduling order: higher priority first; at equal priority exclusive
/// (heavy, hard to fit) before shared before background; then by time.
fn class_rank(class: SchedulingClass) -> u8 {
    match class {
        SchedulingClass::Exclusive => 0,
        SchedulingClass::Shared => 1,
        SchedulingClass::Background => 2,
    }
}

struct TaskPlan<'c> {
    task: &'c Task,
    test: &'c TestDef,
    rounds: Vec<Vec<(usize, usize)>>,
    /// For an exclusive task whose campaign cannot fit its period.
    overload: Option<CampaignOverload>,
}

/// Which runs a planning call places.
#[derive(Clone, Copy)]
enum Scope<'l> {
    /// Every task's runs.
    Everything,
    /// Every task's but the light ones' (placed per client as agents fetch them,
    /// see [`LightTasks`]), and no exclusive campaign starts before
    /// `exclusive_not_before_ms`: light runs already handed out up to then are
    /// not passed in.
    Reserved {
        light: &'l LightTasks,
        exclusive_not_before_ms: i64,
    },
}

/// One task occurrence to place, as (priority, class rank, nominal start, task
/// index, occurrence): sorted, the scheduling order of [`class_rank`].
pub(crate) type Job = (Reverse<i32>, u8, i64, usize, i64);

/// The jobs of `task`'s occurrences in `[window_start_ms, window_end_ms)`, each
/// carrying `index` to find the task again.
pub(crate) fn jobs_of<'t>(
    (task, test): (&'t Task, &'t TestDef),
    index: usize,
    window_start_ms: i64,
    window_end_ms: i64,
) -> impl Iterator<Item = Job> + 't {
    occurrences(task, window_start_ms, window_end_ms).map(move |(occurrence, nominal_ms)| {
        (
            Reverse(task.priority),
            class_rank(test.scheduling),
            nominal_ms,
            index,
            occurrence,
        )
    })
}

/// Occurrences of `task` whose nominal start lies in `[window_start_ms, window_end_ms)`,
/// as (occurrence number, nominal start).
pub(crate) fn occurrences(
    task: &Task,
    window_start_ms: i64,
    window_end_ms: i64,
) -> impl Iterator<Item = (i64, i64)> {
    let every_ms = duration_ms(task.every).max(1);
    let offset_ms = duration_ms(task.offset);
    let mut first = (window_start_ms - offset_ms).div_euclid(every_ms);
    if first * every_ms + offset_ms < window_start_ms {
        first += 1;
    }
    (first..)
        .map(move |occurrence| (occurrence, occurrence * every_ms + offset_ms))
        .take_while(move |&(_, nominal_ms)| nominal_ms < window_end_ms)
}

/// Plans every occurrence of every enabled task whose nominal start lies in
/// the window. `existing` are runs planned earlier (those that may overlap the
/// window): their resources are respected and runs with the same id are not
/// planned again, so replanning a window is idempotent. `seed` picks the
/// pseudo-random slips; the same inputs always give the same plan.
pub fn plan(
    config: &ValidatedConfig,
    agents: &[AgentInfo],
    window: PlanWindow,
    existing: &[PlannedRun],
    seed: u64,
) -> Plan {
    plan_scope(config, agents, window, existing, seed, Scope::Everything)
}

/// Like [`plan`], but the runs of light tasks are left to [`LightTasks::runs_for`]
/// (only their flows that no agent can run are reported here, as non-starts), and
/// no exclusive campaign starts before `exclusive_not_before`. With `light` built
/// from the same configuration and agents, these runs and each client's light runs
/// (given these runs as reserved) together are exactly what [`plan`] places.
pub fn plan_reserved(
    config: &ValidatedConfig,
    agents: &[AgentInfo],
    window: PlanWindow,
    existing: &[PlannedRun],
    seed: u64,
    light: &LightTasks,
    exclusive_not_before: DateTime<Utc>,
) -> Plan {
    let scope = Scope::Reserved {
        light,
        exclusive_not_before_ms: to_ms_ceil(exclusive_not_before),
    };
    plan_scope(config, agents, window, existing, seed, scope)
}

/// The latest time until which a run [`plan_reserved`] places for `window` may hold
/// its resources: an exclusive campaign ends before its task's next occurrence, any
/// other run within its slip plus its reservation. A planning pass needs the stored
/// runs only up to then. `None` when no task but light ones has an occurrence in the
/// window: such a pass places no run, and needs no stored run either.
pub fn reserved_reach(config: &ValidatedConfig, window: PlanWindow) -> Option<DateTime<Utc>> {
    let (window_start_ms, window_end_ms) = (to_ms_ceil(window.start), to_ms_ceil(window.end));
    config
        .tasks
        .iter()
        .filter(|task| task.enabled)
        .filter_map(|task| {
            let test = config.test(&task.test)?;
            if is_light(config, task, test) {
                return None;
            }
            let (_, last_nominal_ms) = occurrences(task, window_start_ms, window_end_ms).last()?;
            let hold_ms = match test.scheduling {
                SchedulingClass::Exclusive => duration_ms(task.every).max(reserve_ms(test)),
                SchedulingClass::Shared | SchedulingClass::Background => {
                    duration_ms(task.slip) + reserve_ms(test)
                }
            };
            Some(last_nominal_ms + hold_ms)
        })
        .max()
        .map(from_ms)
}

fn plan_scope(
    config: &ValidatedConfig,
    agents: &[AgentInfo],
    window: PlanWindow,
    existing: &[PlannedRun],
    seed: u64,
    scope: Scope<'_>,
) -> Plan {
    // Nominal times are whole milliseconds: rounding both bounds up keeps
    // consecutive windows an exact partition.
    let (window_start_ms, window_end_ms) = (to_ms_ceil(window.start), to_ms_ceil(window.end));
    // Runs of this window start at their nominal time or later, so earlier runs
    // neither conflict with them nor share their ids.
    let mut planner = Planner::new(agents, &config.segments, existing, window_start_ms);
    let exclusive_not_before_ms = match scope {
        Scope::Everything => i64::MIN,
        Scope::Reserved {
            light,
            exclusive_not_before_ms,
        } => {
            planner
                .non_starts
                .extend(light.unplaceable(window_start_ms, window_end_ms));
            exclusive_not_before_ms
        }
    };

    // One job per task occurrence; exclusive tasks place a whole campaign per job.
    let mut task_plans = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    for task in config.tasks.iter().filter(|task| task.enabled) {
        let (Some(test), Some(group)) = (config.test(&task.test), config.group(&task.group)) else {
            // validate() rules this out; a hand-built config still gets a reason.
            planner.non_starts.push(NonStart {
                run_id: format!("{}/*", task.name),
                task: task.name.clone(),
                test: task.test.clone(),
                from: String::new(),
                to: String::new(),
                nominal_start: window.start,
                reason: format!(
                    "task refers to test '{}' or group '{}' that the configuration does not define",
                    task.test, task.group
                ),
            });
            continue;
        };
        if matches!(scope, Scope::Reserved { .. }) && is_light(config, task, test) {
            continue;
        }
        let plan_index = task_plans.len();
        let jobs_before = jobs.len();
        jobs.extend(jobs_of(
            (task, test),
            plan_index,
            window_start_ms,
            window_end_ms,
        ));
        // A task with no occurrence in the window is not expanded into its pairs: a
        // replanning tick does not walk every pair of a large mesh that is not due.
        let rounds = if jobs.len() == jobs_before {
            Vec::new()
        } else {
            match test.kind.participants {
                Participants::Pair => planner.rounds(&group.members, task.directions),
                Participants::Alone => planner.each_agent(&group.members),
            }
        };
        task_plans.push(TaskPlan {
            task,
            test,
            rounds,
            overload: None,
        });
    }
    jobs.sort();
    // Only campaigns due in this window are estimated, once each.
    let due_campaigns: BTreeSet<usize> = jobs
        .iter()
        .map(|&(_, _, _, plan_index, _)| plan_index)
        .filter(|&plan_index| task_plans[plan_index].test.scheduling == SchedulingClass::Exclusive)
        .collect();
    for plan_index in due_campaigns {
        let task_plan = &task_plans[plan_index];
        let overload =
            campaign_overload(&planner, task_plan.task, task_plan.test, &task_plan.rounds);
        task_plans[plan_index].overload = overload;
    }

    let mut campaigns = Vec::new();
    for &(_, _, nominal_ms, plan_index, occurrence) in &jobs {
        let task_plan = &task_plans[plan_index];
        if task_plan.test.scheduling == SchedulingClass::Exclusive {
            campaigns.push(place_campaign(
                &mut planner,
                task_plan,
                Occurrence {
                    number: occurrence,
                    nominal_ms,
                },
                exclusive_not_before_ms,
                seed,
            ));
        } else {
            // Shared and background runs of one occurrence are placed in
            // order of their preferred start, which spreads them over the slip.
            for &(from, to) in task_plan.rounds.iter().flatten() {
                place_single(
                    &mut planner,
                    (task_plan.task, task_plan.test),
                    Occurrence {
                        number: occurrence,
                        nominal_ms,
                    },
                    (from, to),
                    seed,
                );
            }
        }
    }

    let mut runs = planner.runs;
    runs.sort_by(|a, b| (a.start, &a.run_id).cmp(&(b.start, &b.run_id)));
    Plan {
        runs,
        non_starts: planner.non_starts,
        campaigns,
    }
}

/// One occurrence of a task: its number and nominal start.
#[derive(Clone, Copy)]
pub(crate) struct Occurrence {
    pub number: i64,
    pub nominal_ms: i64,
}

/// Whether a task's runs can be placed per client when agents fetch them rather
/// than reserved ahead: they claim nothing (background), or share what they claim
/// and no exclusive task outranks them, so every exclusive run is placed first
/// (as [`plan`] orders them) and they only ever fit around exclusive runs, never
/// around each other.
pub fn is_light(config: &ValidatedConfig, task: &Task, test: &TestDef) -> bool {
    match test.scheduling {
        SchedulingClass::Background => true,
        SchedulingClass::Exclusive => false,
        SchedulingClass::Shared => {
            exclusive_tasks(config).all(|exclusive| task.priority <= exclusive.priority)
        }
    }
}

/// The enabled tasks whose test is exclusive.
pub(crate) fn exclusive_tasks(config: &ValidatedConfig) -> impl Iterator<Item = &Task> {
    config.tasks.iter().filter(|task| {
        task.enabled
            && config
                .test(&task.test)
                .is_some_and(|test| test.scheduling == SchedulingClass::Exclusive)
    })
}

pub(crate) fn place_single(
    planner: &mut Planner<'_>,
    (task, test): (&Task, &TestDef),
    Occurrence {
        number: occurrence,
        nominal_ms,
    }: Occurrence,
    (from, to): (usize, usize),
    seed: u64,
) {
    let id = run_id(
        &task.name,
        &planner.agents[from].name,
        &planner.agents[to].name,
        occurrence,
    );
    if planner.existing(&id).is_some() {
        return;
    }
    let identity = RunIdentity {
        run_id: id,
        task: &task.name,
        test: &test.name,
        from,
        to,
        nominal_ms,
    };
    let orientation = match planner.orient(from, to, test) {
        Ok(orientation) => orientation,
        Err(reason) => return planner.non_start(identity, reason),
    };
    let claims = planner.claims(orientation.client, orientation.server, test.scheduling);
    let slip_ms = duration_ms(task.slip);
    let occurrence_text = occurrence.to_string();
    let slip_key = slip_key(
        &task.name,
        &planner.agents[from].name,
        &planner.agents[to].name,
        &occurrence_text,
    );
    let preferred_ms = nominal_ms + slip_offset_ms(seed, &slip_key, slip_ms);
    let latest_ms = nominal_ms + slip_ms;
    let duration = reserve_ms(test);
    // From the preferred point to the end of the slip, then from its beginning.
    let fit = planner
        .timeline
        .earliest_fit(&claims, duration, preferred_ms, latest_ms)
        .or_else(|_| {
            planner
                .timeline
                .earliest_fit(&claims, duration, nominal_ms, latest_ms)
        });
    match fit {
        Ok(start_ms) => {
            planner.commit(RunPlacement {
                run_id: identity.run_id,
                task: &task.name,
                test,
                priority: task.priority,
                orientation,
                claims,
                start_ms,
                campaign_round: None,
            });
        }
        Err(blocker) => {
            let reason = format!(
                "no conflict-free start within the slip ({}s after the nominal time): {}",
                slip_ms as f64 / 1000.0,
                planner.blocker_text(blocker)
            );
            planner.non_start(identity, reason);
        }
    }
}

/// Whether an exclusive task's campaign fits its period, estimated before placing
/// it: the runs claiming one resource (an agent, a segment) run one after another,
/// each holding it for its reservation plus the round gap, and must all lie in the
/// period less the slip. When the busiest resource's runs do not, the campaign is
/// sampled: each occurrence runs one round in `cycle`, the smallest cycle whose
/// share of the busiest resource's runs fits. Said once here rather than as one
/// non-start per run that falls off the end of every period.
fn campaign_overload(
    planner: &Planner<'_>,
    task: &Task,
    test: &TestDef,
    rounds: &[Vec<(usize, usize)>],
) -> Option<CampaignOverload> {
    let duration = reserve_ms(test);
    let gap_ms = duration_ms(task.round_gap);
    let period_ms = duration_ms(task.every);
    let available_ms = period_ms - duration_ms(task.slip);
    let mut runs_per_resource: HashMap<ResourceId, usize> = HashMap::new();
    for &(from, to) in rounds.iter().flatten() {
        if let Ok(orientation) = planner.orient(from, to, test) {
            for (resource, _) in
                planner.claims(orientation.client, orientation.server, test.scheduling)
            {
                *runs_per_resource.entry(resource).or_default() += 1;
            }
        }
    }
    // Most runs first; the first interned resource among equals, for determinism.
    let (busiest_runs, Reverse(busiest)) = runs_per_resource
        .iter()
        .map(|(&resource, &runs)| (runs, Reverse(resource)))
        .max()?;
    let back_to_back = |runs: usize| runs as i64 * (duration + gap_ms) - gap_ms;
    let needed_ms = back_to_back(busiest_runs);
    if needed_ms <= available_ms {
        return None;
    }
    let runs_that_fit = usize::try_from((available_ms + gap_ms) / (duration + gap_ms)).ok()?;
    if runs_that_fit == 0 || rounds.len() < 2 {
        // Not even one run fits after the slip: the runs' own non-starts say why.
        return None;
    }
    let cycle = busiest_runs.div_ceil(runs_that_fit).min(rounds.len());
    fn agents_in<'r>(rounds: impl Iterator<Item = &'r Vec<(usize, usize)>>) -> HashSet<usize> {
        rounds
            .flatten()
            .flat_map(|&(from, to)| [from, to])
            .collect()
    }
    let every_agent = agents_in(rounds.iter());
    let every_agent_each_time = (0..cycle)
        .all(|residue| agents_in(rounds.iter().skip(residue).step_by(cycle)) == every_agent);
    Some(CampaignOverload {
        busiest: planner.timeline.name(busiest).to_string(),
        busiest_runs,
        needed_ms,
        period_ms,
        available_ms,
        rounds_total: rounds.len(),
        cycle: u32::try_from(cycle).unwrap_or(u32::MAX),
        every_agent_each_time,
    })
}

/// One occurrence of an exclusive task. Runs are placed in round order, each
/// at the earliest conflict-free time after every resource it claims (both
/// agents, crossed segments) finished its previous run of the campaign plus
/// the task's round gap. Without other contention this reproduces the rounds
/// exactly (each round as long as its longest run); with contention
/// (segments, other tasks) a delayed pair holds up only its own resources
/// instead of a whole round, and the gap also leaves room on busy segments.
/// Every run must start early enough to end before the next occurrence is due.
fn place_campaign(
    planner: &mut Planner<'_>,
    task_plan: &TaskPlan<'_>,
    Occurrence {
        number: occurrence,
        nominal_ms,
    }: Occurrence,
    not_before_ms: i64,
    seed: u64,
) -> CampaignSummary {
    let (task, test) = (task_plan.task, task_plan.test);
    let duration = reserve_ms(test);
    let latest_start_ms = nominal_ms + duration_ms(task.every) - duration;
    // The campaign's point in its slip is drawn from the part of the slip where it can
    // still end before the next occurrence: with a slip longer than that, a point
    // drawn beyond it made the occurrence a non-start for no reason.
    let slip_room_ms = duration_ms(task.slip).min(latest_start_ms - nominal_ms);
    let start_ms = (nominal_ms
        + slip_offset_ms(
            seed,
            &[&task.name, "/", &occurrence.to_string()],
            slip_room_ms,
        ))
    .max(not_before_ms);
    let gap_ms = duration_ms(task.round_gap);
    let (runs_before, non_starts_before) = (planner.runs.len(), planner.non_starts.len());
    // When each claimed resource is free for its next run of this campaign.
    let mut ready_ms: HashMap<ResourceId, i64> = HashMap::new();
    let mut last_end_ms = start_ms;
    let mut participants = BTreeSet::new();
    let mut rounds_used = BTreeSet::new();
    // A campaign that cannot fit runs one round in `cycle`, a different share each occurrence.
    let cycle = task_plan
        .overload
        .as_ref()
        .map_or(1, |overload| i64::from(overload.cycle));
    // Round order, but runs that cross a segment last: they queue on the
    // segment, and agents waiting for them would otherwise hold up their runs
    // that cross nothing. Without segments this is plain round order.
    let mut order: Vec<(usize, usize, usize)> = task_plan
        .rounds
        .iter()
        .enumerate()
        .filter(|&(round_index, _)| round_index as i64 % cycle == occurrence.rem_euclid(cycle))
        .flat_map(|(round_index, round)| {
            round.iter().map(move |&(from, to)| (round_index, from, to))
        })
        .collect();
    order.sort_by_key(|&(round_index, from, to)| (planner.crosses_segment(from, to), round_index));
    for (round_index, from, to) in order {
        participants.insert(from);
        participants.insert(to);
        let id = run_id(
            &task.name,
            &planner.agents[from].name,
            &planner.agents[to].name,
            occurrence,
        );
        if let Some(existing) = planner.existing(&id) {
            let end_ms = to_ms_ceil(existing.end);
            for claim in &existing.claims {
                let resource = planner.timeline.intern(&claim.resource);
                ready_ms.insert(resource, end_ms + gap_ms);
            }
            last_end_ms = last_end_ms.max(end_ms);
            rounds_used.insert(round_index);
            continue;
        }
        let identity = RunIdentity {
            run_id: id,
            task: &task.name,
            test: &test.name,
            from,
            to,
            nominal_ms,
        };
        let orientation = match planner.orient(from, to, test) {
            Ok(orientation) => orientation,
            Err(reason) => {
                planner.non_start(identity, reason);
                continue;
            }
        };
        let claims = planner.claims(orientation.client, orientation.server, test.scheduling);
        let busiest = claims
            .iter()
            .filter_map(|&(resource, _)| ready_ms.get(&resource).map(|&ready| (ready, resource)))
            .max();
        let earliest_ms = busiest.map_or(start_ms, |(ready, _)| ready.max(start_ms));
        if let Some((ready, resource)) = busiest.filter(|&(ready, _)| ready > latest_start_ms) {
            let reason = format!(
                    "campaign round {round_index} does not fit in the period: {} is busy with earlier runs of this campaign until {}, too late to end before the next occurrence",
                    planner.timeline.name(resource),
                    from_ms(ready).to_rfc3339()
                );
            planner.non_start(identity, reason);
            continue;
        }
        match planner
            .timeline
            .earliest_fit(&claims, duration, earliest_ms, latest_start_ms)
        {
            Ok(run_start_ms) => {
                let end_ms = run_start_ms + duration;
                for &(resource, _) in &claims {
                    ready_ms.insert(resource, end_ms + gap_ms);
                }
                last_end_ms = last_end_ms.max(end_ms);
                rounds_used.insert(round_index);
                planner.commit(RunPlacement {
                    run_id: identity.run_id,
                    task: &task.name,
                    test,
                    priority: task.priority,
                    orientation,
                    claims,
                    start_ms: run_start_ms,
                    campaign_round: u32::try_from(round_index).ok(),
                });
            }
            Err(blocker) => {
                let reason = format!(
                        "campaign round {round_index} found no conflict-free start early enough to end before the next occurrence of the task: {}",
                        planner.blocker_text(blocker)
                    );
                planner.non_start(identity, reason);
            }
        }
    }
    let flows: Vec<(usize, usize)> = task_plan.rounds.iter().flatten().copied().collect();
    CampaignSummary {
        overload: task_plan.overload.clone(),
        task: task.name.clone(),
        occurrence,
        agents: participants.len(),
        runs_planned: planner.runs.len() - runs_before,
        non_starts: planner.non_starts.len() - non_starts_before,
        rounds: rounds_used.len(),
        min_rounds: rounds::max_degree(&flows),
        start: from_ms(start_ms),
        end: from_ms(last_end_ms),
    }
}
