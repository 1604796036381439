//! The one shutdown path every server follows (`crate::app::App` wires it): a signal cancels the token, readiness goes down
//! first (probes and balancers stop sending new work), then the server drains in-flight work
//! for at most a deadline.
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::Readiness;

/// Cancels `shutdown` on SIGTERM (what the kubelet sends) or SIGINT; returns early when
/// something else cancels it.
pub async fn cancel_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = terminate => info!("SIGTERM: shutting down"),
        result = tokio::signal::ctrl_c() => match result {
            Ok(()) => info!("SIGINT: shutting down"),
            Err(error) => {
                warn!(%error, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        },
    }
    shutdown.cancel();
}

/// Takes readiness down, for good, as soon as `shutdown` is cancelled.
pub async fn unready_on_shutdown(readiness: Readiness, shutdown: CancellationToken) {
    shutdown.cancelled().await;
    readiness.shut();
}

/// Runs `server` (which must itself stop accepting once `shutdown` is cancelled) to completion,
/// but gives its in-flight work at most `deadline` after the cancellation. `None` means the
/// deadline cut the drain short.
pub async fn drain<T>(
    server: impl Future<Output = T>,
    shutdown: &CancellationToken,
    deadline: Duration,
) -> Option<T> {
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => Some(result),
        _ = async { shutdown.cancelled().await; tokio::time::sleep(deadline).await } => {
            warn!("in-flight work did not finish within {deadline:?} of shutdown; stopping anyway");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drain_returns_what_the_server_returns() {
        let shutdown = CancellationToken::new();
        assert_eq!(
            drain(async { 7 }, &shutdown, Duration::from_secs(1)).await,
            Some(7)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drain_gives_up_after_the_deadline_once_cancelled() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let stuck = std::future::pending::<()>();
        assert_eq!(drain(stuck, &shutdown, Duration::from_secs(5)).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_a_server_that_is_not_shutting_down() {
        let shutdown = CancellationToken::new();
        let slow = async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            1
        };
        assert_eq!(
            drain(slow, &shutdown, Duration::from_secs(5)).await,
            Some(1)
        );
    }

    #[tokio::test]
    async fn readiness_goes_down_on_shutdown() {
        let (readiness, shutdown) = (Readiness::default(), CancellationToken::new());
        readiness.set(true);
        let task = tokio::spawn(unready_on_shutdown(readiness.clone(), shutdown.clone()));
        shutdown.cancel();
        task.await.unwrap();
        assert!(!readiness.is_ready());
        readiness.set(true);
        assert!(!readiness.is_ready(), "stays down once shut");
    }
}
