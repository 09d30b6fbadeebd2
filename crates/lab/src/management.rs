//! A management path from the host into a lab's measurement points, apart from the
//! emulated links: agents inside the nodes reach a server on the host through it,
//! and their control traffic never crosses (or disturbs) the links under test.
//!
//! Each measurement-point node gets one veth pair to the host's namespace with a /31
//! from 198.19.0.0/16 (node i: host side 198.19.i.0, node side 198.19.i.1, RFC 2544's
//! benchmarking range, which nothing routes), and a host route to the server's
//! address (the first free one of 198.18.0.1–198.18.0.250, put on the host's
//! loopback, so two labs' demos each have their own) through it — and nothing else,
//! so node-to-node traffic still follows the lab's routes. Deleting the lab's
//! namespaces deletes the veth pairs; [`Management::detach`] removes the rest.

use std::net::Ipv4Addr;

use crate::lab::LabError;
use crate::netns::{ip, node_netns};
use crate::topology::Topology;

/// Server addresses are taken from 198.18.0.1 up to this last octet.
const LAST_SERVER_OCTET: u8 = 250;
/// Interface name inside each node.
pub const NODE_INTERFACE: &str = "mgmt0";
/// At most this many measurement points (one /31 each in 198.19.0.0/16, one octet).
pub const MAX_POINTS: usize = 256;

/// One measurement point's management link.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub node: String,
    pub netns: String,
    /// The node's addresses on the emulated links, the one its agent's endpoint
    /// listens on first (IPv4 if it has one): a router answers a trace from the link
    /// the probe came in on, so its agent advertises every one.
    pub lab_addrs: Vec<std::net::IpAddr>,
    pub tags: std::collections::BTreeMap<String, String>,
    host_interface: String,
}

#[derive(Debug)]
pub struct Management {
    pub points: Vec<Point>,
    /// The server's address on the host's loopback, reachable from every point; this
    /// path added it and removes it.
    pub server_addr: Ipv4Addr,
    attached: bool,
}

fn step(step: &str) -> impl Fn(String) -> LabError + '_ {
    move |message| LabError {
        step: step.to_string(),
        message,
    }
}

/// Adds the first free address of 198.18.0.1–198.18.0.250 to the host's loopback:
/// `ip` refuses one that exists, so two demos starting at once never share one.
fn claim_server_addr() -> Result<Ipv4Addr, LabError> {
    let existing = ip("-4 addr show dev lo").map_err(step("read the host's loopback"))?;
    for octet in 1..=LAST_SERVER_OCTET {
        let candidate = Ipv4Addr::new(198, 18, 0, octet);
        if existing.contains(&format!("{candidate}/32")) {
            continue;
        }
        if ip(&format!("addr add {candidate}/32 dev lo")).is_ok() {
            return Ok(candidate);
        }
    }
    Err(LabError {
        step: "add the server address".into(),
        message: format!(
            "198.18.0.1-198.18.0.{LAST_SERVER_OCTET} are all in use on the host's loopback"
        ),
    })
}

/// Host-side interface name for point `index` of `lab` (at most 15 bytes).
fn host_interface(lab: &str, index: usize) -> String {
    format!("vm{index:02x}{lab}").chars().take(15).collect()
}

impl Management {
    /// Builds the management path to every measurement point of the running lab
    /// `topology`. On failure, what it created is removed.
    pub fn attach(topology: &Topology) -> Result<Management, LabError> {
        let points: Vec<(usize, &crate::topology::Node)> = topology
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.measure)
            .collect();
        if points.len() > MAX_POINTS {
            return Err(LabError {
                step: "plan the management path".into(),
                message: format!(
                    "{} measurement points; at most {MAX_POINTS} are supported",
                    points.len()
                ),
            });
        }
        let server_addr = claim_server_addr()?;
        let mut management = Management {
            points: Vec::new(),
            server_addr,
            attached: true,
        };
        for (index, (node_index, node)) in points.into_iter().enumerate() {
            let netns = node_netns(&topology.name, &node.name);
            let host_side = host_interface(&topology.name, index);
            let host_addr = Ipv4Addr::new(198, 19, index as u8, 0);
            let node_addr = Ipv4Addr::new(198, 19, index as u8, 1);
            let addresses: Vec<std::net::IpAddr> = topology
                .node_addresses(node_index)
                .into_iter()
                .map(|(_, address)| address.addr)
                .collect();
            let commands = [
                format!("link add {host_side} type veth peer name {NODE_INTERFACE} netns {netns}"),
                format!("addr add {host_addr}/31 dev {host_side}"),
                format!("link set {host_side} up"),
                format!("-n {netns} addr add {node_addr}/31 dev {NODE_INTERFACE}"),
                format!("-n {netns} link set {NODE_INTERFACE} up"),
                format!(
                    "-n {netns} route add {server_addr}/32 via {host_addr} dev {NODE_INTERFACE}"
                ),
            ];
            let lab_addr = addresses
                .iter()
                .find(|address| address.is_ipv4())
                .or(addresses.first())
                .copied();
            let point = Point {
                node: node.name.clone(),
                netns,
                lab_addrs: lab_addr
                    .into_iter()
                    .chain(addresses.iter().copied().filter(|a| Some(*a) != lab_addr))
                    .collect(),
                tags: node.tags.clone(),
                host_interface: host_side,
            };
            for command in &commands {
                if let Err(message) = ip(command) {
                    management.points.push(point);
                    management.detach();
                    return Err(LabError {
                        step: format!("management path to {}", node.name),
                        message,
                    });
                }
            }
            management.points.push(point);
        }
        Ok(management)
    }

    /// Removes the host side of the path (the node side goes with the lab).
    pub fn detach(&mut self) {
        for point in self.points.drain(..) {
            let _ = ip(&format!("link del {}", point.host_interface));
        }
        if std::mem::take(&mut self.attached) {
            let _ = ip(&format!("addr del {}/32 dev lo", self.server_addr));
        }
    }
}

impl Drop for Management {
    fn drop(&mut self) {
        self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_interface_names_fit_the_kernels_limit_and_differ_by_index() {
        let long = host_interface("averyverylonglabname", 255);
        assert_eq!(long.len(), 15);
        assert!(long.starts_with("vmff"));
        assert_ne!(host_interface("cloud", 0), host_interface("cloud", 1));
    }
}
