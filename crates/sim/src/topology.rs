//! Topologies of directed links, the paths through them, and the two networks of the
//! dissertation's simulations.

use crate::SimError;

/// A directed link (one direction of a full-duplex link).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub from: usize,
    pub to: usize,
    pub capacity_bps: f64,
}

/// A path: the indices of its links, in order.
pub type Path = Vec<usize>;

#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    pub nodes: Vec<String>,
    pub links: Vec<Link>,
}

impl Topology {
    /// Full-duplex links between named nodes, each direction its own resource of
    /// `capacity_bps`. Edge `i` (a→b) becomes link `i`, its reverse b→a link
    /// `i + edges.len()`.
    pub fn full_duplex(nodes: &[&str], edges: &[(usize, usize)], capacity_bps: f64) -> Self {
        let forward = edges.iter().map(|&(from, to)| Link {
            from,
            to,
            capacity_bps,
        });
        let reverse = edges.iter().map(|&(from, to)| Link {
            from: to,
            to: from,
            capacity_bps,
        });
        Topology {
            nodes: nodes.iter().map(|name| name.to_string()).collect(),
            links: forward.chain(reverse).collect(),
        }
    }

    /// Google's G-scale (B4) inter-datacentre WAN: 12 sites, 19 full-duplex links of
    /// 10 Gbit/s (Jain et al., SIGCOMM 2013), the network of the Calibers evaluation.
    /// The site adjacency is the one TEAVAR (Bogle et al., SIGCOMM 2019) publishes for B4.
    pub fn g_scale() -> Self {
        let nodes = [
            "dc1", "dc2", "dc3", "dc4", "dc5", "dc6", "dc7", "dc8", "dc9", "dc10", "dc11", "dc12",
        ];
        let edges = [
            (1, 2),
            (1, 3),
            (2, 5),
            (3, 4),
            (3, 6),
            (4, 5),
            (4, 7),
            (4, 8),
            (5, 6),
            (6, 7),
            (6, 8),
            (7, 8),
            (7, 11),
            (8, 10),
            (9, 10),
            (9, 11),
            (10, 11),
            (10, 12),
            (11, 12),
        ]
        .map(|(a, b)| (a - 1, b - 1));
        Self::full_duplex(&nodes, &edges, 10e9)
    }

    /// The six routers A–F of the SH/DH flow simulation, links of 10 Gbit/s. The
    /// dissertation's map (its Fig. 3.6a) is lost; this ring A-B-C-D-E-F with the rungs
    /// B–F and C–E keeps every link number the text names (1 = A→B, 2 = B→C, 3 = C→D,
    /// 5 = E→F, 10 = C→B, 13 = F→E, the reverse of link i being i + 8) and makes link 2
    /// carry the six pairs it lists (A→C, A→D, B→C, B→D, B→E, F→C) on default routes.
    pub fn six_router() -> Self {
        let (a, b, c, d, e, f) = (0, 1, 2, 3, 4, 5);
        let edges = [
            (a, b),
            (b, c),
            (c, d),
            (d, e),
            (e, f),
            (f, a),
            (b, f),
            (c, e),
        ];
        Self::full_duplex(&["A", "B", "C", "D", "E", "F"], &edges, 10e9)
    }

    pub fn node(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|known| known == name)
    }

    /// Every loop-free path from `from` to `to` of at most `max_hops` links, fewest hops
    /// first, then with the lower-numbered links first (the sum of their indices).
    pub fn simple_paths(&self, from: usize, to: usize, max_hops: usize) -> Vec<Path> {
        let mut paths = Vec::new();
        let mut visited = vec![false; self.nodes.len()];
        let mut path = Vec::new();
        visited[from] = true;
        self.extend(from, to, max_hops, &mut visited, &mut path, &mut paths);
        paths.sort_by_key(|path| (path.len(), path.iter().sum::<usize>()));
        paths
    }

    fn extend(
        &self,
        at: usize,
        to: usize,
        max_hops: usize,
        visited: &mut [bool],
        path: &mut Path,
        paths: &mut Vec<Path>,
    ) {
        if at == to {
            paths.push(path.clone());
            return;
        }
        if path.len() == max_hops {
            return;
        }
        for (index, link) in self.links.iter().enumerate() {
            if link.from == at && !visited[link.to] {
                visited[link.to] = true;
                path.push(index);
                self.extend(link.to, to, max_hops, visited, path, paths);
                path.pop();
                visited[link.to] = false;
            }
        }
    }

    /// The fewest-hop path, ties going to the lower-numbered links: default IP routing
    /// over the "top set of links", as the dissertation routes A→D over links 1, 2, 3.
    pub fn shortest_path(&self, from: usize, to: usize) -> Result<Path, SimError> {
        self.simple_paths(from, to, self.nodes.len().saturating_sub(1))
            .into_iter()
            .next()
            .ok_or_else(|| SimError::NoPath {
                from: self.nodes[from].clone(),
                to: self.nodes[to].clone(),
            })
    }

    /// The default route of every ordered pair, indexed `[from][to]` (empty on the diagonal).
    pub fn shortest_paths(&self) -> Result<Vec<Vec<Path>>, SimError> {
        let n = self.nodes.len();
        (0..n)
            .map(|from| {
                (0..n)
                    .map(|to| {
                        if from == to {
                            Ok(Vec::new())
                        } else {
                            self.shortest_path(from, to)
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_scale_has_twelve_sites_and_nineteen_links_and_is_connected() {
        let g = Topology::g_scale();
        assert_eq!(g.nodes.len(), 12);
        assert_eq!(g.links.len(), 38);
        let paths = g.shortest_paths().unwrap();
        let longest = paths.iter().flatten().map(Vec::len).max().unwrap();
        assert!(longest <= 6, "{longest}");
    }

    #[test]
    fn six_router_link_numbers_and_link_two_pairs_match_the_text() {
        let t = Topology::six_router();
        let name = |i: usize| format!("{}→{}", t.nodes[t.links[i].from], t.nodes[t.links[i].to]);
        // The dissertation numbers links from 1.
        for (number, expected) in [
            (1, "A→B"),
            (2, "B→C"),
            (3, "C→D"),
            (5, "E→F"),
            (10, "C→B"),
            (13, "F→E"),
        ] {
            assert_eq!(name(number - 1), expected);
        }
        let paths = t.shortest_paths().unwrap();
        let mut on_link_two = Vec::new();
        for (from, row) in paths.iter().enumerate() {
            for (to, path) in row.iter().enumerate() {
                if path.contains(&1) {
                    on_link_two.push(format!("{}{}", t.nodes[from], t.nodes[to]));
                }
            }
        }
        assert_eq!(on_link_two, ["AC", "AD", "BC", "BD", "BE", "FC"]);
    }

    #[test]
    fn simple_paths_are_loop_free_and_ordered() {
        let t = Topology::six_router();
        let (b, c) = (t.node("B").unwrap(), t.node("C").unwrap());
        let paths = t.simple_paths(b, c, 5);
        assert_eq!(paths[0], vec![1]);
        assert!(paths.windows(2).all(|w| w[0].len() <= w[1].len()));
        for path in &paths {
            let mut seen = vec![b];
            for &link in path {
                assert!(!seen.contains(&t.links[link].to));
                seen.push(t.links[link].to);
            }
            assert_eq!(*seen.last().unwrap(), c);
        }
    }
}
