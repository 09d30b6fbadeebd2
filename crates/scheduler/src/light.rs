//! Light tasks placed per client when agents fetch their runs.
//!
//! A latency mesh of N agents every minute is N(N−1) runs a minute; reserving
//! each of them ahead for the planning horizon holds millions of reservations
//! in memory and in the archive at a thousand agents. Light runs (shared claims
//! or none, see [`is_light`]) never conflict with each other, only with
//! exclusive runs, which are placed before them. So the planner reserves only
//! the exclusive runs ([`plan_reserved`](crate::plan_reserved)), and each
//! client's light runs are placed when it fetches them, around the exclusive
//! runs stored by then, with the same ids, slips and earliest-fit rule:
//! [`LightTasks::runs_for`]. The pairs and their orientation are worked out
//! once per configuration and agent set ([`LightTasks::new`]).

use std::collections::HashMap;
use std::time::Duration;

use vantage_model::config::ValidatedConfig;
use vantage_model::kinds::Participants;

use crate::plan::{
    exclusive_tasks, is_light, jobs_of, occurrences, place_single, run_id, Job, Occurrence,
    PlanWindow, Planner,
};
use crate::time::{from_ms, to_ms_ceil};
use crate::types::{AgentInfo, NonStart, Plan, PlannedRun};

/// One light flow: a task's run from one endpoint to another.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// Position of the task in the configuration.
    task: usize,
    from: u32,
    to: u32,
}

/// An end of a flow: an agent's name, or an external host as written.
#[derive(Debug)]
struct Endpoint {
    name: String,
    external: bool,
}

/// The light tasks of one configuration and agent set, expanded into each
/// client's flows.
#[derive(Debug)]
pub struct LightTasks {
    config: ValidatedConfig,
    agents: Vec<AgentInfo>,
    /// Positions in the configuration of the enabled light tasks.
    tasks: Vec<usize>,
    endpoints: Vec<Endpoint>,
    /// Each client's flows, in task order and then in the order [`plan`](crate::plan) takes.
    by_client: HashMap<String, Vec<Flow>>,
    /// Flows that no agent can run (an end not registered, neither end able to
    /// serve, …), with the reason: reported by the planner, as no client fetches them.
    unplaceable: Vec<(Flow, String)>,
    flows: usize,
}

impl LightTasks {
    pub fn new(config: &ValidatedConfig, agents: &[AgentInfo]) -> LightTasks {
        let mut planner = Planner::new(agents, &config.segments, &[], i64::MIN);
        let mut tasks = Vec::new();
        let mut by_client: HashMap<String, Vec<Flow>> = HashMap::new();
        let mut unplaceable = Vec::new();
        let mut flows = 0;
        for (position, task) in config.tasks.iter().enumerate() {
            let (Some(test), Some(group)) = (config.test(&task.test), config.group(&task.group))
            else {
                continue; // the planner reports it
            };
            if !task.enabled || !is_light(config, task, test) {
                continue;
            }
            tasks.push(position);
            let rounds = match test.kind.participants {
                Participants::Pair => planner.rounds(&group.members, task.directions),
                Participants::Alone => planner.each_agent(&group.members),
            };
            for (from, to) in rounds.into_iter().flatten() {
                let flow = Flow {
                    task: position,
                    from: u32::try_from(from).expect("fewer than 2^32 endpoints"),
                    to: u32::try_from(to).expect("fewer than 2^32 endpoints"),
                };
                flows += 1;
                match planner.orient(from, to, test) {
                    Ok(orientation) => by_client
                        .entry(planner.agents[orientation.client].name.clone())
                        .or_default()
                        .push(flow),
                    Err(reason) => unplaceable.push((flow, reason)),
                }
            }
        }
        let endpoints = planner
            .agents
            .iter()
            .map(|slot| Endpoint {
                name: slot.name.clone(),
                external: slot.external,
            })
            .collect();
        LightTasks {
            config: config.clone(),
            agents: agents.to_vec(),
            tasks,
            endpoints,
            by_client,
            unplaceable,
            flows,
        }
    }

    /// Names of the light tasks.
    pub fn task_names(&self) -> impl Iterator<Item = &str> {
        self.tasks
            .iter()
            .map(|&position| self.config.tasks[position].name.as_str())
    }

    /// The agents that are the client of some light run.
    pub fn clients(&self) -> impl Iterator<Item = &str> {
        self.by_client.keys().map(String::as_str)
    }

    /// Whether `agent` is the client of some light run.
    pub fn is_client(&self, agent: &str) -> bool {
        self.by_client.contains_key(agent)
    }

    /// Runs of all light tasks per occurrence.
    pub fn flow_count(&self) -> usize {
        self.flows
    }

    /// Whether `client` has a light run whose nominal start lies in the window: most
    /// of an agent's fetches have none, and need not read what is in their way.
    pub fn has_runs_in(&self, client: &str, window: PlanWindow) -> bool {
        let Some(flows) = self.by_client.get(client) else {
            return false;
        };
        let (window_start_ms, window_end_ms) = (to_ms_ceil(window.start), to_ms_ceil(window.end));
        self.tasks.iter().any(|&position| {
            flows.iter().any(|flow| flow.task == position)
                && occurrences(&self.config.tasks[position], window_start_ms, window_end_ms)
                    .next()
                    .is_some()
        })
    }

    /// How long after its nominal start a light run may still hold its resources:
    /// the longest slip plus reservation of the light tasks (zero without any).
    pub fn tail(&self) -> Duration {
        self.tasks
            .iter()
            .filter_map(|&position| {
                let task = &self.config.tasks[position];
                let test = self.config.test(&task.test)?;
                Some(task.slip + test.reserve)
            })
            .max()
            .unwrap_or_default()
    }

    /// How much earlier than the end of the planned window light runs stop being
    /// handed out: their tail when exclusive tasks are configured (so light runs end
    /// before the next window, whose exclusive runs then never wait for them), none
    /// otherwise.
    pub fn holdback(&self) -> Duration {
        if exclusive_tasks(&self.config).next().is_some() {
            self.tail()
        } else {
            Duration::ZERO
        }
    }

    /// The light runs `client` runs whose nominal start lies in the window, placed
    /// as [`plan`](crate::plan) would place them: each from its deterministic
    /// point in the slip at the earliest start free of `reserved` runs' exclusive
    /// claims (those stored that may overlap; light runs never conflict with each
    /// other), or a non-start saying what was in the way.
    pub fn runs_for(
        &self,
        client: &str,
        window: PlanWindow,
        reserved: &[PlannedRun],
        seed: u64,
    ) -> Plan {
        let Some(flows) = self.by_client.get(client) else {
            return Plan::default();
        };
        let (window_start_ms, window_end_ms) = (to_ms_ceil(window.start), to_ms_ceil(window.end));
        let mut planner = Planner::new(
            &self.agents,
            &self.config.segments,
            reserved,
            window_start_ms,
        );
        let mut jobs: Vec<Job> = Vec::new();
        for &position in &self.tasks {
            let task = &self.config.tasks[position];
            let Some(test) = self.config.test(&task.test) else {
                continue;
            };
            jobs.extend(jobs_of(
                (task, test),
                position,
                window_start_ms,
                window_end_ms,
            ));
        }
        jobs.sort();
        let mut slots: HashMap<u32, usize> = HashMap::new();
        for (_, _, nominal_ms, position, occurrence) in jobs {
            let task = &self.config.tasks[position];
            let Some(test) = self.config.test(&task.test) else {
                continue;
            };
            for flow in flows.iter().filter(|flow| flow.task == position) {
                let mut slot = |endpoint: u32| {
                    *slots.entry(endpoint).or_insert_with(|| {
                        let endpoint = &self.endpoints[endpoint as usize];
                        if endpoint.external {
                            planner.target_slot(&endpoint.name)
                        } else {
                            planner.slot_by_name(&endpoint.name)
                        }
                    })
                };
                let pair = (slot(flow.from), slot(flow.to));
                place_single(
                    &mut planner,
                    (task, test),
                    Occurrence {
                        number: occurrence,
                        nominal_ms,
                    },
                    pair,
                    seed,
                );
            }
        }
        let mut runs = planner.runs;
        runs.sort_by(|a, b| (a.start, &a.run_id).cmp(&(b.start, &b.run_id)));
        Plan {
            runs,
            non_starts: planner.non_starts,
            campaigns: Vec::new(),
        }
    }

    /// Non-starts of the flows no agent can run, for every occurrence whose nominal
    /// start lies in `[window_start_ms, window_end_ms)`.
    pub(crate) fn unplaceable(&self, window_start_ms: i64, window_end_ms: i64) -> Vec<NonStart> {
        let mut non_starts = Vec::new();
        for (flow, reason) in &self.unplaceable {
            let task = &self.config.tasks[flow.task];
            let (from, to) = (
                &self.endpoints[flow.from as usize].name,
                &self.endpoints[flow.to as usize].name,
            );
            for (occurrence, nominal_ms) in occurrences(task, window_start_ms, window_end_ms) {
                non_starts.push(NonStart {
                    run_id: run_id(&task.name, from, to, occurrence),
                    task: task.name.clone(),
                    test: task.test.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    nominal_start: from_ms(nominal_ms),
                    reason: reason.clone(),
                });
            }
        }
        non_starts
    }
}
