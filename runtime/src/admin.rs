//! The admin HTTP server (plaintext, for kubelet probes and Prometheus), shared by every server
//! and controller:
//!
//! * `GET /healthz`: 200 while the process runs (liveness).
//! * `GET /readyz`: 200 once [`Readiness::set`] says so, else 503 (readiness).
//! * `GET /metrics`: the [`Registry`] in OpenMetrics text, encoded while it streams (a scrape holds
//!   a few 64 KiB chunks of it at once, whatever its size).
//! * whatever read-only routes the caller adds with [`serve_with`] (the scaler's `/decisions`).
//!
//! [`spawn_thread`] (what [`crate::app::App`] uses) serves them on a thread of its own with its
//! own tokio runtime, so a scrape of a large registry or a caller's heavy route never takes a
//! worker of the runtime that serves the process's main work (the scaler's gRPC). On that
//! runtime, `tokio::task::spawn_blocking` runs on one thread at the lowest CPU priority
//! ([`BACKGROUND_NICE`]): a route's CPU-heavy part goes there and gets a core only when the
//! process's other threads leave one free. Such work must hold no lock the other threads take
//! (a thread that waits for CPU while holding one would pass its wait on).
//!
//! Probes and scrapes need few connections: the port takes [`LIMITS`] (see [`crate::conn`]:
//! a cap, a per-peer cap, half-sent or silent connections closed first to make room) and request
//! headers must arrive within [`HEADER_TIMEOUT`].
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use runtime::admin;
//! # async fn run(registry: prometheus_client::registry::Registry, shutdown: tokio_util::sync::CancellationToken) -> std::io::Result<()> {
//! let readiness = admin::Readiness::default(); // starts unready
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:9090").await?;
//! // The servers run it in their `runtime::app::App` (`App::admin`), which owns the task.
//! let served = admin::serve(listener, Arc::new(registry), readiness.clone(), shutdown.clone());
//! readiness.set(true);
//! served.await?;
//! # Ok(()) }
//! ```
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context as _;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{conn, http1};

/// The admin port's connection limits: kubelet probes and a few scrapers.
pub const LIMITS: conn::Limits = conn::Limits {
    max_connections: 64,
    max_connections_per_peer: 16,
    handshake_timeout: HEADER_TIMEOUT,
    idle_timeout: Duration::from_secs(30),
    protocol: conn::Protocol::Http1,
};
/// Request headers must arrive within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The nice value of the admin runtime's blocking thread: the lowest CPU priority.
pub const BACKGROUND_NICE: i32 = 19;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A shared readiness flag; starts unready. Once [`Readiness::shut`] (at shutdown) it stays
/// unready, whatever a task that has not seen the shutdown yet sets.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicU8>);

const UNREADY: u8 = 0;
const READY: u8 = 1;
const SHUT: u8 = 2;

impl Readiness {
    pub fn set(&self, ready: bool) {
        let to = if ready { READY } else { UNREADY };
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now != SHUT).then_some(to)
            });
    }

    /// Unready for good: the process is shutting down.
    pub fn shut(&self) {
        self.0.store(SHUT, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire) == READY
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// Serves the admin endpoints on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, registry, readiness, Router::new(), shutdown).await
}

/// [`serve`], plus the routes of `extra`: same port, same connection limits, so the network
/// policy that admits scrapers to /metrics covers them too. Shutdown does not wait for slow
/// handlers.
pub async fn serve_with(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    extra: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState {
            registry,
            readiness,
        })
        .merge(extra);
    let incoming = conn::incoming(listener, LIMITS, shutdown.clone(), |tcp, _| async {
        Some(tcp)
    });
    // Open requests are answered at once (no handler waits); header reads are bounded.
    http1::serve(incoming, app, HEADER_TIMEOUT, shutdown, "admin").await;
    Ok(())
}

/// [`serve_with`] on a new thread with a runtime of its own (one blocking thread, at
/// [`BACKGROUND_NICE`]); the future ends with the server (after `shutdown`).
pub fn spawn_thread(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    extra: Router,
    shutdown: CancellationToken,
) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
    let (done, ended) = tokio::sync::oneshot::channel();
    // Moved between runtimes as a plain socket: a tokio socket belongs to the runtime it was
    // registered with.
    let listener = listener.into_std();
    let spawned = std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let _ = done.send(run_on_own_runtime(
                listener, registry, readiness, extra, shutdown,
            ));
        });
    async move {
        spawned.context("cannot start the admin server's thread")?;
        ended
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the admin server's thread panicked")))
    }
}

fn run_on_own_runtime(
    listener: std::io::Result<std::net::TcpListener>,
    registry: Arc<Registry>,
    readiness: Readiness,
    extra: Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .thread_name("admin-background")
        .on_thread_start(|| {
            // Per thread on Linux (who = 0 is the calling thread); where it fails the work still
            // runs, at normal priority.
            if let Err(error) = rustix::process::setpriority_process(None, BACKGROUND_NICE) {
                tracing::debug!(%error, "cannot lower the admin background thread's priority");
            }
        })
        .build()
        .context("cannot build the admin server's runtime")?;
    let served = runtime.block_on(async {
        let listener = TcpListener::from_std(listener?)?;
        serve_with(listener, registry, readiness, extra, shutdown).await
    });
    // A render still running on the blocking thread is not waited for.
    runtime.shutdown_background();
    Ok(served?)
}

async fn readyz(State(state): State<AdminState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

/// Bytes per chunk of a `/metrics` body, and chunks in flight: a scrape holds about this much of
/// its text at once, whatever the registry's size. Encoded whole, the text of the scaler's
/// per-ScaledObject gauges (about 0.9 KB each) took 45 MB at 50,000 ScaledObjects, and the
/// string's growth doubled that for a moment (docs/benchmarks.md).
const CHUNK_BYTES: usize = 64 * 1024;
const CHUNKS_IN_FLIGHT: usize = 4;
/// A scraper that takes no chunk for this long, or is still reading after [`SCRAPE_DEADLINE`], is
/// dropped, and the encoding with it: the background thread it holds also renders `/decisions`.
const CHUNK_SEND_TIMEOUT: Duration = Duration::from_secs(30);
const SCRAPE_DEADLINE: Duration = Duration::from_secs(60);

/// The registry, encoded on the background thread while the body streams: the encoder waits for
/// the scraper (a bounded channel), never the other way round.
async fn metrics(State(state): State<AdminState>) -> Response {
    let (chunks, body) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let registry = state.registry.clone();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            sink: chunks,
            runtime,
            chunk: String::with_capacity(CHUNK_BYTES),
            gone: false,
            deadline: std::time::Instant::now() + SCRAPE_DEADLINE,
        };
        let encoded = prometheus_client::encoding::text::encode(&mut out, &registry);
        match encoded.and_then(|()| out.send()) {
            Ok(()) => {}
            // The scraper left or stalled (its connection ends the body); nothing to answer.
            Err(_) if out.gone => {}
            Err(error) => {
                tracing::warn!(%error, "cannot encode metrics; the scrape is cut short");
                let cut = std::io::Error::other(format!("cannot encode metrics: {error}"));
                // Best effort: a full channel means a scraper that is not reading, which the
                // cut body reaches anyway; waiting for it could hold the thread without bound.
                let _ = out.sink.try_send(Err(cut));
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(body));
    ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response()
}

/// Where the encoder writes: full chunks go to the body, each within [`CHUNK_SEND_TIMEOUT`] and
/// all within [`SCRAPE_DEADLINE`].
struct Chunks {
    sink: tokio::sync::mpsc::Sender<std::io::Result<String>>,
    runtime: tokio::runtime::Handle,
    chunk: String,
    /// The scraper left (the body was dropped) or stalled past the timeout.
    gone: bool,
    deadline: std::time::Instant,
}

impl Chunks {
    fn send(&mut self) -> std::fmt::Result {
        let chunk = std::mem::replace(&mut self.chunk, String::with_capacity(CHUNK_BYTES));
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        let sent = self.runtime.block_on(tokio::time::timeout(
            left.min(CHUNK_SEND_TIMEOUT),
            self.sink.send(Ok(chunk)),
        ));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => {
                self.gone = true;
                Err(std::fmt::Error)
            }
        }
    }
}

impl std::fmt::Write for Chunks {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.chunk.push_str(text);
        if self.chunk.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use axum::Extension;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    async fn fetch(addr: std::net::SocketAddr, path: &str) -> String {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn routes_run_on_the_admin_thread_blocking_work_at_the_lowest_priority_and_may_close() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let extra = Router::new()
            .route(
                "/where",
                get(|| async {
                    let thread = std::thread::current().name().unwrap_or("").to_owned();
                    let nice = tokio::task::spawn_blocking(|| {
                        rustix::process::getpriority_process(None).unwrap()
                    })
                    .await
                    .unwrap();
                    format!("thread={thread} blocking-nice={nice}")
                }),
            )
            .route(
                "/stuck",
                get(
                    |Extension(close): Extension<http1::CloseConnection>| async move {
                        let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
                        let held = close.at(deadline);
                        // A body that never ends, holding its deadline.
                        let never = futures::stream::unfold(held, |held| async move {
                            let _held = held;
                            std::future::pending::<Option<(std::io::Result<String>, _)>>().await
                        });
                        axum::body::Body::from_stream(never)
                    },
                ),
            );
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(spawn_thread(
            listener,
            Arc::new(Registry::default()),
            Readiness::default(),
            extra,
            shutdown.clone(),
        ));
        let answer = fetch(addr, "/where").await;
        // A body that never ends, past its handler's deadline: the connection's task closes it.
        let ended = tokio::time::timeout(Duration::from_secs(10), fetch(addr, "/stuck")).await;
        assert!(ended.unwrap().starts_with("HTTP/1.1 200"));
        assert!(
            answer.ends_with(&format!("thread=admin blocking-nice={BACKGROUND_NICE}")),
            "{answer}"
        );
        assert!(fetch(addr, "/healthz").await.ends_with("ok\n"));
        shutdown.cancel();
        served.await.unwrap().unwrap();
    }

    /// A registry many chunks long arrives whole and in order (an HTTP/1.0 request: no chunked
    /// framing to take apart), encoded while it streams.
    #[tokio::test]
    async fn a_registry_many_chunks_long_streams_whole() {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        let mut registry = Registry::default();
        let family = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("big", "a family of many series", family.clone());
        for i in 0..20_000 {
            family
                .get_or_create(&vec![("series".into(), format!("s{i:05}"))])
                .inc();
        }
        let mut expected = String::new();
        prometheus_client::encoding::text::encode(&mut expected, &registry).unwrap();
        assert!(expected.len() > 8 * CHUNK_BYTES, "{}", expected.len());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(spawn_thread(
            listener,
            Arc::new(registry),
            Readiness::default(),
            Router::new(),
            shutdown.clone(),
        ));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.0\r\nHost: admin\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        assert!(
            body == expected,
            "{} bytes, {} expected",
            body.len(),
            expected.len()
        );
        shutdown.cancel();
        served.await.unwrap().unwrap();
    }
}
