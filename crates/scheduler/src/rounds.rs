//! Packing pairs into rounds of disjoint pairs (edge colouring), so a
//! campaign of exclusive tests runs many pairs in parallel.
//!
//! - Full mesh: the circle method of round-robin tournaments (a
//!   1-factorisation of the complete graph K_n): n−1 rounds for even n, n for
//!   odd n (one agent sits out each round), which is optimal.
//! - A×B with disjoint sides: round r pairs a_i with b_((i+r) mod |B|) (a Latin
//!   square), max(|A|, |B|) rounds, optimal by Kőnig's theorem.
//! - Anything else: greedy colouring, at most 2Δ−1 rounds for maximum degree Δ.

use std::collections::BTreeSet;

/// Rounds of unordered pairs `(i, j)` with `i < j` covering every pair of `0..n` once.
pub fn round_robin(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // Odd n gets a phantom player n; whoever meets it sits the round out.
    let players = if n % 2 == 0 { n } else { n + 1 };
    let rotating = players - 1;
    (0..rotating)
        .map(|round| {
            let mut pairs = vec![(round, players - 1)];
            for k in 1..players / 2 {
                pairs.push(((round + k) % rotating, (round + rotating - k) % rotating));
            }
            pairs
                .into_iter()
                .filter(|&(a, b)| a < n && b < n)
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        })
        .collect()
}

/// Rounds of pairs `(a, b)` covering `side_a × side_b`, for disjoint sides.
pub fn complete_bipartite(side_a: &[usize], side_b: &[usize]) -> Vec<Vec<(usize, usize)>> {
    if side_a.is_empty() || side_b.is_empty() {
        return Vec::new();
    }
    let rounds = side_a.len().max(side_b.len());
    (0..rounds)
        .map(|round| {
            if side_a.len() <= side_b.len() {
                side_a
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| (a, side_b[(i + round) % side_b.len()]))
                    .collect()
            } else {
                side_b
                    .iter()
                    .enumerate()
                    .map(|(j, &b)| (side_a[(j + round) % side_a.len()], b))
                    .collect()
            }
        })
        .collect()
}

/// Greedy colouring: each pair goes to the first round where neither agent is busy.
pub fn greedy(pairs: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut busy: Vec<BTreeSet<usize>> = Vec::new();
    for &(a, b) in pairs {
        let free = busy
            .iter()
            .position(|agents| !agents.contains(&a) && !agents.contains(&b));
        let round = free.unwrap_or_else(|| {
            rounds.push(Vec::new());
            busy.push(BTreeSet::new());
            rounds.len() - 1
        });
        rounds[round].push((a, b));
        busy[round].insert(a);
        busy[round].insert(b);
    }
    rounds
}

/// The most pairs any one agent takes part in: no packing can use fewer rounds.
pub fn max_degree(pairs: &[(usize, usize)]) -> usize {
    let mut degree = std::collections::BTreeMap::new();
    for &(a, b) in pairs {
        *degree.entry(a).or_insert(0usize) += 1;
        *degree.entry(b).or_insert(0usize) += 1;
    }
    degree.values().copied().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_rounds_disjoint(rounds: &[Vec<(usize, usize)>]) {
        for round in rounds {
            let mut seen = BTreeSet::new();
            for &(a, b) in round {
                assert!(seen.insert(a) && seen.insert(b), "agent twice in {round:?}");
            }
        }
    }

    #[test]
    fn round_robin_is_optimal_and_complete() {
        for n in 0..=13 {
            let rounds = round_robin(n);
            assert_rounds_disjoint(&rounds);
            let expected_rounds = match n {
                0 | 1 => 0,
                n if n % 2 == 0 => n - 1,
                n => n,
            };
            assert_eq!(rounds.len(), expected_rounds, "n = {n}");
            let pairs: BTreeSet<_> = rounds.iter().flatten().copied().collect();
            assert_eq!(pairs.len(), n * n.saturating_sub(1) / 2, "n = {n}");
            assert_eq!(rounds.iter().map(Vec::len).sum::<usize>(), pairs.len());
        }
    }

    #[test]
    fn bipartite_uses_the_larger_side_many_rounds() {
        let rounds = complete_bipartite(&[0, 1, 2], &[3, 4, 5, 6, 7]);
        assert_rounds_disjoint(&rounds);
        assert_eq!(rounds.len(), 5);
        let pairs: BTreeSet<_> = rounds.iter().flatten().copied().collect();
        assert_eq!(pairs.len(), 15);
        let rounds = complete_bipartite(&[0, 1, 2, 3], &[4, 5]);
        assert_rounds_disjoint(&rounds);
        assert_eq!(rounds.len(), 4);
        assert_eq!(rounds.iter().flatten().collect::<BTreeSet<_>>().len(), 8);
    }

    #[test]
    fn greedy_keeps_rounds_disjoint_within_two_delta() {
        let pairs = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (1, 3), (4, 0)];
        let rounds = greedy(&pairs);
        assert_rounds_disjoint(&rounds);
        assert_eq!(rounds.iter().map(Vec::len).sum::<usize>(), pairs.len());
        assert!(rounds.len() < 2 * max_degree(&pairs));
    }
}
