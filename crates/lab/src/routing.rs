//! Static routes computed from the topology: every node gets a route to every subnet it is not
//! attached to, along the least-cost path (Dijkstra over link costs). Only routers and switches
//! carry transit traffic; hosts are path ends. Ties break on declaration order, so routes are
//! deterministic.

use crate::addr::IfAddr;
use crate::topology::{Endpoint, NodeKind, Topology};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Route {
    pub node: usize,
    pub destination: IfAddr,
    pub gateway: IpAddr,
    /// The node's interface (= link name) the route leaves through.
    pub interface: String,
}

/// Graph vertex index: nodes first, then switches.
fn vertex(topology: &Topology, endpoint: Endpoint) -> usize {
    match endpoint {
        Endpoint::Node(i) => i,
        Endpoint::Switch(i) => topology.nodes.len() + i,
    }
}

/// Least-cost distances and predecessor links from `source`.
fn shortest_paths(topology: &Topology, source: usize) -> (Vec<u64>, Vec<Option<usize>>) {
    let vertex_count = topology.nodes.len() + topology.switches.len();
    let mut distance = vec![u64::MAX; vertex_count];
    let mut via_link: Vec<Option<usize>> = vec![None; vertex_count];
    let mut queue = BinaryHeap::new();
    distance[source] = 0;
    queue.push(Reverse((0u64, source)));
    while let Some(Reverse((cost, v))) = queue.pop() {
        if cost > distance[v] {
            continue;
        }
        let is_transit_capable =
            v == source || v >= topology.nodes.len() || topology.nodes[v].kind == NodeKind::Router;
        if !is_transit_capable {
            continue;
        }
        for (link_index, link) in topology.links.iter().enumerate() {
            let (a, b) = (vertex(topology, link.a), vertex(topology, link.b));
            let next = if a == v {
                b
            } else if b == v {
                a
            } else {
                continue;
            };
            let next_cost = cost + link.cost as u64;
            if next_cost < distance[next] {
                distance[next] = next_cost;
                via_link[next] = Some(link_index);
                queue.push(Reverse((next_cost, next)));
            }
        }
    }
    (distance, via_link)
}

/// All routes of all nodes.
pub fn compute_routes(topology: &Topology) -> Vec<Route> {
    // Each subnet with the vertices attached to it.
    let mut subnets: Vec<(IfAddr, BTreeSet<usize>)> = Vec::new();
    for link in &topology.links {
        for address in link.a_addresses.iter().chain(&link.b_addresses) {
            let network = address.network();
            let ends = [vertex(topology, link.a), vertex(topology, link.b)];
            match subnets.iter_mut().find(|(n, _)| *n == network) {
                Some((_, attached)) => attached.extend(ends),
                None => subnets.push((network, ends.into_iter().collect())),
            }
        }
    }
    let mut routes = Vec::new();
    for source in 0..topology.nodes.len() {
        let own_networks: BTreeSet<IfAddr> = topology
            .node_addresses(source)
            .iter()
            .map(|(_, a)| a.network())
            .collect();
        let (distance, via_link) = shortest_paths(topology, source);
        for (network, attached) in &subnets {
            if own_networks.contains(network) {
                continue;
            }
            let Some(target) = attached
                .iter()
                .copied()
                .filter(|v| distance[*v] != u64::MAX)
                .min_by_key(|v| (distance[*v], *v))
            else {
                continue;
            };
            // Walk back to the source, remembering the first two hops.
            let mut path = vec![target];
            let mut current = target;
            while current != source {
                let link =
                    &topology.links[via_link[current].expect("reached vertex has a predecessor")];
                let (a, b) = (vertex(topology, link.a), vertex(topology, link.b));
                current = if a == current { b } else { a };
                path.push(current);
            }
            path.reverse();
            let first_link = &topology.links[via_link[path[1]].expect("first hop has a link")];
            // The gateway is the first node on the path (a switch is crossed at layer 2).
            let Some(position) = path[1..].iter().position(|v| *v < topology.nodes.len()) else {
                continue;
            };
            let gateway_vertex = path[1 + position];
            let gateway_link =
                &topology.links[via_link[gateway_vertex].expect("gateway has a link")];
            let gateway_addresses = if vertex(topology, gateway_link.a) == gateway_vertex {
                &gateway_link.a_addresses
            } else {
                &gateway_link.b_addresses
            };
            if let Some(gateway) = gateway_addresses
                .iter()
                .find(|a| a.is_ipv6() == network.is_ipv6())
            {
                routes.push(Route {
                    node: source,
                    destination: *network,
                    gateway: gateway.addr,
                    interface: first_link.name.clone(),
                });
            }
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN_WITH_DETOUR: &str = r#"
        [[nodes]]
        name = "h1"
        [[nodes]]
        name = "r1"
        kind = "router"
        [[nodes]]
        name = "r2"
        kind = "router"
        [[nodes]]
        name = "detour"
        kind = "router"
        [[nodes]]
        name = "h2"
        [[links]]
        a = "h1"
        b = "r1"
        [[links]]
        a = "r1"
        b = "r2"
        [[links]]
        a = "r1"
        b = "detour"
        [[links]]
        a = "detour"
        b = "r2"
        [[links]]
        a = "r2"
        b = "h2"
    "#;

    fn route<'a>(routes: &'a [Route], node: usize, destination: &str) -> Option<&'a Route> {
        routes
            .iter()
            .find(|r| r.node == node && r.destination.to_string() == destination)
    }

    #[test]
    fn shortest_path_and_cost_changes_reroute() {
        let mut topology = Topology::from_toml(CHAIN_WITH_DETOUR).unwrap();
        // Segments: h1-r1 = 10.77.0/24, r1-r2 = .1, r1-detour = .2, detour-r2 = .3, r2-h2 = .4.
        let routes = compute_routes(&topology);
        let h1_to_h2 = route(&routes, 0, "10.77.4.0/24").unwrap();
        assert_eq!(h1_to_h2.gateway.to_string(), "10.77.0.2");
        assert_eq!(h1_to_h2.interface, "h1-r1");
        let r1_to_h2 = route(&routes, 1, "10.77.4.0/24").unwrap();
        assert_eq!(r1_to_h2.gateway.to_string(), "10.77.1.2");
        assert!(route(&routes, 1, "fd77:0:0:4::/64").is_some());
        // Hosts do not route through each other, and connected subnets get no route.
        assert!(route(&routes, 0, "10.77.0.0/24").is_none());

        topology.links[1].cost = 10; // the direct r1-r2 link becomes expensive
        let routes = compute_routes(&topology);
        let r1_to_h2 = route(&routes, 1, "10.77.4.0/24").unwrap();
        assert_eq!(r1_to_h2.gateway.to_string(), "10.77.2.2");
        assert_eq!(r1_to_h2.interface, "r1-detour");
    }

    #[test]
    fn switches_are_crossed_at_layer_two() {
        let text = r#"
            [[nodes]]
            name = "a"
            [[nodes]]
            name = "r"
            kind = "router"
            [[nodes]]
            name = "far"
            [[switches]]
            name = "sw"
            [[links]]
            a = "a"
            b = "sw"
            [[links]]
            a = "r"
            b = "sw"
            [[links]]
            a = "r"
            b = "far"
        "#;
        let topology = Topology::from_toml(text).unwrap();
        let routes = compute_routes(&topology);
        let a_to_far = route(&routes, 0, "10.77.1.0/24").unwrap();
        assert_eq!(a_to_far.gateway.to_string(), "10.77.0.2");
        assert_eq!(a_to_far.interface, "a-sw");
    }
}
