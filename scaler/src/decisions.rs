//! `GET /decisions` on the admin port: what the scaler last decided for every ScaledObject it
//! holds, as JSON, read-only. `scaler status` joins it with the API server's objects.
//!
//! Bounded: at most [`MAX_ENTRIES`] entries (`?limit=` lowers it) and [`MAX_BYTES`] of body; each
//! error message is cut to [`MAX_MESSAGE_BYTES`]. Entries are sorted by namespace and name, and
//! a page that had to stop early says so (`truncated`, `total`); `?namespace=` narrows it.
//!
//! Never at the gRPC server's expense: the admin port has a thread of its own
//! ([`runtime::admin::spawn_thread`]); the snapshot there clones `Arc`s under each lock
//! briefly, and the sort and serialization run on that runtime's blocking thread, at the lowest
//! CPU priority, holding no lock. At most [`MAX_READERS`] answers are made or being sent at
//! once; a reader past them gets 503 with `Retry-After` at once. A slow reader holds one of them
//! for at most [`ANSWER_DEADLINE`] ([`body`]): memory is bounded per reader (a page of at most
//! [`MAX_BYTES`] and its snapshot) and in all.
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::StreamExt as _;
use runtime::http1::CloseConnection;
use scaler_core::metadata::Engine;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cache::Evaluate;
use crate::cache::{Cache, Snapshot};
use crate::metrics::code_name;

/// Most entries one answer carries: the default `--max-cached-objects`, so a fleet the cache
/// holds fits in one page.
pub const MAX_ENTRIES: usize = crate::cache::DEFAULT_CAPACITY;
/// Largest body: entries are about 500 bytes, so [`MAX_ENTRIES`] of them fit.
pub const MAX_BYTES: usize = 8 << 20;
/// Longest error message kept per entry (a backend's error text can be long).
pub const MAX_MESSAGE_BYTES: usize = 512;
/// Most answers made or being sent at once; a reader past them gets 503 (`scaler status --watch` polls one at
/// a time, so this is a few operators at once).
pub const MAX_READERS: usize = 2;
/// What a reader turned away is told to wait, in seconds.
pub const RETRY_AFTER_SECONDS: u32 = 1;
/// A reader that has not taken its whole answer within this is cut off (an 8 MiB page over a
/// `kubectl port-forward` takes a few seconds), so its permit and page are freed.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(30);
/// The size of the pieces an answer is made and sent in.
const PIECE_BYTES: usize = 64 * 1024;

/// One ScaledObject's last decision and last error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub namespace: String,
    pub scaled_object: String,
    /// The object whose count is decided: a CNPG Cluster, a RedisFailover or a Pooler, as
    /// `engine` says.
    pub cluster: String,
    /// Absent from an older scaler's answer, whose every entry was a Cluster's.
    #[serde(default)]
    pub engine: Engine,
    /// From the last good evaluation; absent before the first.
    pub current: Option<u32>,
    pub desired: Option<u32>,
    pub recommended: Option<u32>,
    pub reason: Option<String>,
    pub summary: Option<String>,
    /// When the last good evaluation was made (RFC 3339).
    pub last_success: Option<String>,
    /// When the last evaluation finished, good or not (RFC 3339).
    pub last_evaluation: Option<String>,
    /// The last evaluation's error, when it failed.
    pub last_error: Option<LastError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// The gRPC code KEDA got for it, grpc-go's spelling (`Unavailable`).
    pub code: String,
    pub message: String,
    pub time: String,
    pub age_seconds: u64,
}

/// One answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Entries held for the namespace asked (or all), before the limits.
    pub total: usize,
    /// `true` when `entries` stops before `total`.
    pub truncated: bool,
    pub entries: Vec<Entry>,
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t).map_or_else(|_| String::new(), |t| t.to_string())
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A cache snapshot as an entry (the wall clock `now` dates the error's age).
pub fn entry(snapshot: &Snapshot, now: SystemTime) -> Entry {
    let key = &snapshot.key;
    let good = snapshot.good.as_ref();
    let decision = good.map(|(_, e)| &e.decision);
    let last_error = match &snapshot.attempt {
        Some((at, Some(error))) => Some(LastError {
            code: code_name(error.code()).to_owned(),
            message: cut(&error.to_string(), MAX_MESSAGE_BYTES),
            time: rfc3339(*at),
            age_seconds: now.duration_since(*at).map_or(0, |d| d.as_secs()),
        }),
        _ => None,
    };
    Entry {
        namespace: key.namespace.clone(),
        scaled_object: key.name.clone(),
        cluster: key.config.cluster.clone(),
        engine: key.config.engine,
        current: good.map(|(_, e)| e.observation.current),
        desired: decision.map(|d| d.desired),
        recommended: decision.map(|d| d.recommended),
        reason: decision.map(|d| d.reason.as_str().to_owned()),
        summary: good.map(|(_, e)| cut(&e.summary(), MAX_MESSAGE_BYTES)),
        last_success: good.map(|(at, _)| rfc3339(*at)),
        last_evaluation: snapshot.attempt.as_ref().map(|(at, _)| rfc3339(*at)),
        last_error,
    }
}

/// The body: `items` sorted by `order` (namespace, name), as entries, at most `max_entries` of
/// them and at most `max_bytes` in all (an entry that would pass it is left out with every later
/// one), in pieces of about [`PIECE_BYTES`]. Entries are made one at a time as they are written,
/// and the pieces are never copied or grown past their size: the page takes its own length in
/// memory, and each piece is freed once sent.
pub fn render<T>(
    mut items: Vec<T>,
    order: fn(&T) -> (&str, &str),
    entry: impl Fn(&T) -> Entry,
    max_entries: usize,
    max_bytes: usize,
) -> Vec<Vec<u8>> {
    items.sort_unstable_by(|a, b| order(a).cmp(&order(b)));
    let total = items.len();
    // The envelope with the largest `total` and `truncated` it can have, so the cap holds.
    let envelope = format!("{{\"total\":{total},\"truncated\":false,\"entries\":[]}}").len();
    let mut pieces = vec![Vec::with_capacity(PIECE_BYTES)];
    let (mut written, mut kept) = (0, 0);
    let mut json = Vec::new();
    for item in items.iter().take(max_entries) {
        json.clear();
        // Cannot fail: strings, integers and an enum, into a Vec.
        serde_json::to_writer(&mut json, &entry(item)).expect("entries serialize");
        let separator = usize::from(kept > 0);
        if envelope + written + separator + json.len() > max_bytes {
            break;
        }
        let piece = pieces.last_mut().expect("one piece at least");
        if piece.len() + separator + json.len() > PIECE_BYTES && !piece.is_empty() {
            pieces.push(Vec::with_capacity(PIECE_BYTES.max(json.len() + 1)));
        }
        let piece = pieces.last_mut().expect("one piece at least");
        if kept > 0 {
            piece.push(b',');
        }
        piece.extend_from_slice(&json);
        written += separator + json.len();
        kept += 1;
    }
    let head = format!(
        "{{\"total\":{total},\"truncated\":{},\"entries\":[",
        kept < total
    );
    pieces.insert(0, head.into_bytes());
    pieces.push(b"]}".to_vec());
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

#[derive(Debug, Deserialize)]
struct Params {
    namespace: Option<String>,
    limit: Option<usize>,
}

/// The `/decisions` route, for [`runtime::admin::serve_with`] on its own thread
/// ([`runtime::admin::spawn_thread`], which gives `spawn_blocking` its low-priority thread).
pub fn router<E: Evaluate>(cache: Arc<Cache<E>>) -> Router {
    let state = Decisions {
        cache,
        readers: Arc::new(Semaphore::new(MAX_READERS)),
    };
    Router::new()
        .route("/decisions", get(decisions::<E>))
        .with_state(state)
}

struct Decisions<E> {
    cache: Arc<Cache<E>>,
    /// One permit per answer being made.
    readers: Arc<Semaphore>,
}

impl<E> Clone for Decisions<E> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            readers: self.readers.clone(),
        }
    }
}

async fn decisions<E: Evaluate>(
    State(state): State<Decisions<E>>,
    close: Option<Extension<CloseConnection>>,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return bad_request(
            "query parameters: namespace=<a namespace name>, limit=<a whole number>".into(),
        );
    };
    if let Some(ns) = &params.namespace
        && !names::is_dns_label(ns)
    {
        return bad_request(format!(
            "namespace {} is not {}",
            names::echo(ns),
            names::NAMESPACE_RULE
        ));
    }
    let Ok(permit) = state.readers.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, RETRY_AFTER_SECONDS.to_string())],
            format!("{MAX_READERS} /decisions answers are being made; retry in {RETRY_AFTER_SECONDS} s\n"),
        )
            .into_response();
    };
    let now = SystemTime::now();
    let snapshots = state.cache.snapshot(params.namespace.as_deref());
    let limit = params.limit.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES);
    let rendered = tokio::task::spawn_blocking(move || {
        render(
            snapshots,
            |s| (&s.key.namespace, &s.key.name),
            |s| entry(s, now),
            limit,
            MAX_BYTES,
        )
    })
    .await;
    match rendered {
        Ok(page) => (
            [(header::CONTENT_TYPE, "application/json")],
            body(page, permit, close.map(|Extension(close)| close)),
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot render /decisions: {error}\n"),
        )
            .into_response(),
    }
}

/// An answer's body, sent in its pieces ([`render`]). It holds the reader's permit until its
/// last piece is taken (or the connection drops), so at most [`MAX_READERS`] pages are in memory
/// however slowly readers read. Past [`ANSWER_DEADLINE`] the connection is closed (`close`): a
/// reader that reads nothing or a trickle is never asked for another piece, so the connection's
/// own task does it ([`CloseConnection::at`]); a piece asked for past it is an error, which
/// closes the connection too.
fn body(
    pieces: Vec<Vec<u8>>,
    permit: OwnedSemaphorePermit,
    close: Option<CloseConnection>,
) -> axum::body::Body {
    let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
    // Lifted when the body is taken or dropped.
    let held = close.map(|close| close.at(deadline));
    let pieces = futures::stream::iter(pieces).map(move |piece| {
        let _held = (&permit, &held);
        if tokio::time::Instant::now() > deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the /decisions reader took longer than the answer deadline",
            ));
        }
        Ok(axum::body::Bytes::from(piece))
    });
    axum::body::Body::from_stream(pieces)
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(namespace: &str, name: &str, message: &str) -> Entry {
        Entry {
            namespace: namespace.into(),
            scaled_object: name.into(),
            cluster: name.into(),
            engine: Engine::Cnpg,
            current: Some(3),
            desired: Some(4),
            recommended: Some(4),
            reason: Some("load".into()),
            summary: Some("load asks for 4".into()),
            last_success: Some("2026-12-01T00:00:00Z".into()),
            last_evaluation: Some("2026-12-01T00:00:00Z".into()),
            last_error: (!message.is_empty()).then(|| LastError {
                code: "Unavailable".into(),
                message: message.into(),
                time: "2026-12-01T00:00:00Z".into(),
                age_seconds: 5,
            }),
        }
    }

    fn parse(body: &str) -> Page {
        serde_json::from_str(body).unwrap()
    }

    fn render(entries: Vec<Entry>, max_entries: usize, max_bytes: usize) -> String {
        let pieces = super::render(
            entries,
            |e| (&e.namespace, &e.scaled_object),
            Entry::clone,
            max_entries,
            max_bytes,
        );
        String::from_utf8(pieces.concat()).unwrap()
    }

    #[test]
    fn entries_are_sorted_and_all_kept_within_the_limits() {
        let entries = vec![
            sample("b", "x", ""),
            sample("a", "y", "down"),
            sample("a", "x", ""),
        ];
        let page = parse(&render(entries, 10, MAX_BYTES));
        assert_eq!((page.total, page.truncated), (3, false));
        let order: Vec<_> = page
            .entries
            .iter()
            .map(|e| (e.namespace.as_str(), e.scaled_object.as_str()))
            .collect();
        assert_eq!(order, [("a", "x"), ("a", "y"), ("b", "x")]);
        assert_eq!(page.entries[1].last_error.as_ref().unwrap().message, "down");
    }

    #[test]
    fn the_entry_cap_truncates_and_says_so() {
        let entries: Vec<_> = (0..50)
            .map(|i| sample("a", &format!("pg-{i:02}"), ""))
            .collect();
        let page = parse(&render(entries, 7, MAX_BYTES));
        assert_eq!(
            (page.total, page.truncated, page.entries.len()),
            (50, true, 7)
        );
        assert_eq!(page.entries[6].scaled_object, "pg-06");
        let page = parse(&render(vec![sample("a", "pg", "")], 0, MAX_BYTES));
        assert_eq!(
            (page.total, page.truncated, page.entries.len()),
            (1, true, 0)
        );
    }

    #[test]
    fn the_byte_cap_holds_for_every_size_and_keeps_whole_entries() {
        let entries: Vec<_> = (0..40)
            .map(|i| sample("a", &format!("pg-{i:02}"), &"e".repeat(i * 10)))
            .collect();
        let full = render(entries.clone(), 100, MAX_BYTES).len();
        let mut previous = 0;
        for cap in (0..=full + 10).step_by(37) {
            let body = render(entries.clone(), 100, cap);
            let page = parse(&body);
            assert!(
                body.len() <= cap.max(60),
                "{} bytes over a cap of {cap}",
                body.len()
            );
            assert_eq!(page.truncated, page.entries.len() < 40, "cap {cap}");
            assert!(
                page.entries.len() >= previous,
                "a larger cap never keeps fewer"
            );
            previous = page.entries.len();
        }
        assert_eq!(parse(&render(entries.clone(), 100, full)).entries.len(), 40);
        assert_eq!(parse(&render(entries, 100, full - 1)).entries.len(), 39);
    }

    #[test]
    fn a_page_is_made_in_pieces_of_the_piece_size() {
        let entries: Vec<_> = (0..2_000)
            .map(|i| sample("a", &format!("pg-{i:04}"), "down"))
            .collect();
        let pieces = super::render(
            entries,
            |e| (&e.namespace, &e.scaled_object),
            Entry::clone,
            MAX_ENTRIES,
            MAX_BYTES,
        );
        assert!(pieces.len() > 4, "{} pieces", pieces.len());
        let envelope = 64;
        for piece in &pieces {
            assert!(
                piece.len() <= PIECE_BYTES + envelope,
                "{} bytes",
                piece.len()
            );
            assert!(
                piece.capacity() <= PIECE_BYTES + envelope,
                "never grown past its size"
            );
        }
        let page = parse(&String::from_utf8(pieces.concat()).unwrap());
        assert_eq!((page.total, page.entries.len()), (2_000, 2_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_holds_its_permit_and_its_connection_deadline_until_taken() {
        let readers = Arc::new(Semaphore::new(1));
        let page = |n| vec![vec![b'x'; PIECE_BYTES]; n];
        let close = CloseConnection::default();
        let whole = body(
            page(2),
            readers.clone().try_acquire_owned().unwrap(),
            Some(close.clone()),
        );
        let deadline = close.deadline().expect("a deadline while the body is out");
        assert_eq!(deadline, tokio::time::Instant::now() + ANSWER_DEADLINE);
        let mut pieces = whole.into_data_stream();
        let mut taken = 0;
        while let Some(piece) = pieces.next().await {
            assert_eq!(readers.available_permits(), 0, "held while pieces are left");
            taken += piece.unwrap().len();
        }
        assert_eq!(taken, 2 * PIECE_BYTES);
        drop(pieces);
        assert_eq!(readers.available_permits(), 1);
        assert_eq!(
            close.deadline(),
            None,
            "a page taken in time leaves its connection open"
        );

        let slow = body(
            page(3),
            readers.clone().try_acquire_owned().unwrap(),
            Some(close.clone()),
        );
        let mut pieces = slow.into_data_stream();
        assert_eq!(pieces.next().await.unwrap().unwrap().len(), PIECE_BYTES);
        // A reader that stopped reading is never asked for another piece: the deadline stays
        // for the connection's task to close it (runtime::http1), and a piece asked for past it
        // is an error.
        tokio::time::sleep(ANSWER_DEADLINE + Duration::from_secs(1)).await;
        assert!(close.deadline().is_some());
        let cut = pieces.next().await.unwrap().unwrap_err();
        assert!(cut.to_string().contains("deadline"), "{cut}");
        drop(pieces);
        assert_eq!(readers.available_permits(), 1);
        assert_eq!(close.deadline(), None);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = cut(&long, MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(super::cut("short", MAX_MESSAGE_BYTES), "short");
    }
}
