//! The shared TLS module: ALPN, mTLS, and certificate reload with a broken-file fallback.

use std::time::Duration;

use futures::StreamExt as _;
use runtime::testing::*;
use runtime::tls::{ALPN_GRPC, ClientAuth, ClientCa, Reloading, TlsFiles};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// [`Reloading::load`], its poller running on the test's runtime.
fn load(
    files: TlsFiles,
    alpn: &[&[u8]],
    shutdown: CancellationToken,
) -> Result<Reloading, runtime::tls::TlsError> {
    load_polling(files, alpn, runtime::tls::RELOAD_POLL, shutdown)
}

fn load_polling(
    files: TlsFiles,
    alpn: &[&[u8]],
    poll: Duration,
    shutdown: CancellationToken,
) -> Result<Reloading, runtime::tls::TlsError> {
    let (tls, poller) = Reloading::load_polling(files, alpn, poll, shutdown)?;
    tokio::spawn(poller);
    Ok(tls)
}

/// Starts a TLS echo-once server: for each connection, writes "hi" then closes.
async fn serve(tls: &Reloading, shutdown: CancellationToken) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = runtime::conn::Limits {
        max_connections: 64,
        max_connections_per_peer: 64,
        handshake_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        protocol: runtime::conn::Protocol::Http1,
    };
    let incoming = tls.incoming(listener, limits, shutdown);
    tokio::spawn(incoming.accept);
    let mut incoming = incoming.connections;
    tokio::spawn(async move {
        while let Some(Ok(mut conn)) = incoming.next().await {
            tokio::spawn(async move {
                let _ = conn.write_all(b"hi").await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

/// Writes a server certificate signed by `ca` into `dir` (and `ca` itself as the client CA for
/// mTLS), returning the files to serve.
fn server_files(dir: &TempDir, ca: &Ca, mtls: bool) -> TlsFiles {
    let (cert, key) = ca.leaf();
    write(&dir.path("tls.crt"), &cert);
    write(&dir.path("tls.key"), &key);
    if mtls {
        write(&dir.path("ca.crt"), &ca.pem());
    }
    TlsFiles {
        cert: dir.path("tls.crt"),
        key: dir.path("tls.key"),
        client: mtls.then(|| ClientAuth {
            ca: ClientCa::File(dir.path("ca.crt")),
            identities: Vec::new(),
        }),
    }
}

async fn greeting(
    stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    Ok(buf)
}

#[tokio::test]
async fn broken_files_fail_at_startup_naming_the_file() {
    install_provider();
    let dir = TempDir::new("tls-broken");
    let ca = Ca::new();
    let (cert, _) = ca.leaf();
    write(&dir.path("tls.crt"), &cert);
    write(&dir.path("tls.key"), "not a key");
    let startup_error = |cert: &str| {
        let files = TlsFiles {
            cert: dir.path(cert),
            key: dir.path("tls.key"),
            client: None,
        };
        load(files, ALPN_GRPC, CancellationToken::new())
            .err()
            .unwrap()
            .to_string()
    };
    let error = startup_error("tls.crt");
    assert!(error.contains("tls.key"), "{error}");
    let error = startup_error("missing.crt");
    assert!(error.contains("missing.crt"), "{error}");
}

#[tokio::test]
async fn negotiates_the_configured_alpn() {
    install_provider();
    let dir = TempDir::new("tls-alpn");
    let ca = Ca::new();
    let files = server_files(&dir, &ca, false);
    let shutdown = CancellationToken::new();
    for (server_alpn, client_alpn, want) in [
        (ALPN_GRPC, &[&b"h2"[..]][..], &b"h2"[..]),
        (
            &[b"h2", b"http/1.1"],
            &[&b"http/1.1"[..]][..],
            &b"http/1.1"[..],
        ),
    ] {
        let tls = load(files.clone(), server_alpn, shutdown.clone()).unwrap();
        let addr = serve(&tls, shutdown.clone()).await;
        let stream = tls_connect(&connector(&ca.pem(), None, client_alpn), addr)
            .await
            .unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(want));
    }
    // A gRPC-only server refuses a client that cannot speak h2.
    let tls = load(files, ALPN_GRPC, shutdown.clone()).unwrap();
    let addr = serve(&tls, shutdown.clone()).await;
    assert!(
        tls_connect(&connector(&ca.pem(), None, &[b"http/1.1"]), addr)
            .await
            .is_err()
    );
    shutdown.cancel();
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_ca() {
    install_provider();
    let dir = TempDir::new("tls-mtls");
    let ca = Ca::new();
    let files = server_files(&dir, &ca, true);
    let shutdown = CancellationToken::new();
    let tls = load(files, ALPN_GRPC, shutdown.clone()).unwrap();
    let addr = serve(&tls, shutdown.clone()).await;

    let client = ca.leaf();
    let mut ok = tls_connect(&connector(&ca.pem(), Some(&client), &[b"h2"]), addr)
        .await
        .unwrap();
    assert_eq!(greeting(&mut ok).await.unwrap(), b"hi");

    // TLS 1.3 reports a refused client certificate on the first read, not in connect().
    let anonymous = tls_connect(&connector(&ca.pem(), None, &[b"h2"]), addr).await;
    assert!(anonymous.is_err() || greeting(&mut anonymous.unwrap()).await.is_err());
    let stranger = Ca::new().leaf();
    let foreign = tls_connect(&connector(&ca.pem(), Some(&stranger), &[b"h2"]), addr).await;
    assert!(foreign.is_err() || greeting(&mut foreign.unwrap()).await.is_err());
    shutdown.cancel();
}

/// Whether a client presenting `client` completes a connection and reads the greeting.
async fn admitted(addr: std::net::SocketAddr, server_ca: &Ca, client: &(String, String)) -> bool {
    match tls_connect(&connector(&server_ca.pem(), Some(client), &[b"h2"]), addr).await {
        Ok(mut stream) => greeting(&mut stream).await.is_ok_and(|got| got == b"hi"),
        Err(_) => false,
    }
}

#[tokio::test]
async fn only_the_accepted_identities_from_a_live_client_ca_get_in() {
    install_provider();
    let dir = TempDir::new("tls-identity");
    let server_ca = Ca::new();
    let mut files = server_files(&dir, &server_ca, false);
    let keda_ca = Ca::new();
    let (publish, pem) = tokio::sync::watch::channel(None);
    files.client = Some(ClientAuth {
        ca: ClientCa::Live {
            source: "secret keda/keda-client".into(),
            pem,
        },
        identities: vec!["keda-operator".into()],
    });
    // Nothing published yet: refused at startup, naming the source.
    let error = load(files.clone(), ALPN_GRPC, CancellationToken::new())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("secret keda/keda-client") && error.contains("not read yet"),
        "{error}"
    );

    publish.send_replace(Some(keda_ca.pem().into_bytes()));
    let shutdown = CancellationToken::new();
    let poll = Duration::from_millis(50);
    let tls = load_polling(files, ALPN_GRPC, poll, shutdown.clone()).unwrap();
    let addr = serve(&tls, shutdown.clone()).await;
    assert!(admitted(addr, &server_ca, &keda_ca.client("keda-operator")).await);
    // Same CA, another name: the hole an issuer shared with others would open.
    assert!(!admitted(addr, &server_ca, &keda_ca.client("tenant-app")).await);
    assert!(!admitted(addr, &server_ca, &keda_ca.leaf()).await);
    // The accepted name from a CA the server does not trust.
    assert!(!admitted(addr, &server_ca, &server_ca.client("keda-operator")).await);

    // The owner publishes a new CA: the old one's clients are out, the new one's in.
    let next_ca = Ca::new();
    publish.send_replace(Some(next_ca.pem().into_bytes()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !admitted(addr, &server_ca, &next_ca.client("keda-operator")).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new client CA was not picked up"
        );
        tokio::time::sleep(poll).await;
    }
    assert!(!admitted(addr, &server_ca, &keda_ca.client("keda-operator")).await);
    shutdown.cancel();
}

#[tokio::test]
async fn reloads_new_files_and_keeps_the_old_config_when_they_are_broken() {
    install_provider();
    let dir = TempDir::new("tls-reload");
    let ca = Ca::new();
    let files = server_files(&dir, &ca, false);
    let cert_a = std::fs::read_to_string(&files.cert).unwrap();
    let shutdown = CancellationToken::new();
    let tls = load_polling(
        files,
        ALPN_GRPC,
        Duration::from_millis(100),
        shutdown.clone(),
    )
    .unwrap();
    let addr = serve(&tls, shutdown.clone()).await;
    let client = connector(&ca.pem(), None, &[b"h2"]);
    assert_eq!(
        peer_leaf(&tls_connect(&client, addr).await.unwrap()),
        pem_der(&cert_a)
    );

    // Rotation: key first, then cert (a reader may see the mismatched pair in between).
    let (cert_b, key_b) = ca.leaf();
    write(&dir.path("tls.key"), &key_b);
    write(&dir.path("tls.crt"), &cert_b);
    let start = std::time::Instant::now();
    loop {
        let leaf = peer_leaf(&tls_connect(&client, addr).await.unwrap());
        if leaf == pem_der(&cert_b) {
            break;
        }
        assert_eq!(leaf, pem_der(&cert_a));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "new certificate never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A broken certificate is refused; the previous one keeps serving.
    write(
        &dir.path("tls.crt"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n",
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        peer_leaf(&tls_connect(&client, addr).await.unwrap()),
        pem_der(&cert_b)
    );
    shutdown.cancel();
}

async fn healthz(addr: std::net::SocketAddr) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    tcp.read_to_string(&mut reply).await.unwrap();
    reply
}

/// A certificate path that blocks on read (a FIFO nobody writes: what a hung mount looks like)
/// costs the reload one thread: on a single-threaded runtime, /healthz and TLS keep answering
/// with the old pair, and the reloader recovers once the path reads again.
#[test]
fn a_blocking_certificate_read_freezes_nothing_and_keeps_the_old_pair() {
    install_provider();
    let dir = TempDir::new("tls-fifo");
    let ca = Ca::new();
    let files = server_files(&dir, &ca, false);
    let cert_path = files.cert.clone();
    let cert_a = std::fs::read_to_string(&files.cert).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let shutdown = CancellationToken::new();
            let tls = load_polling(
                files,
                ALPN_GRPC,
                Duration::from_millis(100),
                shutdown.clone(),
            )
            .unwrap();
            let addr = serve(&tls, shutdown.clone()).await;
            let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let admin_addr = admin.local_addr().unwrap();
            let registry = std::sync::Arc::new(prometheus_client::registry::Registry::default());
            tokio::spawn(runtime::admin::serve(
                admin,
                registry,
                Default::default(),
                shutdown.clone(),
            ));
            let client = connector(&ca.pem(), None, &[b"h2"]);

            std::fs::remove_file(&cert_path).unwrap();
            let made = std::process::Command::new("mkfifo")
                .arg(&cert_path)
                .status()
                .unwrap();
            assert!(made.success(), "mkfifo failed");
            // Past the read timeout (2 s): the first read is stuck, later polls are skipped.
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                assert!(healthz(admin_addr).await.starts_with("HTTP/1.1 200"));
                let leaf = peer_leaf(&tls_connect(&client, addr).await.unwrap());
                assert_eq!(leaf, pem_der(&cert_a), "the old pair stopped serving");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Unblock the stuck reader (it reads an empty file: refused), then rotate for real.
            let fifo = cert_path.clone();
            std::thread::spawn(move || drop(std::fs::OpenOptions::new().write(true).open(fifo)));
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::fs::remove_file(&cert_path).unwrap();
            let (cert_b, key_b) = ca.leaf();
            write(&dir.path("tls.key"), &key_b);
            write(&cert_path, &cert_b);
            let start = std::time::Instant::now();
            while peer_leaf(&tls_connect(&client, addr).await.unwrap()) != pem_der(&cert_b) {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the reloader never recovered"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            shutdown.cancel();
        });
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the runtime froze (or the test failed) while the certificate read blocked");
}
