//! Flag groups the servers and controllers share, each used with `#[command(flatten)]`: serving
//! TLS and connection limits (`scaler serve`, `scaler webhook`), the admin port (every long-running
//! subcommand), and leader election (`scaler shard-controller`, `scaler scale-adapter`). Logging
//! is [`crate::logging`]'s.
//!
//! A group declares each flag once (its name, parser and checks, and what it builds); a
//! component's profile type supplies what its users see differently: defaults, environment
//! variables and help (every component documents its own traffic).
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::builder::Resettable;

use crate::app::App;
use crate::{conn, lease, tls};

/// What one server's TLS and connection-limit flags say and default to.
pub trait ServerFlags: Send + Sync + 'static {
    /// `--tls-cert`/`--tls-key` are required (else TLS is optional, both or neither).
    const TLS_REQUIRED: bool;
    const TLS_CERT_ENV: &'static str;
    const TLS_CERT_HELP: &'static str;
    const TLS_KEY_ENV: &'static str;
    const TLS_KEY_HELP: &'static str;
    const MAX_CONNECTIONS: &'static str;
    const MAX_CONNECTIONS_HELP: &'static str;
    const MAX_CONNECTIONS_PER_PEER: &'static str;
    const HANDSHAKE_TIMEOUT_HELP: &'static str;
    const IDLE_TIMEOUT: &'static str;
    const IDLE_TIMEOUT_HELP: &'static str;
}

/// `--tls-cert` and `--tls-key`: the serving identity, reloaded when the files change.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerTls<P: ServerFlags> {
    // Optional TLS is both files or neither (`requires` on a required flag would only reorder
    // the usage line).
    #[arg(long, required = P::TLS_REQUIRED, requires = pair::<P>("tls_key"),
          env = P::TLS_CERT_ENV, help = P::TLS_CERT_HELP)]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, required = P::TLS_REQUIRED, requires = pair::<P>("tls_cert"),
          env = P::TLS_KEY_ENV, help = P::TLS_KEY_HELP)]
    pub tls_key: Option<PathBuf>,
    #[arg(skip)]
    profile: PhantomData<P>,
}

/// The other TLS file, which an optional one requires.
fn pair<P: ServerFlags>(other: &'static str) -> Resettable<clap::Id> {
    if P::TLS_REQUIRED {
        Resettable::Reset
    } else {
        Resettable::Value(other.into())
    }
}

impl<P: ServerFlags> ServerTls<P> {
    /// Loads the certificate (with `client`'s rules for client certificates) and runs its reload
    /// poller in `app`; `None` without `--tls-cert`.
    pub fn load(
        &self,
        app: &mut App,
        alpn: &[&[u8]],
        client: Option<tls::ClientAuth>,
    ) -> anyhow::Result<Option<tls::Reloading>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client,
        };
        let (tls, poller) = tls::Reloading::load(files, alpn, app.shutdown())
            .with_context(|| format!("loading --tls-cert {}", cert.display()))?;
        app.spawn("TLS reload", poller);
        Ok(Some(tls))
    }

    pub fn enabled(&self) -> bool {
        self.tls_cert.is_some()
    }
}

/// `--max-connections`, `--max-connections-per-peer`, `--handshake-timeout`, `--idle-timeout`:
/// the bounds [`conn`] keeps on a server's connections.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnLimits<P: ServerFlags> {
    #[arg(long, default_value = P::MAX_CONNECTIONS, help = P::MAX_CONNECTIONS_HELP)]
    pub max_connections: usize,
    /// Most open connections from one IP address (the same room-making rule applies among them).
    #[arg(long, default_value = P::MAX_CONNECTIONS_PER_PEER)]
    pub max_connections_per_peer: usize,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, help = P::HANDSHAKE_TIMEOUT_HELP)]
    pub handshake_timeout: Duration,
    #[arg(long, default_value = P::IDLE_TIMEOUT, value_parser = humantime::parse_duration, help = P::IDLE_TIMEOUT_HELP)]
    pub idle_timeout: Duration,
    #[arg(skip)]
    profile: PhantomData<P>,
}

impl<P: ServerFlags> ConnLimits<P> {
    /// The limits for a server speaking `protocol`, once every bound is above 0.
    pub fn limits(&self, protocol: conn::Protocol) -> anyhow::Result<conn::Limits> {
        anyhow::ensure!(
            self.max_connections > 0
                && self.max_connections_per_peer > 0
                && !self.handshake_timeout.is_zero()
                && !self.idle_timeout.is_zero(),
            "--max-connections, --max-connections-per-peer, --handshake-timeout and --idle-timeout must be above 0"
        );
        Ok(conn::Limits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            protocol,
        })
    }
}

/// What one component's `--admin-listen` says.
pub trait AdminFlags: Send + Sync + 'static {
    const HELP: &'static str =
        "Address of the plain-HTTP admin server: /healthz, /readyz, /metrics";
    const ENV: Option<&'static str> = None;
}

/// The admin port of the webhook and the controllers.
#[derive(Debug, Clone, Copy)]
pub struct PlainAdmin;

impl AdminFlags for PlainAdmin {}

/// `--admin-listen`: the plain-HTTP admin server ([`App::admin`]).
#[derive(Debug, Clone, clap::Args)]
pub struct Admin<P: AdminFlags = PlainAdmin> {
    #[arg(long, default_value = "0.0.0.0:9090", env = P::ENV, help = P::HELP)]
    pub admin_listen: SocketAddr,
    #[arg(skip)]
    profile: PhantomData<P>,
}

/// What one controller's leader-election flags default to.
pub trait LeaseFlags: Send + Sync + 'static {
    /// Names the replica (with the process id) when `--identity` is not given.
    const COMPONENT: &'static str;
    const LEASE_NAMESPACE: &'static str;
    const LEASE_NAME: &'static str;
    const IDENTITY_HELP: &'static str;
}

/// `--lease-namespace`, `--lease-name`, `--identity` and the lease timings.
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElection<P: LeaseFlags> {
    /// Namespace of the leader-election Lease (the pod's own namespace in the chart).
    #[arg(long, env = "POD_NAMESPACE", default_value = P::LEASE_NAMESPACE)]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = P::LEASE_NAME)]
    pub lease_name: String,
    #[arg(long, env = "POD_NAME", help = P::IDENTITY_HELP)]
    pub identity: Option<String>,
    #[command(flatten)]
    pub timing: lease::Timing,
    #[arg(skip)]
    profile: PhantomData<P>,
}

impl<P: LeaseFlags> LeaderElection<P> {
    /// The Lease to campaign for, once the timings are consistent.
    pub fn election(self) -> anyhow::Result<lease::Election> {
        self.timing.check()?;
        Ok(lease::Election {
            namespace: self.lease_namespace,
            name: self.lease_name,
            identity: self
                .identity
                .unwrap_or_else(|| lease::default_identity(P::COMPONENT)),
            timing: self.timing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Clone, Copy)]
    struct Optional;

    impl ServerFlags for Optional {
        const TLS_REQUIRED: bool = false;
        const TLS_CERT_ENV: &'static str = "FLAGS_TEST_OPTIONAL_CERT";
        const TLS_CERT_HELP: &'static str = "cert";
        const TLS_KEY_ENV: &'static str = "FLAGS_TEST_OPTIONAL_KEY";
        const TLS_KEY_HELP: &'static str = "key";
        const MAX_CONNECTIONS: &'static str = "7";
        const MAX_CONNECTIONS_HELP: &'static str = "connections";
        const MAX_CONNECTIONS_PER_PEER: &'static str = "3";
        const HANDSHAKE_TIMEOUT_HELP: &'static str = "handshake";
        const IDLE_TIMEOUT: &'static str = "9s";
        const IDLE_TIMEOUT_HELP: &'static str = "idle";
    }

    #[derive(Debug, Clone, Copy)]
    struct Campaign;

    impl LeaseFlags for Campaign {
        const COMPONENT: &'static str = "flags-test";
        const LEASE_NAMESPACE: &'static str = "ns";
        const LEASE_NAME: &'static str = "lease";
        const IDENTITY_HELP: &'static str = "identity";
    }

    #[derive(Parser)]
    struct Server<P: ServerFlags> {
        #[command(flatten)]
        tls: ServerTls<P>,
        #[command(flatten)]
        limits: ConnLimits<P>,
        #[command(flatten)]
        admin: Admin,
    }

    #[derive(Parser)]
    struct Controller {
        #[command(flatten)]
        election: LeaderElection<Campaign>,
    }

    #[test]
    fn a_profile_sets_defaults_and_optional_tls_takes_both_files() {
        let server = Server::<Optional>::try_parse_from(["s"]).unwrap();
        assert!(!server.tls.enabled());
        let limits = server.limits.limits(conn::Protocol::Http1).unwrap();
        assert_eq!(
            (limits.max_connections, limits.max_connections_per_peer),
            (7, 3)
        );
        assert_eq!(limits.idle_timeout, Duration::from_secs(9));
        assert_eq!(server.admin.admin_listen.to_string(), "0.0.0.0:9090");
        // Optional TLS is both files or neither.
        for half in [["s", "--tls-cert", "c"], ["s", "--tls-key", "k"]] {
            assert!(
                Server::<Optional>::try_parse_from(half).is_err(),
                "{half:?}"
            );
        }
        let both = ["s", "--tls-cert", "c", "--tls-key", "k"];
        let server = Server::<Optional>::try_parse_from(both).unwrap();
        assert!(server.tls.enabled());
    }

    #[test]
    fn zero_limits_are_refused_by_name() {
        let server = Server::<Optional>::try_parse_from(["s", "--idle-timeout", "0s"]).unwrap();
        let error = server.limits.limits(conn::Protocol::Http2).unwrap_err();
        assert!(error.to_string().contains("--idle-timeout"), "{error}");
    }

    #[test]
    fn an_election_checks_its_timing_and_names_the_replica() {
        let controller = Controller::try_parse_from(["c"]).unwrap();
        let election = controller.election.election().unwrap();
        assert_eq!(
            (election.namespace.as_str(), election.name.as_str()),
            ("ns", "lease")
        );
        assert!(
            election
                .identity
                .ends_with(&format!("-{}", std::process::id()))
        );
        let bad = Controller::try_parse_from(["c", "--renew-deadline", "20s"]).unwrap();
        let error = bad.election.election().unwrap_err();
        assert!(error.to_string().contains("--renew-deadline"), "{error}");
    }
}
