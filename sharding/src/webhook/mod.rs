//! `scaler webhook`: the Flux shard-placement admission webhook (docs/design.md S8).
//!
//! `mutate` decides (pure), `assign` resolves a tenant's shard (the crate's index + namespace
//! label), `server` is the HTTPS shell, `metrics` the gauges.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tracing::{Instrument, info, info_span};

use runtime::app::App;
use runtime::controller::connect;
use runtime::flags::{Admin, ConnLimits, ServerFlags, ServerTls};
use runtime::{conn, logging::WebhookLogArgs, tls};

use crate::{Pin, follow, index};

pub mod assign;
pub mod metrics;
pub mod mutate;
pub mod review;
pub mod server;

/// How often readiness and the load gauges are recomputed from the index (cheap: one
/// placement pass over the tenants).
const GAUGE_REFRESH: Duration = Duration::from_secs(1);
/// ALPN: HTTP/1.1 only; the workspace's axum is built without HTTP/2, and the API server
/// calls webhooks over HTTP/1.1 just as well.
const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];
/// What a draining review gets beyond its admission deadline to write its answer.
const DRAIN_SLACK: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct Args {
    // Boxed: the flags are many, and the CLI enum should stay small (clippy large_enum_variant).
    #[command(flatten)]
    settings: Box<Settings>,
}

/// The webhook's serving flags: TLS required, connections bounded for the API server's calls.
#[derive(Debug, Clone, Copy)]
struct Server;

impl ServerFlags for Server {
    const TLS_REQUIRED: bool = true;
    const TLS_CERT_ENV: &'static str = "WEBHOOK_TLS_CERT";
    const TLS_CERT_HELP: &'static str =
        "Serving certificate chain (PEM); re-read when the file changes";
    const TLS_KEY_ENV: &'static str = "WEBHOOK_TLS_KEY";
    const TLS_KEY_HELP: &'static str = "Serving private key (PEM); re-read when the file changes";
    const MAX_CONNECTIONS: &'static str = "256";
    const MAX_CONNECTIONS_HELP: &'static str = "Most open connections. At the cap a new one closes, first, the oldest connection that has not been answered yet (mid-handshake, silent, half-sent), then the one idle longest; only when all are busy is it refused";
    const MAX_CONNECTIONS_PER_PEER: &'static str = "64";
    const HANDSHAKE_TIMEOUT_HELP: &'static str = "The TLS handshake must finish within this";
    const IDLE_TIMEOUT: &'static str = "60s";
    const IDLE_TIMEOUT_HELP: &'static str =
        "Close a connection that sends nothing for this long, whatever state it is in";
}

#[derive(Debug, clap::Args)]
struct Settings {
    /// Address of the HTTPS admission endpoint (POST /mutate-helmrelease-shard).
    #[arg(long, default_value = "0.0.0.0:9443", env = "WEBHOOK_LISTEN")]
    listen: SocketAddr,
    #[command(flatten)]
    tls: ServerTls<Server>,
    /// PEM CA bundle: require a client certificate signed by it, i.e. accept reviews only from
    /// an API server configured to present one (see docs/webhook.md). Re-read when it changes.
    #[arg(long, env = "WEBHOOK_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    #[command(flatten)]
    limits: ConnLimits<Server>,
    /// Request headers must arrive within this; also closes keep-alive connections idle this long.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    header_read_timeout: Duration,
    /// The request body must arrive within this (408 otherwise).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    body_read_timeout: Duration,
    /// Number of helm-controller shards K; tenants are placed on shard0..shard<K-1>.
    #[arg(long, env = "WEBHOOK_SHARDS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    shards: u32,
    #[command(flatten)]
    admin: Admin,
    /// Namespace of the helm-controller-shard<i> Deployments whose readiness gates placement.
    #[arg(long, default_value = "cozy-fluxcd")]
    flux_namespace: String,
    /// Treat every shard below K as ready and do not watch Deployments: for clusters where the
    /// shards run elsewhere or RBAC cannot read Deployments. Without it, no ready shard means
    /// new tenants are left on the legacy key, never sent to a shard nobody reconciles.
    #[arg(long)]
    assume_shards_ready: bool,
    /// Pin a tenant to a shard when it is first placed, e.g. `--pin tenant-big=shard0`
    /// (repeatable). Pins to shards ≥ K are ignored.
    #[arg(long = "pin", value_name = "TENANT=SHARD")]
    pins: Vec<Pin>,
    /// Timeout of each Kubernetes API call made while admitting.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    api_timeout: Duration,
    /// Upper bound on resolving a tenant's shard; keep well below the 5 s webhook timeout.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    admission_deadline: Duration,
    #[command(flatten)]
    log: WebhookLogArgs,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        let Settings {
            listen,
            tls,
            client_ca,
            limits,
            header_read_timeout,
            body_read_timeout,
            shards,
            admin,
            flux_namespace,
            assume_shards_ready,
            pins,
            api_timeout,
            admission_deadline,
            log,
        } = *self.settings;
        log.init()?;
        let limits = limits.limits(conn::Protocol::Http1)?;
        anyhow::ensure!(
            !header_read_timeout.is_zero() && !body_read_timeout.is_zero(),
            "--header-read-timeout and --body-read-timeout must be above 0"
        );
        let mut app = App::new("webhook").with_signals();
        let client = client_ca.map(|path| tls::ClientAuth {
            ca: tls::ClientCa::File(path),
            identities: Vec::new(),
        });
        let tls = tls
            .load(&mut app, ALPN_HTTP1, client)?
            .context("the webhook serves TLS only: --tls-cert is required")?;
        let flux_ns = (!assume_shards_ready).then_some(flux_namespace.as_str());
        let register = metrics::Metrics::register;
        let (client, metrics) = connect(&mut app, admin.admin_listen, register).await?;
        let index = follow(&mut app, client.clone(), flux_ns);
        let pinned = pins.into_iter().map(|Pin(t, s)| (t, s)).collect();
        let policy = assign::Policy {
            shards,
            pinned,
            assume_ready: assume_shards_ready,
        };
        let gauges = refresh(index.clone(), policy.clone(), metrics.clone(), &app);
        app.spawn("gauges", gauges.instrument(info_span!("gauges")));
        let resolver = assign::Resolver::new(
            index,
            kube::Api::all(client),
            policy,
            api_timeout,
            metrics.clone(),
        );
        let webhook = server::Webhook {
            resolver: Arc::new(resolver),
            metrics,
            deadline: admission_deadline,
            body_timeout: body_read_timeout,
        };

        let socket = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding --listen {listen}"))?;
        let local = socket.local_addr()?;
        let max_connections = limits.max_connections;
        let incoming = tls.incoming(socket, limits, app.shutdown());
        info!(%local, shards, max_connections, "serving the shard-placement webhook");
        let router = server::router(webhook);
        let server = runtime::http1::serve(
            incoming,
            router,
            header_read_timeout,
            app.shutdown(),
            "webhook",
        );
        // Readiness goes down as the token is cancelled; in-flight reviews then get their
        // admission deadline, plus a second to write the answer.
        let drain = admission_deadline + DRAIN_SLACK;
        app.run(server, drain).await
    }
}

/// Refreshes the gauges and flips readiness once the watches have synced, until shutdown
/// (which takes readiness down: `App`).
fn refresh(
    index: index::SharedIndex,
    policy: assign::Policy,
    metrics: metrics::Metrics,
    app: &App,
) -> impl Future<Output = ()> + Send + use<> {
    let (readiness, shutdown) = (app.readiness(), app.shutdown());
    async move {
        let mut tick = tokio::time::interval(GAUGE_REFRESH);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let index = index::read(&index);
            let synced = index.synced().ready(!policy.assume_ready);
            if synced != readiness.is_ready() {
                info!(synced, "watch caches synced");
                readiness.set(synced);
            }
            metrics.observe(&index, &policy.config(&index));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_the_contract() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from([
            "webhook",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
            "--shards",
            "4",
        ])
        .unwrap();
        let s = &cli.args.settings;
        assert_eq!(s.listen.to_string(), "0.0.0.0:9443");
        assert_eq!(s.admin.admin_listen.to_string(), "0.0.0.0:9090");
        assert_eq!(s.limits.max_connections, 256);
        assert_eq!(s.limits.idle_timeout, Duration::from_secs(60));
        // The webhook serves TLS only: its profile makes the files required.
        let error = Cli::try_parse_from(["webhook", "--tls-key", "k", "--shards", "4"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--tls-cert"), "{error}");
        assert_eq!(s.flux_namespace, "cozy-fluxcd");
        assert_eq!(s.shards, 4);
        assert!(
            Cli::try_parse_from([
                "webhook",
                "--tls-cert",
                "c",
                "--tls-key",
                "k",
                "--shards",
                "0"
            ])
            .is_err()
        );
    }
}
