//! Declarative measurement configuration (`vantage config apply FILE`).
//!
//! A configuration names **groups** of agents, **tests** (what is measured and
//! with which parameters), **tasks** (a test run over a group on a schedule),
//! **archivers** (where results go) and **segments** (shared links or uplinks
//! that tests crossing them contend for). The vocabulary follows perfSONAR's
//! pScheduler (PRODUCT.md); the file format is documented in `docs/config.md`.
//!
//! Loading is two steps, both pure:
//! 1. [`parse_config`] turns TOML or JSON text into a [`MeasurementConfig`]
//!    (the file's shape, strings kept as written); unknown fields are refused
//!    with the path of the offending field.
//! 2. [`validate`] checks meaning (references, units, per-test parameters) and
//!    returns a [`ValidatedConfig`] with parsed values, or *every* problem
//!    found, each with its path such as `tasks[2].every`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config_error::check_name;
pub use crate::config_error::ConfigError;
use crate::kinds::{self, KindRef, Participants, Spec};
pub use crate::scheduling::SchedulingClass;
use crate::shared_spec::SharedSpec;
use crate::sla::{validate_contract, Contract, ContractConfig};
use crate::units::{parse_duration, parse_rate_bps};

// ---------------------------------------------------------------------------
// File shape
// ---------------------------------------------------------------------------

/// A configuration file as written (TOML or JSON). See `docs/config.md`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementConfig {
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    #[serde(default)]
    pub tests: Vec<TestConfig>,
    #[serde(default)]
    pub tasks: Vec<TaskConfig>,
    #[serde(default)]
    pub archivers: Vec<ArchiverConfig>,
    #[serde(default)]
    pub segments: Vec<SegmentConfig>,
    /// Service-level agreements judged on the results of some tasks.
    #[serde(default)]
    pub contracts: Vec<ContractConfig>,
}

/// How a group turns its members into agent pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// Every unordered pair {a, b} of `members` (a ≠ b), each pair once;
    /// the task's `directions` decides whether both directions are measured.
    Mesh,
    /// Every pair (a, b) with a from `a` and b from `b` (A×B), a ≠ b.
    Disjoint,
    /// Exactly the pairs listed in `pairs`, as `[from, to]` agent names.
    List,
    /// Every agent of `members` measures every host of `targets`: hosts that are
    /// not agents (an `iperf3 -s`, a TWAMP-Light or STAMP reflector, a `vantage
    /// endpoint`, any ICMP target). Only the agent side runs vantage.
    External,
}

/// A named set of agent pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    pub kind: GroupKind,
    /// `mesh`: member selectors (agent names, `key=value` tag selectors, or `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// `disjoint`: selectors of side A.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a: Vec<String>,
    /// `disjoint`: selectors of side B.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub b: Vec<String>,
    /// `list`: explicit `[from, to]` agent-name pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<Vec<String>>,
    /// `external`: hosts as `HOST` or `HOST:PORT` (default port: the test's service).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// A test definition: its type and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestConfig {
    pub name: String,
    /// `latency`, `throughput` or `capacity`.
    #[serde(rename = "type")]
    pub test_type: String,
    /// Parameters in the CLI's vocabulary (`count`, `interval = "100ms"`, `duration = "10s"` …);
    /// the accepted keys per type are listed in `docs/config.md`.
    #[serde(default)]
    pub spec: Map<String, Value>,
    /// Overrides how runs of this test claim agents' interfaces and segments
    /// (`exclusive`, `shared`, `background`); the default depends on the type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingClass>,
}

/// Which directions of a pair a task measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Directions {
    /// One run per pair, from the first agent of the pair to the second
    /// (round-trip tests such as latency need no more).
    One,
    /// Two runs per pair: forward and the other direction.
    Both,
}

/// A test run over a group on a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    pub name: String,
    /// Name of a test in `tests`.
    pub test: String,
    /// Name of a group in `groups`.
    pub group: String,
    /// Period, a DUR such as `60s` or `1h`.
    pub every: String,
    /// Start offset of the first occurrence after the Unix epoch modulo `every` (DUR, default 0s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Randomised slip: a run may start up to this long after its nominal time
    /// (DUR, default 0s); keeps meshes from firing in lockstep and is the room the
    /// scheduler searches for a conflict-free slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slip: Option<String>,
    /// Higher priorities are placed first (default 0).
    #[serde(default)]
    pub priority: i32,
    /// Campaigns (exclusive tests) only: pause between rounds (DUR, default 0s),
    /// room in which shared tests such as a latency mesh can run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_gap: Option<String>,
    /// Default `one` for `shared`/`background` tests, `both` for `exclusive` ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directions: Option<Directions>,
    /// Archiver names; empty means every archiver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub archivers: Vec<String>,
    #[serde(default = "default_true")]
    pub enabled: bool,
}

fn default_true() -> bool {
    true
}

/// Where results go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiverKind {
    /// The server's own archive (SQLite or PostgreSQL).
    Database,
    /// Append one JSON document per line to `path` on the server.
    File,
    /// POST each result as JSON to `url`.
    Http,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiverConfig {
    pub name: String,
    pub kind: ArchiverKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Which runs use a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// An uplink the members sit behind: used by runs with exactly one endpoint
    /// behind it (traffic between two members stays inside and does not cross it).
    #[default]
    Uplink,
    /// A shared medium (LAN, Wi-Fi cell, tunnel): used by every run with at
    /// least one endpoint on it.
    Shared,
}

/// A declared shared resource that tests crossing it contend for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentConfig {
    pub name: String,
    #[serde(default)]
    pub kind: SegmentKind,
    /// Selectors of the agents behind / on the segment. Agents with the tag
    /// `segment=<name>` are members as well.
    #[serde(default)]
    pub members: Vec<String>,
    /// Nominal capacity, a BPS such as `1G` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
}

// ---------------------------------------------------------------------------
// Validated form
// ---------------------------------------------------------------------------

/// Picks agents by name or by tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// `*`: every agent.
    All,
    /// A bare word: the agent of that name.
    Agent(String),
    /// `key=value`: agents whose tag `key` equals `value`.
    Tag { key: String, value: String },
}

impl Selector {
    /// Parses `*`, `name` or `key=value`.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(Selector::All);
        }
        match text.split_once('=') {
            Some((key, value)) => {
                let (key, value) = (key.trim(), value.trim());
                if key.is_empty() || value.is_empty() {
                    Err(format!(
                        "tag selector '{text}' needs both a key and a value (key=value)"
                    ))
                } else {
                    Ok(Selector::Tag {
                        key: key.to_string(),
                        value: value.to_string(),
                    })
                }
            }
            None if text.is_empty() => Err("empty selector".to_string()),
            None if text.chars().any(char::is_whitespace) => {
                Err(format!("agent name '{text}' contains whitespace"))
            }
            None => Ok(Selector::Agent(text.to_string())),
        }
    }

    pub fn matches(&self, agent_name: &str, agent_tags: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::All => true,
            Selector::Agent(name) => name == agent_name,
            Selector::Tag { key, value } => agent_tags.get(key) == Some(value),
        }
    }
}

/// True when any of `selectors` matches the agent.
pub fn any_matches(
    selectors: &[Selector],
    agent_name: &str,
    agent_tags: &BTreeMap<String, String>,
) -> bool {
    selectors
        .iter()
        .any(|selector| selector.matches(agent_name, agent_tags))
}

/// A group's members, resolved against live agents by the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupMembers {
    Mesh(Vec<Selector>),
    Disjoint {
        a: Vec<Selector>,
        b: Vec<Selector>,
    },
    /// Explicit `(from, to)` agent names.
    List(Vec<(String, String)>),
    /// Agents (clients) × external hosts, each host as written in `targets`.
    External {
        agents: Vec<Selector>,
        targets: Vec<String>,
    },
}

impl GroupMembers {
    /// Whether the agent takes part in the group's runs (on either side; as the
    /// measuring side for external targets).
    pub fn includes_agent(&self, agent_name: &str, agent_tags: &BTreeMap<String, String>) -> bool {
        match self {
            GroupMembers::Mesh(selectors)
            | GroupMembers::External {
                agents: selectors, ..
            } => any_matches(selectors, agent_name, agent_tags),
            GroupMembers::Disjoint { a, b } => {
                any_matches(a, agent_name, agent_tags) || any_matches(b, agent_name, agent_tags)
            }
            GroupMembers::List(pairs) => pairs
                .iter()
                .any(|(from, to)| from == agent_name || to == agent_name),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub members: GroupMembers,
}

/// A validated test definition.
#[derive(Debug, Clone, PartialEq)]
pub struct TestDef {
    pub name: String,
    pub kind: KindRef,
    /// Parameters with every default the reservation depends on filled in, in
    /// the CLI's vocabulary (DUR/BPS/size strings as written). Agents run
    /// exactly this, so the run fits the time the scheduler reserved for it. Shared
    /// (not copied) by every run of the test: a thousand-agent mesh plans, hands out
    /// and checks tens of thousands of runs a second.
    pub spec: SharedSpec,
    pub scheduling: SchedulingClass,
    /// How long the scheduler reserves resources for one run (test time plus
    /// a setup guard, or the `reserve` parameter when given).
    pub reserve: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub name: String,
    pub test: String,
    pub group: String,
    pub every: Duration,
    pub offset: Duration,
    pub slip: Duration,
    pub priority: i32,
    pub round_gap: Duration,
    pub directions: Directions,
    /// Archiver names (all archivers when the file listed none).
    pub archivers: Vec<String>,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiverTarget {
    Database,
    File { path: String },
    Http { url: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archiver {
    pub name: String,
    pub target: ArchiverTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub name: String,
    pub kind: SegmentKind,
    pub members: Vec<Selector>,
    pub capacity_bps: Option<u64>,
}

impl Segment {
    /// Members are matched by the selectors or by the tag `segment=<name>`.
    pub fn contains(&self, agent_name: &str, agent_tags: &BTreeMap<String, String>) -> bool {
        agent_tags.get("segment") == Some(&self.name)
            || any_matches(&self.members, agent_name, agent_tags)
    }

    /// Whether a run between these two endpoints uses the segment.
    pub fn used_by(&self, first_is_member: bool, second_is_member: bool) -> bool {
        match self.kind {
            SegmentKind::Uplink => first_is_member != second_is_member,
            SegmentKind::Shared => first_is_member || second_is_member,
        }
    }
}

/// A configuration whose references, units and parameters are all valid.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedConfig {
    pub groups: Vec<Group>,
    pub tests: Vec<TestDef>,
    pub tasks: Vec<Task>,
    pub archivers: Vec<Archiver>,
    pub segments: Vec<Segment>,
    pub contracts: Vec<Contract>,
}

impl ValidatedConfig {
    pub fn test(&self, name: &str) -> Option<&TestDef> {
        self.tests.iter().find(|test| test.name == name)
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|group| group.name == name)
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// File formats `vantage config apply` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    Toml,
    Json,
}

impl ConfigFormat {
    /// By extension: `.toml` or `.json`.
    pub fn from_file_name(file_name: &str) -> Result<ConfigFormat, ConfigError> {
        let lower = file_name.to_ascii_lowercase();
        if lower.ends_with(".toml") {
            Ok(ConfigFormat::Toml)
        } else if lower.ends_with(".json") {
            Ok(ConfigFormat::Json)
        } else {
            Err(ConfigError::new(
                ".",
                format!("cannot tell the format of '{file_name}': use a .toml or .json file"),
            ))
        }
    }
}

/// Parses configuration text; a structural error (syntax, wrong type, unknown
/// field) is reported with the path of the field where it happened.
pub fn parse_config(text: &str, format: ConfigFormat) -> Result<MeasurementConfig, ConfigError> {
    let path_error = |path: &serde_path_to_error::Path, message: String| {
        ConfigError::new(field_path(path), message)
    };
    match format {
        ConfigFormat::Toml => {
            let deserializer = toml::Deserializer::new(text);
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let message = error.inner().message().to_string();
                let message = match error.inner().span() {
                    Some(span) => {
                        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                        format!("{message} (line {line})")
                    }
                    None => message,
                };
                path_error(error.path(), message)
            })
        }
        ConfigFormat::Json => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut deserializer)
                .map_err(|error| path_error(error.path(), error.inner().to_string()))
        }
    }
}

/// Renders a deserialisation path like `tests[0].spec.count`, quoting keys that
/// are empty or not plain names (`tests[0]."a b"`) so that every path names a place;
/// the whole document is `.`.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let plain = |key: &str| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let mut rendered = String::new();
    for segment in path.iter() {
        let name = match segment {
            Segment::Seq { index } => {
                rendered.push_str(&format!("[{index}]"));
                continue;
            }
            Segment::Map { key } | Segment::Enum { variant: key } if plain(key) => key.clone(),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                serde_json::to_string(key).expect("a string serialises")
            }
            Segment::Unknown => "?".to_string(),
        };
        if !rendered.is_empty() {
            rendered.push('.');
        }
        rendered.push_str(&name);
    }
    if rendered.is_empty() {
        rendered.push('.');
    }
    rendered
}

/// Parses and validates in one step, the usual entry point for files.
pub fn load_config(
    file_name: &str,
    text: &str,
) -> Result<(MeasurementConfig, ValidatedConfig), Vec<ConfigError>> {
    let format = ConfigFormat::from_file_name(file_name).map_err(|error| vec![error])?;
    let config = parse_config(text, format).map_err(|error| vec![error])?;
    let validated = validate(&config)?;
    Ok((config, validated))
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// Checks a parsed configuration; returns every problem found, not just the first.
pub fn validate(config: &MeasurementConfig) -> Result<ValidatedConfig, Vec<ConfigError>> {
    let mut errors = Vec::new();

    let groups: Vec<Group> = config
        .groups
        .iter()
        .enumerate()
        .filter_map(|(index, group)| {
            validate_group(&format!("groups[{index}]"), group, &mut errors)
        })
        .collect();
    let tests: Vec<TestDef> = config
        .tests
        .iter()
        .enumerate()
        .filter_map(|(index, test)| validate_test(&format!("tests[{index}]"), test, &mut errors))
        .collect();
    let archivers: Vec<Archiver> = config
        .archivers
        .iter()
        .enumerate()
        .filter_map(|(index, archiver)| {
            validate_archiver(&format!("archivers[{index}]"), archiver, &mut errors)
        })
        .collect();
    let segments: Vec<Segment> = config
        .segments
        .iter()
        .enumerate()
        .filter_map(|(index, segment)| {
            validate_segment(&format!("segments[{index}]"), segment, &mut errors)
        })
        .collect();

    check_unique_names("groups", config.groups.iter().map(|g| &g.name), &mut errors);
    check_unique_names("tests", config.tests.iter().map(|t| &t.name), &mut errors);
    check_unique_names("tasks", config.tasks.iter().map(|t| &t.name), &mut errors);
    check_unique_names(
        "archivers",
        config.archivers.iter().map(|a| &a.name),
        &mut errors,
    );
    check_unique_names(
        "segments",
        config.segments.iter().map(|s| &s.name),
        &mut errors,
    );
    check_unique_names(
        "contracts",
        config.contracts.iter().map(|c| &c.name),
        &mut errors,
    );

    let context = TaskContext {
        group_names: config.groups.iter().map(|g| g.name.as_str()).collect(),
        external_groups: config
            .groups
            .iter()
            .filter(|g| g.kind == GroupKind::External)
            .map(|g| g.name.as_str())
            .collect(),
        archiver_names: config.archivers.iter().map(|a| a.name.as_str()).collect(),
        tests: &tests,
        test_names: config.tests.iter().map(|t| t.name.as_str()).collect(),
    };
    let tasks: Vec<Task> = config
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(index, task)| {
            validate_task(&format!("tasks[{index}]"), task, &context, &mut errors)
        })
        .collect();

    // What each task runs, for checking that a contract's clauses are measured.
    let task_kinds: BTreeMap<&str, &str> = config
        .tasks
        .iter()
        .filter_map(|task| {
            let test = tests.iter().find(|test| test.name == task.test)?;
            Some((task.name.as_str(), test.kind.as_str()))
        })
        .collect();
    let contracts: Vec<Contract> = config
        .contracts
        .iter()
        .enumerate()
        .filter_map(|(index, contract)| {
            validate_contract(
                &format!("contracts[{index}]"),
                contract,
                &task_kinds,
                &mut errors,
            )
        })
        .collect();

    if errors.is_empty() {
        Ok(ValidatedConfig {
            groups,
            tests,
            tasks,
            archivers,
            segments,
            contracts,
        })
    } else {
        Err(errors)
    }
}

fn check_unique_names<'a>(
    section: &str,
    names: impl Iterator<Item = &'a String>,
    errors: &mut Vec<ConfigError>,
) {
    let mut seen = BTreeSet::new();
    for (index, name) in names.enumerate() {
        if !seen.insert(name.as_str()) {
            errors.push(ConfigError::new(
                format!("{section}[{index}].name"),
                format!("duplicate name '{name}' (names must be unique within {section})"),
            ));
        }
    }
}

fn parse_selectors(path: &str, texts: &[String], errors: &mut Vec<ConfigError>) -> Vec<Selector> {
    texts
        .iter()
        .enumerate()
        .filter_map(|(index, text)| match Selector::parse(text) {
            Ok(selector) => Some(selector),
            Err(message) => {
                errors.push(ConfigError::new(format!("{path}[{index}]"), message));
                None
            }
        })
        .collect()
}

fn validate_group(path: &str, group: &GroupConfig, errors: &mut Vec<ConfigError>) -> Option<Group> {
    let before = errors.len();
    check_name(path, &group.name, errors);
    let unused_field = |field: &str, used: bool, errors: &mut Vec<ConfigError>| {
        if used {
            errors.push(ConfigError::new(
                format!("{path}.{field}"),
                format!(
                    "'{field}' does not apply to a {kind:?} group",
                    kind = group.kind
                ),
            ));
        }
    };
    let require_nonempty = |field: &str, empty: bool, errors: &mut Vec<ConfigError>| {
        if empty {
            errors.push(ConfigError::new(
                format!("{path}.{field}"),
                format!(
                    "a {kind:?} group needs a non-empty '{field}'",
                    kind = group.kind
                ),
            ));
        }
    };
    let members = match group.kind {
        GroupKind::Mesh => {
            unused_field("targets", !group.targets.is_empty(), errors);
            unused_field("a", !group.a.is_empty(), errors);
            unused_field("b", !group.b.is_empty(), errors);
            unused_field("pairs", !group.pairs.is_empty(), errors);
            require_nonempty("members", group.members.is_empty(), errors);
            GroupMembers::Mesh(parse_selectors(
                &format!("{path}.members"),
                &group.members,
                errors,
            ))
        }
        GroupKind::Disjoint => {
            unused_field("targets", !group.targets.is_empty(), errors);
            unused_field("members", !group.members.is_empty(), errors);
            unused_field("pairs", !group.pairs.is_empty(), errors);
            require_nonempty("a", group.a.is_empty(), errors);
            require_nonempty("b", group.b.is_empty(), errors);
            GroupMembers::Disjoint {
                a: parse_selectors(&format!("{path}.a"), &group.a, errors),
                b: parse_selectors(&format!("{path}.b"), &group.b, errors),
            }
        }
        GroupKind::List => {
            unused_field("targets", !group.targets.is_empty(), errors);
            unused_field("members", !group.members.is_empty(), errors);
            unused_field("a", !group.a.is_empty(), errors);
            unused_field("b", !group.b.is_empty(), errors);
            require_nonempty("pairs", group.pairs.is_empty(), errors);
            let mut pairs = Vec::new();
            for (index, pair) in group.pairs.iter().enumerate() {
                let pair_path = format!("{path}.pairs[{index}]");
                match pair.as_slice() {
                    [from, to] => {
                        let parsed = (Selector::parse(from), Selector::parse(to));
                        match parsed {
                            (Ok(Selector::Agent(from)), Ok(Selector::Agent(to))) if from != to => {
                                pairs.push((from, to))
                            }
                            (Ok(Selector::Agent(_)), Ok(Selector::Agent(_))) => errors.push(
                                ConfigError::new(pair_path, "a pair needs two different agents"),
                            ),
                            _ => errors.push(ConfigError::new(
                                pair_path,
                                "list pairs name agents directly (no '*' or key=value selectors)",
                            )),
                        }
                    }
                    _ => errors.push(ConfigError::new(
                        pair_path,
                        format!("a pair is [from, to]; got {} names", pair.len()),
                    )),
                }
            }
            GroupMembers::List(pairs)
        }
        GroupKind::External => {
            unused_field("a", !group.a.is_empty(), errors);
            unused_field("b", !group.b.is_empty(), errors);
            unused_field("pairs", !group.pairs.is_empty(), errors);
            require_nonempty("members", group.members.is_empty(), errors);
            require_nonempty("targets", group.targets.is_empty(), errors);
            for (index, target) in group.targets.iter().enumerate() {
                if let Err(message) = crate::kinds::Target::parse(target, None) {
                    errors.push(ConfigError::new(
                        format!("{path}.targets[{index}]"),
                        message,
                    ));
                }
            }
            GroupMembers::External {
                agents: parse_selectors(&format!("{path}.members"), &group.members, errors),
                targets: group.targets.iter().map(|t| t.trim().to_string()).collect(),
            }
        }
    };
    (errors.len() == before).then(|| Group {
        name: group.name.clone(),
        members,
    })
}

fn validate_archiver(
    path: &str,
    archiver: &ArchiverConfig,
    errors: &mut Vec<ConfigError>,
) -> Option<Archiver> {
    let before = errors.len();
    check_name(path, &archiver.name, errors);
    let mut misplaced = |field: &str| {
        errors.push(ConfigError::new(
            format!("{path}.{field}"),
            format!("'{field}' does not apply to a {:?} archiver", archiver.kind),
        ))
    };
    let target = match archiver.kind {
        ArchiverKind::Database => {
            if archiver.path.is_some() {
                misplaced("path");
            }
            if archiver.url.is_some() {
                misplaced("url");
            }
            ArchiverTarget::Database
        }
        ArchiverKind::File => {
            if archiver.url.is_some() {
                misplaced("url");
            }
            match archiver.path.as_deref().map(str::trim) {
                Some(file_path) if !file_path.is_empty() => ArchiverTarget::File {
                    path: file_path.to_string(),
                },
                _ => {
                    errors.push(ConfigError::new(
                        format!("{path}.path"),
                        "a file archiver needs a non-empty 'path'",
                    ));
                    return None;
                }
            }
        }
        ArchiverKind::Http => {
            if archiver.path.is_some() {
                misplaced("path");
            }
            match archiver.url.as_deref() {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    ArchiverTarget::Http {
                        url: url.to_string(),
                    }
                }
                other => {
                    errors.push(ConfigError::new(
                        format!("{path}.url"),
                        format!(
                            "an http archiver needs a 'url' starting with http:// or https:// (got {})",
                            other.map_or("nothing".to_string(), |url| format!("'{url}'"))
                        ),
                    ));
                    return None;
                }
            }
        }
    };
    (errors.len() == before).then(|| Archiver {
        name: archiver.name.clone(),
        target,
    })
}

fn validate_segment(
    path: &str,
    segment: &SegmentConfig,
    errors: &mut Vec<ConfigError>,
) -> Option<Segment> {
    let before = errors.len();
    check_name(path, &segment.name, errors);
    let members = parse_selectors(&format!("{path}.members"), &segment.members, errors);
    let capacity_bps = segment.capacity.as_deref().and_then(|text| {
        parse_rate_bps(text)
            .map_err(|error| {
                errors.push(ConfigError::new(
                    format!("{path}.capacity"),
                    error.to_string(),
                ))
            })
            .ok()
    });
    (errors.len() == before).then(|| Segment {
        name: segment.name.clone(),
        kind: segment.kind,
        members,
        capacity_bps,
    })
}

struct TaskContext<'a> {
    group_names: BTreeSet<&'a str>,
    /// Groups whose second side is external hosts.
    external_groups: BTreeSet<&'a str>,
    archiver_names: BTreeSet<&'a str>,
    test_names: BTreeSet<&'a str>,
    tests: &'a [TestDef],
}

fn parse_duration_field(
    path: &str,
    field: &str,
    text: Option<&str>,
    errors: &mut Vec<ConfigError>,
) -> Duration {
    match text {
        None => Duration::ZERO,
        Some(text) => parse_duration(text).unwrap_or_else(|error| {
            errors.push(ConfigError::new(
                format!("{path}.{field}"),
                error.to_string(),
            ));
            Duration::ZERO
        }),
    }
}

fn validate_task(
    path: &str,
    task: &TaskConfig,
    context: &TaskContext<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<Task> {
    let before = errors.len();
    check_name(path, &task.name, errors);
    if !context.test_names.contains(task.test.as_str()) {
        errors.push(ConfigError::new(
            format!("{path}.test"),
            format!("no test named '{}' in tests", task.test),
        ));
    }
    if !context.group_names.contains(task.group.as_str()) {
        errors.push(ConfigError::new(
            format!("{path}.group"),
            format!("no group named '{}' in groups", task.group),
        ));
    }
    for (index, archiver) in task.archivers.iter().enumerate() {
        if !context.archiver_names.contains(archiver.as_str()) {
            errors.push(ConfigError::new(
                format!("{path}.archivers[{index}]"),
                format!("no archiver named '{archiver}' in archivers"),
            ));
        }
    }
    let every = parse_duration_field(path, "every", Some(&task.every), errors);
    let offset = parse_duration_field(path, "offset", task.offset.as_deref(), errors);
    let slip = parse_duration_field(path, "slip", task.slip.as_deref(), errors);
    let round_gap = parse_duration_field(path, "round_gap", task.round_gap.as_deref(), errors);
    if errors.len() == before {
        if every < Duration::from_secs(1) {
            errors.push(ConfigError::new(
                format!("{path}.every"),
                "the period must be at least 1s",
            ));
        }
        if offset >= every {
            errors.push(ConfigError::new(
                format!("{path}.offset"),
                format!(
                    "the offset ({}) must be shorter than the period ({})",
                    task.offset.as_deref().unwrap_or_default(),
                    task.every
                ),
            ));
        }
        if slip >= every {
            errors.push(ConfigError::new(
                format!("{path}.slip"),
                format!("the slip ({}) must be shorter than the period ({}), or runs of consecutive occurrences would pile up", task.slip.as_deref().unwrap_or_default(), task.every),
            ));
        }
    }
    let test = context.tests.iter().find(|test| test.name == task.test);
    if let Some(test) = test {
        if test.reserve > every {
            errors.push(ConfigError::new(
                format!("{path}.every"),
                format!(
                    "test '{}' reserves {:.1}s per run, longer than the period {}",
                    test.name,
                    test.reserve.as_secs_f64(),
                    task.every
                ),
            ));
        }
    }
    let external = context.external_groups.contains(task.group.as_str());
    if external && task.directions == Some(Directions::Both) {
        errors.push(ConfigError::new(
            format!("{path}.directions"),
            format!(
                "group '{}' targets external hosts, which only answer: measure the other direction with the test's 'reverse' parameter",
                task.group
            ),
        ));
    }
    // A kind whose agents measure alone has neither targets nor directions.
    if let Some(test) = test.filter(|test| test.kind.participants == Participants::Alone) {
        if external {
            errors.push(ConfigError::new(
                format!("{path}.group"),
                format!(
                    "test '{}' ({}) runs on each agent alone, with no target, but group '{}' lists external hosts: use a mesh group of the agents",
                    test.name, test.kind.as_str(), task.group
                ),
            ));
        }
        if task.directions == Some(Directions::Both) {
            errors.push(ConfigError::new(
                format!("{path}.directions"),
                format!(
                    "test '{}' ({}) runs on each agent alone and has no directions",
                    test.name,
                    test.kind.as_str()
                ),
            ));
        }
    }
    let directions = task.directions.unwrap_or(match test.map(|t| t.scheduling) {
        Some(SchedulingClass::Exclusive) if !external => Directions::Both,
        _ => Directions::One,
    });
    let archivers = if task.archivers.is_empty() {
        context
            .archiver_names
            .iter()
            .map(|name| name.to_string())
            .collect()
    } else {
        task.archivers.clone()
    };
    (errors.len() == before).then(|| Task {
        name: task.name.clone(),
        test: task.test.clone(),
        group: task.group.clone(),
        every,
        offset,
        slip,
        priority: task.priority,
        round_gap,
        directions,
        archivers,
        enabled: task.enabled,
    })
}

// ---- per-test parameters --------------------------------------------------

/// Seconds added to every reservation: control-connection setup and teardown,
/// and clock offsets between the server and agents that start runs.
const SETUP_GUARD: Duration = Duration::from_secs(1);

/// Any test may override its reservation (a DUR); the kinds estimate it otherwise.
const RESERVE_KEY: &str = "reserve";

fn validate_test(path: &str, test: &TestConfig, errors: &mut Vec<ConfigError>) -> Option<TestDef> {
    let before = errors.len();
    check_name(path, &test.name, errors);
    let Some(kind) = KindRef::named(&test.test_type) else {
        errors.push(ConfigError::new(
            format!("{path}.type"),
            format!(
                "unknown test type '{}' (known: {})",
                test.test_type,
                kinds::names().join(", ")
            ),
        ));
        return None;
    };
    let spec_path = format!("{path}.spec");
    let mut given = test.spec.clone();
    let reserve = given.remove(RESERVE_KEY).map(|value| match &value {
        Value::String(text) => parse_duration(text).map_err(|error| error.to_string()),
        other => Err(format!("expected a duration such as \"30s\", got {other}")),
    });
    if let Some(Err(message)) = &reserve {
        errors.push(ConfigError::new(
            format!("{spec_path}.{RESERVE_KEY}"),
            message.clone(),
        ));
    }
    let spec = match kind.0.normalise(&spec_path, &given) {
        Ok(spec) => spec,
        Err(found) => {
            errors.extend(found);
            return None;
        }
    };
    if errors.len() != before {
        return None;
    }
    let reserve = match reserve {
        Some(reserve) => reserve.ok(),
        None => (kind.estimate)(&Spec::new(kind.0, &spec)).map(|time| time + SETUP_GUARD),
    };
    let Some(reserve) = reserve else {
        errors.push(ConfigError::new(
            format!("{spec_path}.{RESERVE_KEY}"),
            format!(
                "a {} test with this spec has no known length: give '{RESERVE_KEY}' (e.g. \"30s\")",
                kind.name
            ),
        ));
        return None;
    };
    if reserve.is_zero() {
        errors.push(ConfigError::new(
            format!("{spec_path}.{RESERVE_KEY}"),
            "the reservation must be longer than zero",
        ));
        return None;
    }
    let scheduling = test
        .scheduling
        .unwrap_or_else(|| kind.0.scheduling_for(&spec));
    Some(TestDef {
        name: test.name.clone(),
        kind,
        spec: Value::Object(spec).into(),
        scheduling,
        reserve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE_TOML: &str = include_str!("../../../docs/examples/mesh.toml");

    fn errors_of(text: &str) -> Vec<ConfigError> {
        let config = parse_config(text, ConfigFormat::Toml).expect("structurally valid");
        validate(&config).expect_err("semantically invalid")
    }

    #[test]
    fn group_members_include_agents_by_kind() {
        let selectors = |texts: &[&str]| -> Vec<Selector> {
            texts.iter().map(|t| Selector::parse(t).unwrap()).collect()
        };
        let campus = BTreeMap::from([("site".to_string(), "campus".to_string())]);
        let none = BTreeMap::new();
        let mesh = GroupMembers::Mesh(selectors(&["site=campus", "home-1"]));
        assert!(mesh.includes_agent("c1", &campus));
        assert!(mesh.includes_agent("home-1", &none));
        assert!(!mesh.includes_agent("home-2", &none));
        let disjoint = GroupMembers::Disjoint {
            a: selectors(&["site=campus"]),
            b: selectors(&["home-2"]),
        };
        assert!(disjoint.includes_agent("c1", &campus) && disjoint.includes_agent("home-2", &none));
        assert!(!disjoint.includes_agent("home-1", &none));
        let list = GroupMembers::List(vec![("w1".into(), "fs".into())]);
        assert!(list.includes_agent("w1", &none) && list.includes_agent("fs", &none));
        assert!(!list.includes_agent("w2", &none));
        let external = GroupMembers::External {
            agents: selectors(&["*"]),
            targets: vec!["iperf3.example.net".into()],
        };
        assert!(external.includes_agent("anyone", &none));
    }

    fn paths(errors: &[ConfigError]) -> Vec<&str> {
        errors.iter().map(|error| error.path.as_str()).collect()
    }

    const BASE: &str = r#"
[[groups]]
name = "g"
kind = "mesh"
members = ["*"]

[[tests]]
name = "rtt"
type = "latency"
"#;

    #[test]
    fn documented_example_validates_with_defaults_filled_in() {
        let (config, validated) = load_config("mesh.toml", EXAMPLE_TOML).expect("example is valid");
        assert_eq!(config.tasks.len(), 13);
        // Every test kind appears in the example.
        let kinds: BTreeSet<&str> = validated.tests.iter().map(|t| t.kind.as_str()).collect();
        assert_eq!(kinds, crate::kinds::names().into_iter().collect());
        let rtt = validated.test("rtt").unwrap();
        assert_eq!(rtt.scheduling, SchedulingClass::Shared);
        // 10 x 100 ms + 1 s timeout + 1 s setup guard.
        assert_eq!(rtt.reserve, Duration::from_secs(3));
        let bulk = validated.test("bulk").unwrap();
        assert_eq!(bulk.scheduling, SchedulingClass::Exclusive);
        assert_eq!(bulk.reserve, Duration::from_secs(12));
        let sla = validated.test("sla").unwrap();
        // Two 5 s TCP tests + 250 ms each, eight 2 s UDP probes + 500 ms each, 1 s guard.
        assert_eq!(
            sla.reserve,
            Duration::from_millis(2 * 5250 + 8 * 2500 + 1000)
        );
        let counters = validated.test("host-counters").unwrap();
        assert_eq!(counters.scheduling, SchedulingClass::Background);
        // 5 × 10 s + 1 s setup guard.
        assert_eq!(counters.reserve, Duration::from_secs(51));
        let mesh = &validated.tasks[0];
        assert_eq!(mesh.directions, Directions::One);
        assert_eq!(mesh.every, Duration::from_secs(60));
        assert_eq!(mesh.slip, Duration::from_secs(45));
        assert_eq!(mesh.archivers, vec!["archive", "ops-log"]);
        let throughput = &validated.tasks[1];
        assert_eq!(throughput.offset, Duration::from_secs(300));
        assert_eq!(throughput.round_gap, Duration::from_secs(4));
        assert_eq!(throughput.priority, 10);
        assert!(!validated.tasks[2].enabled);
        assert_eq!(
            validated.group("file-server-paths").unwrap().members,
            GroupMembers::List(vec![
                ("worker-1".into(), "file-server".into()),
                ("worker-2".into(), "file-server".into())
            ])
        );
        assert_eq!(validated.segments[0].capacity_bps, Some(10_000_000_000));
        let contract = &validated.contracts[0];
        assert_eq!(contract.tasks, ["home-downlink-capacity", "home-stamp"]);
        assert_eq!(contract.limits[&crate::sla::Clause::Rate], 50e6);
        assert_eq!(contract.limits[&crate::sla::Clause::Jitter], 5_000.0);
    }

    #[test]
    fn json_and_toml_give_the_same_configuration() {
        let from_toml = parse_config(EXAMPLE_TOML, ConfigFormat::Toml).unwrap();
        let json = serde_json::to_string_pretty(&from_toml).unwrap();
        let (from_json, _) = load_config("mesh.JSON", &json).unwrap();
        assert_eq!(from_toml, from_json);
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_path() {
        let text = format!("{BASE}\n[[tasks]]\nname = \"t\"\ntest = \"rtt\"\ngroup = \"g\"\nevery = \"1m\"\nevry = \"2m\"\n");
        let error = parse_config(&text, ConfigFormat::Toml).unwrap_err();
        assert_eq!(error.path, "tasks[0].evry", "{error}");
        assert!(error.message.contains("unknown field `evry`"), "{error}");
        let error = parse_config(
            r#"{"tests": [{"name": "x", "type": "latency", "colour": 1}]}"#,
            ConfigFormat::Json,
        )
        .unwrap_err();
        assert!(
            error.path.starts_with("tests[0]") && error.message.contains("colour"),
            "{error}"
        );
        let error = parse_config("[[tasks]]\nname = 5\n", ConfigFormat::Toml).unwrap_err();
        assert_eq!(error.path, "tasks[0].name", "{error}");
        assert!(error.message.ends_with("(line 2)"), "{error}");
        // A key that is empty or not a plain name is quoted, so the path still names it.
        let error = parse_config(r#"{"": 1}"#, ConfigFormat::Json).unwrap_err();
        assert_eq!(error.path, r#""""#, "{error}");
        let error = parse_config(r#"{"tests": [{"a b": 1}]}"#, ConfigFormat::Json).unwrap_err();
        assert_eq!(error.path, r#"tests[0]."a b""#, "{error}");
        let error = parse_config("[", ConfigFormat::Json).unwrap_err();
        assert_eq!(error.path, ".", "{error}");
    }

    #[test]
    fn every_semantic_error_is_reported_with_its_path() {
        let text = format!(
            r#"{BASE}
[[tasks]]
name = "ok"
test = "rtt"
group = "g"
every = "1m"

[[tasks]]
name = "bad"
test = "nope"
group = "missing"
every = "60"
slip = "2x"
archivers = ["ghost"]
"#
        );
        let errors = errors_of(&text);
        assert_eq!(
            paths(&errors),
            vec![
                "tasks[1].test",
                "tasks[1].group",
                "tasks[1].archivers[0]",
                "tasks[1].every",
                "tasks[1].slip"
            ],
            "{errors:?}"
        );
        assert!(errors[3].message.contains("missing unit"), "{}", errors[3]);
    }

    #[test]
    fn a_kind_measured_alone_takes_neither_external_hosts_nor_directions() {
        let text = format!(
            r#"{BASE}
[[groups]]
name = "hosts"
kind = "external"
members = ["*"]
targets = ["iperf3.example.net"]

[[tests]]
name = "nics"
type = "counters"

[[tasks]]
name = "ok"
test = "nics"
group = "g"
every = "2m"

[[tasks]]
name = "outward"
test = "nics"
group = "hosts"
every = "2m"

[[tasks]]
name = "both-ways"
test = "nics"
group = "g"
every = "2m"
directions = "both"
"#
        );
        let errors = errors_of(&text);
        assert_eq!(
            paths(&errors),
            vec!["tasks[1].group", "tasks[2].directions"],
            "{errors:?}"
        );
        assert!(
            errors[0]
                .message
                .contains("runs on each agent alone, with no target"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn test_parameters_are_checked_per_type() {
        let text = r#"
[[tests]]
name = "a"
type = "latency"
spec = { cnt = 5, count = 0, interval = 100, protocol = "sctp", size = "1Q" }

[[tests]]
name = "b"
type = "throughput"
spec = { bytes = "1G" }

[[tests]]
name = "c"
type = "teleport"
"#;
        let errors = errors_of(text);
        assert_eq!(
            paths(&errors),
            vec![
                "tests[0].spec.cnt",
                "tests[0].spec.count",
                "tests[0].spec.interval",
                "tests[0].spec.protocol",
                "tests[0].spec.size",
                "tests[1].spec.reserve",
                "tests[2].type"
            ],
            "{errors:?}"
        );
        assert!(
            errors[0].message.contains("known: protocol, count"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn schedule_limits_are_enforced() {
        let text = format!(
            "{BASE}\n[[tasks]]\nname = \"t\"\ntest = \"rtt\"\ngroup = \"g\"\nevery = \"2s\"\noffset = \"2s\"\nslip = \"3s\"\n"
        );
        let errors = errors_of(&text);
        // Offset and slip must be shorter than the period; the 3 s reservation is longer.
        assert_eq!(
            paths(&errors),
            vec!["tasks[0].offset", "tasks[0].slip", "tasks[0].every"],
            "{errors:?}"
        );
    }

    #[test]
    fn group_fields_must_match_the_kind_and_names_be_unique() {
        let text = r#"
[[groups]]
name = "g"
kind = "disjoint"
members = ["a"]
a = ["site="]

[[groups]]
name = "g"
kind = "list"
pairs = [["a", "a"], ["a"], ["site=x", "b"]]
"#;
        let errors = errors_of(text);
        assert_eq!(
            paths(&errors),
            vec![
                "groups[0].members",
                "groups[0].b",
                "groups[0].a[0]",
                "groups[1].pairs[0]",
                "groups[1].pairs[1]",
                "groups[1].pairs[2]",
                "groups[1].name"
            ],
            "{errors:?}"
        );
    }

    #[test]
    fn archivers_need_their_target() {
        let text = r#"
[[archivers]]
name = "f"
kind = "file"

[[archivers]]
name = "h"
kind = "http"
url = "ftp://x"

[[archivers]]
name = "d"
kind = "database"
url = "http://x"
"#;
        assert_eq!(
            paths(&errors_of(text)),
            vec!["archivers[0].path", "archivers[1].url", "archivers[2].url"]
        );
    }

    #[test]
    fn selectors_and_segments() {
        let tags: BTreeMap<String, String> = [("site".to_string(), "campus".to_string())]
            .into_iter()
            .collect();
        assert!(Selector::parse("site=campus").unwrap().matches("x", &tags));
        assert!(!Selector::parse("site=home").unwrap().matches("x", &tags));
        assert!(Selector::parse("x").unwrap().matches("x", &tags));
        assert!(Selector::parse("*").unwrap().matches("y", &BTreeMap::new()));
        assert!(Selector::parse("=v").is_err());
        assert!(Selector::parse("two words").is_err());
        let uplink = Segment {
            name: "up".into(),
            kind: SegmentKind::Uplink,
            members: vec![Selector::parse("site=campus").unwrap()],
            capacity_bps: None,
        };
        let tagged: BTreeMap<String, String> = [("segment".to_string(), "up".to_string())]
            .into_iter()
            .collect();
        assert!(uplink.contains("x", &tags) && uplink.contains("z", &tagged));
        assert!(uplink.used_by(true, false) && !uplink.used_by(true, true));
        let shared = Segment {
            kind: SegmentKind::Shared,
            ..uplink
        };
        assert!(shared.used_by(true, true) && !shared.used_by(false, false));
    }

    #[test]
    fn file_format_comes_from_the_extension() {
        assert_eq!(
            ConfigFormat::from_file_name("a.toml"),
            Ok(ConfigFormat::Toml)
        );
        assert_eq!(
            ConfigFormat::from_file_name("a.Json"),
            Ok(ConfigFormat::Json)
        );
        let error = load_config("a.yaml", "").unwrap_err();
        assert!(error[0].message.contains(".toml or .json"));
        let error = load_config("a.json", "{").unwrap_err();
        assert_eq!(error.len(), 1);
    }
}
