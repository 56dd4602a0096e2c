//! When a failed row is tried again, and when it is given up.

use std::time::Duration;

/// The delays between attempts: after the first failure the first delay,
/// and so on; a failure with no delay left gives the row up (`dead`).
///
/// Each delay may be spread by `jitter` (a fraction, 0.2 for ±20 %), so that
/// rows that failed together (a receiver that was down) do not come back at
/// the same instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    delays: Vec<Duration>,
    jitter: f64,
}

/// A schedule that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the jitter must be a fraction between 0 and 1")]
pub struct InvalidSchedule;

impl Schedule {
    /// Tries again after each of `delays` in turn, spread by `jitter`.
    pub fn new(delays: Vec<Duration>, jitter: f64) -> Result<Schedule, InvalidSchedule> {
        if !(0.0..1.0).contains(&jitter) {
            return Err(InvalidSchedule);
        }
        Ok(Schedule { delays, jitter })
    }

    /// `max_attempts` attempts in all, the first delay `base`, each next one
    /// twice the one before up to `cap`; no jitter.
    pub fn doubling(max_attempts: u32, base: Duration, cap: Duration) -> Schedule {
        let delays = (0..max_attempts.saturating_sub(1))
            .map(|n| base.saturating_mul(2u32.checked_pow(n).unwrap_or(u32::MAX)).min(cap))
            .collect();
        Schedule { delays, jitter: 0.0 }
    }

    /// Attempts in all, the first one included.
    pub fn attempts(&self) -> usize {
        self.delays.len() + 1
    }

    /// The delays, before jitter.
    pub fn delays(&self) -> &[Duration] {
        &self.delays
    }

    /// The longest wait a receiver may ask for (`Retry-After`): the longest
    /// delay of the schedule, and at least an hour, so that a receiver
    /// cannot park a row for ever.
    pub fn longest_wait(&self) -> Duration {
        self.delays.iter().copied().max().unwrap_or_default().max(Duration::from_secs(3600))
    }

    /// The delay before the next attempt once `attempt` (1 for the first)
    /// has failed, or `None` when none is left.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        let delay = *self.delays.get(usize::try_from(attempt).ok()?.checked_sub(1)?)?;
        if self.jitter == 0.0 {
            return Some(delay);
        }
        let spread = 1.0 + self.jitter * (2.0 * rand::random::<f64>() - 1.0);
        Some(delay.mul_f64(spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doubling_schedule_doubles_up_to_the_cap_and_stops_at_the_last_attempt() {
        let schedule = Schedule::doubling(6, Duration::from_secs(30), Duration::from_secs(200));
        let delays: Vec<_> =
            (1..=6).map(|attempt| schedule.delay_after(attempt).map(|d| d.as_secs())).collect();
        assert_eq!(delays, [Some(30), Some(60), Some(120), Some(200), Some(200), None]);
        assert_eq!(schedule.attempts(), 6);

        let huge = Schedule::doubling(1000, Duration::from_secs(1), Duration::from_secs(3600));
        assert_eq!(huge.delay_after(999), Some(Duration::from_secs(3600)));
        assert_eq!(huge.delay_after(1000), None);
        assert_eq!(
            Schedule::doubling(1, Duration::from_secs(1), Duration::from_secs(1)).delay_after(1),
            None
        );
    }

    #[test]
    fn jitter_spreads_each_delay_within_its_fraction() {
        let schedule = Schedule::new(vec![Duration::from_secs(100), Duration::ZERO], 0.2).unwrap();
        let delays: Vec<Duration> = (0..1000).map(|_| schedule.delay_after(1).unwrap()).collect();
        assert!(delays.iter().all(|d| (80.0..=120.0).contains(&d.as_secs_f64())), "{delays:?}");
        assert!(
            delays.iter().any(|d| d.as_secs_f64() < 95.0) && delays.iter().any(|d| d.as_secs_f64() > 105.0)
        );
        assert_eq!(schedule.delay_after(2), Some(Duration::ZERO), "immediately stays immediately");
        assert_eq!(schedule.delay_after(3), None);
        assert_eq!(schedule.delay_after(0), None);
        assert_eq!(Schedule::new(vec![], 1.0), Err(InvalidSchedule));
    }
}
