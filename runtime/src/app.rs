//! The lifecycle every server and controller shares (`scaler serve`, `scaler webhook`,
//! `scaler shard-controller`, `scaler scale-adapter`):
//!
//! * one shutdown token, cancelled by SIGTERM/SIGINT ([`App::with_signals`]) or by the caller;
//! * readiness that starts down and, at shutdown, goes down first and for good
//!   ([`shutdown::unready_on_shutdown`]), so probes and balancers stop sending new work;
//! * the admin port ([`App::admin`]), on a thread of its own;
//! * a task set that owns every long-lived task ([`App::spawn`]): a task that fails or panics
//!   ends the app with an error naming it, and none outlives [`App::run`]. Per-connection and
//!   per-request tasks belong to what started them ([`crate::tasks`]), itself one of these or
//!   the main future: a panic there is logged and counted, and they end with their owner;
//! * [`App::run`]: the main future (the server or the sync loop) runs until it ends or shutdown;
//!   its in-flight work then gets at most the drain deadline, and the remaining tasks (a lease
//!   release, the admin server) the same again before they are aborted.
//!
//! ```no_run
//! # async fn run(registry: prometheus_client::registry::Registry) -> anyhow::Result<()> {
//! let mut app = runtime::app::App::new("example").with_signals();
//! app.admin("0.0.0.0:9090".parse()?, registry).await?;
//! let shutdown = app.shutdown();
//! app.readiness().set(true);
//! app.run(async move { shutdown.cancelled().await }, std::time::Duration::from_secs(5)).await
//! # }
//! ```
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::{self, Readiness};
use crate::shutdown;

/// What a task may return: nothing, or a result whose error ends the app.
pub trait Outcome {
    fn into_result(self) -> anyhow::Result<()>;
}

impl Outcome for () {
    fn into_result(self) -> anyhow::Result<()> {
        Ok(())
    }
}

impl<E: Into<anyhow::Error>> Outcome for Result<(), E> {
    fn into_result(self) -> anyhow::Result<()> {
        self.map_err(Into::into)
    }
}

/// One running server or controller; see the module doc.
pub struct App {
    component: &'static str,
    shutdown: CancellationToken,
    readiness: Readiness,
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<Id, &'static str>,
}

impl App {
    /// An app named `component` (in its start and stop lines), with its own shutdown token.
    pub fn new(component: &'static str) -> Self {
        Self::with_shutdown(component, CancellationToken::new())
    }

    /// An app that stops when `shutdown` is cancelled (tests cancel it instead of signalling).
    pub fn with_shutdown(component: &'static str, shutdown: CancellationToken) -> Self {
        let mut app = Self {
            component,
            shutdown: shutdown.clone(),
            readiness: Readiness::default(),
            tasks: JoinSet::new(),
            names: HashMap::new(),
        };
        let readiness = app.readiness.clone();
        app.spawn(
            "readiness",
            shutdown::unready_on_shutdown(readiness, shutdown),
        );
        app
    }

    /// Also cancels the shutdown token on SIGTERM (what the kubelet sends) or SIGINT.
    pub fn with_signals(mut self) -> Self {
        let shutdown = self.shutdown.clone();
        self.spawn("signals", shutdown::cancel_on_signal(shutdown));
        self
    }

    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Runs `task` in the app's task set. It must end once the shutdown token is cancelled; an
    /// error (or a panic) cancels the token and becomes the app's error.
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future + Send + 'static,
        F::Output: Outcome,
    {
        let handle = self.tasks.spawn(async move { task.await.into_result() });
        self.names.insert(handle.id(), name);
    }

    /// Binds `--admin-listen` (failing with the flag's name) and serves the admin endpoints.
    pub async fn admin(&mut self, addr: SocketAddr, registry: Registry) -> anyhow::Result<()> {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --admin-listen {addr}"))?;
        self.admin_on(listener, registry, Router::new());
        Ok(())
    }

    /// Serves the admin endpoints, plus the routes of `extra`, on a bound listener, on a thread
    /// of its own ([`admin::spawn_thread`]): probes, scrapes and `extra`'s handlers never run on
    /// the runtime that serves the app's main work.
    pub fn admin_on(&mut self, listener: TcpListener, mut registry: Registry, extra: Router) {
        registry.register(
            "runtime_task_panics",
            "Per-connection and per-request tasks that panicked (each logged at error; the app's own tasks end it instead)",
            crate::tasks::panics(),
        );
        let served = admin::spawn_thread(
            listener,
            Arc::new(registry),
            self.readiness(),
            extra,
            self.shutdown(),
        );
        self.spawn("admin server", served);
    }

    /// Runs `main` until it returns, shutdown is cancelled, or a task fails; see the module doc.
    /// The first error (of `main` or a task) is the app's.
    pub async fn run<F>(mut self, main: F, deadline: Duration) -> anyhow::Result<()>
    where
        F: Future,
        F::Output: Outcome,
    {
        info!(component = self.component, "running");
        let mut failure = None;
        let token = self.shutdown.clone();
        let main = shutdown::drain(async { main.await.into_result() }, &token, deadline);
        tokio::pin!(main);
        let outcome = loop {
            tokio::select! {
                outcome = &mut main => break outcome.unwrap_or(Ok(())),
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    if let Err(error) = self.joined(joined) {
                        warn!(component = self.component, error = format!("{error:#}"), "stopping");
                        failure.get_or_insert(error);
                        self.shutdown.cancel();
                    }
                }
            }
        };
        self.shutdown.cancel();
        let rest = tokio::time::timeout(deadline, async {
            while let Some(joined) = self.tasks.join_next_with_id().await {
                if let Err(error) = self.joined(joined) {
                    failure.get_or_insert(error);
                }
            }
        })
        .await;
        if rest.is_err() {
            let left: Vec<_> = self.names.values().collect();
            warn!(
                component = self.component,
                ?left,
                "tasks did not stop within {deadline:?}; aborting them"
            );
        }
        info!(component = self.component, "stopped");
        match failure {
            Some(error) => Err(error),
            None => outcome,
        }
    }

    fn joined(
        &mut self,
        joined: Result<(Id, anyhow::Result<()>), JoinError>,
    ) -> anyhow::Result<()> {
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(error) => (error.id(), Err(anyhow::anyhow!("panicked: {error}"))),
        };
        let name = self.names.remove(&id).unwrap_or("task");
        result.with_context(|| format!("{name} failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failing_task_ends_the_app_with_its_error_after_the_drain() {
        let mut app = App::new("test");
        let shutdown = app.shutdown();
        let readiness = app.readiness();
        readiness.set(true);
        app.spawn("watch", async { Err::<(), _>(anyhow::anyhow!("boom")) });
        let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let main = {
            let drained = drained.clone();
            async move {
                shutdown.cancelled().await;
                drained.store(true, std::sync::atomic::Ordering::Release);
            }
        };
        let error = app.run(main, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(format!("{error:#}"), "watch failed: boom");
        assert!(drained.load(std::sync::atomic::Ordering::Acquire));
        assert!(!readiness.is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_an_error() {
        async fn bug() {
            panic!("bug")
        }
        let mut app = App::new("test");
        app.spawn("gauges", bug());
        let shutdown = app.shutdown();
        let main = async move {
            shutdown.cancelled().await;
        };
        let error = app.run(main, Duration::from_secs(5)).await.unwrap_err();
        assert!(
            format!("{error:#}").starts_with("gauges failed: panicked"),
            "{error:#}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_takes_readiness_down_for_good_and_waits_for_the_tasks() {
        let shutdown = CancellationToken::new();
        let mut app = App::with_shutdown("test", shutdown.clone());
        let readiness = app.readiness();
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (shutdown, released) = (shutdown.clone(), released.clone());
            app.spawn("lease", async move {
                shutdown.cancelled().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                released.store(true, std::sync::atomic::Ordering::Release);
            });
        }
        let main = {
            let (shutdown, readiness) = (shutdown.clone(), readiness.clone());
            async move {
                readiness.set(true);
                shutdown.cancel();
                tokio::task::yield_now().await;
                // A late "ready" from a task that has not seen the shutdown yet stays ignored.
                readiness.set(true);
            }
        };
        app.run(main, Duration::from_secs(5)).await.unwrap();
        assert!(released.load(std::sync::atomic::Ordering::Acquire));
        assert!(!readiness.is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_that_do_not_stop_are_aborted_after_the_deadline() {
        let mut app = App::new("test");
        app.spawn("stuck", std::future::pending::<()>());
        let started = tokio::time::Instant::now();
        app.run(async {}, Duration::from_secs(3)).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn the_main_error_is_the_apps() {
        let app = App::new("test");
        let error = app
            .run(
                async { anyhow::bail!("gRPC server failed") },
                Duration::from_secs(1),
            )
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "gRPC server failed");
    }
}
