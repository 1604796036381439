//! Tasks a loop starts per connection or per request, owned by that loop: none outlives it, and a
//! panic in one is logged and counted (`runtime_task_panics_total` on the admin port), never
//! silent. Long-lived tasks belong to [`crate::app::App::spawn`] instead, where a panic ends the
//! app.
use std::future::Future;
use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use tokio::task::{JoinError, JoinSet};
use tracing::error;

/// Panics of owned tasks in this process, whichever loop owned them.
static PANICS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The process-wide panic counter, for registering on the admin port.
pub fn panics() -> Counter {
    PANICS.clone()
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
            PANICS.inc();
            error!(tasks = self.what, "a task panicked: {failure}");
        }
    }
}

#[cfg(test)]
mod tests {
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
}
