//! The binary's integration tests' helpers: a real VictoriaMetrics, plus the certificate and
//! polling helpers of `runtime::testing`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use runtime::testing::*;

/// A real VictoriaMetrics (the `victoria-metrics` binary from PATH) on a free loopback port.
pub struct VictoriaMetrics {
    child: Child,
    pub url: String,
    _dir: TempDir,
}

impl VictoriaMetrics {
    pub async fn start() -> Self {
        install_provider();
        let dir = TempDir::new("vm");
        let port = free_port();
        let child = Command::new("victoria-metrics")
            .arg(format!("-storageDataPath={}", dir.path("data").display()))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .args([
                "-retentionPeriod=100y",
                "-search.latencyOffset=0s",
                "-loggerLevel=ERROR",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("victoria-metrics on PATH (tests/lib/setup.sh installs it)");
        let vm = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let client = reqwest::Client::new();
        let start = Instant::now();
        while client
            .get(format!("{}/health", vm.url))
            .send()
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "VictoriaMetrics did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        vm
    }

    /// Imports Prometheus text lines, flushes, and waits until `probe` returns a sample.
    pub async fn import(&self, text: &str, probe: &str) {
        let client = reqwest::Client::new();
        let status = client
            .post(format!("{}/api/v1/import/prometheus", self.url))
            .body(text.to_string())
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "import: {status}");
        client
            .get(format!("{}/internal/force_flush", self.url))
            .send()
            .await
            .unwrap();
        let start = Instant::now();
        loop {
            let body = client
                .get(format!("{}/api/v1/query", self.url))
                .query(&[("query", probe)])
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if body.contains("\"value\"") {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "series never became queryable: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for VictoriaMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
