//! Accepting connections under limits, shared by the gRPC server and the webhook:
//!
//! * at most `max_connections` open at once: a semaphore permit is taken *before* `accept`, so
//!   past the cap new clients wait in the kernel's backlog instead of costing memory here;
//! * a connection that sends nothing for `idle_timeout` is closed. Neither tonic nor hyper has an
//!   option for a peer that never finishes the HTTP/2 preface (hyper's h2 handshake waits
//!   forever), so this one is enforced on the socket. Live gRPC clients answer the server's
//!   keepalive pings and so are never idle; HTTP/1.1 idle keep-alive is hyper's
//!   `header_read_timeout`.
//!
//! ```no_run
//! # use runtime::conn;
//! # async fn run(limits: conn::Limits, shutdown: tokio_util::sync::CancellationToken) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:6000").await?;
//! // Each accepted socket is upgraded (TLS, say) by the closure; `None` drops it.
//! let incoming = conn::incoming(listener, limits, shutdown.clone(), |io, _remote| async move { Some(io) });
//! # drop(incoming); Ok(()) }
//! ```
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Accepted connections waiting for the server to pick them up; it drains them as fast as it
/// spawns connection tasks.
const ACCEPT_BACKLOG: usize = 64;

/// Per-listener connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub idle_timeout: Duration,
}

/// A TCP connection holding one of the listener's permits, closed when it reads nothing for
/// `idle_timeout`.
pub struct Guarded {
    tcp: TcpStream,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    _permit: OwnedSemaphorePermit,
}

impl Guarded {
    pub fn get_ref(&self) -> &TcpStream {
        &self.tcp
    }
}

/// Accepts from `listener` under `limits`, runs `upgrade` (a TLS handshake, or nothing) for each
/// connection in its own task so a slow one never stalls the accept loop, and yields those it
/// returns. The stream ends when `shutdown` is cancelled.
pub fn incoming<T, F, Fut>(
    listener: TcpListener,
    limits: Limits,
    shutdown: CancellationToken,
    upgrade: F,
) -> ReceiverStream<io::Result<T>>
where
    T: Send + 'static,
    F: Fn(Guarded, SocketAddr) -> Fut + Send + 'static,
    Fut: Future<Output = Option<T>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = accept(&listener, &permits, limits) => accepted,
            };
            let (conn, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (tx, upgraded) = (tx.clone(), upgrade(conn, remote));
            tokio::spawn(async move {
                if let Some(conn) = upgraded.await {
                    let _ = tx.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    limits: Limits,
) -> io::Result<(Guarded, SocketAddr)> {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| io::Error::other("connection limiter closed"))?;
    let (tcp, remote) = listener.accept().await?;
    // Small gRPC frames and webhook replies must not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    let conn = Guarded {
        tcp,
        idle_timeout: limits.idle_timeout,
        idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
        _permit: permit,
    };
    Ok((conn, remote))
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let deadline = Instant::now() + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("closing a connection idle for {:?}", self.idle_timeout),
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    use super::*;

    async fn listen(limits: Limits) -> (SocketAddr, ReceiverStream<io::Result<Guarded>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = incoming(listener, limits, CancellationToken::new(), |io, _| async {
            Some(io)
        });
        (addr, incoming)
    }

    #[tokio::test]
    async fn caps_open_connections_and_frees_the_slot_on_close() {
        let limits = Limits {
            max_connections: 2,
            idle_timeout: Duration::from_secs(60),
        };
        let (addr, mut incoming) = listen(limits).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let first = incoming.next().await.unwrap().unwrap();
        let _second = incoming.next().await.unwrap().unwrap();
        // The third connects (kernel backlog) but is not accepted while two are open.
        let _c = TcpStream::connect(addr).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
        assert!(waited.is_err(), "a third connection was accepted");
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await;
        assert!(matches!(third, Ok(Some(Ok(_)))));
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_a_talking_one_is_not() {
        let limits = Limits {
            max_connections: 8,
            idle_timeout: Duration::from_millis(300),
        };
        let (addr, mut incoming) = listen(limits).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut server = incoming.next().await.unwrap().unwrap();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let mut got = 0;
            loop {
                match server.read(&mut buf).await {
                    Ok(0) => return Ok(got),
                    Ok(n) => got += n,
                    Err(e) => return Err((e.kind(), got)),
                }
            }
        });
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.write_all(b"x").await.unwrap();
        }
        let started = Instant::now();
        let result = reader.await.unwrap();
        assert_eq!(result, Err((io::ErrorKind::TimedOut, 4)));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
