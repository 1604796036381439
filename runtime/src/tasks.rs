//! Tasks started per connection or per request, owned by what started them: none outlives its
//! owner, and a panic in one is logged and counted (`runtime_task_panics_total` on the admin
//! port), never silent. Long-lived tasks belong to [`crate::app::App::spawn`] instead, where a
//! panic ends the app.
//!
//! * [`Owned`]: the tasks of one loop (an accept loop's handshakes, a server's connections),
//!   which waits for them when it ends; dropped, it aborts them.
//! * [`Tracker`]: tasks any holder of shared state may start (a cache's evaluations, which must
//!   outlive the request that started them); its owner waits for them at shutdown, and stops the
//!   rest if that wait is itself dropped (the app aborting it past its deadline).
//! * [`panicked`]: the same log line and count for a panic caught in place (a gRPC handler's).
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::LazyLock;

use futures::FutureExt as _;
use prometheus_client::metrics::counter::Counter;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::error;

/// Panics of owned tasks in this process, whichever loop owned them.
static PANICS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The process-wide panic counter, for registering on the admin port.
pub fn panics() -> Counter {
    PANICS.clone()
}

/// Counts and logs (at error) a panic of one of `what`, caught from its `payload`; returns the
/// panic's message.
pub fn panicked(what: &str, payload: &(dyn Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    PANICS.inc();
    error!(tasks = what, "a task panicked: {message}");
    message.to_owned()
}

/// The tasks one loop started; `what` names them in the log.
pub struct Owned {
    set: JoinSet<()>,
    what: &'static str,
}

impl Owned {
    pub fn new(what: &'static str) -> Self {
        Self {
            set: JoinSet::new(),
            what,
        }
    }

    /// Starts `task`, first reaping those that ended (so the set holds only live ones).
    pub fn spawn<F>(&mut self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        while let Some(ended) = self.set.try_join_next() {
            self.check(ended);
        }
        self.set.spawn(task);
    }

    /// How many are running (or ended and not reaped yet).
    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Waits for every task to end (the loop stopped starting new ones).
    pub async fn join_all(mut self) {
        while let Some(ended) = self.set.join_next().await {
            self.check(ended);
        }
    }

    fn check(&self, ended: Result<(), JoinError>) {
        if let Err(failure) = ended
            && failure.is_panic()
        {
            panicked(self.what, &*failure.into_panic());
        }
    }
}

/// Tasks started from shared state; clones share them. See the module doc.
#[derive(Clone)]
pub struct Tracker {
    tasks: TaskTracker,
    /// Cancelled when the owner's wait is dropped before the tasks ended.
    stop: CancellationToken,
    what: &'static str,
}

impl Tracker {
    pub fn new(what: &'static str) -> Self {
        Self {
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            what,
        }
    }

    /// Starts `task`. Nothing is kept for it once it ends, so memory follows the running ones.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, what) = (self.stop.clone(), self.what);
        self.tasks.spawn(async move {
            tokio::select! {
                ended = AssertUnwindSafe(task).catch_unwind() => {
                    if let Err(payload) = ended {
                        panicked(what, &*payload);
                    }
                }
                _ = stop.cancelled() => {}
            }
        });
    }

    /// How many are running.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Waits for every task to end, those started meanwhile included (the owner is shutting
    /// down). Dropping this future before that stops the tasks still running.
    pub async fn join_all(&self) {
        let stop_unless_done = self.stop.clone().drop_guard();
        self.tasks.close();
        self.tasks.wait().await;
        stop_unless_done.disarm();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_panic_is_counted_and_the_others_run_to_the_end() {
        let before = panics().get();
        let mut owned = Owned::new("test");
        let (tx, rx) = tokio::sync::oneshot::channel();
        owned.spawn(async { panic!("a bug in one connection") });
        owned.spawn(async move {
            tokio::task::yield_now().await;
            let _ = tx.send(());
        });
        owned.join_all().await;
        assert!(rx.await.is_ok(), "the other task ran to its end");
        assert!(panics().get() > before);
    }

    #[tokio::test]
    async fn ended_tasks_are_reaped_as_new_ones_start() {
        let mut owned = Owned::new("test");
        for _ in 0..100 {
            owned.spawn(async {});
            tokio::task::yield_now().await;
        }
        assert!(owned.len() < 100, "{}", owned.len());
    }

    #[tokio::test]
    async fn a_tracked_panic_is_counted_and_the_owner_waits_for_the_others() {
        let before = panics().get();
        let tracker = Tracker::new("test");
        let (tx, rx) = tokio::sync::oneshot::channel();
        tracker.spawn(async { panic!("a bug in one evaluation") });
        tracker.clone().spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(());
        });
        tracker.join_all().await;
        assert!(tracker.is_empty());
        assert!(rx.await.is_ok(), "the other task ran to its end");
        assert!(panics().get() > before);
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_wait_stops_the_tracked_tasks() {
        let tracker = Tracker::new("test");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tracker.spawn(async move {
            let _held = tx;
            std::future::pending::<()>().await;
        });
        let waited = tokio::time::timeout(Duration::from_secs(1), tracker.join_all()).await;
        assert!(waited.is_err(), "the task never ends by itself");
        // Stopped: its future (and the sender it held) is dropped.
        assert!(rx.await.is_err());
        tokio::task::yield_now().await;
        assert!(tracker.is_empty());
    }
}
