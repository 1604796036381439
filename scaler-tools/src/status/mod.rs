//! `scaler status` (also `kubectl cozy-autoscaling status`): every ScaledObject this scaler
//! serves, with its Cluster, its HPA and the scaler's decision, trouble first.
//!
//! The I/O: ScaledObjects, Clusters and HPAs from the API server (the kubeconfig's client), the
//! decisions from the scaler's admin port (`--decisions-url`, `/decisions`). Each source is read
//! on its own, bounded ([`list`]), all of them within one `--timeout`; one that fails is named and
//! its columns left empty ([`table`] builds the rows).
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, ApiResource, DynamicObject};
use tokio::time::Instant;

use runtime::logging::LogArgs;
use scaler::decisions::{self, Page};
use scaler::list;
use scaler::scaledobject::{self, AddressMatch};
use scaler::topology::Kind;

pub mod table;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Namespace to list; the kubeconfig's namespace when neither -n nor -A is given.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// List every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Label selector on the ScaledObjects, e.g. `app.kubernetes.io/instance=pg`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    /// The scaler's /decisions (its admin port, e.g. through
    /// `kubectl -n cozy-autoscaling port-forward svc/cozy-autoscaling-scaler 9090:metrics`).
    #[arg(
        long,
        default_value = "http://127.0.0.1:9090/decisions",
        env = "SCALER_DECISIONS_URL"
    )]
    pub decisions_url: String,
    /// Which ScaledObjects are this scaler's: a trigger of type external whose scalerAddress host
    /// is this value or a longer DNS name of it (with `host:port`, the port must match too).
    /// Repeat for several.
    #[arg(long = "scaler-address", default_value = scaledobject::DEFAULT_SCALER_ADDRESS)]
    pub scaler_address: Vec<String>,
    /// Print again every --watch-interval (each time a full re-list).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub watch_interval: Duration,
    /// Bound on the whole read: every page of every list and /decisions (each --watch round
    /// gets its own).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Most objects read from each list (ScaledObjects, Clusters, HPAs); a longer list is an
    /// error naming this flag.
    #[arg(long, default_value_t = 50_000)]
    pub max_items: usize,
    /// Largest page of a list read, in bytes (pages of 500 objects are asked for; a real one
    /// is a few MiB); a larger one is an error naming this flag.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_page_bytes: usize,
    #[command(flatten)]
    pub log: LogArgs,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        self.log.init()?;
        anyhow::ensure!(
            !self.watch_interval.is_zero() && !self.timeout.is_zero(),
            "--watch-interval and --timeout must be above 0"
        );
        anyhow::ensure!(
            self.max_items > 0 && self.max_page_bytes > 0,
            "--max-items and --max-page-bytes must be above 0"
        );
        let client = kube::Client::try_default()
            .await
            .map_err(|e| format!("no Kubernetes client: {e}"));
        let namespace = match (&self.namespace, self.all_namespaces, &client) {
            (_, true, _) => None,
            (Some(ns), _, _) => Some(ns.clone()),
            (None, false, Ok(client)) => Some(client.default_namespace().to_owned()),
            (None, false, Err(_)) => None,
        };
        loop {
            let inputs = self.read(client.as_ref(), namespace.as_deref()).await;
            self.print(&inputs)?;
            if !self.watch {
                return Ok(());
            }
            tokio::time::sleep(self.watch_interval).await;
            println!();
        }
    }

    fn print(&self, inputs: &table::Inputs) -> anyhow::Result<()> {
        let rows = table::rows(inputs);
        let missing = table::missing(inputs);
        match self.output {
            Output::Text | Output::Wide => {
                for note in &missing {
                    eprintln!("warning: {note}");
                }
                print!("{}", table::text(&rows, self.output == Output::Wide));
            }
            Output::Json => println!("{}", table::json(&rows, &missing)?),
            Output::Yaml => print!("{}", table::yaml(&rows, &missing)?),
        }
        Ok(())
    }

    async fn read(
        &self,
        client: Result<&kube::Client, &String>,
        namespace: Option<&str>,
    ) -> table::Inputs {
        let deadline = Instant::now() + self.timeout;
        let rule = AddressMatch(self.scaler_address.clone());
        let caps = list::Caps {
            items: self.max_items,
            page_bytes: self.max_page_bytes,
        };
        let objects = async {
            let client = client.map_err(String::clone)?;
            let api = dynamic(client.clone(), namespace, &scaler::scaledobject::resource());
            let selector = self.selector.as_deref();
            let read = list::list(client, api.resource_url(), selector, caps, |o| {
                object(&o, &rule)
            });
            self.bounded(deadline, hinted(read)).await
        };
        let clusters = async {
            let client = client.map_err(String::clone)?;
            let api = dynamic(client.clone(), namespace, &Kind::Cluster.resource());
            let read = list::list(client, api.resource_url(), None, caps, |o| {
                Some(cluster(&o))
            });
            self.bounded(deadline, hinted(read)).await
        };
        let hpas = async {
            let client = client.map_err(String::clone)?;
            let api: Api<HorizontalPodAutoscaler> = match namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            let read = list::list(client, api.resource_url(), None, caps, |h| Some(hpa(&h)));
            self.bounded(deadline, hinted(read)).await
        };
        let decisions = self.bounded(deadline, self.decisions(namespace));
        let (objects, clusters, hpas, decisions) = tokio::join!(objects, clusters, hpas, decisions);
        table::Inputs {
            objects,
            clusters,
            hpas,
            decisions: decisions.map_err(|e| format!("{}: {e}", self.decisions_url)),
            now: jiff::Timestamp::now(),
        }
    }

    /// `read` unless `deadline` (the whole run's `--timeout`) passes first.
    async fn bounded<T>(
        &self,
        deadline: Instant,
        read: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        tokio::time::timeout_at(deadline, read)
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {:?} (--timeout)", self.timeout)))
    }

    /// GET --decisions-url (with `?namespace=`), at most [`decisions::MAX_BYTES`] and a bit read
    /// (an error's body: [`list::ERROR_BYTES`]).
    async fn decisions(&self, namespace: Option<&str>) -> Result<Page, String> {
        let read = async {
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("building the HTTP client")?;
            let mut request = http.get(&self.decisions_url);
            if let Some(ns) = namespace {
                request = request.query(&[("namespace", ns)]);
            }
            let response = request.send().await?;
            let status = response.status();
            if !status.is_success() {
                let (body, _) =
                    list::read_capped(reqwest::Body::from(response), list::ERROR_BYTES).await?;
                anyhow::bail!(
                    "HTTP {status}: {}",
                    names::echo(&String::from_utf8_lossy(&body))
                );
            }
            let cap = decisions::MAX_BYTES + 4096;
            let (body, cut) = list::read_capped(reqwest::Body::from(response), cap).await?;
            anyhow::ensure!(!cut, "the answer is larger than {cap} bytes");
            serde_json::from_slice::<Page>(&body).context("the answer is not a /decisions page")
        };
        read.await.map_err(|e| format!("{e:#}"))
    }
}

/// A list's outcome, its error naming the flag that raises the cap it hit.
async fn hinted<U>(
    read: impl Future<Output = Result<Vec<U>, list::ListError>>,
) -> Result<Vec<U>, String> {
    read.await.map_err(|error| match error {
        list::ListError::PageTooLarge { bytes } => format!(
            "a page of the list is larger than {bytes} bytes (--max-page-bytes; {} items were \
             asked for): raise --max-page-bytes if the objects are that large",
            list::PAGE_ITEMS
        ),
        list::ListError::TooManyItems { items } => format!(
            "the list holds more than {items} items (--max-items): narrow it with -n or -l, or \
             raise --max-items"
        ),
        other => other.to_string(),
    })
}

fn dynamic(client: kube::Client, namespace: Option<&str>, ar: &ApiResource) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, ar),
        None => Api::all_with(client, ar),
    }
}

fn object(o: &DynamicObject, rule: &AddressMatch) -> Option<table::Object> {
    let name = o.metadata.name.clone()?;
    let json = serde_json::to_value(o).ok()?;
    let trigger = scaledobject::trigger(&json, rule)?;
    let hpa = scaledobject::hpa_name(&json, &name);
    Some(table::Object::new(
        o.metadata.namespace.clone()?,
        name,
        &trigger,
        hpa,
    ))
}

fn cluster(o: &DynamicObject) -> table::Cluster {
    table::Cluster {
        namespace: o.metadata.namespace.clone().unwrap_or_default(),
        name: o.metadata.name.clone().unwrap_or_default(),
        instances: o
            .data
            .pointer("/spec/instances")
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
    }
}

fn hpa(h: &HorizontalPodAutoscaler) -> table::Hpa {
    let status = h.status.as_ref();
    table::Hpa {
        namespace: h.metadata.namespace.clone().unwrap_or_default(),
        name: h.metadata.name.clone().unwrap_or_default(),
        desired: status.map(|s| s.desired_replicas),
        last_scale: status.and_then(|s| s.last_scale_time.as_ref()).map(|t| t.0),
        conditions: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| table::Condition {
                kind: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
            })
            .collect(),
    }
}
