//! Serving an axum `Router` over HTTP/1.1 on [`conn`]'s tracked connections: the admin port's
//! plain TCP and the webhook's TLS alike.
use std::sync::Arc;
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::conn::{Incoming, Tracked};
use crate::tasks::Owned;

/// In every request's extensions: closes the connection the request came on at a deadline
/// ([`CloseConnection::at`]). For a response body with a deadline: hyper stops polling the body
/// of a reader that does not read (or reads a trickle), so the body cannot end itself; the
/// connection's own task keeps the time.
#[derive(Clone, Debug)]
pub struct CloseConnection {
    deadline: Arc<watch::Sender<Option<Instant>>>,
}

impl Default for CloseConnection {
    fn default() -> Self {
        Self {
            deadline: Arc::new(watch::channel(None).0),
        }
    }
}

impl CloseConnection {
    /// Closes the connection at `deadline` unless the guard returned is dropped first (the
    /// answer went out in time).
    pub fn at(&self, deadline: Instant) -> Deadline {
        self.deadline.send_replace(Some(deadline));
        Deadline {
            deadline: self.deadline.clone(),
            at: deadline,
        }
    }

    /// The deadline in force, if any.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.borrow()
    }

    /// Ends when a deadline in force passes.
    async fn passed(&self) {
        let mut deadline = self.deadline.subscribe();
        loop {
            let at = *deadline.borrow_and_update();
            tokio::select! {
                // Not polled without a deadline (the precondition); the far instant is a placeholder.
                _ = tokio::time::sleep_until(at.unwrap_or_else(far_future)), if at.is_some() => return,
                // Never fails: `self` holds the sender.
                _ = deadline.changed() => {}
            }
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// The deadline [`CloseConnection::at`] set; dropping it lifts that deadline.
#[derive(Debug)]
pub struct Deadline {
    deadline: Arc<watch::Sender<Option<Instant>>>,
    at: Instant,
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // A later request's deadline stays.
        self.deadline.send_if_modified(|current| {
            let mine = *current == Some(self.at);
            if mine {
                *current = None;
            }
            mine
        });
    }
}

/// Serves `router` on the connections `incoming` yields (running its accept loop beside, so a
/// panic in it is the caller's) until `shutdown`, then waits for open requests to finish (the
/// caller bounds that wait). Headers must arrive within `header_read_timeout`, which also closes
/// keep-alive connections idle that long. `server` names the port in the logs. Each
/// connection's task is owned by this loop.
pub async fn serve<S>(
    incoming: Incoming<S>,
    router: Router,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
    server: &'static str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Incoming {
        connections,
        accept,
    } = incoming;
    let serving = serve_connections(connections, router, header_read_timeout, shutdown, server);
    tokio::join!(accept, serving);
}

async fn serve_connections<S>(
    mut connections: ReceiverStream<std::io::Result<Tracked<S>>>,
    router: Router,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
    server: &'static str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut serving = Owned::new("HTTP/1.1 connections");
    loop {
        let conn = tokio::select! {
            _ = shutdown.cancelled() => break,
            conn = connections.next() => match conn {
                Some(Ok(conn)) => conn,
                Some(Err(error)) => {
                    warn!(%error, server, "accept failed");
                    continue;
                }
                None => break,
            },
        };
        let remote = conn.remote_addr();
        let close = CloseConnection::default();
        let service = router.clone().layer(Extension(close.clone()));
        let service = TowerToHyperService::new(service);
        let served = graceful.watch(http.serve_connection(TokioIo::new(conn), service));
        serving.spawn(async move {
            tokio::select! {
                served = served => if let Err(error) = served {
                    debug!(%error, %remote, server, "connection closed");
                },
                _ = close.passed() => debug!(%remote, server, "connection closed: an answer passed its handler's deadline"),
            }
        });
    }
    graceful.shutdown().await;
    serving.join_all().await;
}
