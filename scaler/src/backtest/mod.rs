//! `scaler backtest`: what the scaler and the HPA would have done over a stretch of history.
//!
//! The decision query of `serve` runs as range queries, in chunks of at most
//! [`POINTS_PER_QUERY`] evaluation times (VictoriaMetrics refuses more than 30,000 points per
//! series by default); each evaluation time goes through the same evaluation as metrics-only
//! `serve` and a simulated HPA ([`scaler_core::replay`]). The table goes to CSV and/or JSON, the
//! plot to SVG.
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use prometheus_client::registry::Registry;

use crate::backend;
use crate::metrics::Metrics;
use runtime::logging::LogArgs;
use scaler_core::metadata::{self, Metric};
use scaler_core::promql;
use scaler_core::replay::{HpaSpec, Replay, Row};

mod output;
mod plot;
mod scaled_object;

/// Evaluation times per range query: a third of VictoriaMetrics' default points limit.
pub const POINTS_PER_QUERY: i64 = 10_000;
/// Evaluation times per backtest: bounds the table held for the plot (a month at 15 s).
pub const MAX_STEPS: i64 = 200_000;
/// HPA syncs per backtest: bounds the simulation's time when --step is far above the sync period
/// (two years at 15 s).
pub const MAX_SYNCS: i64 = 4_000_000;
/// Default `--max-response-bytes`: a chunk's answer is at most about 2 MiB (10,000 times × a
/// dozen parts × 20 bytes); it is parsed streaming (docs/backtest.md's memory budget).
const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("outputs").required(true).multiple(true).args(["csv", "json", "plot"])))]
pub struct Args {
    /// Prometheus-compatible API root holding the history.
    #[arg(long, env = "SCALER_PROMETHEUS_URL")]
    pub prometheus_url: String,
    /// Namespace of the Cluster whose history is replayed.
    #[arg(long)]
    pub namespace: String,
    /// CNPG Cluster whose history is replayed; default: the one the ScaledObject names. Another
    /// name replays these settings on that cluster's history.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Rendered ScaledObject (YAML, e.g. `helm template` output): trigger metadata,
    /// min/maxReplicaCount and the HPA behaviour come from it.
    #[arg(long, value_name = "FILE")]
    pub scaled_object: PathBuf,
    /// Which ScaledObject of the file, when it holds several.
    #[arg(long)]
    pub name: Option<String>,
    /// Start: RFC 3339 (2026-11-30T00:00:00Z), Unix seconds, or now-DURATION (now-1d).
    #[arg(long, value_parser = parse_time)]
    pub from: i64,
    /// End, inclusive; same forms as --from.
    #[arg(long, value_parser = parse_time, default_value = "now")]
    pub to: i64,
    /// Time between evaluations; --from and --to are rounded down to a multiple of it.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub step: Duration,
    /// The HPA controller's sync period (kube-controller-manager's
    /// --horizontal-pod-autoscaler-sync-period).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub hpa_sync_period: Duration,
    /// Write the table as CSV here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the table and what was replayed as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of load and instance counts here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Timeout of each range query.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,
    /// Largest answer accepted for one range query.
    #[arg(long, default_value_t = DEFAULT_MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,
    #[command(flatten)]
    pub log: LogArgs,
}

/// `--from`/`--to`: RFC 3339, Unix seconds, `now` or `now-DURATION`.
fn parse_time(text: &str) -> Result<i64, String> {
    let now = jiff::Timestamp::now().as_second();
    if text == "now" {
        return Ok(now);
    }
    if let Some(ago) = text.strip_prefix("now-") {
        let ago =
            humantime::parse_duration(ago).map_err(|e| format!("{}: {e}", names::echo(ago)))?;
        return i64::try_from(ago.as_secs())
            .ok()
            .and_then(|s| now.checked_sub(s))
            .filter(|t| jiff::Timestamp::from_second(*t).is_ok())
            .ok_or_else(|| format!("{} is too far back", names::echo(text)));
    }
    if let Ok(seconds) = text.parse::<i64>() {
        // Within the calendar's years (-9999 to 9999): every later sum and difference fits.
        return jiff::Timestamp::from_second(seconds)
            .map(|t| t.as_second())
            .map_err(|_| format!("{seconds} is outside the years -9999 to 9999 in Unix seconds"));
    }
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| {
            format!("{} is not a time: use RFC 3339 (2026-11-30T00:00:00Z), Unix seconds or now-1d ({e})", names::echo(text))
        })
}

/// Whole seconds of a duration flag, within `range`.
fn seconds(
    flag: &str,
    value: Duration,
    range: std::ops::RangeInclusive<u64>,
) -> anyhow::Result<u64> {
    let whole = value.as_secs();
    ensure!(
        value.subsec_nanos() == 0 && range.contains(&whole),
        "{flag} {}: use whole seconds from {}s to {}s",
        humantime::format_duration(value),
        range.start(),
        range.end()
    );
    Ok(whole)
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        self.log.init()?;
        let outputs = [
            ("--csv", &self.csv),
            ("--json", &self.json),
            ("--plot", &self.plot),
        ];
        let outputs: Vec<_> = outputs
            .iter()
            .filter_map(|(flag, path)| Some((*flag, path.as_deref()?)))
            .collect();
        for (i, (a, path_a)) in outputs.iter().enumerate() {
            for (b, path_b) in &outputs[i + 1..] {
                ensure!(
                    !output::same_file(path_a, path_b),
                    "{a} and {b} name the same file ({}): give each output its own path",
                    path_a.display()
                );
            }
        }
        let step = seconds("--step", self.step, 1..=86_400)?;
        let sync = seconds("--hpa-sync-period", self.hpa_sync_period, 1..=600)?;
        let align = |t: i64| t - t.rem_euclid(step as i64);
        let (from, to) = (align(self.from), align(self.to));
        ensure!(
            from <= to,
            "--from ({}) is after --to ({})",
            output::rfc3339(self.from),
            output::rfc3339(self.to)
        );
        let total = (to - from) / step as i64 + 1;
        if total > MAX_STEPS {
            bail!(
                "--from to --to at --step {step}s is {total} evaluations, above {MAX_STEPS}: raise --step or shorten the range"
            );
        }
        let syncs = (to - from) / sync as i64 + 1;
        if syncs > MAX_SYNCS {
            bail!(
                "--from to --to is {syncs} HPA syncs at --hpa-sync-period {sync}s, above {MAX_SYNCS}: shorten the range or raise --hpa-sync-period"
            );
        }
        let so = scaled_object::read(&self.scaled_object, self.name.as_deref())?;
        let mut config = metadata::parse(&so.name, &so.metadata).with_context(|| {
            format!(
                "--scaled-object {}: the external trigger's metadata",
                self.scaled_object.display()
            )
        })?;
        if let Some(cluster) = &self.cluster {
            ensure!(
                names::is_dns_label(cluster),
                "--cluster {}: use a CNPG cluster name (a lowercase DNS label)",
                names::echo(cluster)
            );
            config.cluster = cluster.clone();
        }
        let spec = HpaSpec {
            min_replicas: so.min_replicas,
            max_replicas: so.max_replicas,
            behavior: so.behavior.clone(),
            sync_period_seconds: sync as u32,
        };
        let target = promql::Target {
            namespace: self.namespace.clone(),
            cluster: config.cluster.clone(),
        };
        let query =
            promql::decision_query(std::slice::from_ref(&target), promql::Shape::of(&config));
        let client = backend::Client::new(
            &self.prometheus_url,
            self.query_timeout,
            1,
            self.max_response_bytes,
            Metrics::register(&mut Registry::default()),
        )?;
        let progress = progress_bar(total as u64);
        let mut replay = Replay::new(&self.namespace, config.clone(), spec.clone());
        let mut rows: Vec<Row> = Vec::with_capacity(total as usize);
        let empty = Default::default();
        let mut start = from;
        while start <= to {
            let end = to.min(start + (POINTS_PER_QUERY - 1) * step as i64);
            let answers = client
                .range_parts(&query, &target, start, end, step)
                .await
                .with_context(|| {
                    format!(
                        "range query from {} to {}",
                        output::rfc3339(start),
                        output::rfc3339(end)
                    )
                })?;
            // Every evaluation time of the chunk; one without an answer is a gap in the history.
            for time in (start..=end).step_by(step as usize) {
                rows.push(replay.step(time, answers.get(&time).unwrap_or(&empty)));
            }
            progress.inc(((end - start) / step as i64 + 1) as u64);
            start = end + step as i64;
        }
        progress.finish_and_clear();
        let load_label = match config.metric {
            Metric::ReadConnections => "active connections",
            Metric::ReadCpuUtilization => "CPU millicores",
            Metric::ReadConnectionUsage => "connection usage (%)",
            Metric::ReadCommandsPerSecond => "read commands per second",
        };
        if let Some(path) = &self.csv {
            output::csv(path, &rows)?;
        }
        if let Some(path) = &self.json {
            let header = output::Header {
                namespace: &self.namespace,
                cluster: &config.cluster,
                scaled_object: &so.name,
                metric: config.metric.as_str(),
                target: config.target,
                from: output::rfc3339(from),
                to: output::rfc3339(to),
                step_seconds: step,
                query: &query,
                hpa: &spec,
            };
            output::json(path, &header, &rows)?;
        }
        if let Some(path) = &self.plot {
            let title = format!(
                "{}/{}: {} target {} per replica",
                self.namespace, config.cluster, config.metric, config.target
            );
            plot::svg(path, &title, load_label, &rows)?;
        }
        print!("{}", summary(&rows, step));
        Ok(())
    }
}

/// A progress bar on a terminal; nothing otherwise (logs and pipes stay clean).
fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} evaluations, {elapsed} (eta {eta})")
    {
        bar.set_style(style);
    }
    bar
}

/// Counts and instance-hours, simulated against observed.
fn summary(rows: &[Row], step: u64) -> String {
    let hours = |sum: u64| sum as f64 * step as f64 / 3600.0;
    let errors = rows.iter().filter(|r| r.error.is_some()).count();
    let changes = rows
        .windows(2)
        .filter(|w| w[0].simulated != w[1].simulated)
        .count();
    let simulated: u64 = rows.iter().map(|r| u64::from(r.simulated)).sum();
    let observed: u64 = rows.iter().filter_map(|r| r.observed).map(u64::from).sum();
    format!(
        "{} evaluations, {errors} without an answer (gaps or scaler errors)\n\
         simulated: {changes} scale events, {:.1} instance-hours; observed: {:.1} instance-hours\n",
        rows.len(),
        hours(simulated),
        hours(observed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_every_accepted_form() {
        assert_eq!(parse_time("2026-11-30T00:00:00Z"), Ok(1_795_996_800));
        assert_eq!(parse_time("1796000000"), Ok(1_796_000_000));
        let now = jiff::Timestamp::now().as_second();
        assert!((parse_time("now-1d").unwrap() - (now - 86_400)).abs() <= 1);
        for bad in [
            "yesterday",
            "now-1parsec",
            "2026-13-01T00:00:00Z",
            "-9223372036854775808",
            "9223372036854775807",
            "now-300000years",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_must_be_whole_seconds_in_range() {
        assert_eq!(
            seconds("--step", Duration::from_secs(60), 1..=86_400).unwrap(),
            60
        );
        let err = seconds("--step", Duration::from_millis(1500), 1..=86_400).unwrap_err();
        assert!(err.to_string().starts_with("--step 1s 500ms"), "{err}");
        assert!(seconds("--hpa-sync-period", Duration::ZERO, 1..=600).is_err());
    }
}
