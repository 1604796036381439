//! The HTTPS shell: POST `/mutate-helmrelease-shard` → [`admit`] → resolve → [`Pending::finish`].
//! A body that is not an AdmissionReview gets 400; any other path or method gets 404.
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::assign::Resolver;
use crate::metrics::Metrics;
use crate::mutate::{Admit, Outcome, Reason, admit};
use crate::review::AdmissionReview;
use runtime::tls::TlsConn;

/// The webhook path (cozystack-designs.md §2.2).
pub const PATH: &str = "/mutate-helmrelease-shard";
/// Largest accepted body: an object (≤ 1.5 MiB in etcd) plus oldObject and the envelope.
const BODY_LIMIT: usize = 4 * 1024 * 1024;

#[derive(Clone)]
pub struct Webhook {
    pub resolver: Arc<Resolver>,
    pub metrics: Metrics,
    /// Upper bound on resolving one tenant's shard; must stay well below the API server's
    /// webhook timeout (5 s) so a slow API answers "unchanged" rather than timing out.
    pub deadline: Duration,
}

pub fn router(webhook: Webhook) -> Router {
    Router::new()
        .route(PATH, post(review).fallback(not_found))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(webhook)
}

async fn not_found() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        "not found; POST AdmissionReviews to /mutate-helmrelease-shard\n",
    )
}

async fn review(State(webhook): State<Webhook>, body: Bytes) -> Response {
    let started = Instant::now();
    let review = match AdmissionReview::from_slice(&body) {
        Ok(review) => review,
        Err(error) => {
            info!(%error, "rejected a body that is not an AdmissionReview");
            return (StatusCode::BAD_REQUEST, format!("{error}\n")).into_response();
        }
    };
    let req = &review.request;
    let span = info_span!(
        "admission",
        uid = %req.uid,
        op = %req.operation,
        kind = %req.kind.kind,
        ns = req.namespace.as_deref().unwrap_or(""),
        name = req.name.as_deref().unwrap_or(""),
    );
    let outcome = webhook.decide(&review).instrument(span.clone()).await;
    webhook
        .metrics
        .admission(outcome.reason, started.elapsed().as_secs_f64());
    span.in_scope(|| debug!(reason = outcome.reason.as_str(), "allowed"));
    axum::Json(outcome.response.into_review()).into_response()
}

impl Webhook {
    async fn decide(&self, review: &AdmissionReview) -> Outcome {
        match admit(&review.request) {
            Admit::Done(outcome) => outcome,
            Admit::NeedsShard(pending) => {
                let shard = match timeout(self.deadline, self.resolver.shard_for(&pending)).await {
                    Ok(shard) => shard,
                    Err(_) => {
                        warn!(tenant = %pending.tenant, deadline = ?self.deadline, "shard lookup exceeded the deadline");
                        Err(Reason::Timeout)
                    }
                };
                pending.finish(shard)
            }
        }
    }
}

/// Adapts the TLS accept stream to `axum::serve`.
pub struct TlsListener {
    pub incoming: ReceiverStream<io::Result<TlsConn>>,
    pub local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TlsConn, SocketAddr) {
        loop {
            match self.incoming.next().await {
                Some(Ok(conn)) => {
                    let remote = conn.remote_addr();
                    return (conn, remote);
                }
                Some(Err(error)) => warn!(%error, "accept failed"),
                // The accept loop ended at shutdown; axum stops via its graceful-shutdown signal.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
