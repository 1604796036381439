use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;

use super::*;

fn limits(max: usize, per_peer: usize, protocol: Protocol) -> Limits {
    Limits {
        max_connections: max,
        max_connections_per_peer: per_peer,
        handshake_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(400),
        protocol,
    }
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

#[test]
fn at_the_cap_the_oldest_unestablished_goes_first_then_the_longest_idle() {
    let limits = limits(3, 3, Protocol::Http2);
    let mut table = Table::default();
    let (_, a) = table.admit(&limits, ip(1), 0, false);
    let (_, b) = table.admit(&limits, ip(2), 10, false);
    let (_, c) = table.admit(&limits, ip(3), 20, false);
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    for slot in [&a, &c] {
        slot.established.store(true, Ordering::Relaxed);
    }
    a.last_active_ms.store(5_000, Ordering::Relaxed);
    c.last_active_ms.store(2_000, Ordering::Relaxed);
    // b never sent a request: it goes first, though a and c are idle too.
    let (admission, d) = table.admit(&limits, ip(4), 9_000, false);
    assert_eq!(admission, Admission::Evicted(b.id));
    assert!(b.close.is_cancelled() && !a.close.is_cancelled());
    d.unwrap().established.store(true, Ordering::Relaxed);
    // Then c, idle since 2 s; d (just arrived) is not idle yet.
    let (admission, _) = table.admit(&limits, ip(5), 9_100, false);
    assert_eq!(admission, Admission::Evicted(c.id));
}

#[test]
fn busy_connections_are_never_closed_and_the_newcomer_is_refused() {
    let limits = limits(2, 2, Protocol::Http2);
    let mut table = Table::default();
    for peer in [1, 2] {
        let (_, slot) = table.admit(&limits, ip(peer), 0, false);
        let slot = slot.unwrap();
        slot.established.store(true, Ordering::Relaxed);
        slot.in_flight.store(1, Ordering::Relaxed); // a StreamIsActive stream, say
    }
    assert_eq!(
        table.admit(&limits, ip(3), 60_000, false).0,
        Admission::Refused
    );
    assert_eq!(table.slots.len(), 2);
}

#[test]
fn a_peer_at_its_cap_makes_room_among_its_own_connections_only() {
    let limits = limits(10, 2, Protocol::Http1);
    let mut table = Table::default();
    let (_, other) = table.admit(&limits, ip(9), 0, false);
    let (_, first) = table.admit(&limits, ip(1), 1, false);
    let (_, second) = table.admit(&limits, ip(1), 2, false);
    let (admission, _) = table.admit(&limits, ip(1), 3, false);
    assert_eq!(admission, Admission::Evicted(first.unwrap().id));
    assert!(!other.unwrap().close.is_cancelled() && !second.unwrap().close.is_cancelled());
    assert_eq!(table.per_peer[&ip(1)], 2);
}

#[test]
fn out_of_descriptors_counts_as_the_cap() {
    let limits = limits(10, 10, Protocol::Http1);
    let mut table = Table::default();
    let (_, only) = table.admit(&limits, ip(1), 0, false);
    assert_eq!(
        table.admit(&limits, ip(2), 1, true).0,
        Admission::Evicted(only.unwrap().id)
    );
}

#[test]
fn frame_headers_are_found_however_the_bytes_are_split() {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let frame = |len: u32, kind: u8, flags: u8, stream: u32, out: &mut Vec<u8>| {
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend(std::iter::repeat_n(0xAB, len as usize));
    };
    frame(6, 4, 0, 0, &mut bytes); // SETTINGS
    frame(8, 6, 0, 0, &mut bytes); // PING
    frame(300, 1, 4, 1, &mut bytes); // HEADERS
    frame(5, 0, 1, 1, &mut bytes); // DATA, END_STREAM
    let want = vec![
        Frame {
            kind: 4,
            flags: 0,
            stream: 0,
        },
        Frame {
            kind: 6,
            flags: 0,
            stream: 0,
        },
        Frame {
            kind: 1,
            flags: 4,
            stream: 1,
        },
        Frame {
            kind: 0,
            flags: 1,
            stream: 1,
        },
    ];
    for chunk in [1, 2, 7, 9, 10, 64, bytes.len()] {
        let (mut scan, mut seen) = (FrameScan::client(), Vec::new());
        for piece in bytes.chunks(chunk) {
            scan.feed(piece, |f| seen.push(f));
        }
        assert_eq!(seen, want, "chunks of {chunk}");
    }
}

async fn listen(limits: Limits) -> (SocketAddr, ReceiverStream<io::Result<Tracked<Guarded>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = incoming(listener, limits, CancellationToken::new(), |io, _| async {
        Some(io)
    });
    tokio::spawn(incoming.accept);
    (addr, incoming.connections)
}

/// Reads until the server closes or errors; the error kind, or `None` on a clean end.
fn drain(mut conn: Tracked<Guarded>) -> tokio::task::JoinHandle<Option<io::ErrorKind>> {
    tokio::spawn(async move {
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(e.kind()),
            }
        }
    })
}

#[tokio::test]
async fn a_new_connection_closes_a_silent_one_at_the_cap() {
    let (addr, mut incoming) = listen(limits(2, 2, Protocol::Http1)).await;
    let _a = TcpStream::connect(addr).await.unwrap();
    let first = drain(incoming.next().await.unwrap().unwrap());
    let _b = TcpStream::connect(addr).await.unwrap();
    let _second = incoming.next().await.unwrap().unwrap();
    let _c = TcpStream::connect(addr).await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(2), incoming.next()).await;
    assert!(
        matches!(third, Ok(Some(Ok(_)))),
        "the third connection waited"
    );
    let ended = tokio::time::timeout(Duration::from_millis(300), first).await;
    assert_eq!(
        ended.unwrap().unwrap(),
        Some(io::ErrorKind::ConnectionAborted)
    );
}

#[tokio::test]
async fn http1_a_silent_connection_is_closed_and_a_talking_one_is_not() {
    let (addr, mut incoming) = listen(limits(8, 8, Protocol::Http1)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let reader = drain(incoming.next().await.unwrap().unwrap());
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.write_all(b"x").await.unwrap();
    }
    assert!(!reader.is_finished(), "a talking connection was closed");
    let started = Instant::now();
    assert_eq!(reader.await.unwrap(), Some(io::ErrorKind::TimedOut));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn http2_pings_are_not_activity() {
    let (addr, mut incoming) = listen(limits(8, 8, Protocol::Http2)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let reader = drain(incoming.next().await.unwrap().unwrap());
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let started = Instant::now();
    let ping = b"\0\0\x08\x06\0\0\0\0\0\0\0\0\0\0\0\0\0";
    while !reader.is_finished() && started.elapsed() < Duration::from_secs(3) {
        let _ = client.write_all(ping).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reader.await.unwrap(), Some(io::ErrorKind::TimedOut));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "pings kept it open {:?}",
        started.elapsed()
    );
}
