//! `scaler backtest`: what the scaler and the HPA would have done over a stretch of history.
//!
//! The decision query of `serve` runs as range queries, in chunks of at most
//! [`POINTS_PER_QUERY`] evaluation times (VictoriaMetrics refuses more than 30,000 points per
//! series by default); each evaluation time goes through the same evaluation as metrics-only
//! `serve` and a simulated HPA ([`scaler_core::replay`]). The table goes to CSV and/or JSON or
//! stdout, the plot to SVG and/or PNG; `--tune` replays a grid of settings over the same history
//! ([`tune`]).
use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use prometheus_client::registry::Registry;

use runtime::logging::LogArgs;
use scaler::backend;
use scaler::metrics::Metrics;
use scaler_core::metadata::{self, Metric, ScalerConfig};
use scaler_core::promql;
use scaler_core::replay::{HpaSpec, Replay, Row, Tally};

mod output;
mod plot;
mod scaled_object;
mod ticks;
mod tune;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns; for a run, one line per change (the CSV and JSON have every row).
    Table,
    Csv,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("outputs").required(true).multiple(true)
    .args(["csv", "json", "plot", "png", "output", "tune"])))]
pub struct Args {
    /// Prometheus-compatible API root holding the history.
    #[arg(long, env = "SCALER_PROMETHEUS_URL")]
    pub prometheus_url: String,
    /// Namespace of the Cluster whose history is replayed; default: the ScaledObject's
    /// `metadata.namespace`.
    #[arg(long)]
    pub namespace: Option<String>,
    /// CNPG Cluster whose history is replayed; default: the one the ScaledObject names. Another
    /// name replays these settings on that cluster's history.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Rendered ScaledObject (YAML: `helm template` output, or `kubectl get scaledobjects -o
    /// yaml`): trigger metadata, min/maxReplicaCount and the HPA behaviour come from it.
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
    /// Write an SVG plot of load, instance counts and reasons here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Write the plot as PNG here (rendered with a font compiled in).
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
    /// Print the table (or with --tune the settings) to stdout in this format; the summary
    /// then goes to stderr.
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
    /// IANA time zone of the plot's ticks and the printed table (the files stay in UTC).
    #[arg(long, default_value = "UTC")]
    pub time_zone: String,
    /// Sweep settings over the same history and recommend the cheapest within --max-overload.
    #[arg(long, conflicts_with_all = ["csv", "json", "plot", "png"])]
    pub tune: bool,
    /// --tune: targets, as `30,40,50` or `30..60:10`; default 50 % to 200 % of the
    /// ScaledObject's target in steps of 10 %.
    #[arg(long, requires = "tune", value_name = "GRID")]
    pub tune_target: Option<String>,
    /// --tune: HPA scale-down stabilization windows in seconds (0 to 3600); default the
    /// ScaledObject's.
    #[arg(long, requires = "tune", value_name = "GRID")]
    pub tune_scale_down_window: Option<String>,
    /// --tune: minReplicas (trigger metadata and spec.minReplicaCount); default the
    /// ScaledObject's.
    #[arg(long, requires = "tune", value_name = "GRID")]
    pub tune_min_replicas: Option<String>,
    /// Load per read replica above which an evaluation counts as overloaded (on the simulated
    /// HPA's count); default: the ScaledObject's target.
    #[arg(long)]
    pub overload_above: Option<f64>,
    /// --tune: the overload budget, as a percentage of the evaluations with an answer.
    #[arg(long, default_value = "1%", value_parser = tune::parse_percent)]
    pub max_overload: f64,
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

/// What both a single run and a sweep replay: the range, the query and its client.
struct History {
    namespace: String,
    target: promql::Target,
    query: String,
    client: backend::Client,
    from: i64,
    to: i64,
    step: u64,
}

impl History {
    fn evaluations(&self) -> u64 {
        ((self.to - self.from) / self.step as i64 + 1) as u64
    }

    /// Fetches the history once, a range query per chunk, and hands every evaluation time of
    /// each chunk with its answer (empty: a gap) to `each`.
    async fn replay(
        &self,
        progress: &ProgressBar,
        mut each: impl FnMut(&[(i64, &HashMap<String, f64>)]),
    ) -> anyhow::Result<()> {
        let step = self.step as i64;
        let empty = HashMap::new();
        let mut start = self.from;
        while start <= self.to {
            let end = self.to.min(start + (POINTS_PER_QUERY - 1) * step);
            let answers = self
                .client
                .range_parts(&self.query, &self.target, start, end, self.step)
                .await
                .with_context(|| {
                    format!(
                        "range query from {} to {}",
                        output::rfc3339(start),
                        output::rfc3339(end)
                    )
                })?;
            let times: Vec<(i64, &HashMap<String, f64>)> = (start..=end)
                .step_by(self.step as usize)
                .map(|t| (t, answers.get(&t).unwrap_or(&empty)))
                .collect();
            each(&times);
            progress.inc(times.len() as u64);
            start = end + step;
        }
        progress.finish_and_clear();
        Ok(())
    }
}

/// The replayed range, aligned to `--step`, and the HPA's sync period.
struct Range {
    from: i64,
    to: i64,
    step: u64,
    sync: u64,
    /// Evaluations and HPA syncs over the range.
    total: i64,
    syncs: i64,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        self.log.init()?;
        self.check_outputs()?;
        let zone = jiff::tz::TimeZone::get(&self.time_zone).map_err(|_| {
            anyhow::anyhow!(
                "--time-zone {}: not an IANA time zone (e.g. UTC, Europe/Berlin)",
                names::echo(&self.time_zone)
            )
        })?;
        let range = self.range()?;
        let so = scaled_object::read(&self.scaled_object, self.name.as_deref())?;
        let (config, namespace) = self.config(&so)?;
        let overload_above = self.overload_above.unwrap_or(config.target);
        ensure!(
            overload_above.is_finite() && overload_above > 0.0,
            "--overload-above {overload_above}: use a load per read replica above 0"
        );
        let history = self.history(namespace, &config, &range)?;
        if self.tune {
            let inputs = SweepInputs {
                sync: range.sync as u32,
                overload_above,
                syncs: range.syncs as u64,
            };
            return self.sweep(&history, &so, config.target, &inputs).await;
        }
        let spec = HpaSpec {
            min_replicas: so.min_replicas,
            max_replicas: so.max_replicas,
            behavior: so.behavior.clone(),
            sync_period_seconds: range.sync as u32,
        };
        let progress = progress_bar(history.evaluations(), "evaluations");
        let mut replay = Replay::new(&history.namespace, config.clone(), spec.clone());
        let mut rows: Vec<Row> = Vec::with_capacity(range.total as usize);
        history
            .replay(&progress, |times| {
                rows.extend(times.iter().map(|(t, parts)| replay.step(*t, parts)));
            })
            .await?;
        let header = output::Header {
            namespace: &history.namespace,
            cluster: &config.cluster,
            scaled_object: &so.name,
            metric: config.metric.as_str(),
            target: config.target,
            from: output::rfc3339(range.from),
            to: output::rfc3339(range.to),
            step_seconds: range.step,
            query: &history.query,
            hpa: &spec,
        };
        self.write_outputs(&header, &rows, &config, &zone)?;
        let mut tally = Tally::default();
        for row in &rows {
            tally.add(row, overload_above);
        }
        let summary = summary(
            &tally,
            range.step,
            overload_above,
            load_label(config.metric),
        );
        match self.output {
            None => print!("{summary}"),
            Some(format) => {
                output::print_rows(format, &header, &rows, &zone)?;
                eprint!("{summary}");
            }
        }
        Ok(())
    }

    /// No two outputs name the same file.
    fn check_outputs(&self) -> anyhow::Result<()> {
        let outputs = [
            ("--csv", &self.csv),
            ("--json", &self.json),
            ("--plot", &self.plot),
            ("--png", &self.png),
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
        Ok(())
    }

    /// `--from` to `--to` at `--step`, within the bounds on evaluations and HPA syncs.
    fn range(&self) -> anyhow::Result<Range> {
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
        Ok(Range {
            from,
            to,
            step,
            sync,
            total,
            syncs,
        })
    }

    /// The trigger's config (`--cluster` overriding its cluster) and the namespace.
    fn config(&self, so: &scaled_object::ScaledObject) -> anyhow::Result<(ScalerConfig, String)> {
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
        let namespace = match (&self.namespace, &so.namespace) {
            (Some(ns), _) => {
                ensure!(
                    names::is_dns_label(ns),
                    "--namespace {}: use a namespace name (a lowercase DNS label)",
                    names::echo(ns)
                );
                ns.clone()
            }
            (None, Some(ns)) => ns.clone(),
            (None, None) => bail!(
                "--namespace: required, the ScaledObject {} has no metadata.namespace",
                names::echo(&so.name)
            ),
        };
        Ok((config, namespace))
    }

    /// The one-cluster decision query over the range, and its client.
    fn history(
        &self,
        namespace: String,
        config: &ScalerConfig,
        range: &Range,
    ) -> anyhow::Result<History> {
        // A Pooler's decision needs its Cluster's budget from a second query, which the
        // backtest's one range query does not have.
        anyhow::ensure!(
            config.engine != scaler_core::metadata::Engine::Pgbouncer,
            "the backtest does not replay engine pgbouncer yet (its connection budget is a second \
             query): use scaler explain"
        );
        let target = promql::Target {
            namespace: namespace.clone(),
            cluster: config.cluster.clone(),
        };
        let query =
            promql::decision_query(std::slice::from_ref(&target), promql::Shape::of(config));
        Ok(History {
            namespace,
            query,
            target,
            client: backend::Client::new(
                &self.prometheus_url,
                self.query_timeout,
                1,
                self.max_response_bytes,
                Metrics::register(&mut Registry::default()),
            )?,
            from: range.from,
            to: range.to,
            step: range.step,
        })
    }

    /// `--csv`, `--json`, `--plot` and `--png`, those given.
    fn write_outputs(
        &self,
        header: &output::Header<'_>,
        rows: &[Row],
        config: &ScalerConfig,
        zone: &jiff::tz::TimeZone,
    ) -> anyhow::Result<()> {
        if let Some(path) = &self.csv {
            output::csv(path, rows)?;
        }
        if let Some(path) = &self.json {
            output::json(path, header, rows)?;
        }
        if self.plot.is_some() || self.png.is_some() {
            let title = format!(
                "{}/{}: {} target {} per replica",
                header.namespace, config.cluster, config.metric, config.target
            );
            let frame = plot::Frame {
                title: &title,
                load_label: load_label(config.metric),
                zone,
                zone_name: &self.time_zone,
                min_replicas: config.min_replicas,
                max_replicas: config.max_replicas,
            };
            let svg = plot::svg_text(&frame, rows)?;
            if let Some(path) = &self.plot {
                plot::write_svg(path, &svg)?;
            }
            if let Some(path) = &self.png {
                plot::write_png(path, &svg)?;
            }
        }
        Ok(())
    }

    /// `--tune`: every setting of the grid replayed over the history fetched once.
    async fn sweep(
        &self,
        history: &History,
        so: &scaled_object::ScaledObject,
        file_target: f64,
        inputs: &SweepInputs,
    ) -> anyhow::Result<()> {
        let SweepInputs {
            sync,
            overload_above,
            syncs,
        } = *inputs;
        let settings = self.tune_grid(so, file_target, history.evaluations() + syncs)?;
        let mut runs = settings
            .iter()
            .map(|s| {
                let (config, spec) = tune::apply(so, self.cluster.as_deref(), sync, s)?;
                let shown = (config.min_replicas, tune::window_of(&spec));
                Ok((
                    Replay::new(&history.namespace, config, spec),
                    Tally::default(),
                    shown,
                ))
            })
            .collect::<anyhow::Result<Vec<SweepRun>>>()?;
        replay_all(history, &mut runs, overload_above).await?;
        let tallies: Vec<Tally> = runs.iter().map(|r| r.1).collect();
        let answered = tallies.first().map_or(0, |t| t.evaluations - t.errors);
        let budget = (answered as f64 * self.max_overload / 100.0).floor() as u64;
        let best = tune::recommend(&tallies, budget);
        let step = history.step as f64;
        let lines = sweep_lines(&settings, &runs, best, step);
        let budget_minutes = budget as f64 * step / 60.0;
        let mut report = format!(
            "{} settings over {} evaluations ({} with an answer); overloaded: above {overload_above} per read replica \
             on the simulated count; budget --max-overload {}% = {budget_minutes:.1} min\n",
            settings.len(),
            history.evaluations(),
            answered,
            self.max_overload
        );
        report += &recommendation(best.map(|i| (&lines[i], &settings[i])), so);
        match self.output.unwrap_or(Format::Table) {
            Format::Table => print!("{}{report}", tune::table(&lines)),
            format => {
                output::print_settings(format, &lines)?;
                eprint!("{report}");
            }
        }
        Ok(())
    }

    /// The grid of `--tune-target`, `--tune-scale-down-window` and `--tune-min-replicas`
    /// (targets around the file's `file_target` by default), bounded in settings and work.
    fn tune_grid(
        &self,
        so: &scaled_object::ScaledObject,
        file_target: f64,
        work_per_setting: u64,
    ) -> anyhow::Result<Vec<tune::Setting>> {
        let targets = match &self.tune_target {
            Some(text) => tune::parse_grid("--tune-target", text)?,
            None => tune::default_targets(file_target),
        };
        let windows = self
            .tune_scale_down_window
            .as_deref()
            .map(|text| {
                let flag = "--tune-scale-down-window";
                tune::whole(flag, &tune::parse_grid(flag, text)?, tune::WINDOWS)
            })
            .transpose()?;
        let mins = self
            .tune_min_replicas
            .as_deref()
            .map(|text| {
                let flag = "--tune-min-replicas";
                tune::whole(
                    flag,
                    &tune::parse_grid(flag, text)?,
                    1..=so.max_replicas.max(1),
                )
            })
            .transpose()?;
        tune::settings(
            &targets,
            windows.as_deref(),
            mins.as_deref(),
            work_per_setting,
        )
    }
}

/// One setting's replay, its tally, and the minReplicas and scale-down window it ran with.
type SweepRun = (Replay, Tally, (u32, u32));

/// Steps every setting's replay over the history, fetched once.
async fn replay_all(
    history: &History,
    runs: &mut [SweepRun],
    overload_above: f64,
) -> anyhow::Result<()> {
    let progress = progress_bar(history.evaluations(), "evaluations (every setting)");
    // Settings are independent: split across the cores, each thread stepping its own.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = runs.len().div_ceil(threads).max(1);
    history
        .replay(&progress, |times| {
            std::thread::scope(|scope| {
                for part in runs.chunks_mut(per_thread) {
                    scope.spawn(move || {
                        for (t, parts) in times {
                            for (replay, tally, _) in part.iter_mut() {
                                tally.add(&replay.step(*t, parts), overload_above);
                            }
                        }
                    });
                }
            });
        })
        .await
}

/// The sweep's table: each setting's tally in hours and minutes of `step` seconds, the Pareto
/// front and the `best` setting marked.
fn sweep_lines(
    settings: &[tune::Setting],
    runs: &[SweepRun],
    best: Option<usize>,
    step: f64,
) -> Vec<tune::Line> {
    let front = tune::pareto(
        &runs
            .iter()
            .map(|(_, t, _)| (t.simulated_steps, t.overloaded))
            .collect::<Vec<_>>(),
    );
    settings
        .iter()
        .zip(runs)
        .enumerate()
        .map(|(i, (s, (_, t, (min, window))))| tune::Line {
            target: s.target,
            scale_down_window_seconds: *window,
            min_replicas: *min,
            instance_hours: t.simulated_steps as f64 * step / 3600.0,
            overloaded_minutes: t.overloaded as f64 * step / 60.0,
            scale_events: t.scale_events,
            pareto: front[i],
            recommended: best == Some(i),
        })
        .collect()
}

/// The report's last line(s): the recommended setting and how to apply it, or why there is none.
fn recommendation(
    best: Option<(&tune::Line, &tune::Setting)>,
    so: &scaled_object::ScaledObject,
) -> String {
    match best {
        Some((l, setting)) => format!(
            "recommended: target {} ({:.1} instance-hours, {:.1} min overloaded, {} scale events), \
             the cheapest within the budget; apply to ScaledObject {}:\n{}",
            l.target,
            l.instance_hours,
            l.overloaded_minutes,
            l.scale_events,
            so.name,
            tune::apply_lines(so, setting)
        ),
        None => "recommended: none; every setting is overloaded beyond the budget \
                 (lower --tune-target, or raise --max-overload)\n"
            .into(),
    }
}

/// What a sweep takes from the flags besides the grid.
#[derive(Clone, Copy)]
struct SweepInputs {
    /// The HPA's sync period in seconds.
    sync: u32,
    overload_above: f64,
    /// HPA syncs over the range (the sweep's work per setting, with the evaluations).
    syncs: u64,
}

/// The load axis' label.
fn load_label(metric: Metric) -> &'static str {
    match metric {
        Metric::ReadConnections => "active connections",
        Metric::ReadCpuUtilization => "CPU millicores",
        Metric::ReadConnectionUsage => "connection usage (%)",
        Metric::ReadCommandsPerSecond => "read commands per second",
        Metric::ClientConnections => "pooler clients",
    }
}

/// A progress bar on a terminal; nothing otherwise (logs and pipes stay clean).
fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{bar:40}} {{pos}}/{{len}} {what}, {{elapsed}} (eta {{eta}})"
    )) {
        bar.set_style(style);
    }
    bar
}

/// Counts, instance-hours (simulated against observed) and overload, from the run's tally.
fn summary(tally: &Tally, step: u64, overload_above: f64, load_label: &str) -> String {
    let hours = |sum: u64| sum as f64 * step as f64 / 3600.0;
    format!(
        "{} evaluations, {} without an answer (gaps or scaler errors)\n\
         simulated: {} scale events, {:.1} instance-hours, {:.1} min overloaded (above {overload_above} {load_label} \
         per read replica); observed: {:.1} instance-hours\n",
        tally.evaluations,
        tally.errors,
        tally.scale_events,
        hours(tally.simulated_steps),
        tally.overloaded as f64 * step as f64 / 60.0,
        hours(tally.observed_steps),
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
