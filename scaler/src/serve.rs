//! `scaler serve`: the KEDA external-scaler gRPC server, its admin port, and their wiring.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tower::layer::util::{Identity, Stack};
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{info, warn};

use crate::backend;
use crate::cache::{Cache, Timing};
use crate::decisions;
use crate::events::Events;
use crate::grpc::Scaler;
use crate::metrics::Metrics;
use crate::observe::{self, Observer};
use crate::parsed::MetadataCache;
use crate::proto::external_scaler_server::ExternalScalerServer;
use crate::scaledobject::{self, AddressMatch};
use crate::topology::{self, ClusterIndex, Topology};
use crate::warm;
use runtime::app::App;
use runtime::flags::{Admin, AdminFlags, ConnLimits, ServerFlags, ServerTls};
use runtime::logging::LogArgs;
use runtime::{admin, conn, tls};

/// How long the first read of --tls-client-ca-secret may take before the start fails.
const CLIENT_CA_WAIT: Duration = Duration::from_secs(30);
/// `--convergence-deadline`'s default, shared with `scaler explain`.
pub const DEFAULT_CONVERGENCE_DEADLINE: &str = "10m";
/// How long in-flight rpcs may take to finish after SIGTERM before the server stops anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The HTTP/2 PING interval on a quiet connection, and the time its answer may take, are each
/// `--idle-timeout` / this: a live client answers well within the idle timeout, so only sockets
/// that never speak HTTP/2 or dead peers reach it.
const KEEPALIVE_DIVISOR: u32 = 4;
/// Shortest `--idle-timeout`: below it the PINGs come too fast for a loaded client.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on one rpc until its response starts (a body sent slowly included); streams then run on.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `--cold-batch-window`.
const MAX_COLD_BATCH_WINDOW: Duration = Duration::from_secs(1);
/// Largest request header block: gRPC requests carry a few hundred bytes of headers.
const MAX_HEADER_LIST_SIZE: u32 = 64 * 1024;
/// Largest request message, on every service: a ScaledObject's reference and trigger metadata
/// are a few KiB at most (a `schedules` value at most 4). tonic's default, 4 MiB, reserves a
/// buffer of the size a message's 5-byte prefix declares, so one connection's streams could hold
/// GiBs; a longer message is refused (`OUT_OF_RANGE`, naming the limit) before its body is read.
const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// The layers around every service: the in-flight bound over all connections.
type Layers = Stack<GlobalConcurrencyLimitLayer, Identity>;
/// Most queries one refresh-tick call runs at once: a call's answers and new evaluations are
/// all in memory until it ends, so this bounds what a tick adds to the fleet's live set
/// (16 × `--observe-batch-size` keys), while cold keys still find half the query slots free.
const TICK_QUERIES: usize = 16;

/// `scaler serve`'s admin port also serves /decisions, and is set per pod through the environment.
#[derive(Debug, Clone, Copy)]
pub struct ServeAdmin;

impl AdminFlags for ServeAdmin {
    const HELP: &'static str =
        "Plaintext HTTP address for /healthz, /readyz, /metrics and /decisions";
    const ENV: Option<&'static str> = Some("SCALER_ADMIN_LISTEN");
}

/// `scaler serve`'s TLS (optional, ALPN h2) and its connection bounds, sized for KEDA's one
/// connection per operator replica.
#[derive(Debug, Clone, Copy)]
pub struct Grpc;

impl ServerFlags for Grpc {
    const TLS_REQUIRED: bool = false;
    const TLS_CERT_ENV: &'static str = "SCALER_TLS_CERT";
    const TLS_CERT_HELP: &'static str =
        "PEM certificate chain: serve gRPC over TLS (ALPN h2). Reloaded when the file changes";
    const TLS_KEY_ENV: &'static str = "SCALER_TLS_KEY";
    const TLS_KEY_HELP: &'static str = "PEM private key for --tls-cert";
    const MAX_CONNECTIONS: &'static str = "1024";
    const MAX_CONNECTIONS_HELP: &'static str = "Most open client connections. At the cap a new one closes, first, the oldest connection that has sent no rpc yet, then the one idle longest; only when all are busy is it refused";
    const MAX_CONNECTIONS_PER_PEER: &'static str = "128";
    const HANDSHAKE_TIMEOUT_HELP: &'static str =
        "A client must finish the TLS handshake and send its first rpc's headers within this";
    const IDLE_TIMEOUT: &'static str = "2m";
    const IDLE_TIMEOUT_HELP: &'static str = "Close a connection with no rpc in flight and no request for this long; PINGs from the client do not count. The server PINGs quiet connections every quarter of it to find dead peers";
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// gRPC listen address.
    #[arg(long, default_value = "0.0.0.0:6000", env = "SCALER_LISTEN")]
    pub listen: SocketAddr,
    /// Prometheus-compatible API root, e.g. http://vmselect:8481/select/0/prometheus.
    #[arg(long, env = "SCALER_PROMETHEUS_URL")]
    pub prometheus_url: String,
    /// Where Cluster spec.instances and the sync quorum come from.
    #[arg(long, value_enum, default_value = "auto", env = "SCALER_TOPOLOGY")]
    pub topology: topology::Mode,
    #[command(flatten)]
    pub admin: Admin<ServeAdmin>,
    /// One decision per ScaledObject serves every call within this interval.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub refresh_interval: Duration,
    /// After this long without a successful decision, answers become UNAVAILABLE.
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    pub staleness: Duration,
    /// Bound on each backend query (Prometheus, Kubernetes); keep it under KEDA's 3 s.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,
    /// Most Prometheus queries in flight at once (protects a slow backend; waiting counts toward
    /// --query-timeout).
    #[arg(long, default_value = "64")]
    pub max_concurrent_queries: usize,
    /// Largest Prometheus answer read, in bytes; a larger one is an error (UNAVAILABLE) and is
    /// abandoned while streaming. A decision's answer is a few hundred bytes.
    #[arg(long, default_value_t = backend::DEFAULT_MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,
    /// Most CNPG clusters one Prometheus query answers for on a refresh tick (1 = one query per
    /// ScaledObject); long batches are split further so a query stays under 12 KiB.
    #[arg(long, default_value_t = observe::DEFAULT_BATCH_SIZE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=observe::MAX_BATCH_SIZE as u64))]
    pub observe_batch_size: usize,
    /// How long spec.instances may stay above the Cluster's ready instances before the scaler
    /// holds at the ready count (reason `stuck`); 0s turns the hold off. Trigger metadata
    /// `convergenceDeadlineSeconds` overrides it per ScaledObject.
    #[arg(long, default_value = DEFAULT_CONVERGENCE_DEADLINE, value_parser = humantime::parse_duration, env = "SCALER_CONVERGENCE_DEADLINE")]
    pub convergence_deadline: Duration,
    /// Cold ScaledObjects arriving within this of each other (a scaler start: KEDA asks for the
    /// whole fleet) are evaluated together in batched queries; one while no other is being
    /// evaluated goes at once. 0s evaluates each alone. At most 1s: a cold answer takes this plus the query.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub cold_batch_window: Duration,
    /// Before reporting ready, list the ScaledObjects that name this scaler (--scaler-address)
    /// and evaluate them in batched queries, so a whole fleet's first calls are answered from
    /// memory; ready anyway after this long (the rest goes on). Needs the Kubernetes topology and
    /// RBAC to list ScaledObjects; 0s turns it off.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, env = "SCALER_WARM_START_TIMEOUT")]
    pub warm_start_timeout: Duration,
    /// Which ScaledObjects the warm start evaluates: a trigger of type external whose
    /// scalerAddress host is this value or a longer DNS name of it (with `host:port`, the port
    /// must match too), as `scaler status` reads them. Repeat or comma-separate.
    #[arg(long = "scaler-address", value_delimiter = ',', default_value = scaledobject::DEFAULT_SCALER_ADDRESS, env = "SCALER_ADDRESSES")]
    pub scaler_address: Vec<String>,
    /// Forget ScaledObjects nobody asked about for this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub cache_ttl: Duration,
    /// Most ScaledObjects (and distinct trigger metadata) held; past it the least recently asked
    /// are forgotten. Callers choose the keys, so this bounds memory and /metrics.
    #[arg(long, default_value_t = crate::cache::DEFAULT_CAPACITY,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_cached_objects: usize,
    /// Record Kubernetes Events on ScaledObjects (a guard engaging or releasing, invalid
    /// metadata); needs the Kubernetes topology and RBAC to create and patch events.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SCALER_EVENTS")]
    pub events: bool,
    /// How often StreamIsActive repeats `true`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub stream_heartbeat: Duration,
    /// Close client connections after this age so new scaler pods get traffic (headless Service).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_connection_age: Option<Duration>,
    #[command(flatten)]
    pub limits: ConnLimits<Grpc>,
    /// Most concurrent HTTP/2 streams (rpcs, StreamIsActive streams) on one connection. KEDA
    /// sends every ScaledObject's calls over one connection, so this bounds how many of a
    /// restart's cold calls the scaler sees at once, and how many external-push ScaledObjects
    /// (one open stream each) one KEDA can have.
    #[arg(long, default_value = "1024")]
    pub max_streams_per_connection: u32,
    /// Most rpcs in flight over all connections; past it a new rpc is refused at once with
    /// RESOURCE_EXHAUSTED (KEDA asks again at its next poll). Bounds what a flood of slow rpcs
    /// spread over many connections holds. A streaming rpc counts until its stream starts.
    #[arg(long, default_value = "4096")]
    pub max_in_flight_rpcs: usize,
    #[command(flatten)]
    pub tls: ServerTls<Grpc>,
    /// PEM CA bundle: require client certificates signed by it (mTLS).
    #[arg(long, requires = "tls_cert", env = "SCALER_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// NAMESPACE/NAME of a Secret whose `ca.crt` client certificates must chain to (mTLS), watched
    /// through the Kubernetes API: KEDA's client CA lives in KEDA's namespace.
    #[arg(
        long,
        requires = "tls_cert",
        conflicts_with = "tls_client_ca",
        env = "SCALER_TLS_CLIENT_CA_SECRET"
    )]
    pub tls_client_ca_secret: Option<crate::client_ca::SecretRef>,
    /// Accept only client certificates naming one of these (subject CN, DNS or URI SAN; repeat
    /// or comma-separate). Without it, any certificate from the client CA is accepted.
    #[arg(
        long = "tls-client-identity",
        value_delimiter = ',',
        env = "SCALER_TLS_CLIENT_IDENTITIES"
    )]
    pub tls_client_identities: Vec<String>,
    #[command(flatten)]
    pub log: LogArgs,
}

impl Args {
    /// Who may call, from --tls-client-ca / --tls-client-ca-secret and --tls-client-identity.
    async fn client_auth(&self, app: &mut App) -> anyhow::Result<Option<tls::ClientAuth>> {
        let ca = match (&self.tls_client_ca, &self.tls_client_ca_secret) {
            (Some(path), _) => tls::ClientCa::File(path.clone()),
            (None, Some(secret)) => {
                let client = kube::Client::try_default().await.map_err(|e| {
                    anyhow::anyhow!("--tls-client-ca-secret: cannot build a Kubernetes client: {e}")
                })?;
                let (ca, watching) = crate::client_ca::watch_secret(
                    client,
                    secret.clone(),
                    CLIENT_CA_WAIT,
                    app.shutdown(),
                )
                .await?;
                app.spawn("client CA watch", watching);
                ca
            }
            (None, None) => {
                anyhow::ensure!(
                    self.tls_client_identities.is_empty(),
                    "--tls-client-identity needs --tls-client-ca or --tls-client-ca-secret"
                );
                return Ok(None);
            }
        };
        Ok(Some(tls::ClientAuth {
            ca,
            identities: self.tls_client_identities.clone(),
        }))
    }

    pub async fn run(self) -> anyhow::Result<()> {
        self.log.init()?;
        conn::raise_fd_limit();
        let app = App::new("scaler").with_signals();
        let grpc = TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("cannot listen on --listen {}", self.listen))?;
        let admin = TcpListener::bind(self.admin.admin_listen)
            .await
            .with_context(|| {
                let addr = self.admin.admin_listen;
                format!("cannot listen on --admin-listen {addr}")
            })?;
        self.serve_in(app, grpc, admin).await
    }

    /// Serves on already-bound listeners until `shutdown` is cancelled (tests bind port 0).
    pub async fn serve(
        self,
        grpc: TcpListener,
        admin: TcpListener,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let app = App::with_shutdown("scaler", shutdown);
        self.serve_in(app, grpc, admin).await
    }

    async fn serve_in(
        self,
        mut app: App,
        grpc: TcpListener,
        admin: TcpListener,
    ) -> anyhow::Result<()> {
        let limits = self.check()?;
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let tls = self.tls(&mut app).await?;
        let client = Topology::client(self.topology).await?;
        let events = match (&client, self.events) {
            (Some(client), true) => {
                let (events, publisher) =
                    Events::new(client.clone(), self.max_cached_objects, app.shutdown());
                app.spawn("events publisher", publisher);
                Some(events)
            }
            _ => None,
        };
        let index = client
            .clone()
            .map(|client| ClusterIndex::spawn(&mut app, client));
        let topology = index.clone().map_or(Topology::Metrics, Topology::Watched);
        info!(topology = topology.name(), prometheus = %self.prometheus_url, events = events.is_some(), "starting");
        let cache = self
            .cache(topology, &metrics)?
            .with_events(events.clone())
            .shared();
        app.spawn("decision cache", cache.clone().run(app.shutdown()));

        let metadata = MetadataCache::new(self.max_cached_objects, metrics.clone());
        let metadata = Arc::new(metadata.with_events(events));
        let warm = match client {
            Some(client) if !self.warm_start_timeout.is_zero() => {
                let (done, warmed) = tokio::sync::oneshot::channel();
                let deadline = tokio::time::Instant::now() + self.warm_start_timeout;
                let warming = WarmStart {
                    client,
                    rule: AddressMatch(self.scaler_address.clone()),
                    metadata: metadata.clone(),
                    cache: cache.clone(),
                    capacity: self.max_cached_objects,
                    index: index.clone(),
                    metrics: metrics.clone(),
                };
                app.spawn("warm start", warming.run(done, app.shutdown()));
                Some((warmed, deadline))
            }
            _ => None,
        };

        let (health, health_service) = tonic_health::server::health_reporter();
        set_health(&health, ServingStatus::NotServing).await;
        app.admin_on(admin, registry, decisions::router(cache.clone()));
        let ready = ready_when_synced(index, warm, health, app.readiness(), app.shutdown());
        app.spawn("health", ready);

        let scaler = Scaler {
            cache,
            metadata,
            metrics,
            shutdown: app.shutdown(),
            heartbeat: self.stream_heartbeat,
        };
        let router = self
            .grpc_server()
            .add_service(health_service.max_decoding_message_size(MAX_REQUEST_BYTES))
            .add_service(
                ExternalScalerServer::new(scaler).max_decoding_message_size(MAX_REQUEST_BYTES),
            );
        info!(listen = %grpc.local_addr()?, tls = tls.is_some(), max_connections = limits.max_connections, "serving gRPC");
        let server = serve_grpc(router, grpc, limits, tls, app.shutdown());
        app.run(server, DRAIN_TIMEOUT).await
    }

    /// The flag checks clap cannot make; the connection limits they leave.
    fn check(&self) -> anyhow::Result<conn::Limits> {
        anyhow::ensure!(
            !self.refresh_interval.is_zero() && !self.query_timeout.is_zero(),
            "--refresh-interval and --query-timeout must be above 0"
        );
        let idle_timeout = self.limits.idle_timeout;
        anyhow::ensure!(
            idle_timeout >= MIN_IDLE_TIMEOUT,
            "--idle-timeout ({}) must be at least {}",
            humantime::format_duration(idle_timeout),
            humantime::format_duration(MIN_IDLE_TIMEOUT)
        );
        let limits = self.limits.limits(conn::Protocol::Http2)?;
        anyhow::ensure!(
            self.max_streams_per_connection > 0 && self.max_in_flight_rpcs > 0,
            "--max-streams-per-connection and --max-in-flight-rpcs must be above 0"
        );
        anyhow::ensure!(
            self.cold_batch_window <= MAX_COLD_BATCH_WINDOW,
            "--cold-batch-window ({}) must be at most {}: a cold answer takes it plus the query, within KEDA's 3 s",
            humantime::format_duration(self.cold_batch_window),
            humantime::format_duration(MAX_COLD_BATCH_WINDOW)
        );
        anyhow::ensure!(
            self.staleness >= self.refresh_interval,
            "--staleness ({}) must be at least --refresh-interval ({})",
            humantime::format_duration(self.staleness),
            humantime::format_duration(self.refresh_interval)
        );
        Ok(limits)
    }

    /// The reloading TLS identity of --tls-cert/--tls-key, if any; its reload poller (and the
    /// client CA's watch) run in `app`'s task set.
    async fn tls(&self, app: &mut App) -> anyhow::Result<Option<tls::Reloading>> {
        if !self.tls.enabled() {
            return Ok(None);
        }
        let client = self.client_auth(app).await?;
        self.tls.load(app, tls::ALPN_GRPC, client)
    }

    /// The decision cache over Prometheus and `topology`.
    fn cache(&self, topology: Topology, metrics: &Metrics) -> anyhow::Result<Cache<Observer>> {
        let prometheus = backend::Client::new(
            &self.prometheus_url,
            self.query_timeout,
            self.max_concurrent_queries,
            self.max_response_bytes,
            metrics.clone(),
        )?;
        let observer = Observer {
            prometheus,
            topology,
            metrics: metrics.clone(),
            convergence_deadline: self.convergence_deadline,
            batch_size: self.observe_batch_size,
            // Half the query slots at most, so cold keys' queries always find one free; and a
            // tick's call holds all its answers at once, so at most TICK_QUERIES of them.
            concurrency: (self.max_concurrent_queries / 2).clamp(1, TICK_QUERIES),
        };
        let timing = Timing {
            refresh: self.refresh_interval,
            staleness: self.staleness,
            ttl: self.cache_ttl,
            capacity: self.max_cached_objects,
            cold_window: self.cold_batch_window,
        };
        Ok(Cache::new(observer, timing, metrics.clone()))
    }

    /// tonic's server with the keep-alive, stream and header limits of the flags.
    fn grpc_server(&self) -> Server<Layers> {
        let builder = Server::builder()
            // Sheds what the limits below cannot take at once instead of queueing it.
            .load_shed(true)
            .http2_keepalive_interval(Some(self.limits.idle_timeout / KEEPALIVE_DIVISOR))
            .http2_keepalive_timeout(Some(self.limits.idle_timeout / KEEPALIVE_DIVISOR))
            .max_concurrent_streams(self.max_streams_per_connection)
            .concurrency_limit_per_connection(self.max_streams_per_connection as usize)
            .http2_max_header_list_size(MAX_HEADER_LIST_SIZE)
            .timeout(RPC_TIMEOUT)
            .layer(GlobalConcurrencyLimitLayer::new(self.max_in_flight_rpcs));
        match self.max_connection_age {
            Some(age) => builder.max_connection_age(age),
            None => builder,
        }
    }
}

/// The warm start's task and what it needs ([`crate::warm`]).
struct WarmStart {
    client: kube::Client,
    rule: AddressMatch,
    metadata: Arc<MetadataCache>,
    cache: Arc<Cache<Observer>>,
    capacity: usize,
    index: Option<ClusterIndex>,
    metrics: Metrics,
}

impl WarmStart {
    /// Once the Cluster index is synced (the evaluations read it), lists and evaluates; says
    /// `done` (readiness waits for it) whatever the outcome: a failure only means a cold start.
    async fn run(self, done: tokio::sync::oneshot::Sender<()>, shutdown: CancellationToken) {
        let warm = async {
            if !synced(self.index.as_ref(), &shutdown).await {
                return;
            }
            let held = warm::warm_start(
                &self.client,
                &self.rule,
                &self.metadata,
                &self.cache,
                self.capacity,
            )
            .await
            .unwrap_or_else(|error| {
                warn!(%error, "warm start: cannot list ScaledObjects; starting cold");
                0
            });
            self.metrics.warm_start_objects.set(held as i64);
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = warm => {}
        }
        let _ = done.send(());
    }
}

/// Waits until the Cluster index, if any, has its first full list; `false` at shutdown.
async fn synced(index: Option<&ClusterIndex>, shutdown: &CancellationToken) -> bool {
    let Some(index) = index else { return true };
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    while !index.is_synced() {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = poll.tick() => {}
        }
    }
    true
}

/// Serving (health and /readyz) once the Cluster index, if any, has its first full list and the
/// warm start, if any, is done or past its deadline; at shutdown health goes NOT_SERVING with
/// readiness (`App`), so balancers stop sending new calls.
async fn ready_when_synced(
    index: Option<ClusterIndex>,
    warm: Option<(tokio::sync::oneshot::Receiver<()>, tokio::time::Instant)>,
    health: tonic_health::server::HealthReporter,
    readiness: admin::Readiness,
    shutdown: CancellationToken,
) {
    if !synced(index.as_ref(), &shutdown).await {
        return;
    }
    if let Some((warmed, deadline)) = warm {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = warmed => {}
            _ = tokio::time::sleep_until(deadline) => {
                warn!("warm start still running at --warm-start-timeout; ready anyway");
            }
        }
    }
    set_health(&health, ServingStatus::Serving).await;
    readiness.set(true);
    info!("ready");
    shutdown.cancelled().await;
    set_health(&health, ServingStatus::NotServing).await;
}

/// Serves gRPC on `listener` (over TLS when `tls` is set) until `shutdown`.
async fn serve_grpc(
    router: tonic::transport::server::Router<Layers>,
    listener: TcpListener,
    limits: conn::Limits,
    tls: Option<tls::Reloading>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let signal = {
        let shutdown = shutdown.clone();
        async move { shutdown.cancelled().await }
    };
    // The accept loop runs beside the server it feeds (a panic in it is the server's).
    let served = match &tls {
        Some(tls) => {
            let incoming = tls.incoming(listener, limits, shutdown);
            let serve = router.serve_with_incoming_shutdown(incoming.connections, signal);
            tokio::join!(serve, incoming.accept).0
        }
        None => {
            let incoming = conn::incoming(listener, limits, shutdown, |tcp, _| async { Some(tcp) });
            let serve = router.serve_with_incoming_shutdown(incoming.connections, signal);
            tokio::join!(serve, incoming.accept).0
        }
    };
    served.context("gRPC server failed")
}

async fn set_health(health: &tonic_health::server::HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health
        .set_service_status("externalscaler.ExternalScaler", status)
        .await;
}
