//! Operator schedules (trigger metadata `schedules`): cron windows that, for a duration after
//! each start, raise the floor and/or turn scale-in off, in a time zone.
//!
//! `0 8 * * 1-5 for 10h floor 4 in Europe/Berlin; 0 22 * * * for 8h scaleIn disabled`
//!
//! Pure: the time is an argument (the evaluation's `now`), never the wall clock, so a backtest
//! replays it. The cron syntax is croner's five-field one (OCPS: `L`, `#`, `W`, names, `@daily`);
//! time zones come from the tz database compiled into the binary (the image has no zoneinfo).
use std::fmt;
use std::hash::{Hash, Hasher};

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use names::echo;

/// Highest instance count anywhere in a trigger: a window's `floor` here, and the metadata's
/// `maxReplicas` and other counts, which take it from here (a window's floor is the lower
/// module's need). Far above any sane cluster, low enough that `desired × target` stays exact
/// in an `f64` and an `i64`.
pub const MAX_REPLICAS_LIMIT: u32 = 1000;
/// Most windows in one `schedules` value.
pub const MAX_WINDOWS: usize = 16;
/// Longest `schedules` value read (16 windows of a long time zone name fit easily).
pub const MAX_LEN: usize = 4096;
/// Years after which the Gregorian calendar repeats, weekdays included.
const CALENDAR_CYCLE_YEARS: i16 = 400;
/// Shortest window: one minute, cron's resolution.
pub const MIN_DURATION: SignedDuration = SignedDuration::from_secs(60);
/// Longest window: 31 days (a monthly window); only the latest start is looked up, so a window
/// is open exactly when its latest start is less than its duration ago.
pub const MAX_DURATION: SignedDuration = SignedDuration::from_hours(31 * 24);
/// The syntax, for error messages.
pub const SYNTAX: &str = "windows separated by ';', each `<cron: 5 fields> for <duration: 30m, 10h, 2h30m> \
     [floor <instances>] [scaleIn disabled] [in <IANA time zone, default UTC>]`";

/// One window: when it opens (cron in a zone), for how long, and what it does.
#[derive(Debug, Clone)]
pub struct Window {
    /// The window as written, whitespace collapsed (its identity for equality and hashing).
    text: String,
    cron: Cron,
    duration: SignedDuration,
    zone: TimeZone,
    /// Lowest total instance count while open.
    pub floor: Option<u32>,
    /// No scale-in while open.
    pub scale_in_disabled: bool,
}

/// All windows of one trigger; empty when `schedules` is not set.
#[derive(Debug, Clone, Default)]
pub struct Schedules {
    windows: Vec<Window>,
}

impl PartialEq for Schedules {
    fn eq(&self, other: &Self) -> bool {
        self.windows.len() == other.windows.len()
            && self
                .windows
                .iter()
                .zip(&other.windows)
                .all(|(a, b)| a.text == b.text)
    }
}

impl Eq for Schedules {}

impl Hash for Schedules {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for w in &self.windows {
            w.text.hash(state);
        }
    }
}

impl fmt::Display for Schedules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let texts: Vec<&str> = self.windows.iter().map(|w| w.text.as_str()).collect();
        f.write_str(&texts.join("; "))
    }
}

/// Why a `schedules` value was refused; `window` is 1-based, `text` a bounded [`echo`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("window {window} {text}: {problem}")]
pub struct ScheduleError {
    pub window: usize,
    pub text: String,
    pub problem: String,
}

/// A window that is open at the time asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenWindow {
    pub window: String,
    /// When it opened and when it closes, RFC 3339 in the window's zone.
    pub opened: String,
    pub closes: String,
}

/// What the open windows ask for at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Active {
    /// The highest floor of the open windows; 0 when none sets one.
    pub floor: u32,
    /// Some open window turns scale-in off.
    pub scale_in_disabled: bool,
    pub windows: Vec<OpenWindow>,
}

impl Schedules {
    /// Parses `schedules`; every refusal names the window and the fix.
    pub fn parse(value: &str) -> Result<Self, ScheduleError> {
        let whole = |problem: String| ScheduleError {
            window: 0,
            text: echo(value),
            problem,
        };
        if value.len() > MAX_LEN {
            return Err(whole(format!("longer than {MAX_LEN} bytes")));
        }
        let entries: Vec<&str> = value
            .split(';')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.len() > MAX_WINDOWS {
            return Err(whole(format!(
                "{} windows, at most {MAX_WINDOWS}",
                entries.len()
            )));
        }
        let windows = entries
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                Window::parse(entry).map_err(|problem| ScheduleError {
                    window: i + 1,
                    text: echo(entry),
                    problem,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { windows })
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// The windows open at `now` and what they ask for together.
    pub fn active(&self, now: Timestamp) -> Active {
        let mut active = Active::default();
        for w in &self.windows {
            if let Some(open) = w.open_at(now) {
                active.floor = active.floor.max(w.floor.unwrap_or(0));
                active.scale_in_disabled |= w.scale_in_disabled;
                active.windows.push(open);
            }
        }
        active
    }
}

impl Window {
    /// `<cron> for <duration> [floor <n>] [scaleIn disabled] [in <zone>]`, in named steps.
    fn parse(entry: &str) -> Result<Self, String> {
        let tokens: Vec<&str> = entry.split_whitespace().collect();
        let at = tokens
            .iter()
            .position(|t| *t == "for")
            .ok_or("no `for <duration>` after the cron expression")?;
        let cron = parse_cron(&tokens[..at].join(" "))?;
        let duration = parse_duration(tokens.get(at + 1).ok_or("`for` needs a duration")?)?;
        let Options {
            floor,
            scale_in_disabled,
            zone,
        } = Options::parse(&tokens[at + 2..])?;
        let window = Self {
            text: tokens.join(" "),
            cron,
            duration,
            zone: zone.unwrap_or(TimeZone::UTC),
            floor,
            scale_in_disabled,
        };
        // A pattern that never matches (`0 0 31 2 *`) is a mistake, not a window.
        if !window.matches_some_day() {
            return Err("the cron expression never matches".to_owned());
        }
        Ok(window)
    }

    /// Whether the pattern matches any minute at all, decided exactly within a bounded search:
    /// the Gregorian calendar repeats every 400 years (146,097 days, a whole number of weeks),
    /// so a pattern that matches no day of one cycle never matches. At most 146,097 day checks
    /// (bit tests), only in the months the pattern allows; croner's own search walks to the year
    /// 5000 first (about 80 ms per never-matching window, issue 23).
    fn matches_some_day(&self) -> bool {
        let p = &self.cron.pattern;
        let hours = (0..24).any(|h| p.hour_match(h).unwrap_or(false));
        let minutes = (0..60).any(|m| p.minute_match(m).unwrap_or(false));
        hours
            && minutes
            && (2000..2000 + CALENDAR_CYCLE_YEARS).any(|year| {
                (1..=12).any(|month| {
                    let Ok(first) = jiff::civil::Date::new(year, month, 1) else {
                        return false;
                    };
                    if !self.month_matches(first) {
                        return false;
                    }
                    // Weekdays by offset from the first: one calendar lookup per month.
                    let weekday = weekday_of(first);
                    (0..first.days_in_month()).any(|offset| {
                        p.day_match(
                            year.into(),
                            month.unsigned_abs().into(),
                            (offset + 1).unsigned_abs().into(),
                            weekday.shift(offset.into()),
                        )
                        .unwrap_or(false)
                    })
                })
            })
    }

    fn month_matches(&self, day: Date) -> bool {
        self.cron
            .pattern
            .month_match(day.month().unsigned_abs().into())
            .unwrap_or(false)
    }

    /// The pattern's day fields (day of month, weekday, `L`, `W`, `#`) and month accept `day`.
    fn day_matches(&self, day: Date) -> bool {
        let weekday = weekday_of(day);
        self.month_matches(day)
            && self
                .cron
                .pattern
                .day_match(
                    day.year().into(),
                    day.month().unsigned_abs().into(),
                    day.day().unsigned_abs().into(),
                    weekday,
                )
                .unwrap_or(false)
    }

    /// The window's span around `now` when it is open: its latest start at or before `now` is
    /// less than its duration ago. Bounded: only the days from `now − duration` to `now` are
    /// looked at (at most 32, [`MAX_DURATION`]), latest first; within a day the matching hours
    /// and minutes, latest first, in wall-clock time (a time in a DST gap is the instant after
    /// it, an ambiguous one the earlier instant).
    fn open_at(&self, now: Timestamp) -> Option<OpenWindow> {
        let p = &self.cron.pattern;
        let here = now.to_zoned(self.zone.clone());
        let earliest = now.checked_sub(self.duration).ok()?;
        let first_day = earliest.to_zoned(self.zone.clone()).date();
        // Wall-clock times this far past `now` cannot be at or before it, whatever DST does.
        let latest_civil = here
            .datetime()
            .checked_add(SignedDuration::from_hours(3))
            .ok()?;
        let hours: Vec<i8> = (0..24i8)
            .rev()
            .filter(|h| p.hour_match(h.unsigned_abs().into()).unwrap_or(false))
            .collect();
        let minutes: Vec<i8> = (0..60i8)
            .rev()
            .filter(|m| p.minute_match(m.unsigned_abs().into()).unwrap_or(false))
            .collect();
        let mut day = here.date();
        while day >= first_day {
            if self.day_matches(day) {
                for (&hour, &minute) in hours
                    .iter()
                    .flat_map(|h| minutes.iter().map(move |m| (h, m)))
                {
                    let civil = day.at(hour, minute, 0, 0);
                    if civil > latest_civil {
                        continue;
                    }
                    let Ok(start) = civil.to_zoned(self.zone.clone()) else {
                        continue;
                    };
                    if start.timestamp() > now {
                        continue;
                    }
                    if start.timestamp() <= earliest {
                        return None;
                    }
                    let end = start.timestamp().checked_add(self.duration).ok()?;
                    return Some(OpenWindow {
                        window: self.text.clone(),
                        opened: start.to_string(),
                        closes: end.to_zoned(self.zone.clone()).to_string(),
                    });
                }
            }
            day = day.yesterday().ok()?;
        }
        None
    }
}

fn parse_cron(text: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        // croner's messages may quote the pattern: bounded and escaped like any echo.
        .map_err(|e| format!("cron expression: {}", echo(&e.to_string())))
}

fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    text.parse::<SignedDuration>()
        .ok()
        .filter(|d| (MIN_DURATION..=MAX_DURATION).contains(d))
        .ok_or_else(|| {
            format!(
                "duration {} is not one from 1m to 744h (e.g. 30m, 10h, 2h30m)",
                echo(text)
            )
        })
}

/// The `word value` pairs after the duration, each at most once; at least one must act.
#[derive(Default)]
struct Options {
    floor: Option<u32>,
    scale_in_disabled: bool,
    zone: Option<TimeZone>,
}

impl Options {
    fn parse(words: &[&str]) -> Result<Self, String> {
        let mut options = Self::default();
        let mut rest = words.iter();
        while let Some(word) = rest.next() {
            let arg = rest.next().ok_or_else(|| format!("{word} needs a value"))?;
            match *word {
                "floor" if options.floor.is_none() => options.floor = Some(parse_floor(arg)?),
                "scaleIn" if !options.scale_in_disabled => {
                    if *arg != "disabled" {
                        return Err(format!("scaleIn {}: only `scaleIn disabled`", echo(arg)));
                    }
                    options.scale_in_disabled = true;
                }
                "in" if options.zone.is_none() => options.zone = Some(parse_zone(arg)?),
                "floor" | "scaleIn" | "in" => return Err(format!("{word} is given twice")),
                _ => return Err(format!("{} is not floor, scaleIn or in", echo(word))),
            }
        }
        if options.floor.is_none() && !options.scale_in_disabled {
            return Err(
                "the window does nothing: add `floor <n>` and/or `scaleIn disabled`".into(),
            );
        }
        Ok(options)
    }
}

fn parse_floor(arg: &str) -> Result<u32, String> {
    arg.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_REPLICAS_LIMIT).contains(n))
        .ok_or_else(|| {
            format!(
                "floor {} is not a whole number from 1 to {MAX_REPLICAS_LIMIT}",
                echo(arg)
            )
        })
}

fn parse_zone(arg: &str) -> Result<TimeZone, String> {
    TimeZone::get(arg).map_err(|_| {
        format!(
            "time zone {} is not in the tz database (e.g. UTC, Europe/Berlin)",
            echo(arg)
        )
    })
}

fn weekday_of(day: Date) -> croner::Weekday {
    croner::Weekday::from_days_from_sunday(
        day.weekday().to_sunday_zero_offset().unsigned_abs().into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    #[test]
    fn a_weekday_window_in_berlin_opens_and_closes_in_local_time() {
        let s = Schedules::parse("0 8 * * 1-5 for 10h floor 4 in Europe/Berlin").unwrap();
        // Monday 2026-11-30 08:00 CET is 07:00 UTC.
        let open = s.active(at("2026-11-30T07:00:00Z"));
        assert_eq!((open.floor, open.scale_in_disabled), (4, false));
        assert_eq!(
            open.windows[0].opened,
            "2026-11-30T08:00:00+01:00[Europe/Berlin]"
        );
        assert_eq!(
            open.windows[0].closes,
            "2026-11-30T18:00:00+01:00[Europe/Berlin]"
        );
        assert_eq!(s.active(at("2026-11-30T06:59:59Z")), Active::default());
        assert_eq!(s.active(at("2026-11-30T16:59:59Z")).floor, 4);
        assert_eq!(s.active(at("2026-11-30T17:00:00Z")), Active::default());
        // Saturday: no window.
        assert_eq!(s.active(at("2026-12-05T09:00:00Z")), Active::default());
        // Summer time: 08:00 CEST is 06:00 UTC.
        assert_eq!(s.active(at("2026-07-01T06:00:00Z")).floor, 4);
        assert_eq!(s.active(at("2026-07-01T05:59:00Z")).floor, 0);
    }

    #[test]
    fn a_window_spanning_midnight_and_several_windows_combine() {
        let s = Schedules::parse(
            "0 22 * * * for 8h scaleIn disabled; 0 5 * * * for 3h floor 3 ;0 7 * * * for 1h floor 5",
        )
        .unwrap();
        let night = s.active(at("2026-12-01T03:00:00Z"));
        assert_eq!((night.floor, night.scale_in_disabled), (0, true));
        let both = s.active(at("2026-12-01T05:30:00Z"));
        assert_eq!((both.floor, both.scale_in_disabled), (3, true));
        // Overlapping floors: the highest wins.
        let peak = s.active(at("2026-12-01T07:10:00Z"));
        assert_eq!(
            (peak.floor, peak.scale_in_disabled, peak.windows.len()),
            (5, false, 2)
        );
        assert_eq!(
            s.to_string(),
            "0 22 * * * for 8h scaleIn disabled; 0 5 * * * for 3h floor 3; 0 7 * * * for 1h floor 5"
        );
    }

    #[test]
    fn a_window_longer_than_its_period_stays_open() {
        let s = Schedules::parse("*/5 * * * * for 1h floor 2").unwrap();
        assert_eq!(s.active(at("2026-12-01T00:03:00Z")).floor, 2);
        // Once a month, open for 3 days: from the 1st 00:00 to the 4th 00:00.
        let s = Schedules::parse("0 0 1 * * for 71h60m floor 3").unwrap();
        assert_eq!(s.active(at("2026-12-03T23:59:59Z")).floor, 3);
        assert_eq!(s.active(at("2026-12-04T00:00:00Z")).floor, 0);
    }

    #[test]
    fn refusals_name_the_window_and_the_problem() {
        let cases = [
            ("0 8 * * 1-5 floor 4", "no `for"),
            ("0 8 * * for 10h floor 4", "cron expression"),
            ("0 0 8 * * 1-5 for 10h floor 4", "cron expression"),
            ("0 0 31 2 * for 1h floor 4", "never matches"),
            ("0 8 * * * for 10 floor 4", "duration"),
            ("0 8 * * * for 30s floor 4", "duration"),
            ("0 8 * * * for 745h floor 4", "duration"),
            ("0 8 * * * for 1h floor 0", "floor"),
            ("0 8 * * * for 1h floor 1001", "floor"),
            ("0 8 * * * for 1h floor four", "floor"),
            ("0 8 * * * for 1h", "does nothing"),
            ("0 8 * * * for 1h floor 3 floor 4", "twice"),
            ("0 8 * * * for 1h floor 3 in Mars/Olympus", "time zone"),
            ("0 8 * * * for 1h scaleIn off", "scaleIn"),
            ("0 8 * * * for 1h floor", "needs a value"),
            ("0 8 * * * for 1h floor 3 until 9", "is not floor"),
        ];
        for (text, problem) in cases {
            let err = Schedules::parse(&format!("0 1 * * * for 1h floor 2; {text}")).unwrap_err();
            assert_eq!(err.window, 2, "{text}: {err}");
            assert!(err.to_string().contains(problem), "{text}: {err}");
        }
        let many = vec!["0 1 * * * for 1h floor 2"; MAX_WINDOWS + 1].join(";");
        assert!(
            Schedules::parse(&many)
                .unwrap_err()
                .problem
                .contains("at most")
        );
        assert!(Schedules::parse(&"x".repeat(MAX_LEN + 1)).is_err());
    }

    #[test]
    fn never_matching_and_rare_patterns_cost_a_bounded_search() {
        // Never: refused, fast (croner's own search walked to the year 5000: ~80 ms each).
        let started = std::time::Instant::now();
        for text in [
            "0 0 31 2 * for 1h floor 2",
            "0 0 30 2 * for 1h floor 2",
            "0 0 31 4,6,9,11 * for 1h floor 2",
            "0 0 30,31 2 * for 1h floor 2",
        ]
        .repeat(2)
        {
            let err = Schedules::parse(text).unwrap_err();
            assert!(err.problem.contains("never matches"), "{text}: {err}");
        }
        // Rare but real: Feb 29, once every four years (eight around 2100).
        let leap = Schedules::parse("0 0 29 2 * for 1h floor 2").unwrap();
        assert_eq!(leap.active(at("2028-02-29T00:30:00Z")).floor, 2);
        assert_eq!(leap.active(at("2027-03-01T00:30:00Z")).floor, 0);
        // A closed rare window costs a bounded walk (its duration's days), not years of search.
        for _ in 0..100 {
            assert_eq!(leap.active(at("2026-12-01T00:00:00Z")).floor, 0);
        }
        // Before the bounded search these eight refusals alone took 2.6 s (debug build).
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_millis(1200),
            "took {took:?}"
        );
    }

    #[test]
    fn windows_open_across_dst_changes_in_wall_clock_time() {
        // Berlin leaves summer time on 2026-10-25 at 03:00 CEST (01:00 UTC).
        let s = Schedules::parse("30 1 * * * for 2h floor 3 in Europe/Berlin").unwrap();
        // 01:30 CEST = 23:30 UTC the day before; open for 2 h of absolute time.
        assert_eq!(s.active(at("2026-10-24T23:29:00Z")).floor, 0);
        assert_eq!(s.active(at("2026-10-24T23:30:00Z")).floor, 3);
        assert_eq!(s.active(at("2026-10-25T01:29:00Z")).floor, 3);
        assert_eq!(s.active(at("2026-10-25T01:30:00Z")).floor, 0);
        // A start in the spring gap (02:30 on 2026-03-29 does not exist) opens after the gap.
        let gap = Schedules::parse("30 2 * * * for 1h floor 3 in Europe/Berlin").unwrap();
        assert_eq!(gap.active(at("2026-03-29T01:29:00Z")).floor, 0);
        assert_eq!(gap.active(at("2026-03-29T01:31:00Z")).floor, 3);
    }

    #[test]
    fn equality_follows_the_text_with_whitespace_collapsed() {
        let a = Schedules::parse("0 8 * * *  for 1h floor 2;").unwrap();
        let b = Schedules::parse(" 0 8 * * * for 1h   floor 2").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, Schedules::parse("0 9 * * * for 1h floor 2").unwrap());
        assert!(Schedules::parse("").unwrap().is_empty());
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// Cron fields from real syntax (lists, ranges, steps, names, OCPS `L`, `#`, `W`) mixed
        /// with garbage, so parsing sees both near misses and noise.
        fn field() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("*".to_string()),
                "[0-9]{1,3}",
                "[0-9]{1,2}-[0-9]{1,2}(/[0-9]{1,3})?",
                "\\*/[0-9]{1,4}",
                "[0-9]{1,2}(,[0-9]{1,2}){0,6}",
                "(?i)(mon|tue|fri|sun|jan|dec)(-(sat|jun))?",
                "[0-9]{0,2}(L|W|LW|#[0-9])",
                ".{0,6}",
            ]
        }

        fn window() -> impl Strategy<Value = String> {
            let cron = proptest::collection::vec(field(), 4..7).prop_map(|f| f.join(" "));
            let duration = prop_oneof!["[0-9]{1,4}(m|h|d|s)", "[0-9]h[0-9]{1,2}m", ".{0,5}"];
            let floor = proptest::option::of("floor ([0-9]{1,4}|-1|x)");
            let scale_in = proptest::option::of(Just("scaleIn disabled"));
            let zone = proptest::option::of(prop_oneof![
                Just("in Europe/Berlin"),
                Just("in America/St_Johns"),
                Just("in Australia/Lord_Howe"),
                Just("in UTC"),
                Just("in Mars/Olympus"),
            ]);
            (cron, duration, floor, scale_in, zone).prop_map(|(c, d, f, s, z)| {
                [
                    Some(c),
                    Some(format!("for {d}")),
                    f,
                    s.map(str::to_owned),
                    z.map(str::to_owned),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ")
            })
        }

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => proptest::collection::vec(window(), 0..20).prop_map(|w| w.join("; ")),
                1 => "(@(daily|hourly|weekly|yearly|reboot) for 1h)?.{0,60}",
                // Past MAX_LEN: refused whole, with a bounded message.
                1 => (MAX_LEN..MAX_LEN * 3).prop_map(|n| "0 8 * * * for 1h;".repeat(n / 17 + 1)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(600))]
            /// Whatever the text: no panic, a bounded one-line error, or windows within the limits
            /// that answer `active` at any instant from 1970 to 2200 (the scan is bounded by the
            /// window's duration, so this also never hangs), and whose text parses back the same.
            #[test]
            fn any_schedules_text_parses_or_is_refused_within_bounds(
                text in value(),
                instants in proptest::collection::vec(0i64..7_258_118_400, 1..4),
            ) {
                match Schedules::parse(&text) {
                    Ok(schedules) => {
                        prop_assert!(schedules.windows().len() <= MAX_WINDOWS);
                        for w in schedules.windows() {
                            prop_assert!((MIN_DURATION..=MAX_DURATION).contains(&w.duration));
                        }
                        for second in instants {
                            let active = schedules.active(Timestamp::from_second(second).unwrap());
                            prop_assert!(active.windows.len() <= schedules.windows().len());
                            let floors = schedules.windows().iter().filter_map(|w| w.floor);
                            prop_assert!(active.floor <= floors.max().unwrap_or(0));
                        }
                        prop_assert_eq!(Schedules::parse(&schedules.to_string()).unwrap(), schedules);
                    }
                    Err(error) => {
                        let message = error.to_string();
                        prop_assert!(message.len() < 1200, "{} bytes: {}", message.len(), message);
                        prop_assert!(!message.contains('\n'), "{}", message);
                    }
                }
            }
        }
    }
}
