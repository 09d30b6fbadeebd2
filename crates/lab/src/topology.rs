//! Topology files: parsing, validation (errors name the exact field path) and the
//! resolved form the lab builds from (addresses assigned, names checked).
//!
//! ```toml
//! [lab]
//! name = "twohosts"
//! [[nodes]]
//! name = "h1"            # kind = "host" (default) or "router"
//! [[nodes]]
//! name = "h2"
//! [[links]]
//! a = "h1"
//! b = "h2"
//! both = { delay = "20ms" }   # per direction: forward (a→b), reverse (b→a), both
//! ```

use crate::addr::IfAddr;
use crate::impairment::Impairment;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A validation error: where (`links[2].forward.loss`) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TopologyError {
    pub path: String,
    pub message: String,
}

fn error(path: impl Into<String>, message: impl Into<String>) -> TopologyError {
    TopologyError {
        path: path.into(),
        message: message.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// An end system: never forwards others' traffic.
    #[default]
    Host,
    /// Forwards IPv4 and IPv6 between its links.
    Router,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    #[serde(default)]
    lab: RawLab,
    #[serde(default)]
    nodes: Vec<RawNode>,
    #[serde(default)]
    switches: Vec<RawSwitch>,
    #[serde(default)]
    links: Vec<RawLink>,
    #[serde(default)]
    incidents: Vec<RawIncident>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLab {
    name: Option<String>,
    description: Option<String>,
    seed: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    #[serde(default)]
    kind: NodeKind,
    description: Option<String>,
    /// Whether `vantage demo --lab` runs an agent here (default: hosts yes, routers no).
    measure: Option<bool>,
    /// Tags the node's agent registers with (`zone`, `site`, `segment`…).
    #[serde(default)]
    tags: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    name: Option<String>,
    a: String,
    b: String,
    mtu: Option<u32>,
    cost: Option<u32>,
    #[serde(default)]
    a_addresses: Vec<String>,
    #[serde(default)]
    b_addresses: Vec<String>,
    both: Option<toml::Table>,
    forward: Option<toml::Table>,
    reverse: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIncident {
    name: String,
    description: Option<String>,
    #[serde(default)]
    changes: Vec<RawChange>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChange {
    link: String,
    #[serde(default)]
    direction: Direction,
    set: toml::Table,
}

/// Which direction(s) of a link a setting applies to: forward is a→b.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Forward,
    Reverse,
    #[default]
    Both,
}

impl std::str::FromStr for Direction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "forward" => Ok(Direction::Forward),
            "reverse" => Ok(Direction::Reverse),
            "both" => Ok(Direction::Both),
            other => Err(format!(
                "\"{other}\" is not a direction (forward, reverse or both)"
            )),
        }
    }
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reverse => "reverse",
            Direction::Both => "both",
        }
    }
    pub fn includes_forward(self) -> bool {
        matches!(self, Direction::Forward | Direction::Both)
    }
    pub fn includes_reverse(self) -> bool {
        matches!(self, Direction::Reverse | Direction::Both)
    }
}

/// One end of a link: a node (its own namespace) or a switch (a bridge in the emulator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    Node(usize),
    Switch(usize),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    pub description: Option<String>,
    /// A measurement point: `vantage demo --lab` runs an agent here.
    #[serde(default)]
    pub measure: bool,
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Also the interface name inside the node(s) it attaches to.
    pub name: String,
    pub a: Endpoint,
    pub b: Endpoint,
    pub mtu: u32,
    /// Routing cost (shortest path uses the sum of costs).
    pub cost: u32,
    pub a_addresses: Vec<IfAddr>,
    pub b_addresses: Vec<IfAddr>,
    /// a→b.
    pub forward: Impairment,
    /// b→a.
    pub reverse: Impairment,
}

impl Link {
    pub fn impairment_mut(&mut self, forward: bool) -> &mut Impairment {
        if forward {
            &mut self.forward
        } else {
            &mut self.reverse
        }
    }

    /// Applies one `KEY=VALUE` of `lab set`: link-wide `mtu`/`cost` or a per-direction impairment.
    pub fn apply_setting(
        &mut self,
        direction: Direction,
        key: &str,
        value: &str,
    ) -> Result<(), String> {
        match key {
            "mtu" => self.mtu = parse_mtu(value)?,
            "cost" => {
                self.cost = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|c| *c >= 1)
                    .ok_or_else(|| format!("\"{value}\" is not a cost (an integer ≥ 1)"))?
            }
            _ => {
                if direction.includes_forward() {
                    self.forward.apply_setting(key, value)?;
                }
                if direction.includes_reverse() {
                    self.reverse.apply_setting(key, value)?;
                }
            }
        }
        Ok(())
    }
}

fn parse_mtu(value: &str) -> Result<u32, String> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|m| (1280..=65535).contains(m))
        .ok_or_else(|| format!("\"{value}\" is not an MTU in 1280..=65535 (IPv6 needs 1280)"))
}

/// A named set of `lab set` changes that `lab incident NAME on` applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    pub name: String,
    pub description: Option<String>,
    pub changes: Vec<IncidentChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentChange {
    pub link: String,
    pub direction: Direction,
    /// Ordered `KEY=VALUE` settings, already validated.
    pub settings: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    pub name: String,
    pub description: Option<String>,
    /// Seed of the impairment engines' random sources (reproducible runs).
    pub seed: u64,
    pub nodes: Vec<Node>,
    pub switches: Vec<String>,
    pub links: Vec<Link>,
    pub incidents: Vec<Incident>,
}

/// Lab names become part of namespace names (`vl-<lab>-<node>`), so they are short and plain.
pub fn validate_lab_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 12
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{name}\" is not a lab name (1-12 characters, lowercase letters and digits)"
        ))
    }
}

fn validate_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{name}\" is not a name (1-32 characters: lowercase letters, digits, '-')"
        ))
    }
}

fn validate_interface_name(name: &str) -> Result<(), String> {
    validate_node_name(name)?;
    if name.len() > 15 {
        return Err(format!(
            "\"{name}\" is longer than 15 characters (it becomes an interface name)"
        ));
    }
    Ok(())
}

fn value_as_setting(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Validates a table of settings against a scratch link, returning them in order.
fn parse_settings(
    table: &toml::Table,
    path: &str,
    link: &mut Link,
    direction: Direction,
) -> Result<Vec<(String, String)>, TopologyError> {
    let mut settings = Vec::new();
    for (key, value) in table {
        let value = value_as_setting(value);
        link.apply_setting(direction, key, &value)
            .map_err(|message| error(format!("{path}.{key}"), message))?;
        settings.push((key.clone(), value));
    }
    Ok(settings)
}

/// The interface addresses auto-assigned to the member at `host_index` (1-based) of segment
/// `segment`: `10.77.<segment>.<host>/24` and `fd77:0:0:<segment>::<host>/64`. Every lab lives
/// in its own namespaces, so labs reuse the same plan without colliding.
pub fn auto_addresses(segment: usize, host_index: usize) -> Vec<IfAddr> {
    vec![
        IfAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, 77, segment as u8, host_index as u8)),
            24,
        ),
        IfAddr::new(
            IpAddr::V6(Ipv6Addr::new(
                0xfd77,
                0,
                0,
                segment as u16,
                0,
                0,
                0,
                host_index as u16,
            )),
            64,
        ),
    ]
}

impl Topology {
    /// Parses and validates a topology file's text.
    pub fn from_toml(text: &str) -> Result<Topology, TopologyError> {
        let raw: RawTopology = toml::from_str(text)
            .map_err(|e| error("topology", e.to_string().trim().to_string()))?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: RawTopology) -> Result<Topology, TopologyError> {
        let name = raw.lab.name.unwrap_or_else(|| "lab".to_string());
        validate_lab_name(&name).map_err(|m| error("lab.name", m))?;
        let mut names = HashSet::new();
        let mut nodes = Vec::new();
        for (i, node) in raw.nodes.into_iter().enumerate() {
            let path = format!("nodes[{i}].name");
            validate_node_name(&node.name).map_err(|m| error(&path, m))?;
            if !names.insert(node.name.clone()) {
                return Err(error(path, format!("\"{}\" is declared twice", node.name)));
            }
            for (key, value) in &node.tags {
                if key.is_empty() || value.is_empty() || key.contains('=') {
                    return Err(error(
                        format!("nodes[{i}].tags"),
                        format!("tag \"{key}\" = \"{value}\" needs a non-empty key without '=' and a non-empty value"),
                    ));
                }
            }
            nodes.push(Node {
                name: node.name,
                kind: node.kind,
                description: node.description,
                measure: node.measure.unwrap_or(node.kind == NodeKind::Host),
                tags: node.tags,
            });
        }
        if nodes.is_empty() {
            return Err(error("nodes", "a lab needs at least one node"));
        }
        let mut switches = Vec::new();
        for (i, switch) in raw.switches.into_iter().enumerate() {
            let path = format!("switches[{i}].name");
            validate_node_name(&switch.name).map_err(|m| error(&path, m))?;
            if !names.insert(switch.name.clone()) {
                return Err(error(
                    path,
                    format!("\"{}\" is declared twice", switch.name),
                ));
            }
            switches.push(switch.name);
        }
        let resolve = |name: &str, path: String| -> Result<Endpoint, TopologyError> {
            if let Some(i) = nodes.iter().position(|n| n.name == name) {
                Ok(Endpoint::Node(i))
            } else if let Some(i) = switches.iter().position(|s| s == name) {
                Ok(Endpoint::Switch(i))
            } else {
                Err(error(
                    path,
                    format!("\"{name}\" is not a declared node or switch"),
                ))
            }
        };

        let mut links: Vec<Link> = Vec::new();
        for (i, raw_link) in raw.links.into_iter().enumerate() {
            let path = format!("links[{i}]");
            let a = resolve(&raw_link.a, format!("{path}.a"))?;
            let b = resolve(&raw_link.b, format!("{path}.b"))?;
            if a == b {
                return Err(error(
                    format!("{path}.b"),
                    "a link needs two different ends",
                ));
            }
            if matches!((a, b), (Endpoint::Switch(_), Endpoint::Switch(_))) {
                return Err(error(
                    format!("{path}.b"),
                    "links between two switches are not supported; join the segments with a router",
                ));
            }
            let name = match raw_link.name {
                Some(name) => {
                    validate_interface_name(&name).map_err(|m| error(format!("{path}.name"), m))?;
                    name
                }
                None => {
                    let generated = format!("{}-{}", raw_link.a, raw_link.b);
                    validate_interface_name(&generated).map_err(|m| {
                        error(
                            format!("{path}.name"),
                            format!("missing, and the default {m}"),
                        )
                    })?;
                    generated
                }
            };
            if links.iter().any(|l| l.name == name) {
                return Err(error(
                    format!("{path}.name"),
                    format!("\"{name}\" is used by another link"),
                ));
            }
            let mtu = match raw_link.mtu {
                Some(mtu) => {
                    parse_mtu(&mtu.to_string()).map_err(|m| error(format!("{path}.mtu"), m))?
                }
                None => 1500,
            };
            let cost = raw_link.cost.unwrap_or(1);
            if cost == 0 {
                return Err(error(format!("{path}.cost"), "cost must be ≥ 1"));
            }
            let parse_addresses =
                |list: &[String], side: &str| -> Result<Vec<IfAddr>, TopologyError> {
                    list.iter()
                        .enumerate()
                        .map(|(j, a)| {
                            a.parse()
                                .map_err(|m| error(format!("{path}.{side}_addresses[{j}]"), m))
                        })
                        .collect()
                };
            let a_addresses = parse_addresses(&raw_link.a_addresses, "a")?;
            let b_addresses = parse_addresses(&raw_link.b_addresses, "b")?;
            for (side, end, list) in [("a", a, &a_addresses), ("b", b, &b_addresses)] {
                if matches!(end, Endpoint::Switch(_)) && !list.is_empty() {
                    return Err(error(
                        format!("{path}.{side}_addresses"),
                        "a switch end has no addresses",
                    ));
                }
            }
            let mut link = Link {
                name,
                a,
                b,
                mtu,
                cost,
                a_addresses,
                b_addresses,
                forward: Impairment::default(),
                reverse: Impairment::default(),
            };
            for (section, direction) in [
                (&raw_link.both, Direction::Both),
                (&raw_link.forward, Direction::Forward),
                (&raw_link.reverse, Direction::Reverse),
            ] {
                if let Some(table) = section {
                    let section_path = format!("{path}.{}", direction.as_str());
                    for key in table.keys() {
                        if key == "mtu" || key == "cost" {
                            return Err(error(
                                format!("{section_path}.{key}"),
                                "is a property of the whole link; set it on the link itself",
                            ));
                        }
                    }
                    parse_settings(table, &section_path, &mut link, direction)?;
                }
            }
            links.push(link);
        }
        for (i, node) in nodes.iter().enumerate() {
            if !links
                .iter()
                .any(|l| l.a == Endpoint::Node(i) || l.b == Endpoint::Node(i))
            {
                return Err(error(
                    format!("nodes[{i}]"),
                    format!("\"{}\" is not connected by any link", node.name),
                ));
            }
        }
        assign_addresses(&mut links, switches.len())?;

        let mut incidents: Vec<Incident> = Vec::new();
        for (i, raw_incident) in raw.incidents.into_iter().enumerate() {
            let path = format!("incidents[{i}]");
            validate_node_name(&raw_incident.name).map_err(|m| error(format!("{path}.name"), m))?;
            if incidents.iter().any(|x| x.name == raw_incident.name) {
                return Err(error(
                    format!("{path}.name"),
                    format!("\"{}\" is declared twice", raw_incident.name),
                ));
            }
            let mut changes = Vec::new();
            for (j, change) in raw_incident.changes.into_iter().enumerate() {
                let change_path = format!("{path}.changes[{j}]");
                let mut scratch = links
                    .iter()
                    .find(|l| l.name == change.link)
                    .cloned()
                    .ok_or_else(|| {
                        error(
                            format!("{change_path}.link"),
                            format!("\"{}\" is not a link", change.link),
                        )
                    })?;
                let settings = parse_settings(
                    &change.set,
                    &format!("{change_path}.set"),
                    &mut scratch,
                    change.direction,
                )?;
                changes.push(IncidentChange {
                    link: change.link,
                    direction: change.direction,
                    settings,
                });
            }
            incidents.push(Incident {
                name: raw_incident.name,
                description: raw_incident.description,
                changes,
            });
        }

        Ok(Topology {
            name,
            description: raw.lab.description,
            seed: raw.lab.seed.unwrap_or(1),
            nodes,
            switches,
            links,
            incidents,
        })
    }

    pub fn endpoint_name(&self, endpoint: Endpoint) -> &str {
        match endpoint {
            Endpoint::Node(i) => &self.nodes[i].name,
            Endpoint::Switch(i) => &self.switches[i],
        }
    }

    pub fn link_index(&self, name: &str) -> Option<usize> {
        self.links.iter().position(|l| l.name == name)
    }

    /// Every address of a node, by link: `(link index, address)`.
    pub fn node_addresses(&self, node: usize) -> Vec<(usize, IfAddr)> {
        let mut out = Vec::new();
        for (i, link) in self.links.iter().enumerate() {
            if link.a == Endpoint::Node(node) {
                out.extend(link.a_addresses.iter().map(|a| (i, *a)));
            }
            if link.b == Endpoint::Node(node) {
                out.extend(link.b_addresses.iter().map(|a| (i, *a)));
            }
        }
        out
    }
}

/// Segments: each switch is one L2 segment (index = switch index); each node-to-node link is
/// its own segment after them. Members without explicit addresses get [`auto_addresses`].
fn assign_addresses(links: &mut [Link], switch_count: usize) -> Result<(), TopologyError> {
    let mut switch_members: BTreeMap<usize, usize> = BTreeMap::new();
    let mut next_p2p_segment = switch_count;
    for (i, link) in links.iter_mut().enumerate() {
        let segment_and_hosts = match (link.a, link.b) {
            (Endpoint::Switch(s), Endpoint::Node(_)) | (Endpoint::Node(_), Endpoint::Switch(s)) => {
                let member = switch_members.entry(s).or_insert(0);
                *member += 1;
                let host = *member;
                if matches!(link.a, Endpoint::Switch(_)) {
                    (s, 0, host)
                } else {
                    (s, host, 0)
                }
            }
            (Endpoint::Node(_), Endpoint::Node(_)) => {
                next_p2p_segment += 1;
                (next_p2p_segment - 1, 1, 2)
            }
            (Endpoint::Switch(_), Endpoint::Switch(_)) => {
                unreachable!("rejected while parsing links")
            }
        };
        let (segment, a_host, b_host) = segment_and_hosts;
        if segment > 255 || a_host > 254 || b_host > 254 {
            return Err(error(
                format!("links[{i}]"),
                "too many links or switch members for automatic addressing (256 segments of 254 hosts); give addresses explicitly",
            ));
        }
        if a_host > 0 && link.a_addresses.is_empty() {
            link.a_addresses = auto_addresses(segment, a_host);
        }
        if b_host > 0 && link.b_addresses.is_empty() {
            link.b_addresses = auto_addresses(segment, b_host);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_HOSTS: &str = r#"
        [lab]
        name = "two"
        [[nodes]]
        name = "h1"
        [[nodes]]
        name = "h2"
        [[links]]
        a = "h1"
        b = "h2"
        both = { delay = "20ms" }
        forward = { loss = "1%" }
    "#;

    #[test]
    fn two_hosts_resolve_with_auto_addresses_and_directions() {
        let topology = Topology::from_toml(TWO_HOSTS).unwrap();
        let link = &topology.links[0];
        assert_eq!(link.name, "h1-h2");
        assert_eq!(link.forward.delay_us, 20_000);
        assert_eq!(link.reverse.delay_us, 20_000);
        assert!((link.forward.loss_ratio - 0.01).abs() < 1e-12);
        assert_eq!(link.reverse.loss_ratio, 0.0);
        let a: Vec<String> = link.a_addresses.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            a,
            [
                "10.77.0.1/24",
                "fd77:0:0:0::1/64"
                    .parse::<IfAddr>()
                    .unwrap()
                    .to_string()
                    .as_str()
            ]
        );
        assert_eq!(link.b_addresses[0].to_string(), "10.77.0.2/24");
    }

    fn error_of(text: &str) -> String {
        Topology::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_field_path() {
        let bad_loss = TWO_HOSTS.replace("loss = \"1%\"", "loss = \"5x\"");
        assert_eq!(
            error_of(&bad_loss),
            "links[0].forward.loss: \"5x\" is not a percentage (e.g. 1%, 0.1%)"
        );
        let bad_end = TWO_HOSTS.replace("b = \"h2\"", "b = \"h3\"");
        assert_eq!(
            error_of(&bad_end),
            "links[0].b: \"h3\" is not a declared node or switch"
        );
        let bad_delay = TWO_HOSTS.replace("20ms", "20");
        assert!(error_of(&bad_delay).starts_with("links[0].both.delay: invalid duration"));
        let unknown_field = TWO_HOSTS.replace("[lab]", "[lab]\nfoo = 1");
        assert!(error_of(&unknown_field).contains("unknown field `foo`"));
        let long_name =
            TWO_HOSTS.replace("b = \"h2\"", "b = \"h2\"\nname = \"a-very-long-link-name\"");
        assert!(error_of(&long_name).starts_with("links[0].name: "));
        let bad_mtu = TWO_HOSTS.replace("b = \"h2\"", "b = \"h2\"\nmtu = 70000");
        assert!(error_of(&bad_mtu).starts_with("links[0].mtu: "));
        let lonely = format!("{TWO_HOSTS}\n[[nodes]]\nname = \"h3\"");
        assert!(error_of(&lonely).starts_with("nodes[2]: \"h3\" is not connected"));
        let bad_address =
            TWO_HOSTS.replace("b = \"h2\"", "b = \"h2\"\na_addresses = [\"10.0.0.1\"]");
        assert!(error_of(&bad_address).starts_with("links[0].a_addresses[0]: "));
    }

    #[test]
    fn incidents_are_validated_against_links() {
        let with_incident = format!(
            "{TWO_HOSTS}\n[[incidents]]\nname = \"bad\"\n[[incidents.changes]]\nlink = \"h1-h2\"\ndirection = \"forward\"\nset = {{ loss = \"40%\", mtu = 1400 }}\n"
        );
        let topology = Topology::from_toml(&with_incident).unwrap();
        assert_eq!(topology.incidents[0].changes[0].settings.len(), 2);
        let broken = with_incident.replace("40%", "forty");
        assert!(error_of(&broken).starts_with("incidents[0].changes[0].set.loss: "));
        let unknown_link = with_incident.replace("link = \"h1-h2\"", "link = \"nope\"");
        assert!(error_of(&unknown_link).starts_with("incidents[0].changes[0].link: "));
    }

    #[test]
    fn switch_members_share_a_subnet() {
        let text = r#"
            [[nodes]]
            name = "a"
            [[nodes]]
            name = "b"
            [[nodes]]
            name = "r"
            kind = "router"
            [[switches]]
            name = "sw"
            [[links]]
            a = "a"
            b = "sw"
            [[links]]
            a = "b"
            b = "sw"
            [[links]]
            a = "sw"
            b = "r"
        "#;
        let topology = Topology::from_toml(text).unwrap();
        assert_eq!(topology.links[0].a_addresses[0].to_string(), "10.77.0.1/24");
        assert_eq!(topology.links[1].a_addresses[0].to_string(), "10.77.0.2/24");
        assert_eq!(topology.links[2].b_addresses[0].to_string(), "10.77.0.3/24");
        assert!(topology.links[2].a_addresses.is_empty());
    }
}
