//! The webhook's routes (served over HTTPS by [`runtime::http1::serve`]): POST `/mutate-helmrelease-shard` → [`admit`] → resolve → [`Pending::finish`].
//! A body that is not an AdmissionReview gets 400, one too large 413, one sent too slowly 408;
//! any other path or method gets 404.
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::time::timeout;
use tracing::{Instrument, debug, info, info_span, warn};

use super::assign::Resolver;
use super::metrics::Metrics;
use super::mutate::{Admit, Outcome, Reason, admit};
use super::review::AdmissionReview;

/// The webhook path (docs/design.md S1).
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
    /// Longest time the request body may take to arrive.
    pub body_timeout: Duration,
}

pub fn router(webhook: Webhook) -> Router {
    Router::new()
        .route(PATH, post(review).fallback(not_found))
        .fallback(not_found)
        .with_state(webhook)
}

async fn not_found(State(webhook): State<Webhook>, body: Body) -> impl IntoResponse {
    // Read the body first (bounded): hyper closes a connection whose request body was left
    // unread, after a response that does not say so, and a client reusing it would race that.
    let _ = timeout(webhook.body_timeout, axum::body::to_bytes(body, BODY_LIMIT)).await;
    (
        StatusCode::NOT_FOUND,
        "not found; POST AdmissionReviews to /mutate-helmrelease-shard\n",
    )
}

async fn review(State(webhook): State<Webhook>, body: Body) -> Response {
    let started = Instant::now();
    let body = match timeout(webhook.body_timeout, axum::body::to_bytes(body, BODY_LIMIT)).await {
        Ok(Ok(body)) => body,
        Ok(Err(error)) => {
            info!(%error, "rejected an unreadable or oversized body");
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body unreadable or larger than {BODY_LIMIT} bytes\n"),
            )
                .into_response();
        }
        Err(_) => {
            info!(timeout = ?webhook.body_timeout, "request body arrived too slowly");
            return (
                StatusCode::REQUEST_TIMEOUT,
                "request body arrived too slowly\n",
            )
                .into_response();
        }
    };
    let review = match AdmissionReview::from_slice(&body) {
        Ok(review) => review,
        Err(error) => {
            let error = names::echo(&error.to_string());
            info!(%error, "rejected a body that is not an AdmissionReview");
            return (StatusCode::BAD_REQUEST, format!("{error}\n")).into_response();
        }
    };
    let req = &review.request;
    let span = info_span!(
        "admission",
        uid = %names::echo(&req.uid),
        op = %names::echo(&req.operation),
        kind = %names::echo(&req.kind.kind),
        ns = %names::echo(req.namespace.as_deref().unwrap_or("")),
        name = %names::echo(req.name.as_deref().unwrap_or("")),
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
