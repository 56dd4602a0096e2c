//! Durations and points in time as operators type them: `90d`, `2h`, `30m`,
//! or an RFC 3339 time.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeDelta, Utc};

/// A length of time back from now: `<n>d`, `<n>h`, `<n>m` or `<n>s`; a bare
/// number is days (so `FAILED_RETENTION_DAYS=180` reads as one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Age {
    seconds: u32,
}

impl Age {
    /// `days` days.
    pub const fn days(days: u32) -> Age {
        Age { seconds: days.saturating_mul(86_400) }
    }

    /// The length in seconds.
    pub fn seconds(self) -> u32 {
        self.seconds
    }

    /// Whether it is zero (which retention settings read as "never").
    pub fn is_zero(self) -> bool {
        self.seconds == 0
    }
}

/// Why a duration or time did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a duration like 90d, 12h, 30m, 45s (or an RFC 3339 time where one is accepted)")]
pub struct InvalidAge(String);

impl FromStr for Age {
    type Err = InvalidAge;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidAge(text.to_string());
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u32 = number.parse().map_err(|_| invalid())?;
        let unit: u32 = match unit {
            "d" | "" => 86_400,
            "h" => 3_600,
            "m" => 60,
            "s" => 1,
            _ => return Err(invalid()),
        };
        number.checked_mul(unit).map(|seconds| Age { seconds }).ok_or_else(invalid)
    }
}

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.seconds;
        match s {
            0 => write!(f, "0"),
            _ if s.is_multiple_of(86_400) => write!(f, "{}d", s / 86_400),
            _ if s.is_multiple_of(3_600) => write!(f, "{}h", s / 3_600),
            _ if s.is_multiple_of(60) => write!(f, "{}m", s / 60),
            _ => write!(f, "{s}s"),
        }
    }
}

/// A lower bound on a time: an [`Age`] back from now (`1d`, `2h`) or an
/// RFC 3339 time (`2026-11-30T08:00:00Z`). Relative values are resolved when
/// parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since(pub DateTime<Utc>);

impl FromStr for Since {
    type Err = InvalidAge;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Ok(age) = text.parse::<Age>() {
            return Ok(Since(Utc::now() - TimeDelta::seconds(age.seconds.into())));
        }
        DateTime::parse_from_rfc3339(text.trim())
            .map(|time| Since(time.with_timezone(&Utc)))
            .map_err(|_| InvalidAge(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_days_hours_minutes_and_seconds_and_a_bare_number_as_days() {
        assert_eq!("90d".parse(), Ok(Age::days(90)));
        assert_eq!("180".parse(), Ok(Age::days(180)));
        assert_eq!("2h".parse::<Age>().unwrap().seconds(), 7_200);
        assert_eq!("30m".parse::<Age>().unwrap().seconds(), 1_800);
        assert_eq!("45s".parse::<Age>().unwrap().seconds(), 45);
        for bad in ["", "d", "-1d", "1w", "1.5d", "99999999d"] {
            assert!(bad.parse::<Age>().is_err(), "{bad}");
        }
        assert_eq!(Age::days(90).to_string(), "90d");
        assert_eq!("90m".parse::<Age>().unwrap().to_string(), "90m");
    }

    #[test]
    fn since_is_a_duration_back_from_now_or_an_rfc3339_time() {
        let before = Utc::now();
        let Since(day_ago) = "1d".parse().unwrap();
        assert!(day_ago <= before - TimeDelta::days(1) + TimeDelta::seconds(1));
        assert!(day_ago >= before - TimeDelta::days(1) - TimeDelta::seconds(5));
        let Since(fixed) = "2026-11-30T08:00:00+01:00".parse().unwrap();
        assert_eq!(fixed.to_rfc3339(), "2026-11-30T07:00:00+00:00");
        assert!("yesterday".parse::<Since>().is_err());
    }
}
