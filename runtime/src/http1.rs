//! Serving an axum `Router` over HTTP/1.1 on [`conn`]'s tracked connections: the admin port's
//! plain TCP and the webhook's TLS alike.
use std::io;
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::conn::Tracked;

/// In every request's extensions: cancelling it closes the connection the request came on, at
/// once. For a response body with a deadline: hyper stops polling the body of a reader that
/// does not read (or reads a trickle), so the body cannot end itself.
#[derive(Clone, Debug)]
pub struct CloseConnection(pub CancellationToken);

/// Serves `router` on the connections `incoming` yields until `shutdown`, then waits for open
/// requests to finish (the caller bounds that wait). Headers must arrive within
/// `header_read_timeout`, which also closes keep-alive connections idle that long. `server`
/// names the port in the logs.
pub async fn serve<S>(
    mut incoming: ReceiverStream<io::Result<Tracked<S>>>,
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
    loop {
        let conn = tokio::select! {
            _ = shutdown.cancelled() => break,
            conn = incoming.next() => match conn {
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
        tokio::spawn(async move {
            tokio::select! {
                served = served => if let Err(error) = served {
                    debug!(%error, %remote, server, "connection closed");
                },
                _ = close.cancelled() => debug!(%remote, server, "connection closed by its handler"),
            }
        });
    }
    graceful.shutdown().await;
}
