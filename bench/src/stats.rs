//! Summary statistics of timing samples.

/// The `p`-th percentile (0–100) of `samples` by the nearest-rank method: the smallest sample
/// with at least `p`% of the samples at or below it. `NaN` when there are no samples.
pub(crate) fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median (50th percentile, nearest rank: the lower middle of an even count).
pub(crate) fn median(samples: &[f64]) -> f64 {
    percentile(samples, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&xs, 95.0), 19.0);
        assert_eq!(percentile(&xs, 100.0), 20.0);
        assert_eq!(median(&xs), 10.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
        assert!(median(&[]).is_nan());
    }
}
