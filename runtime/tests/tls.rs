//! The shared TLS module: ALPN, mTLS, and certificate reload with a broken-file fallback.

use std::time::Duration;

use futures::StreamExt as _;
use runtime::testing::*;
use runtime::tls::{ALPN_GRPC, ALPN_HTTPS, Reloading, TlsFiles};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Starts a TLS echo-once server: for each connection, writes "hi" then closes.
async fn serve(tls: &Reloading, shutdown: CancellationToken) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = runtime::conn::Limits {
        max_connections: 64,
        idle_timeout: Duration::from_secs(60),
    };
    let mut incoming = tls.incoming(listener, limits, shutdown);
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
        client_ca: mtls.then(|| dir.path("ca.crt")),
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
            client_ca: None,
        };
        Reloading::spawn(files, ALPN_GRPC, CancellationToken::new())
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
        (ALPN_HTTPS, &[&b"http/1.1"[..]][..], &b"http/1.1"[..]),
    ] {
        let tls = Reloading::spawn(files.clone(), server_alpn, shutdown.clone()).unwrap();
        let addr = serve(&tls, shutdown.clone()).await;
        let stream = tls_connect(&connector(&ca.pem(), None, client_alpn), addr)
            .await
            .unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(want));
    }
    // A gRPC-only server refuses a client that cannot speak h2.
    let tls = Reloading::spawn(files, ALPN_GRPC, shutdown.clone()).unwrap();
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
    let tls = Reloading::spawn(files, ALPN_GRPC, shutdown.clone()).unwrap();
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

#[tokio::test]
async fn reloads_new_files_and_keeps_the_old_config_when_they_are_broken() {
    install_provider();
    let dir = TempDir::new("tls-reload");
    let ca = Ca::new();
    let files = server_files(&dir, &ca, false);
    let cert_a = std::fs::read_to_string(&files.cert).unwrap();
    let shutdown = CancellationToken::new();
    let tls = Reloading::spawn_polling(
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
