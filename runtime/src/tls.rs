//! Server-side TLS with certificate hot reload, shared by the gRPC scaler and the webhook.
//!
//! ```no_run
//! # use std::path::PathBuf;
//! # use runtime::{conn, tls};
//! # async fn run(limits: conn::Limits, app: &mut runtime::app::App) -> Result<(), Box<dyn std::error::Error>> {
//! let files = tls::TlsFiles { cert: PathBuf::from("/tls/tls.crt"), key: PathBuf::from("/tls/tls.key"), client: None };
//! // Fails now, with the file named, if the certificate or key do not load. The caller owns the
//! // reload poller: the app's task set runs it.
//! let (tls, poller) = tls::Reloading::load(files, tls::ALPN_GRPC, app.shutdown())?;
//! app.spawn("TLS reload", poller);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:6000").await?;
//! // For tonic's `serve_with_incoming_shutdown`: `TlsConn` implements its `Connected`. For
//! // hyper-util (the webhook): wrap each `TlsConn` in `hyper_util::rt::TokioIo`.
//! let incoming = tls.incoming(listener, limits, app.shutdown());
//! # drop(incoming); Ok(()) }
//! ```
//!
//! * Every few seconds ([`RELOAD_POLL`]) the files are re-read. When their contents changed, a new
//!   config is built and used for new connections. A broken new set is logged and the previous
//!   config keeps serving. Polling contents (not inotify) survives Kubernetes' symlink swaps of
//!   mounted Secrets.
//! * With `client`, clients must present a certificate signed by its CA (mTLS) and, when
//!   identities are given, naming one of them (subject CN, DNS or URI SAN): a CA that also signs
//!   for others then does not make those others clients. The CA comes from a file, re-read like
//!   the certificate, or from bytes someone else keeps current (the scaler watches a Secret).
//! * TLS 1.2 and 1.3 only; ALPN is set by the caller: [`ALPN_GRPC`] (grpc-go ≥ 1.67 refuses a
//!   server that selects no ALPN protocol) or the caller's own list (the webhook: HTTP/1.1).
//! * Handshakes run in their own tasks under the listener's `handshake_timeout`, so a slow or
//!   broken client never stalls the accept loop; failed handshakes are logged and skipped.
//! * The files are read on a thread of their own, bounded by [`READ_TIMEOUT`]: a path that blocks
//!   (a FIFO, a hung network mount) costs that one thread, never the async runtime. The current
//!   config keeps serving; later polls try again, with at most a few such threads at once.
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::conn::{self, Guarded, Tracked};
use crate::identity::IdentityVerifier;

/// ALPN for the gRPC server: HTTP/2 only.
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];
/// How often the certificate files are re-read.
pub const RELOAD_POLL: Duration = Duration::from_secs(5);
/// Longest time one reload's file reads may take before the current config is kept.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Blocked reads (threads) tolerated at once; past it polls are skipped until one returns.
const MAX_STUCK_READS: usize = 4;

/// PEM files making up the server identity.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Who may connect; `None` means no client certificates.
    pub client: Option<ClientAuth>,
}

/// Client certificates required (mTLS): signed by `ca` and, unless `identities` is empty, naming
/// one of `identities`.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub ca: ClientCa,
    pub identities: Vec<String>,
}

/// Where the CA bundle that client certificates must chain to comes from.
#[derive(Debug, Clone)]
pub enum ClientCa {
    /// A PEM file, re-read with the certificate.
    File(PathBuf),
    /// PEM kept current by its owner (`None` until first read); `source` names it in errors.
    Live {
        source: String,
        pem: watch::Receiver<Option<Vec<u8>>>,
    },
}

impl ClientCa {
    fn name(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Live { source, .. } => source.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} holds no PEM {what}; give a PEM file with a {what}")]
    Pem { path: PathBuf, what: &'static str },
    #[error("invalid TLS configuration from {cert} / {key}: {source}")]
    Config {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("invalid client CA {source_name}: {message}")]
    ClientCa {
        source_name: String,
        message: String,
    },
}

/// The reload task of a [`Reloading`]: its owner runs it until shutdown.
pub type Poller = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A TLS server config that follows its files on disk.
#[derive(Clone)]
pub struct Reloading {
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl Reloading {
    /// Loads the files now (failing with the file named if they do not load); returns the config
    /// and its reload poller, which the caller runs (it stops when `shutdown` is cancelled).
    pub fn load(
        files: TlsFiles,
        alpn: &[&[u8]],
        shutdown: CancellationToken,
    ) -> Result<(Self, Poller), TlsError> {
        Self::load_polling(files, alpn, RELOAD_POLL, shutdown)
    }

    /// [`Reloading::load`] with a custom poll interval (tests use a short one).
    pub fn load_polling(
        files: TlsFiles,
        alpn: &[&[u8]],
        poll: Duration,
        shutdown: CancellationToken,
    ) -> Result<(Self, Poller), TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let contents = Contents::read(&files)?;
        let config = contents.build(&files, &alpn)?;
        let this = Self {
            current: Arc::new(RwLock::new(Arc::new(config))),
        };
        let reloader = this.clone();
        let poller = Box::pin(async move {
            reloader.watch(files, alpn, contents, poll, shutdown).await;
        });
        Ok((this, poller))
    }

    /// The config new connections get right now.
    pub fn config(&self) -> Arc<ServerConfig> {
        crate::lock::read(&self.current).clone()
    }

    /// Accepts TCP connections from `listener` under `limits` (see [`conn`]) and yields those
    /// that completed a TLS handshake, with the accept loop the caller runs ([`conn::incoming`]).
    /// The stream ends when `shutdown` is cancelled.
    pub fn incoming(
        &self,
        listener: TcpListener,
        limits: conn::Limits,
        shutdown: CancellationToken,
    ) -> conn::Incoming<TlsStream<Guarded>> {
        let this = self.clone();
        conn::incoming(listener, limits, shutdown, move |tcp, remote| {
            let acceptor = TlsAcceptor::from(this.config());
            async move {
                match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => Some(stream),
                    Ok(Err(error)) => {
                        debug!(%error, %remote, "TLS handshake failed");
                        None
                    }
                    Err(_) => {
                        debug!(%remote, "TLS handshake timed out");
                        None
                    }
                }
            }
        })
    }

    async fn watch(
        &self,
        files: TlsFiles,
        alpn: Vec<Vec<u8>>,
        mut seen: Contents,
        poll: Duration,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Reads that outlived READ_TIMEOUT, each holding a thread until it returns.
        let mut stuck: Vec<oneshot::Receiver<Result<Contents, TlsError>>> = Vec::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            stuck.retain_mut(|read| {
                matches!(read.try_recv(), Err(oneshot::error::TryRecvError::Empty))
            });
            if stuck.len() >= MAX_STUCK_READS {
                debug!(cert = %files.cert.display(), "TLS file reads are still blocked; keeping the current config");
                continue;
            }
            let mut read = read_off_runtime(files.clone());
            let contents = match tokio::time::timeout(READ_TIMEOUT, &mut read).await {
                Ok(Ok(Ok(contents))) => contents,
                // Mid-swap reads can fail transiently; the next poll retries.
                Ok(Ok(Err(error))) => {
                    debug!(%error, "TLS files not readable; keeping the current config");
                    continue;
                }
                Ok(Err(_)) => {
                    warn!("the TLS file reader stopped; keeping the current config");
                    continue;
                }
                Err(_) => {
                    warn!(cert = %files.cert.display(), key = %files.key.display(), timeout = ?READ_TIMEOUT,
                          "reading the TLS files did not finish (a FIFO or a hung mount?); keeping the current certificate");
                    stuck.push(read);
                    continue;
                }
            };
            if contents == seen {
                continue;
            }
            match contents.build(&files, &alpn) {
                Ok(config) => {
                    *crate::lock::write(&self.current) = Arc::new(config);
                    info!(cert = %files.cert.display(), "reloaded TLS certificate");
                }
                Err(error) => {
                    warn!(%error, "new TLS files are invalid; keeping the previous certificate")
                }
            }
            // Remember what was seen either way, so a broken set is reported once, not every poll.
            seen = contents;
        }
    }
}

/// Reads `files` on a thread of its own (not `spawn_blocking`: a runtime waits for its blocking
/// tasks when it shuts down, and a read stuck forever would then stop the process from exiting).
fn read_off_runtime(files: TlsFiles) -> oneshot::Receiver<Result<Contents, TlsError>> {
    let (tx, rx) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("tls-read".into())
        .spawn(move || {
            let _ = tx.send(Contents::read(&files));
        });
    if let Err(error) = spawned {
        // The sender was dropped with the closure: the caller sees the reader stop.
        warn!(%error, "cannot start a thread to read the TLS files");
    }
    rx
}

/// Raw file contents; comparing them detects rotation whatever the filesystem does.
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Contents {
    fn read(files: &TlsFiles) -> Result<Self, TlsError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })
        };
        let client_ca = match files.client.as_ref().map(|client| &client.ca) {
            None => None,
            Some(ClientCa::File(path)) => Some(read(path)?),
            Some(ca @ ClientCa::Live { pem, .. }) => {
                Some(pem.borrow().clone().ok_or_else(|| TlsError::ClientCa {
                    source_name: ca.name(),
                    message: "not read yet".into(),
                })?)
            }
        };
        Ok(Self {
            cert: read(&files.cert)?,
            key: read(&files.key)?,
            client_ca,
        })
    }

    fn build(&self, files: &TlsFiles, alpn: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
        let certs = parse_certs(&self.cert, &files.cert)?;
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|_| TlsError::Pem {
            path: files.key.clone(),
            what: "private key",
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config_error = |source| TlsError::Config {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(config_error)?;
        let builder = match (&self.client_ca, &files.client) {
            (Some(pem), Some(client)) => {
                let ca_error = |message: String| TlsError::ClientCa {
                    source_name: client.ca.name(),
                    message,
                };
                let mut roots = rustls::RootCertStore::empty();
                let path = PathBuf::from(client.ca.name());
                for cert in parse_certs(pem, &path)? {
                    roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| ca_error(e.to_string()))?;
                if client.identities.is_empty() {
                    builder.with_client_cert_verifier(verifier)
                } else {
                    builder.with_client_cert_verifier(Arc::new(IdentityVerifier {
                        inner: verifier,
                        identities: client.identities.clone(),
                    }))
                }
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(certs, key).map_err(config_error)?;
        config.alpn_protocols = alpn.to_vec();
        Ok(config)
    }
}

fn parse_certs(
    pem: &[u8],
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::Pem {
            path: path.to_path_buf(),
            what: "certificate",
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// An accepted TLS connection; usable with tonic (`Connected`) and hyper-util (`TokioIo`).
pub type TlsConn = Tracked<TlsStream<Guarded>>;
