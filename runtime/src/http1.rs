//! Serving an axum `Router` over HTTP/1.1 on [`conn`]'s tracked connections: the admin port's
//! plain TCP and the webhook's TLS alike.
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::conn::Incoming;
use crate::tasks::Owned;

/// In every request's extensions: cancelling it closes the connection the request came on, at
/// once. For a response body with a deadline: hyper stops polling the body of a reader that
/// does not read (or reads a trickle), so the body cannot end itself.
#[derive(Clone, Debug)]
pub struct CloseConnection(pub CancellationToken);

/// Serves `router` on the connections `incoming` yields (running its accept loop beside) until
/// `shutdown`, then waits for open requests to finish (the caller bounds that wait). Headers must
/// arrive within `header_read_timeout`, which also closes keep-alive connections idle that long.
/// `server` names the port in the logs. Each connection's task is owned by this loop.
pub async fn serve<S>(
    incoming: Incoming<S>,
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
    let Incoming {
        mut connections,
        accept,
    } = incoming;
    let accepting = tokio::spawn(accept);
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
        let close = CancellationToken::new();
        let service = router
            .clone()
            .layer(Extension(CloseConnection(close.clone())));
        let service = TowerToHyperService::new(service);
        let served = graceful.watch(http.serve_connection(TokioIo::new(conn), service));
        serving.spawn(async move {
            tokio::select! {
                served = served => if let Err(error) = served {
                    debug!(%error, %remote, server, "connection closed");
                },
                _ = close.cancelled() => debug!(%remote, server, "connection closed by its handler"),
            }
        });
    }
    graceful.shutdown().await;
    serving.join_all().await;
    if let Err(failure) = accepting.await
        && failure.is_panic()
    {
        std::panic::resume_unwind(failure.into_panic());
    }
}
