//! Random variates by inversion of their distribution function, so that a seed gives the
//! same sequence on every platform.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator every simulation draws from: ChaCha8, portable and reproducible.
pub type SimRng = ChaCha8Rng;

/// A generator for one run: `seed` and the run's index give independent streams.
pub fn run_rng(seed: u64, run: u64) -> SimRng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(run);
    rng
}

/// A uniform draw in (0, 1]: never 0, so logarithms and powers stay finite.
fn open_unit(rng: &mut SimRng) -> f64 {
    1.0 - rng.gen::<f64>()
}

/// Exponential with the given mean.
pub fn exponential(rng: &mut SimRng, mean: f64) -> f64 {
    -mean * open_unit(rng).ln()
}

/// Pareto (type I) with shape α and scale x_m, the smallest value: P(X > x) = (x_m/x)^α.
pub fn pareto(rng: &mut SimRng, shape: f64, scale: f64) -> f64 {
    scale / open_unit(rng).powf(1.0 / shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_mean(draw: impl Fn(&mut SimRng) -> f64) -> f64 {
        let mut rng = run_rng(7, 0);
        let n = 200_000;
        (0..n).map(|_| draw(&mut rng)).sum::<f64>() / n as f64
    }

    #[test]
    fn sample_means_approach_the_distributions_means() {
        let exp = sample_mean(|rng| exponential(rng, 20.0));
        assert!((exp - 20.0).abs() < 0.2, "{exp}");
        let par = sample_mean(|rng| pareto(rng, 4.0, 1.5));
        // Pareto(α, x_m) has mean α·x_m/(α − 1): 4 · 1.5 / 3 = 2.
        assert!((par - 2.0).abs() < 0.01, "{par}");
    }

    #[test]
    fn pareto_never_draws_below_its_scale() {
        let mut rng = run_rng(1, 0);
        assert!((0..10_000).all(|_| pareto(&mut rng, 2.1, 3.0) >= 3.0));
    }

    #[test]
    fn a_seed_and_run_give_one_sequence_and_runs_differ() {
        let draw = |run| {
            let mut rng = run_rng(42, run);
            (0..4)
                .map(|_| exponential(&mut rng, 1.0))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(0), draw(0));
        assert_ne!(draw(0), draw(1));
    }
}
