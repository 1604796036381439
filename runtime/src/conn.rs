//! Accepting connections under limits, shared by the gRPC server, the webhook and the admin
//! ports. Every listener accepts at once (a client never waits in the kernel's backlog behind a
//! flood) and then decides, in [`Table::admit`]:
//!
//! * at most `max_connections` open, at most `max_connections_per_peer` from one IP address, and
//!   no more process-wide than the open-file limit less [`FD_RESERVE`] (kept for the backend
//!   client, the Kubernetes client and `accept` itself; see [`raise_fd_limit`]);
//! * at a cap, room is made by closing, first, the oldest connection that has not yet sent a
//!   request (mid-handshake, silent, PING-only, or half-sent; for the per-peer cap, one of that
//!   peer's own), then the connection idle longest (no request in flight for at least
//!   [`IDLE_FOR_EVICTION`]); only when every connection is busy is the new one refused;
//! * a TLS handshake must finish within `handshake_timeout` ([`crate::tls`]); an HTTP/2 client
//!   must send its first request headers within it too;
//! * an HTTP/2 connection with no rpc in flight and no request frames for `idle_timeout` is
//!   closed: PING, SETTINGS and WINDOW_UPDATE frames are not activity, so a peer that only pings
//!   cannot hold a slot. An HTTP/1.1 connection is closed after `idle_timeout` without a byte
//!   either way; its header deadline is hyper's `header_read_timeout` (the callers set it).
//!
//! What "a request" is comes from [`Protocol`]: HTTP/2 frame headers are followed on both
//! directions of the plaintext (above TLS) without buffering; HTTP/1.1 counts the first byte the
//! server writes back.
//!
//! ```no_run
//! # use runtime::conn;
//! # async fn run(limits: conn::Limits, shutdown: tokio_util::sync::CancellationToken) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:6000").await?;
//! // Each accepted socket is upgraded (TLS, say) by the closure; `None` drops it. The caller
//! // runs the accept loop beside its server (it ends at shutdown).
//! let incoming = conn::incoming(listener, limits, shutdown.clone(), |io, _remote| async move { Some(io) });
//! # drop(incoming); Ok(()) }
//! ```
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::{debug, info, warn};

use crate::tasks::Owned;

/// Accepted connections waiting for the server to pick them up; it drains them as fast as it
/// spawns connection tasks.
const ACCEPT_BACKLOG: usize = 64;
/// File descriptors kept out of every listener's reach: the backend and Kubernetes clients'
/// sockets, certificate reads, logs, and the descriptor `accept` itself needs.
pub const FD_RESERVE: usize = 256;
/// An established connection becomes a candidate for closing at a cap once it has had no request
/// in flight for this long: a client between polls reconnects in a round trip.
pub const IDLE_FOR_EVICTION: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` (EMFILE and friends) so the loop backs off instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Streams one HTTP/2 connection's tracker follows; past it the connection just counts as busy.
const MAX_TRACKED_STREAMS: usize = 4096;

/// What the server speaks on the connection, which decides what counts as a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// Per-listener connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// TLS handshake (and, for HTTP/2, first request headers) deadline.
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub protocol: Protocol,
}

/// Process-wide budget of descriptors for accepted connections, set by [`raise_fd_limit`];
/// unset (tests) means no budget.
static FD_BUDGET: OnceLock<usize> = OnceLock::new();
static FDS_HELD: AtomicUsize = AtomicUsize::new(0);

/// Raises the open-file soft limit to the hard limit and sets the accepted-connection budget to
/// it less [`FD_RESERVE`]. Returns the limit now in force. Call once at start.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current.unwrap_or(u64::MAX);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = limit.maximum.unwrap_or(u64::MAX),
            Err(error) => warn!(%error, soft, "cannot raise the open-file limit"),
        }
    }
    let usable = usize::try_from(soft).unwrap_or(usize::MAX);
    let _ = FD_BUDGET.set(usable.saturating_sub(FD_RESERVE));
    info!(open_files = soft, reserve = FD_RESERVE, "open-file limit");
    soft
}

fn fds_exhausted() -> bool {
    FD_BUDGET
        .get()
        .is_some_and(|budget| FDS_HELD.load(Ordering::Relaxed) >= *budget)
}

/// One open connection as the listener's table sees it.
struct Slot {
    id: u64,
    peer: IpAddr,
    /// Milliseconds since the listener's epoch.
    opened_ms: u64,
    /// A request has been seen (HTTP/2 headers read, HTTP/1.1 answer written).
    established: AtomicBool,
    last_active_ms: AtomicU64,
    in_flight: AtomicUsize,
    close: CancellationToken,
}

/// How a connection ranks as the one to close at a cap; lower goes first, `None` is never closed.
fn eviction_rank(slot: &Slot, now_ms: u64) -> Option<(u8, u64)> {
    if !slot.established.load(Ordering::Relaxed) {
        return Some((0, slot.opened_ms));
    }
    let active = slot.last_active_ms.load(Ordering::Relaxed);
    let idle = now_ms.saturating_sub(active) >= IDLE_FOR_EVICTION.as_millis() as u64;
    (slot.in_flight.load(Ordering::Relaxed) == 0 && idle).then_some((1, active))
}

/// What [`Table::admit`] decided for a new connection.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    Admitted,
    /// Admitted after closing the connection with this id.
    Evicted(u64),
    /// Every slot it could take is busy.
    Refused,
}

#[derive(Default)]
struct Table {
    slots: HashMap<u64, Arc<Slot>>,
    per_peer: HashMap<IpAddr, usize>,
    next_id: u64,
}

impl Table {
    /// Decides on a connection from `peer` (`fds_out`: the process is out of descriptors) and,
    /// when admitted, records it.
    fn admit(
        &mut self,
        limits: &Limits,
        peer: IpAddr,
        now_ms: u64,
        fds_out: bool,
    ) -> (Admission, Option<Arc<Slot>>) {
        let peer_full =
            self.per_peer.get(&peer).copied().unwrap_or(0) >= limits.max_connections_per_peer;
        let full = peer_full || self.slots.len() >= limits.max_connections || fds_out;
        let mut admission = Admission::Admitted;
        if full {
            let victim = self
                .slots
                .values()
                .filter(|slot| !peer_full || slot.peer == peer)
                .filter_map(|slot| eviction_rank(slot, now_ms).map(|rank| (rank, slot.id)))
                .min()
                .map(|(_, id)| id);
            match victim {
                Some(id) => {
                    if let Some(slot) = self.release(id) {
                        slot.close.cancel();
                    }
                    admission = Admission::Evicted(id);
                }
                None => return (Admission::Refused, None),
            }
        }
        let slot = Arc::new(Slot {
            id: self.next_id,
            peer,
            opened_ms: now_ms,
            established: AtomicBool::new(false),
            last_active_ms: AtomicU64::new(now_ms),
            in_flight: AtomicUsize::new(0),
            close: CancellationToken::new(),
        });
        self.next_id += 1;
        self.slots.insert(slot.id, slot.clone());
        *self.per_peer.entry(peer).or_default() += 1;
        (admission, Some(slot))
    }

    fn release(&mut self, id: u64) -> Option<Arc<Slot>> {
        let slot = self.slots.remove(&id)?;
        if let Some(count) = self.per_peer.get_mut(&slot.peer) {
            *count -= 1;
            if *count == 0 {
                self.per_peer.remove(&slot.peer);
            }
        }
        Some(slot)
    }
}

/// A listener's table and clock.
struct Shared {
    table: Mutex<Table>,
    limits: Limits,
    epoch: Instant,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        crate::lock::lock(&self.table)
    }
}

/// An accepted TCP connection holding a slot in its listener's table; reading fails once the
/// listener closes it to make room.
pub struct Guarded {
    tcp: TcpStream,
    slot: Arc<Slot>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    shared: Arc<Shared>,
}

impl Guarded {
    pub fn get_ref(&self) -> &TcpStream {
        &self.tcp
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.shared.table().release(self.slot.id);
        FDS_HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The accept loop of [`incoming`]: the caller owns it (runs it beside its server), so a panic
/// in it is never silent. It ends when `shutdown` is cancelled.
pub type AcceptLoop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What [`incoming`] returns: the connections, and the loop that accepts them.
pub struct Incoming<S> {
    pub connections: ReceiverStream<io::Result<Tracked<S>>>,
    pub accept: AcceptLoop,
}

/// Accepts from `listener` under `limits`, runs `upgrade` (a TLS handshake, or nothing) for each
/// connection in a task of its own (owned by the accept loop, [`crate::tasks`]) so a slow one
/// never stalls the loop, and yields those it returns, wrapped in a [`Tracked`] that follows
/// their requests. The stream ends when the returned accept loop does: at `shutdown`.
pub fn incoming<S, F, Fut>(
    listener: TcpListener,
    limits: Limits,
    shutdown: CancellationToken,
    upgrade: F,
) -> Incoming<S>
where
    S: Send + 'static,
    F: Fn(Guarded, SocketAddr) -> Fut + Send + 'static,
    Fut: Future<Output = Option<S>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
    let shared = Arc::new(Shared {
        table: Mutex::new(Table::default()),
        limits,
        epoch: Instant::now(),
    });
    let accept = Box::pin(async move {
        // Handshakes in progress are dropped with the loop (bounded by the handshake timeout).
        let mut upgrading = Owned::new("connection upgrades");
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "accept failed; backing off");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let Some(conn) = admit(&shared, tcp, remote) else {
                continue;
            };
            let local = conn.tcp.local_addr().ok();
            let slot = conn.slot.clone();
            let (tx, upgraded, shared) = (tx.clone(), upgrade(conn, remote), shared.clone());
            upgrading.spawn(async move {
                if let Some(inner) = upgraded.await {
                    let tracked = Tracked::new(inner, slot, shared, remote, local);
                    let _ = tx.send(Ok(tracked)).await;
                }
            });
        }
    });
    Incoming {
        connections: ReceiverStream::new(rx),
        accept,
    }
}

fn admit(shared: &Arc<Shared>, tcp: TcpStream, remote: SocketAddr) -> Option<Guarded> {
    let (admission, slot) = shared.table().admit(
        &shared.limits,
        remote.ip(),
        shared.now_ms(),
        fds_exhausted(),
    );
    match admission {
        Admission::Admitted => {}
        Admission::Evicted(id) => {
            debug!(%remote, closed = id, "at a connection cap: closed one to make room")
        }
        Admission::Refused => {
            debug!(%remote, "at a connection cap with every connection busy: refused");
            return None;
        }
    }
    let slot = slot?;
    FDS_HELD.fetch_add(1, Ordering::Relaxed);
    // Small gRPC frames and webhook replies must not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    Some(Guarded {
        tcp,
        closed: Box::pin(slot.close.clone().cancelled_owned()),
        slot,
        shared: shared.clone(),
    })
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Pending => match self.closed.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed to make room at a connection cap",
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

/// HTTP/2 frame types and flags the tracker acts on (RFC 9113 §6).
mod h2 {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const CONTINUATION: u8 = 0x9;
    pub const END_STREAM: u8 = 0x1;
    pub const PREFACE_LEN: usize = 24;
}

/// Follows HTTP/2 frame headers through a byte stream, skipping payloads, never buffering more
/// than one 9-byte header.
#[derive(Debug, Default)]
struct FrameScan {
    preface_left: usize,
    head: [u8; 9],
    have: usize,
    skip: usize,
}

/// A frame header: type, flags, stream id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameScan {
    fn client() -> Self {
        Self {
            preface_left: h2::PREFACE_LEN,
            ..Self::default()
        }
    }

    fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(Frame)) {
        while !bytes.is_empty() {
            let n = if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                n
            } else if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                n
            } else {
                let n = (9 - self.have).min(bytes.len());
                self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                if self.have == 9 {
                    let h = self.head;
                    self.have = 0;
                    self.skip =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    on_frame(Frame {
                        kind: h[3],
                        flags: h[4],
                        stream,
                    });
                }
                n
            };
            bytes = &bytes[n..];
        }
    }
}

/// What a [`Tracked`] follows, per protocol.
enum Requests {
    Http1,
    Http2 {
        read: FrameScan,
        write: FrameScan,
        open: HashSet<u32>,
    },
}

/// An upgraded connection (TCP, or TLS over it) whose requests are followed for the listener's
/// table, and which closes itself when idle (see the module docs).
pub struct Tracked<S> {
    inner: S,
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    requests: Requests,
    timer: Pin<Box<Sleep>>,
    remote: SocketAddr,
    local: Option<SocketAddr>,
}

impl<S> Tracked<S> {
    fn new(
        inner: S,
        slot: Arc<Slot>,
        shared: Arc<Shared>,
        remote: SocketAddr,
        local: Option<SocketAddr>,
    ) -> Self {
        let limits = shared.limits;
        let (requests, first) = match limits.protocol {
            Protocol::Http1 => (Requests::Http1, limits.idle_timeout),
            Protocol::Http2 => (
                Requests::Http2 {
                    read: FrameScan::client(),
                    write: FrameScan::default(),
                    open: HashSet::new(),
                },
                limits.handshake_timeout,
            ),
        };
        Self {
            inner,
            slot,
            shared,
            requests,
            timer: Box::pin(tokio::time::sleep(first)),
            remote,
            local,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    fn touch(&self) {
        self.slot
            .last_active_ms
            .store(self.shared.now_ms(), Ordering::Relaxed);
    }

    fn saw_read(&mut self, bytes: &[u8]) {
        match &mut self.requests {
            Requests::Http1 => {
                self.slot.in_flight.store(1, Ordering::Relaxed);
                self.touch();
            }
            Requests::Http2 { read, open, .. } => {
                let (mut active, mut established) = (false, false);
                read.feed(bytes, |frame| match frame.kind {
                    h2::HEADERS => {
                        (active, established) = (true, true);
                        if open.len() < MAX_TRACKED_STREAMS {
                            open.insert(frame.stream);
                        }
                    }
                    h2::DATA | h2::CONTINUATION => active = true,
                    h2::RST_STREAM => {
                        open.remove(&frame.stream);
                    }
                    _ => {}
                });
                self.slot.in_flight.store(open.len(), Ordering::Relaxed);
                if established {
                    self.slot.established.store(true, Ordering::Relaxed);
                }
                if active {
                    self.touch();
                }
            }
        }
    }

    fn saw_write(&mut self, bytes: &[u8]) {
        match &mut self.requests {
            Requests::Http1 => {
                self.slot.in_flight.store(0, Ordering::Relaxed);
                self.slot.established.store(true, Ordering::Relaxed);
                self.touch();
            }
            Requests::Http2 { write, open, .. } => {
                let mut active = false;
                write.feed(bytes, |frame| match frame.kind {
                    h2::HEADERS | h2::DATA => {
                        active = true;
                        if frame.flags & h2::END_STREAM != 0 {
                            open.remove(&frame.stream);
                        }
                    }
                    h2::RST_STREAM => {
                        open.remove(&frame.stream);
                    }
                    _ => {}
                });
                self.slot.in_flight.store(open.len(), Ordering::Relaxed);
                if active {
                    self.touch();
                }
            }
        }
    }

    /// When the connection is due to close, if nothing happens first; `Err` when it is now.
    fn deadline(&self) -> Result<Instant, &'static str> {
        let limits = &self.shared.limits;
        let now = Instant::now();
        let since = |ms: u64| self.shared.epoch + Duration::from_millis(ms);
        let due = match self.requests {
            Requests::Http2 { .. } if !self.slot.established.load(Ordering::Relaxed) => (
                since(self.slot.opened_ms) + limits.handshake_timeout,
                "sent no request headers within the handshake timeout",
            ),
            Requests::Http2 { .. } if self.slot.in_flight.load(Ordering::Relaxed) > 0 => {
                (now + limits.idle_timeout, "")
            }
            _ => (
                since(self.slot.last_active_ms.load(Ordering::Relaxed)) + limits.idle_timeout,
                "idle for the idle timeout",
            ),
        };
        if due.0 <= now { Err(due.1) } else { Ok(due.0) }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let filled = buf.filled().len();
                if filled > before {
                    let this = &mut *self;
                    this.saw_read(&buf.filled()[before..filled]);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => loop {
                if self.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                match self.deadline() {
                    Ok(at) => self.timer.as_mut().reset(at),
                    Err(why) => {
                        let message = format!("closing a connection that {why}");
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)));
                    }
                }
            },
            ready => ready,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            self.saw_write(&buf[..n]);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            let mut left = n;
            for slice in bufs {
                if left == 0 {
                    break;
                }
                let take = left.min(slice.len());
                self.saw_write(&slice[..take]);
                left -= take;
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: Send + 'static> tonic::transport::server::Connected for Tracked<S> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: self.local,
            remote_addr: Some(self.remote),
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
