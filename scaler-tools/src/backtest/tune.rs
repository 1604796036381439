//! `scaler backtest --tune`: the same history replayed under a grid of settings (`target`, and
//! optionally the HPA's scale-down window and `minReplicas`), each setting through its own
//! [`scaler_core::replay::Replay`] (the evaluation `serve` runs), tallied the same way as a
//! single run; then the Pareto front of instance-hours against overload and the cheapest setting
//! within the overload budget. Everything here is pure; the fetching is in `mod.rs`.
use std::collections::HashMap;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;

use scaler_core::hpa::{BehaviorSpec, LEGACY_WINDOW_SECONDS, MAX_WINDOW_SECONDS, RulesSpec};
use scaler_core::metadata::{self, ScalerConfig};
use scaler_core::replay::{HpaSpec, Tally};

use super::scaled_object::ScaledObject;

/// Values one grid flag may list (after expanding ranges).
pub const MAX_VALUES: usize = 100;
/// Settings one sweep may hold (the product of the grid flags).
pub const MAX_SETTINGS: usize = 400;
/// Settings × (evaluations + HPA syncs) one sweep may replay: bounds its time (a day at 15 s
/// steps and syncs is 11,521 per setting; this is a week at 15 s for 100 settings).
pub const MAX_WORK: u64 = 81_000_000;

/// A grid flag: comma-separated numbers and inclusive ranges `FROM..TO:STEP` (`30..60:10` is
/// 30, 40, 50, 60); sorted, duplicates dropped. Empty, backwards or oversized grids are refused
/// naming `flag`.
pub fn parse_grid(flag: &str, text: &str) -> anyhow::Result<Vec<f64>> {
    let hint = "give values such as 30,40,50 or a range 30..60:10";
    let mut values = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .with_context(|| format!("{flag}: {} is not a number; {hint}", names::echo(s)))
        };
        match item.split_once("..") {
            None => values.push(number(item)?),
            Some((from, rest)) => {
                let (to, step) = rest.split_once(':').with_context(|| {
                    format!("{flag}: range {} has no step; {hint}", names::echo(item))
                })?;
                let (from, to, step) = (number(from)?, number(to)?, number(step)?);
                ensure!(
                    step > 0.0 && from <= to,
                    "{flag}: range {} is empty (use FROM <= TO and a STEP above 0); {hint}",
                    names::echo(item)
                );
                // Counted before expanding, so a huge range costs nothing.
                let count = ((to - from) / step + 1e-9).floor() + 1.0;
                ensure!(
                    count + values.len() as f64 <= MAX_VALUES as f64,
                    "{flag}: more than {MAX_VALUES} values; use a coarser STEP"
                );
                for i in 0..count as usize {
                    // Rounded so that 0.1 steps print as 0.3, not 0.30000000000000004.
                    values.push(((from + i as f64 * step) * 1e6).round() / 1e6);
                }
            }
        }
        ensure!(
            values.len() <= MAX_VALUES,
            "{flag}: more than {MAX_VALUES} values; thin the grid"
        );
    }
    ensure!(!values.is_empty(), "{flag}: empty grid; {hint}");
    values.sort_by(f64::total_cmp);
    values.dedup();
    Ok(values)
}

/// Whole numbers in `range` from a grid flag.
pub fn whole(
    flag: &str,
    values: &[f64],
    range: std::ops::RangeInclusive<u32>,
) -> anyhow::Result<Vec<u32>> {
    values
        .iter()
        .map(|&v| {
            ensure!(
                v.fract() == 0.0 && v >= f64::from(*range.start()) && v <= f64::from(*range.end()),
                "{flag}: {v} is not a whole number from {} to {}",
                range.start(),
                range.end()
            );
            Ok(v as u32)
        })
        .collect()
}

/// The default `--tune-target` grid: 50 % to 200 % of the ScaledObject's target in steps of
/// 10 % of it, in whole numbers when the target is 10 or more (the charts render it as one).
pub fn default_targets(target: f64) -> Vec<f64> {
    let mut values: Vec<f64> = (5..=20)
        .map(|tenth| target * f64::from(tenth) / 10.0)
        .map(|v| {
            if target >= 10.0 {
                v.round()
            } else {
                (v * 1e6).round() / 1e6
            }
        })
        .collect();
    values.dedup();
    values
}

/// One point of the grid; `None` keeps the ScaledObject's value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setting {
    pub target: f64,
    pub scale_down_window_seconds: Option<u32>,
    pub min_replicas: Option<u32>,
}

/// The grid's settings (targets outermost), refused above [`MAX_SETTINGS`] or [`MAX_WORK`].
pub fn settings(
    targets: &[f64],
    windows: Option<&[u32]>,
    mins: Option<&[u32]>,
    work_per_setting: u64,
) -> anyhow::Result<Vec<Setting>> {
    let windows: Vec<Option<u32>> =
        windows.map_or(vec![None], |w| w.iter().copied().map(Some).collect());
    let mins: Vec<Option<u32>> = mins.map_or(vec![None], |m| m.iter().copied().map(Some).collect());
    let count = targets.len() * windows.len() * mins.len();
    let flags = "--tune-target × --tune-scale-down-window × --tune-min-replicas";
    ensure!(
        count <= MAX_SETTINGS,
        "{flags} is {count} settings, above {MAX_SETTINGS}: thin a grid flag"
    );
    let work = count as u64 * work_per_setting;
    ensure!(
        work <= MAX_WORK,
        "{flags} is {count} settings × {work_per_setting} evaluations and HPA syncs = {work}, above {MAX_WORK}: \
         thin a grid flag, raise --step or shorten --from/--to"
    );
    let mut out = Vec::with_capacity(count);
    for &target in targets {
        for &window in &windows {
            for &min in &mins {
                out.push(Setting {
                    target,
                    scale_down_window_seconds: window,
                    min_replicas: min,
                });
            }
        }
    }
    Ok(out)
}

/// The trigger metadata and HPA of `so` under `setting`, validated as `serve` validates them;
/// errors name the grid flag.
pub fn apply(
    so: &ScaledObject,
    cluster: Option<&str>,
    sync_period_seconds: u32,
    setting: &Setting,
) -> anyhow::Result<(ScalerConfig, HpaSpec)> {
    let mut md: HashMap<String, String> = so.metadata.clone();
    md.insert("target".into(), setting.target.to_string());
    if let Some(min) = setting.min_replicas {
        md.insert("minReplicas".into(), min.to_string());
    }
    let mut config =
        metadata::parse(&so.name, &md).with_context(|| match setting.min_replicas {
            Some(min) => format!(
                "--tune-target {} with --tune-min-replicas {min}",
                setting.target
            ),
            None => format!("--tune-target {}", setting.target),
        })?;
    if let Some(cluster) = cluster {
        config.cluster = cluster.to_owned();
    }
    let min_replicas = setting.min_replicas.unwrap_or(so.min_replicas);
    if min_replicas > so.max_replicas {
        bail!(
            "--tune-min-replicas {min_replicas} is above the ScaledObject's spec.maxReplicaCount ({})",
            so.max_replicas
        );
    }
    let behavior = match setting.scale_down_window_seconds {
        None => so.behavior.clone(),
        Some(window) => {
            // Without behavior KEDA sets only this field and the API server defaults the rest.
            let mut behavior = match &so.behavior {
                Some(b) => b.clone(),
                None => BehaviorSpec {
                    scale_up: None,
                    scale_down: Some(RulesSpec::default()),
                }
                .resolve()
                .map_err(|e| anyhow::anyhow!("--tune-scale-down-window: {e}"))?,
            };
            behavior.scale_down.stabilization_window_seconds = window;
            Some(behavior)
        }
    };
    Ok((
        config,
        HpaSpec {
            min_replicas,
            max_replicas: so.max_replicas,
            behavior,
            sync_period_seconds,
        },
    ))
}

/// The scale-down window an HPA spec has in effect (the fixed rules' when it has no behaviour).
pub fn window_of(spec: &HpaSpec) -> u32 {
    spec.behavior.as_ref().map_or(LEGACY_WINDOW_SECONDS, |b| {
        b.scale_down.stabilization_window_seconds
    })
}

/// Grid bound for `--tune-scale-down-window`.
pub const WINDOWS: std::ops::RangeInclusive<u32> = 0..=MAX_WINDOW_SECONDS;

/// Which of (instance-steps, overloaded evaluations) no other point beats in both, strictly in
/// one: the Pareto front of cost against overload.
pub fn pareto(points: &[(u64, u64)]) -> Vec<bool> {
    points
        .iter()
        .map(|&(cost, over)| {
            !points
                .iter()
                .any(|&(c, o)| c <= cost && o <= over && (c < cost || o < over))
        })
        .collect()
}

/// The cheapest point whose overload is within `budget` (ties: less overload, then fewer scale
/// events, then grid order); `None` when none is. Always on the [`pareto`] front: a point that
/// beat it would be within the budget and cheaper, or as cheap and less overloaded.
pub fn recommend(tallies: &[Tally], budget: u64) -> Option<usize> {
    tallies
        .iter()
        .enumerate()
        .filter(|(_, t)| t.overloaded <= budget)
        .min_by_key(|(i, t)| (t.simulated_steps, t.overloaded, t.scale_events, *i))
        .map(|(i, _)| i)
}

/// One setting's figures, as the report shows them.
#[derive(Debug, Serialize)]
pub struct Line {
    pub target: f64,
    pub scale_down_window_seconds: u32,
    pub min_replicas: u32,
    pub instance_hours: f64,
    pub overloaded_minutes: f64,
    pub scale_events: u64,
    pub pareto: bool,
    pub recommended: bool,
}

/// The table `-o table` prints (the default for `--tune`).
pub fn table(lines: &[Line]) -> String {
    let mut out = format!(
        "{:>8} {:>12} {:>4} {:>15} {:>18} {:>13}  {}\n",
        "target",
        "down window",
        "min",
        "instance-hours",
        "overloaded (min)",
        "scale events",
        "front"
    );
    for l in lines {
        let mark = match (l.recommended, l.pareto) {
            (true, _) => "* recommended",
            (false, true) => "*",
            _ => "",
        };
        let line = format!(
            "{:>8} {:>11}s {:>4} {:>15.1} {:>18.1} {:>13}  {mark}",
            l.target,
            l.scale_down_window_seconds,
            l.min_replicas,
            l.instance_hours,
            l.overloaded_minutes,
            l.scale_events
        );
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// What to write into the ScaledObject for `setting` (the swept fields only).
pub fn apply_lines(so: &ScaledObject, setting: &Setting) -> String {
    let metadata = format!("spec.triggers[{}].metadata", so.trigger);
    let mut out = format!("  {metadata}.target: \"{}\"\n", setting.target);
    if let Some(min) = setting.min_replicas {
        out += &format!("  {metadata}.minReplicas: \"{min}\"\n  spec.minReplicaCount: {min}\n");
    }
    if let Some(window) = setting.scale_down_window_seconds {
        out += &format!(
            "  spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds: {window}\n"
        );
    }
    out
}

/// `--max-overload`: a percentage of the evaluations with an answer, `1%` or `1`.
pub fn parse_percent(text: &str) -> Result<f64, String> {
    text.trim()
        .trim_end_matches('%')
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=100.0).contains(p))
        .ok_or_else(|| {
            format!(
                "{} is not a percentage from 0 to 100 (e.g. 1%)",
                names::echo(text)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(cost: u64, over: u64, events: u64) -> Tally {
        let mut t = Tally::default();
        (t.simulated_steps, t.overloaded, t.scale_events) = (cost, over, events);
        t
    }

    #[test]
    fn grids_expand_ranges_and_refuse_empty_or_oversized_ones_naming_the_flag() {
        assert_eq!(
            parse_grid("--tune-target", "30..60:10, 45,30").unwrap(),
            [30.0, 40.0, 45.0, 50.0, 60.0]
        );
        assert_eq!(
            parse_grid("--tune-target", "0.1..0.3:0.1").unwrap(),
            [0.1, 0.2, 0.3]
        );
        for (text, says) in [
            ("", "empty grid"),
            (" , ", "empty grid"),
            ("60..30:10", "is empty"),
            ("30..60:0", "is empty"),
            ("30..60", "no step"),
            ("fifty", "not a number"),
            ("1..1e9:1", "more than 100"),
            ("NaN", "not a number"),
        ] {
            let error = parse_grid("--tune-target", text).unwrap_err().to_string();
            assert!(
                error.starts_with("--tune-target: ") && error.contains(says),
                "{text}: {error}"
            );
        }
        let many: String = (0..101).map(|i| format!("{i},")).collect();
        assert!(parse_grid("--tune-min-replicas", &many).is_err());
        assert_eq!(
            whole("--tune-min-replicas", &[2.0, 3.0], 1..=100).unwrap(),
            [2, 3]
        );
        let error = whole("--tune-scale-down-window", &[4000.0], WINDOWS).unwrap_err();
        assert!(
            error.to_string().contains("--tune-scale-down-window: 4000"),
            "{error}"
        );
        assert!(whole("--tune-min-replicas", &[2.5], 1..=100).is_err());
    }

    #[test]
    fn the_grid_is_bounded_in_settings_and_work() {
        let targets: Vec<f64> = (1..=100).map(f64::from).collect();
        let windows: Vec<u32> = (0..5).collect();
        assert_eq!(
            settings(&targets, Some(&windows[..4]), None, 10)
                .unwrap()
                .len(),
            400
        );
        let error = settings(&targets, Some(&windows), None, 10).unwrap_err();
        assert!(
            error.to_string().contains("500 settings, above 400"),
            "{error}"
        );
        let error = settings(&targets, None, None, MAX_WORK).unwrap_err();
        assert!(error.to_string().contains("--step"), "{error}");
        let one = settings(&[50.0], None, Some(&[2, 3]), 1).unwrap();
        assert_eq!(one[1].min_replicas, Some(3));
        assert_eq!(default_targets(50.0)[..3], [25.0, 30.0, 35.0]);
        assert_eq!(default_targets(50.0).len(), 16);
        assert_eq!(default_targets(2.0)[0], 1.0);
    }

    #[test]
    fn the_front_and_the_recommendation_on_it() {
        // cost, overload: (10, 5) and (12, 0) are the front; (12, 6) is beaten by both.
        let points = [(10, 5), (12, 0), (12, 6), (10, 5)];
        assert_eq!(pareto(&points), [true, true, false, true]);
        let tallies: Vec<Tally> = points.iter().map(|&(c, o)| tally(c, o, 1)).collect();
        assert_eq!(recommend(&tallies, 5), Some(0));
        assert_eq!(recommend(&tallies, 4), Some(1));
        assert_eq!(recommend(&[tally(10, 9, 1)], 4), None);
        // Equal cost: less overload wins, then fewer scale events.
        let tied = [tally(10, 3, 9), tally(10, 2, 9), tally(10, 2, 4)];
        assert_eq!(recommend(&tied, 5), Some(2));
        let front = pareto(
            &tied
                .iter()
                .map(|t| (t.simulated_steps, t.overloaded))
                .collect::<Vec<_>>(),
        );
        assert!(front[2]);
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("1%"), Ok(1.0));
        assert_eq!(parse_percent("0.5"), Ok(0.5));
        assert!(parse_percent("150%").is_err() && parse_percent("lots").is_err());
    }
}
