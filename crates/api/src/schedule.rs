//! Cron schedules for backups, with the semantics of the Kubernetes CronJob controller.
//!
//! The CronJob controller accepts five fields (`minute hour day-of-month month day-of-week`),
//! the operators `*`, `?`, `,`, `-` and `/`, month and weekday names, and the descriptors
//! `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily` and `@hourly`. This module accepts
//! exactly that, so a schedule that validates here is one the CronJob controller will run, and
//! [`next_run`] gives the same time the controller will start the next job (schedules are
//! evaluated in UTC; the rendered CronJob sets `timeZone: Etc/UTC`).

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Why a schedule is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The expression does not have the cron shape.
    #[error("{0}")]
    Syntax(String),
    /// The expression parses but never fires (such as `0 0 30 2 *`, February 30th).
    #[error("schedule never runs: no date matches it")]
    NeverRuns,
}

const DESCRIPTORS: &[&str] = &[
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
    },
    Field {
        name: "day-of-week",
        min: 0,
        max: 6,
        names: WEEKDAYS,
    },
];

/// A parsed, validated backup schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
}

impl Schedule {
    /// Parses and checks `expr`; see the module docs for what is accepted.
    ///
    /// ```
    /// use database_operator_api::schedule::Schedule;
    /// assert!(Schedule::parse("0 2 * * *").is_ok());
    /// assert!(Schedule::parse("@daily").is_ok());
    /// assert!(Schedule::parse("61 2 * * *").is_err());
    /// ```
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let expr = expr.trim();
        if expr.starts_with('@') {
            if !DESCRIPTORS.contains(&expr) {
                return Err(ScheduleError::Syntax(format!(
                    "unknown descriptor {expr:?}: use one of {}",
                    DESCRIPTORS.join(", ")
                )));
            }
        } else {
            let fields: Vec<&str> = expr.split_whitespace().collect();
            if fields.len() != 5 {
                return Err(ScheduleError::Syntax(format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                    fields.len()
                )));
            }
            for (field, spec) in fields.iter().zip(FIELDS.iter()) {
                check_field(field, spec)?;
            }
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| ScheduleError::Syntax(e.to_string()))?;
        let schedule = Self { cron };
        // Every cron expression repeats at least every four years (February 29th), so one that
        // has no occurrence after the epoch never runs at all.
        schedule.next_after(Timestamp::UNIX_EPOCH)?;
        Ok(schedule)
    }

    /// The first run strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Result<Timestamp, ScheduleError> {
        let zoned = after.to_zoned(TimeZone::UTC);
        self.cron
            .find_next_occurrence(&zoned, false)
            .map(|z| z.timestamp())
            .map_err(|_| ScheduleError::NeverRuns)
    }
}

/// The first run of `expr` strictly after `after` (UTC).
///
/// ```
/// use database_operator_api::schedule::next_run;
/// let after: jiff::Timestamp = "2026-01-01T03:00:00Z".parse().unwrap();
/// assert_eq!(next_run("0 2 * * *", after).unwrap().to_string(), "2026-01-02T02:00:00Z");
/// ```
pub fn next_run(expr: &str, after: Timestamp) -> Result<Timestamp, ScheduleError> {
    Schedule::parse(expr)?.next_after(after)
}

fn check_field(field: &str, spec: &Field) -> Result<(), ScheduleError> {
    let err = |msg: String| ScheduleError::Syntax(format!("{} field {field:?}: {msg}", spec.name));
    for item in field.split(',') {
        if item.is_empty() {
            return Err(err("empty list item".into()));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        if let Some(step) = step {
            let n: u32 = step
                .parse()
                .map_err(|_| err(format!("step {step:?} is not a number")))?;
            if n == 0 {
                return Err(err("step must be at least 1".into()));
            }
        }
        if range == "*" || range == "?" {
            continue;
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (
                value(a, spec).map_err(err)?,
                Some(value(b, spec).map_err(err)?),
            ),
            None => (value(range, spec).map_err(err)?, None),
        };
        if let Some(hi) = hi
            && hi < lo
        {
            return Err(err(format!("range {range:?} ends before it starts")));
        }
    }
    Ok(())
}

fn value(atom: &str, spec: &Field) -> Result<u32, String> {
    if atom.is_empty() {
        return Err("missing value".into());
    }
    if atom.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = atom.parse().map_err(|_| format!("{atom:?} is too large"))?;
        if n < spec.min || n > spec.max {
            return Err(format!("{n} is out of range {}-{}", spec.min, spec.max));
        }
        return Ok(n);
    }
    let upper = atom.to_ascii_uppercase();
    match spec.names.iter().position(|n| *n == upper) {
        Some(i) => Ok(i as u32 + spec.min),
        None if spec.names.is_empty() => Err(format!("{atom:?} is not a number")),
        None => Err(format!(
            "{atom:?} is not a number or one of {}",
            spec.names.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn accepts_what_the_cronjob_controller_accepts() {
        for ok in [
            "0 2 * * *",
            "@daily",
            "@hourly",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
            "*/15 * * * *",
            "0 0 1,15 * *",
            "30 4 * * MON-FRI",
            "0 3 * JAN,JUL ?",
            "5-10/2 1 * * 0",
            "0 0 29 2 *",
        ] {
            assert!(
                Schedule::parse(ok).is_ok(),
                "{ok} should parse: {:?}",
                Schedule::parse(ok)
            );
        }
    }

    #[test]
    fn rejects_with_reason() {
        for (bad, why) in [
            ("0 2 * * * *", "expected 5 fields"),
            ("@dailyfoo", "unknown descriptor"),
            ("61 2 * * *", "minute field \"61\": 61 is out of range 0-59"),
            ("0 24 * * *", "hour field"),
            ("0 0 0 * *", "day-of-month field"),
            ("0 0 * 13 *", "month field"),
            ("0 0 * * 7", "day-of-week field"),
            ("0 0 L * *", "is not a number"),
            ("0 0 * * 1#2", "is not a number"),
            ("*/0 * * * *", "step must be at least 1"),
            ("0 0 30 2 *", "never runs"),
            ("10-5 * * * *", "ends before it starts"),
            ("", "expected 5 fields"),
            ("CRON_TZ=UTC 0 2 * * *", "expected 5 fields"),
        ] {
            let err = Schedule::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn next_run_is_strictly_after() {
        assert_eq!(
            next_run("0 2 * * *", ts("2026-03-01T02:00:00Z")).unwrap(),
            ts("2026-03-02T02:00:00Z")
        );
        assert_eq!(
            next_run("0 2 * * *", ts("2026-03-01T01:59:59Z")).unwrap(),
            ts("2026-03-01T02:00:00Z")
        );
        assert_eq!(
            next_run("@hourly", ts("2026-03-01T01:30:00Z")).unwrap(),
            ts("2026-03-01T02:00:00Z")
        );
        assert_eq!(
            next_run("0 0 29 2 *", ts("2026-03-01T00:00:00Z")).unwrap(),
            ts("2028-02-29T00:00:00Z")
        );
        // Day-of-month and day-of-week both restricted: either matches (vixie cron semantics).
        assert_eq!(
            next_run("0 0 13 * FRI", ts("2026-11-01T00:00:00Z")).unwrap(),
            ts("2026-11-06T00:00:00Z")
        );
    }
}
