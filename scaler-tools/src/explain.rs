//! `scaler explain`: one decision, with every input and guard that shaped it, for operators.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde::Serialize;

use anyhow::Context as _;

use runtime::logging::LogArgs;
use scaler::backend;
use scaler::cache::Evaluate as _;
use scaler::cache::Key;
use scaler::metrics::Metrics;
use scaler::observe::Observer;
use scaler::scaledobject::{self, AddressMatch};
use scaler::serve;
use scaler::topology::{self, Topology};
use scaler_core::decision::{Brake, ConvergencePhase, RedisReplication};
use scaler_core::evaluate::{CurrentSource, Evaluation, QuorumSource};
use scaler_core::metadata::{self, Engine, Metric};
use scaler_core::promql::redis::BACKGROUND_REPL_BYTES_PER_SECOND;
use scaler_core::promql::{self, Shape, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// The decision `serve` makes for one ScaledObject: its trigger metadata read from the API
/// server (`--scaled-object`), else from the flags alone. Every metadata flag overrides one key;
/// a flag left out leaves the key to the ScaledObject, else to the metadata parser's default,
/// the same as serve's (scaler-core/src/metadata.rs).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Prometheus-compatible API root.
    #[arg(long, env = "SCALER_PROMETHEUS_URL")]
    pub prometheus_url: String,
    /// NAMESPACE/NAME of a live ScaledObject: its trigger metadata, Cluster and quotas are read
    /// from the API server.
    #[arg(long)]
    pub scaled_object: Option<String>,
    /// Which trigger is this scaler's (as `scaler status --scaler-address`).
    #[arg(long = "scaler-address", default_value = scaledobject::DEFAULT_SCALER_ADDRESS)]
    pub scaler_address: Vec<String>,
    /// Namespace of the ScaledObject and the Cluster (without --scaled-object).
    #[arg(long, required_unless_present = "scaled_object")]
    pub namespace: Option<String>,
    /// CNPG Cluster name, or with --engine redis the RedisFailover's (without --scaled-object
    /// also the ScaledObject's name, unless --pooler names it); with --engine pgbouncer the
    /// Cluster behind the Pooler.
    #[arg(long, required_unless_present = "scaled_object")]
    pub cluster: Option<String>,
    /// cnpg (the default), redis or pgbouncer.
    #[arg(long)]
    pub engine: Option<String>,
    /// With --engine pgbouncer: the CNPG Pooler (without --scaled-object also the ScaledObject's
    /// name).
    #[arg(long)]
    pub pooler: Option<String>,
    /// Load signal: ReadConnections, ReadCPUUtilization or ReadConnectionUsage (redis:
    /// ReadConnections or ReadCommandsPerSecond; pgbouncer: ClientConnections).
    #[arg(long)]
    pub metric: Option<String>,
    /// Load one read replica should carry (connections, CPU millicores, percent of
    /// max_connections, or Redis read commands per second).
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long)]
    pub min_replicas: Option<String>,
    #[arg(long)]
    pub max_replicas: Option<String>,
    /// Synchronous quorum; read from the Cluster when absent.
    #[arg(long)]
    pub max_sync_replicas: Option<String>,
    /// Lag brake threshold in seconds; 0 turns it off (CNPG).
    #[arg(long)]
    pub max_replication_lag_seconds: Option<String>,
    /// How far back the CNPG brake reads lag and writes, seconds (300 when absent).
    #[arg(long)]
    pub brake_window_seconds: Option<String>,
    /// With --engine redis: a replica's offset lag in bytes above which the brake holds while
    /// the master writes; 0 = that part off (links down and full syncs still brake).
    #[arg(long)]
    pub max_replication_lag_bytes: Option<String>,
    /// With --engine pgbouncer: a longest client wait above this raises the count; 0 = off.
    #[arg(long)]
    pub max_client_wait_seconds: Option<String>,
    /// With --engine pgbouncer: the Pooler's default_pool_size, reserve_pool_size and
    /// max_db_connections (the connection budget).
    #[arg(long)]
    pub default_pool_size: Option<String>,
    #[arg(long)]
    pub reserve_pool_size: Option<String>,
    #[arg(long)]
    pub max_db_connections: Option<String>,
    /// `--dry-run` alone is `--dry-run true`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub dry_run: Option<String>,
    /// Seconds spec.instances may stay above the ready count before the stuck hold; 0 = off.
    #[arg(long)]
    pub convergence_deadline_seconds: Option<String>,
    /// The deadline when the metadata has none: serve's `--convergence-deadline`.
    #[arg(long, default_value = serve::DEFAULT_CONVERGENCE_DEADLINE, value_parser = humantime::parse_duration)]
    pub convergence_deadline: Duration,
    /// enabled, or disabled: never recommend fewer than the current count.
    #[arg(long)]
    pub scale_in: Option<String>,
    /// Schedule windows, as the `schedules` metadata, e.g.
    /// "0 8 * * 1-5 for 10h floor 4 in Europe/Berlin; 0 22 * * * for 8h scaleIn disabled".
    #[arg(long)]
    pub schedules: Option<String>,
    /// More signals, as the `signals` metadata, e.g. "ReadCPUUtilization=400,ReadConnectionUsage=70".
    #[arg(long)]
    pub signals: Option<String>,
    #[arg(long, value_enum, default_value = "auto")]
    pub topology: topology::Mode,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    evaluation: &'a Evaluation,
    /// [`Evaluation::summary`].
    summary: String,
    /// What GetMetrics would return (desired × target).
    metric_name: String,
    metric_value: f64,
    /// `brakeWindowSeconds`: how far back the CNPG brake read lag and writes.
    brake_window_seconds: u32,
    query: String,
}

impl Args {
    /// The metadata flags that were given, as metadata keys.
    fn overrides(&self) -> Vec<(&'static str, String)> {
        [
            ("cluster", &self.cluster),
            ("engine", &self.engine),
            ("pooler", &self.pooler),
            ("metric", &self.metric),
            ("target", &self.target),
            ("minReplicas", &self.min_replicas),
            ("maxReplicas", &self.max_replicas),
            ("maxSyncReplicas", &self.max_sync_replicas),
            (
                "maxReplicationLagSeconds",
                &self.max_replication_lag_seconds,
            ),
            ("brakeWindowSeconds", &self.brake_window_seconds),
            ("maxReplicationLagBytes", &self.max_replication_lag_bytes),
            ("maxClientWaitSeconds", &self.max_client_wait_seconds),
            ("defaultPoolSize", &self.default_pool_size),
            ("reservePoolSize", &self.reserve_pool_size),
            ("maxDbConnections", &self.max_db_connections),
            ("dryRun", &self.dry_run),
            (
                "convergenceDeadlineSeconds",
                &self.convergence_deadline_seconds,
            ),
            ("scaleIn", &self.scale_in),
            ("schedules", &self.schedules),
            ("signals", &self.signals),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.clone()?)))
        .collect()
    }

    /// The namespace, ScaledObject name and metadata: the live object's, or the flags' alone.
    async fn source(&self) -> anyhow::Result<(String, String, HashMap<String, String>)> {
        let Some(reference) = &self.scaled_object else {
            let (Some(namespace), Some(cluster)) = (&self.namespace, &self.cluster) else {
                anyhow::bail!("give --scaled-object NAMESPACE/NAME, or --namespace and --cluster");
            };
            // A pooler trigger's ScaledObject is named after its Pooler (chartgen's and the
            // metadata's default), the Cluster being the budget's database.
            let name = self.pooler.as_ref().unwrap_or(cluster);
            return Ok((namespace.clone(), name.clone(), HashMap::new()));
        };
        let Some((namespace, name)) = reference.split_once('/') else {
            anyhow::bail!("--scaled-object {reference:?} is not NAMESPACE/NAME");
        };
        anyhow::ensure!(
            self.namespace.as_deref().is_none_or(|ns| ns == namespace),
            "--namespace differs from the namespace of --scaled-object"
        );
        let client = kube::Client::try_default()
            .await
            .context("--scaled-object: cannot build a Kubernetes client")?;
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client, namespace, &scaler::scaledobject::resource());
        let object = tokio::time::timeout(self.query_timeout, api.get(name))
            .await
            .map_err(|_| anyhow::anyhow!("reading ScaledObject {reference} timed out"))?
            .with_context(|| format!("reading ScaledObject {reference}"))?;
        let rule = AddressMatch(self.scaler_address.clone());
        let trigger = scaledobject::trigger(&serde_json::to_value(&object)?, &rule)
            .with_context(|| {
                format!(
                    "ScaledObject {reference} has no external trigger whose scalerAddress matches                      --scaler-address {}",
                    self.scaler_address.join(", ")
                )
            })?;
        Ok((namespace.to_owned(), name.to_owned(), trigger.metadata))
    }

    pub async fn run(self) -> anyhow::Result<()> {
        self.log.init()?;
        let (namespace, name, mut md) = self.source().await?;
        for (key, value) in self.overrides() {
            md.insert(key.to_owned(), value);
        }
        let config = metadata::parse(&name, &md)?;
        let metrics = Metrics::register(&mut Registry::default());
        let topology = match Topology::client(self.topology).await? {
            None => Topology::Metrics,
            Some(client) => Topology::Direct {
                client,
                timeout: self.query_timeout,
            },
        };
        let observer = Observer {
            prometheus: backend::Client::new(
                &self.prometheus_url,
                self.query_timeout,
                1,
                backend::DEFAULT_MAX_RESPONSE_BYTES,
                metrics.clone(),
            )?,
            topology,
            metrics,
            convergence_deadline: self.convergence_deadline,
            batch_size: 1,
            concurrency: 1,
        };
        let key = Arc::new(Key {
            namespace: namespace.clone(),
            name,
            config: config.clone().into(),
        });
        let evaluation = observer
            .evaluate(std::slice::from_ref(&key))
            .await
            .into_iter()
            .next()
            .with_context(|| {
                format!(
                    "evaluating {namespace}/{}: no result came back (a bug in the scaler)",
                    key.name
                )
            })??;
        let report = Report {
            evaluation: &evaluation,
            summary: evaluation.summary(),
            metric_name: config.metric_name(),
            metric_value: f64::from(evaluation.decision.desired) * config.target,
            brake_window_seconds: config.brake_window_seconds,
            query: {
                let mut query = promql::decision_query(
                    &[Target {
                        namespace: namespace.clone(),
                        cluster: config.cluster.clone(),
                    }],
                    Shape::of(&config),
                );
                if let Some((shape, cluster)) = Shape::budget_of(&config, &namespace) {
                    query.push_str("\n\n# the connection budget, a second query\n");
                    query.push_str(&promql::decision_query(&[cluster], shape));
                }
                query
            },
        };
        match self.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            Output::Text => print!("{}", text(&report)),
        }
        Ok(())
    }
}

fn text(report: &Report<'_>) -> String {
    let e = report.evaluation;
    let mut s = String::new();
    let (what, per) = match e.policy.engine {
        Engine::Cnpg => ("CNPG cluster", "read replica"),
        Engine::Redis => ("RedisFailover", "read replica"),
        Engine::Pgbouncer => ("CNPG Pooler", "pooler instance"),
    };
    let _ = writeln!(
        s,
        "{what} {}/{} ({}, target {} per {per})",
        e.namespace, e.cluster, e.metric, e.policy.target
    );
    decision_section(&mut s, report);
    inputs_section(&mut s, e, report.brake_window_seconds);
    guards_section(&mut s, e);
    let _ = writeln!(
        s,
        "\nQuery (one per decision)\n  {}",
        report.query.replace('\n', "\n  ")
    );
    s
}

/// What a signal's load counts.
fn unit(engine: Engine, metric: Metric) -> &'static str {
    match metric {
        Metric::ReadConnections if engine == Engine::Redis => {
            "client connections on Redis replicas, less the sentinels', the exporter's and the \
             master link"
        }
        Metric::ReadConnections => "active client backends on replicas",
        Metric::ReadCpuUtilization => {
            "CPU millicores of the postgres container on streaming replicas"
        }
        Metric::ReadConnectionUsage => {
            "client connections over max_connections on streaming replicas, percent summed"
        }
        Metric::ReadCommandsPerSecond => "read commands per second on Redis replicas",
        Metric::ClientConnections => {
            "clients of the Pooler's PgBouncers, served (cl_active) and waiting (cl_waiting)"
        }
    }
}

/// The count, its reason and what GetMetrics serves.
fn decision_section(s: &mut String, report: &Report<'_>) {
    let (e, d) = (report.evaluation, &report.evaluation.decision);
    let _ = writeln!(s, "\nDecision");
    let _ = writeln!(
        s,
        "  desired instances     {}   reason: {}",
        d.desired, d.reason
    );
    let _ = writeln!(s, "  recommended           {}", d.recommended);
    let _ = writeln!(s, "  why                   {}", e.summary());
    let _ = writeln!(
        s,
        "  GetMetrics            {} = {} (= desired × target; the HPA computes ceil(value / target))",
        report.metric_name, report.metric_value
    );
}

/// What was measured: instances, loads, and the lag brake's series.
fn inputs_section(s: &mut String, e: &Evaluation, brake_window_seconds: u32) {
    let (p, o, d) = (&e.policy, &e.observation, &e.decision);
    let _ = writeln!(s, "\nInputs (topology: {})", e.topology);
    // Each engine counts its instances by its own exporter's pods.
    let (prefix, pods) = match p.engine {
        Engine::Cnpg => ("", "-<n> reporting cnpg_pg_replication_in_recovery"),
        Engine::Redis => ("rfr-", "-<n> reporting redis_instance_info"),
        Engine::Pgbouncer => (
            "",
            "-<hash>-<hash> reporting cnpg_pgbouncer_last_collection_error",
        ),
    };
    let _ = writeln!(
        s,
        "  instance series       {} (pods {prefix}{}{pods})",
        e.instance_series, e.cluster
    );
    let current_from = match e.current_source {
        CurrentSource::ClusterSpec if p.engine == Engine::Redis => {
            "RedisFailover spec.redis.replicas"
        }
        CurrentSource::ClusterSpec => "Cluster spec.instances",
        CurrentSource::InstanceSeries => "count of instance series",
        CurrentSource::Simulated => "the backtest's simulated HPA",
    };
    let _ = writeln!(
        s,
        "  current instances     {} (from {current_from})",
        o.current
    );
    let absent = match (e.load_series_present, p.engine) {
        (true, _) => "",
        (false, Engine::Redis) => " (no load series: the master has no replicas)",
        (false, _) => " (no load series: CNPG omits zero rows)",
    };
    let _ = writeln!(
        s,
        "  read load             {} ({}){absent}",
        o.load,
        unit(p.engine, p.metric)
    );
    for (signal, load) in p.extra.iter().zip(o.extra_loads) {
        if let Some(signal) = signal {
            let _ = writeln!(
                s,
                "  signal {}  {load} / target {} ({})",
                signal.metric,
                signal.target,
                unit(p.engine, signal.metric)
            );
        }
    }
    let _ = writeln!(s, "  winning signal        {}", d.signal);
    if let Some(pooler) = o.pooler {
        let b = pooler.budget;
        let _ = writeln!(
            s,
            "  waiting clients       {} (oldest waited {}s; maxClientWaitSeconds {})",
            pooler.waiting, pooler.max_wait_seconds, p.max_client_wait_seconds
        );
        let _ = writeln!(
            s,
            "  connection budget     max_connections {} − reserved {} − other clients {} = room \
             for {} instances of {} server connections",
            b.max_connections, b.reserved, b.other, b.fits, b.per_instance
        );
    }
    if let Some(warming) = e.warming_replicas {
        let _ = writeln!(
            s,
            "  warming replicas      {warming} (WAL receiver down: left out of the CPU signal)"
        );
    }
    match o.redis {
        Some(r) => replication_lines(s, e, r),
        None => lag_lines(s, e, brake_window_seconds),
    }
}

/// A Redis master's replication health: the brake's inputs, each as the exporter reports it.
fn replication_lines(s: &mut String, e: &Evaluation, r: RedisReplication) {
    let (p, o) = (&e.policy, &e.observation);
    // Evaluation refuses an answer without exactly one master: the other series are replicas.
    let replicas = e.instance_series.saturating_sub(1);
    _ = writeln!(
        s,
        "  replica links down    {} of {replicas} (redis_master_link_up 0)",
        r.links_down
    );
    _ = writeln!(
        s,
        "  replicas syncing      {} of {replicas} (redis_master_sync_in_progress 1, or listed by the master not online: a full sync)",
        r.syncing
    );
    let threshold = if p.max_lag_bytes > 0.0 {
        format!("maxReplicationLagBytes {}", p.max_lag_bytes)
    } else {
        "not compared: maxReplicationLagBytes 0".to_owned()
    };
    match r.max_lag_bytes {
        _ if o.lag_unknown => {
            _ = writeln!(
                s,
                "  replica lag, bytes    unknown: the master reports no replica offsets (counts as \
             lagging; {threshold})"
            )
        }
        Some(lag) => {
            _ = writeln!(
                s,
                "  replica lag, bytes    {lag} B, the largest of master offset − a replica's \
             acknowledged offset ({threshold})"
            )
        }
        None => {
            _ = writeln!(
                s,
                "  replica lag, bytes    none reported (no replica offsets; {threshold})"
            )
        }
    }
    let gate = BACKGROUND_REPL_BYTES_PER_SECOND;
    match (e.repl_bytes_per_second, o.primary_writing) {
        (Some(rate), Some(true)) => {
            _ = writeln!(
                s,
                "  master replication    {rate} B/s (above the {gate} B/s of sentinel hellos and \
             pings: writing)"
            )
        }
        (Some(rate), _) => {
            _ = writeln!(
                s,
                "  master replication    {rate} B/s (at most the {gate} B/s of sentinel hellos and \
             pings: idle)"
            )
        }
        (None, _) => {
            _ = writeln!(
                s,
                "  master replication    unknown (no rate of redis_master_repl_offset yet: counts as \
             writing)"
            )
        }
    }
}

/// Replica lag and the primary's WAL rate, when the brake queried them.
fn lag_lines(s: &mut String, e: &Evaluation, window_seconds: u32) {
    let o = &e.observation;
    if e.policy.max_lag_seconds <= 0.0 {
        _ = writeln!(s, "  replica lag, WAL      not queried (lag brake off)");
        return;
    }
    let label = format!("replica lag, {window_seconds}s max");
    match o.max_lag_seconds {
        Some(lag) => _ = writeln!(s, "  {label:<21} {lag} s"),
        None => _ = writeln!(s, "  {label:<21} none (no replica lags)"),
    }
    if o.lag_unknown {
        _ = writeln!(
            s,
            "  replica lag known     no: a replica has no lag series (counts as lagging)"
        );
    }
    match e.wal_bytes_per_second {
        Some(rate) => {
            let state = if o.primary_writing == Some(true) {
                "writing"
            } else {
                "idle"
            };
            _ = writeln!(s, "  primary WAL rate      {rate} B/s ({state})")
        }
        None => {
            _ = writeln!(
                s,
                "  primary WAL rate      unknown (no WAL rate yet: counts as writing)"
            )
        }
    }
}

/// Every guard of the decision: the bounds first, then what raises, caps or holds the count.
fn guards_section(s: &mut String, e: &Evaluation) {
    let (p, d) = (&e.policy, &e.decision);
    let _ = writeln!(s, "\nGuards");
    if p.engine == Engine::Redis {
        let _ = writeln!(
            s,
            "  sync quorum           none (Redis replication is asynchronous)"
        );
        let _ = writeln!(
            s,
            "  floor                 {} = max(minReplicas {}, 2)",
            d.floor, p.min_replicas
        );
    } else {
        let quorum_from = match e.quorum_source {
            QuorumSource::Metadata => "maxSyncReplicas metadata",
            QuorumSource::ClusterSpec => "the Cluster's sync settings",
            QuorumSource::Default => "default",
        };
        let _ = writeln!(
            s,
            "  sync quorum           {} (from {quorum_from})",
            p.quorum
        );
        let _ = writeln!(
            s,
            "  floor                 {} = max(minReplicas {}, quorum + 1 = {}, 2)",
            d.floor,
            p.min_replicas,
            p.quorum.saturating_add(1)
        );
    }
    let _ = writeln!(
        s,
        "  ceiling               {} = max(maxReplicas {}, floor)",
        d.ceiling, p.max_replicas
    );
    let _ = writeln!(
        s,
        "  raw                   {} = 1 + ceil(load / target)",
        d.raw
    );
    match e.observation.redis {
        Some(r) => _ = writeln!(s, "  replication brake     {}", redis_brake_line(e, r)),
        None => _ = writeln!(s, "  lag brake             {}", brake_line(e)),
    }
    let _ = writeln!(s, "  schedule              {}", schedule_line(e));
    let _ = writeln!(
        s,
        "  scale-in              {}",
        if p.scale_in_disabled {
            "disabled: never fewer than the current count"
        } else {
            "enabled"
        }
    );
    let _ = writeln!(s, "  quota ceiling         {}", quota_line(e));
    let _ = writeln!(s, "  convergence           {}", convergence_line(e));
    let _ = writeln!(
        s,
        "  dry run               {}",
        if p.dry_run {
            "yes: holding the current count"
        } else {
            "no"
        }
    );
}

fn brake_line(e: &Evaluation) -> String {
    let threshold = e.policy.max_lag_seconds;
    match e.decision.brake {
        Brake::Off => "off (maxReplicationLagSeconds 0)".to_owned(),
        Brake::Clear => format!("clear (every replica's lag known, not above {threshold} s)"),
        Brake::IdleLag => {
            format!("ignored: lag above {threshold} s (or unknown) but the primary writes no WAL")
        }
        Brake::Engaged => {
            let writes = match e.observation.primary_writing {
                Some(true) => "the primary writes WAL",
                _ => "the primary's WAL rate is unknown",
            };
            format!("ENGAGED: lag above {threshold} s (or unknown) while {writes}; holding")
        }
    }
}

/// The Redis brake: what is unhealthy, and whether the master's writes make it hold.
fn redis_brake_line(e: &Evaluation, r: RedisReplication) -> String {
    let (p, o) = (&e.policy, &e.observation);
    let mut unhealthy = Vec::new();
    if r.links_down > 0 {
        unhealthy.push(format!("{} replica link(s) down", r.links_down));
    }
    if r.syncing > 0 {
        unhealthy.push(format!("{} replica(s) in a full sync", r.syncing));
    }
    if o.lag_unknown {
        unhealthy.push("replica offsets unknown".to_owned());
    } else if let Some(lag) = r
        .max_lag_bytes
        .filter(|lag| p.max_lag_bytes > 0.0 && *lag > p.max_lag_bytes)
    {
        unhealthy.push(format!(
            "offset lag {lag} B above maxReplicationLagBytes {}",
            p.max_lag_bytes
        ));
    }
    let unhealthy = unhealthy.join(", ");
    match e.decision.brake {
        // The Redis brake has no off switch; Off would be a CNPG state.
        Brake::Off | Brake::Clear => {
            let lag = if p.max_lag_bytes > 0.0 {
                format!("offset lag not above {} B", p.max_lag_bytes)
            } else {
                "offset lag not compared".to_owned()
            };
            format!("clear (every replica's link up, none in a full sync, {lag})")
        }
        Brake::IdleLag => format!(
            "ignored: {unhealthy}, but the master is idle (replication at most {} B/s): \
             nothing is being lost",
            BACKGROUND_REPL_BYTES_PER_SECOND
        ),
        Brake::Engaged => {
            let writes = match o.primary_writing {
                Some(true) => "the master writes",
                _ => "the master's writes are unknown",
            };
            format!("ENGAGED: {unhealthy} while {writes}; holding")
        }
    }
}

fn schedule_line(e: &Evaluation) -> String {
    if e.schedule.windows.is_empty() {
        return "no open window".to_owned();
    }
    let open: Vec<String> = e
        .schedule
        .windows
        .iter()
        .map(|w| format!("`{}` ({} to {})", w.window, w.opened, w.closes))
        .collect();
    format!(
        "floor {} from open windows: {}",
        e.schedule.floor,
        open.join(", ")
    )
}

fn quota_line(e: &Evaluation) -> String {
    let d = &e.decision;
    match (&e.quota, d.quota_ceiling) {
        _ if e.topology != "kube" => "not applied (needs --topology kube)".to_owned(),
        (Some(fit), Some(cap)) if fit.unreadable.is_some() => format!(
            "{cap} = max(existing, current, floor): ResourceQuota {} cannot be read ({}), so no \
             growth fits; HOLDING growth until it can",
            fit.quota,
            fit.unreadable.as_deref().unwrap_or_default()
        ),
        (Some(fit), Some(cap)) => {
            let used = fit
                .used
                .map_or("not yet counted".to_owned(), |u| u.to_string());
            format!(
                "{cap} = max(existing + {} more that fit, current, floor); binding: {} in ResourceQuota {} \
                 (hard {}, used {used}, {} per instance){}",
                fit.more,
                fit.resource,
                fit.quota,
                fit.hard,
                fit.cost,
                if d.reason == scaler_core::decision::Reason::Quota {
                    "; CAPPING"
                } else {
                    ""
                }
            )
        }
        _ => "none (no ResourceQuota limits what an instance uses)".to_owned(),
    }
}

fn convergence_line(e: &Evaluation) -> String {
    let deadline = e.policy.convergence_deadline_seconds;
    let ready = e
        .observation
        .convergence
        .map_or("?".to_owned(), |c| c.ready.to_string());
    match e.decision.convergence {
        ConvergencePhase::Unknown if e.policy.engine == Engine::Redis => {
            "not applied (a RedisFailover's ready count is not read)".to_owned()
        }
        ConvergencePhase::Unknown if deadline <= 0.0 => "hold off (deadline 0)".to_owned(),
        ConvergencePhase::Unknown => "unknown (no Cluster status)".to_owned(),
        ConvergencePhase::Converged => format!("converged ({ready} ready)"),
        ConvergencePhase::Converging { seconds } => format!(
            "{ready} of {} ready for {seconds:.0}s (deadline {deadline}s)",
            e.observation.current
        ),
        ConvergencePhase::Hold {
            attempt,
            remaining_seconds,
        } => format!(
            "STUCK: {ready} of {} ready past the {deadline}s deadline; hold {attempt} ends in {remaining_seconds:.0}s",
            e.observation.current
        ),
        ConvergencePhase::Retry {
            attempt,
            remaining_seconds,
        } => format!(
            "{ready} of {} ready past the deadline; retry window after hold {attempt}, {remaining_seconds:.0}s left",
            e.observation.current
        ),
    }
}
