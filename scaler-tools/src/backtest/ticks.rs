//! Time ticks of the plot: round local times (a whole number of minutes, hours, days or months
//! in the chosen time zone), as many as fit in the given count.
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, Zoned};

/// A tick interval, in civil time: 15-minute ticks stay on :00, :15, … across a DST change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Minutes(i8),
    Hours(i8),
    Days(i8),
    Months(i8),
}

const INTERVALS: [Interval; 18] = [
    Interval::Minutes(1),
    Interval::Minutes(2),
    Interval::Minutes(5),
    Interval::Minutes(10),
    Interval::Minutes(15),
    Interval::Minutes(30),
    Interval::Hours(1),
    Interval::Hours(2),
    Interval::Hours(3),
    Interval::Hours(6),
    Interval::Hours(12),
    Interval::Days(1),
    Interval::Days(2),
    Interval::Days(7),
    Interval::Months(1),
    Interval::Months(3),
    Interval::Months(6),
    Interval::Months(12),
];

impl Interval {
    /// Approximate length in seconds (a month as 28 days: never underestimates the count).
    fn seconds(self) -> i64 {
        match self {
            Self::Minutes(n) => i64::from(n) * 60,
            Self::Hours(n) => i64::from(n) * 3600,
            Self::Days(n) => i64::from(n) * 86_400,
            Self::Months(n) => i64::from(n) * 28 * 86_400,
        }
    }

    fn span(self) -> Span {
        match self {
            Self::Minutes(n) => Span::new().minutes(n),
            Self::Hours(n) => Span::new().hours(n),
            Self::Days(n) => Span::new().days(n),
            Self::Months(n) => Span::new().months(n),
        }
    }

    /// The round civil time at or before `t`.
    fn floor(self, t: DateTime) -> DateTime {
        let date = t.date();
        let at = |h: i8, m: i8| date.at(h, m, 0, 0);
        match self {
            Self::Minutes(n) => at(t.hour(), t.minute() - t.minute() % n),
            Self::Hours(n) => at(t.hour() - t.hour() % n, 0),
            // Day ticks from the month's first day: 1, 3, 5, … or 1, 8, 15, …
            Self::Days(n) => date
                .with()
                .day(date.day() - (date.day() - 1) % n)
                .build()
                .map_or(at(0, 0), |d| d.at(0, 0, 0, 0)),
            Self::Months(n) => date
                .with()
                .month(date.month() - (date.month() - 1) % n)
                .day(1)
                .build()
                .map_or(at(0, 0), |d| d.at(0, 0, 0, 0)),
        }
    }

    /// The label format of a tick at this interval.
    pub fn format(self) -> &'static str {
        match self {
            Self::Minutes(_) | Self::Hours(_) => "%H:%M",
            Self::Days(_) => "%b %d",
            Self::Months(_) => "%Y-%m",
        }
    }
}

/// The ticks in `[from, to]` (Unix seconds) at the finest interval giving at most `most`, and
/// that interval.
pub fn ticks(from: i64, to: i64, zone: &TimeZone, most: usize) -> (Interval, Vec<i64>) {
    let length = (to - from).max(1);
    let interval = INTERVALS
        .into_iter()
        .find(|i| length / i.seconds() < most as i64)
        .unwrap_or(Interval::Months(12));
    let Ok(start) = Timestamp::from_second(from) else {
        return (interval, Vec::new());
    };
    let mut civil = interval.floor(start.to_zoned(zone.clone()).datetime());
    let mut out: Vec<i64> = Vec::new();
    // Bounded: the interval was chosen for at most `most` ticks (plus the DST repeats).
    for _ in 0..most * 2 + 4 {
        let Ok(zoned) = civil.to_zoned(zone.clone()) else {
            break;
        };
        let t = zoned.timestamp().as_second();
        if t > to {
            break;
        }
        // A civil time skipped by DST maps to the next hour: a repeat is one tick.
        if t >= from && out.last() != Some(&t) {
            out.push(t);
        }
        match civil.checked_add(interval.span()) {
            Ok(next) => civil = next,
            Err(_) => break,
        }
    }
    (interval, out)
}

/// A tick's label in `zone`: the date at local midnight or the first tick, else the time.
pub fn label(t: i64, interval: Interval, zone: &TimeZone, first: bool) -> String {
    let Ok(zoned): Result<Zoned, _> = Timestamp::from_second(t).map(|t| t.to_zoned(zone.clone()))
    else {
        return String::new();
    };
    let midnight = zoned.hour() == 0 && zoned.minute() == 0;
    match interval {
        Interval::Minutes(_) | Interval::Hours(_) if first || midnight => {
            zoned.strftime("%b %d %H:%M").to_string()
        }
        _ => zoned.strftime(interval.format()).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 1_793_491_200; // 2026-11-01T00:00:00Z

    #[test]
    fn ticks_fall_on_round_hours_in_the_zone() {
        let utc = TimeZone::UTC;
        // 17:33 to 23:06: hourly ticks from 18:00.
        let (interval, t) = ticks(DAY + 17 * 3600 + 33 * 60, DAY + 23 * 3600 + 6 * 60, &utc, 8);
        assert_eq!(interval, Interval::Hours(1));
        assert_eq!(t, (18..=23).map(|h| DAY + h * 3600).collect::<Vec<_>>());
        // A day: every 3 hours (8 ticks of 3 h, 00:00 to 21:00, plus 24:00).
        let (interval, t) = ticks(DAY, DAY + 86_400, &utc, 10);
        assert_eq!(interval, Interval::Hours(3));
        assert_eq!(t.len(), 9);
        assert!(t.iter().all(|t| t % (3 * 3600) == 0));
        // Berlin is UTC+1 in November: its round hours are at :00 UTC too, but 3-hour ticks
        // fall at 00:00, 03:00 local = 23:00, 02:00 UTC.
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let (_, t) = ticks(DAY, DAY + 86_400, &berlin, 10);
        assert_eq!(t[0], DAY + 2 * 3600);
        assert_eq!(label(t[0], Interval::Hours(3), &berlin, false), "03:00");
        assert_eq!(
            label(DAY + 23 * 3600, Interval::Hours(3), &berlin, false),
            "Nov 02 00:00"
        );
        // India (UTC+5:30): round local hours are at :30 UTC.
        let kolkata = TimeZone::get("Asia/Kolkata").unwrap();
        let (_, t) = ticks(DAY, DAY + 6 * 3600, &kolkata, 8);
        assert!(t.iter().all(|t| t % 3600 == 1800), "{t:?}");
    }

    #[test]
    fn dst_and_long_ranges_stay_round_and_bounded() {
        // Europe/Berlin leaves DST on 2026-10-25 at 03:00 local: hourly ticks repeat 02:00
        // once (both are round hours) and never land off the hour.
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let change = 1_792_890_000 - 3600 * 3; // 2026-10-24T22:20:00Z, before the change
        let (_, t) = ticks(change, change + 6 * 3600, &berlin, 8);
        assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
        assert!(t.iter().all(|t| t % 3600 == 0), "{t:?}");
        // Years: monthly or coarser ticks, never more than asked.
        for days in [10, 40, 200, 1000] {
            let (_, t) = ticks(DAY, DAY + days * 86_400, &TimeZone::UTC, 8);
            assert!(!t.is_empty() && t.len() <= 8, "{days}: {}", t.len());
        }
        let (interval, _) = ticks(DAY, DAY + 90, &TimeZone::UTC, 8);
        assert_eq!(interval, Interval::Minutes(1));
    }
}
