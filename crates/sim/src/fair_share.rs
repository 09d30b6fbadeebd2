//! Max-min fair rates by progressive filling (Bertsekas and Gallager, Data Networks,
//! §6.5.2): every unfrozen flow's rate grows at the same pace until a link it crosses is
//! full or it reaches its own cap; then it is frozen and the others keep growing. No flow
//! can gain without taking from one that has no more than it.

/// The rate of each flow, in bit/s. `paths[i]` lists the links flow `i` crosses (at least
/// one); `cap_bps[i]`, when given, is its own ceiling (a paced sender, an endpoint's I/O).
pub fn max_min_rates(
    paths: &[&[usize]],
    capacity_bps: &[f64],
    cap_bps: Option<&[f64]>,
) -> Vec<f64> {
    let mut rate = vec![0.0; paths.len()];
    let mut frozen = vec![false; paths.len()];
    let mut spare = capacity_bps.to_vec();
    let mut crossing = vec![0usize; capacity_bps.len()];
    for path in paths {
        for &link in *path {
            crossing[link] += 1;
        }
    }
    let mut unfrozen = paths.len();
    while unfrozen > 0 {
        // The largest equal increment no link and no cap can refuse.
        let mut step = f64::INFINITY;
        for (link, &count) in crossing.iter().enumerate() {
            if count > 0 {
                step = step.min(spare[link] / count as f64);
            }
        }
        if let Some(caps) = cap_bps {
            for (flow, &cap) in caps.iter().enumerate() {
                if !frozen[flow] {
                    step = step.min(cap - rate[flow]);
                }
            }
        }
        let step = step.max(0.0);
        for (flow, path) in paths.iter().enumerate() {
            if !frozen[flow] {
                rate[flow] += step;
                for &link in *path {
                    spare[link] -= step;
                }
            }
        }
        // Freeze the flows on links now full (to a relative tolerance) or at their cap.
        let full: Vec<bool> = spare
            .iter()
            .zip(capacity_bps)
            .map(|(&left, &capacity)| left <= capacity * 1e-12)
            .collect();
        for (flow, path) in paths.iter().enumerate() {
            let capped = cap_bps.is_some_and(|caps| rate[flow] >= caps[flow] * (1.0 - 1e-12));
            if !frozen[flow] && (capped || path.iter().any(|&link| full[link])) {
                frozen[flow] = true;
                unfrozen -= 1;
                for &link in *path {
                    crossing[link] -= 1;
                }
            }
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_flows_on_one_link_share_it_equally() {
        let rates = max_min_rates(&[&[0], &[0]], &[10.0], None);
        assert_eq!(rates, vec![5.0, 5.0]);
    }

    #[test]
    fn a_capped_flow_leaves_the_rest_to_the_other() {
        let rates = max_min_rates(&[&[0], &[0]], &[10.0], Some(&[2.0, f64::INFINITY]));
        assert_eq!(rates, vec![2.0, 8.0]);
    }

    /// The classic line: flow 0 crosses links 0 and 1 (capacities 10 and 4), flow 1 only
    /// link 0, flow 2 only link 1. Link 1 is the bottleneck of flows 0 and 2 (2 each), and
    /// flow 1 takes what link 0 has left (8).
    #[test]
    fn the_bottleneck_freezes_first_and_the_others_take_the_rest() {
        let rates = max_min_rates(&[&[0, 1], &[0], &[1]], &[10.0, 4.0], None);
        assert_eq!(rates, vec![2.0, 8.0, 2.0]);
    }

    #[test]
    fn no_flows_no_rates() {
        assert!(max_min_rates(&[], &[10.0], None).is_empty());
    }
}
