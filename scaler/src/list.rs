//! Bounded reads of the Kubernetes API (`scaler status`'s lists, `scaler serve`'s warm start):
//! every list paged (`limit`/`continue`), each page read into at most a byte cap and its items
//! projected as they parse, at most an item cap in all; every HTTP body read with a byte cap.
//!
//! kube's own `list` reads the whole answer, however large, and parses it at once: an endless
//! list grew `status` past a gigabyte, and a 300 MB one parsed past `--timeout`.
use std::fmt;
use std::marker::PhantomData;

use http_body_util::BodyExt as _;
use kube::api::ListParams;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess};

/// Items asked for per page (kubectl's chunk size).
pub const PAGE_ITEMS: u32 = 500;
/// Bytes of an error answer kept for its message (the note cuts it shorter still).
pub const ERROR_BYTES: usize = 4096;

/// The bounds on one list: items in all, bytes per page.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub items: usize,
    pub page_bytes: usize,
}

/// Why a list stopped; the caller names the setting that raises a cap.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ListError {
    /// The request failed, or the API server answered an error (its message).
    #[error("{0}")]
    Api(String),
    #[error("a page of the list is larger than {bytes} bytes ({PAGE_ITEMS} items were asked for)")]
    PageTooLarge { bytes: usize },
    #[error("the list holds more than {items} items")]
    TooManyItems { items: usize },
    #[error("the answer is not a list: {0}")]
    NotAList(String),
}

/// Reads `body` into at most `cap` bytes; `cut` says it held more (the rest is never read).
pub async fn read_capped<B>(mut body: B, cap: usize) -> Result<(Vec<u8>, bool), B::Error>
where
    B: hyper::body::Body + Unpin,
    B::Data: AsRef<[u8]>,
{
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            let data = data.as_ref();
            if out.len() + data.len() > cap {
                out.extend_from_slice(&data[..cap - out.len()]);
                return Ok((out, true));
            }
            out.extend_from_slice(data);
        }
    }
    Ok((out, false))
}

/// Every item of the list at `path` (an API collection URL), each projected by `project`, paged
/// and capped by `caps`.
pub async fn list<T, U>(
    client: &kube::Client,
    path: &str,
    selector: Option<&str>,
    caps: Caps,
    project: impl Fn(T) -> Option<U>,
) -> Result<Vec<U>, ListError>
where
    T: DeserializeOwned,
{
    let mut collect = Collect {
        room: caps.items,
        listed: 0,
        over: false,
        project: &project,
        out: Vec::new(),
        item: PhantomData,
    };
    let mut next: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE_ITEMS);
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        if let Some(token) = &next {
            params = params.continue_token(token);
        }
        let api = |e: &dyn fmt::Display| ListError::Api(e.to_string());
        let request = kube::core::Request::new(path)
            .list(&params)
            .map_err(|e| api(&e))?;
        let response = client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|e| api(&e))?;
        let status = response.status();
        if !status.is_success() {
            let (body, _) = read_capped(response.into_body(), ERROR_BYTES)
                .await
                .map_err(|e| api(&e))?;
            return Err(ListError::Api(api_error(status.as_u16(), &body)));
        }
        let (body, cut) = read_capped(response.into_body(), caps.page_bytes)
            .await
            .map_err(|e| api(&e))?;
        if cut {
            return Err(ListError::PageTooLarge {
                bytes: caps.page_bytes,
            });
        }
        next = parse_page(&body, &mut collect)?;
        if next.is_none() {
            return Ok(collect.out);
        }
    }
}

/// The API server's message (a `Status`), else the start of the body; escaped where it is shown.
fn api_error(code: u16, body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        message: String,
    }
    match serde_json::from_slice::<Status>(body) {
        Ok(status) => format!("HTTP {code}: {}", status.message),
        Err(_) => format!("HTTP {code}: {}", String::from_utf8_lossy(body)),
    }
}

/// What the pages parsed so far hold: the projected items, and how many were listed against the
/// room the item cap leaves.
struct Collect<'a, T, U, F> {
    room: usize,
    listed: usize,
    over: bool,
    project: &'a F,
    out: Vec<U>,
    item: PhantomData<fn() -> T>,
}

/// Parses one page into `collect` (each item projected as soon as it is parsed, so a page of a
/// million tiny items never lives in memory); returns the next page's token.
fn parse_page<T, U, F>(
    bytes: &[u8],
    collect: &mut Collect<T, U, F>,
) -> Result<Option<String>, ListError>
where
    T: DeserializeOwned,
    F: Fn(T) -> Option<U>,
{
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Page(collect)
        .deserialize(&mut de)
        .and_then(|next| de.end().map(|()| next));
    match parsed {
        Ok(next) => Ok(next.filter(|token| !token.is_empty())),
        Err(_) if collect.over => Err(ListError::TooManyItems {
            items: collect.room,
        }),
        Err(e) => Err(ListError::NotAList(e.to_string())),
    }
}

struct Page<'c, 'a, T, U, F>(&'c mut Collect<'a, T, U, F>);
struct Items<'c, 'a, T, U, F>(&'c mut Collect<'a, T, U, F>);

impl<'de, T, U, F> DeserializeSeed<'de> for Page<'_, '_, T, U, F>
where
    T: DeserializeOwned,
    F: Fn(T) -> Option<U>,
{
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T, U, F> de::Visitor<'de> for Page<'_, '_, T, U, F>
where
    T: DeserializeOwned,
    F: Fn(T) -> Option<U>,
{
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        #[derive(Deserialize)]
        struct Meta {
            #[serde(rename = "continue")]
            next: Option<String>,
        }
        let mut next = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "items" => map.next_value_seed(Items(&mut *self.0))?,
                "metadata" => next = map.next_value::<Meta>()?.next,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(next)
    }
}

impl<'de, T, U, F> DeserializeSeed<'de> for Items<'_, '_, T, U, F>
where
    T: DeserializeOwned,
    F: Fn(T) -> Option<U>,
{
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T, U, F> de::Visitor<'de> for Items<'_, '_, T, U, F>
where
    T: DeserializeOwned,
    F: Fn(T) -> Option<U>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list's items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let c = self.0;
        loop {
            if c.listed == c.room {
                // One more is one too many; none is the end.
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    c.over = true;
                    return Err(de::Error::custom("over the item cap"));
                }
                return Ok(());
            }
            match seq.next_element::<T>()? {
                Some(item) => {
                    c.listed += 1;
                    c.out.extend((c.project)(item));
                }
                None => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn collect<F: Fn(Value) -> Option<u64>>(
        room: usize,
        project: &F,
    ) -> Collect<'_, Value, u64, F> {
        Collect {
            room,
            listed: 0,
            over: false,
            project,
            out: Vec::new(),
            item: PhantomData,
        }
    }

    #[test]
    fn pages_are_projected_and_counted_across_pages() {
        let project = |v: Value| v["n"].as_u64();
        let mut c = collect(5, &project);
        let page = |items: Value, next: &str| {
            serde_json::to_vec(
                &json!({"kind": "List", "metadata": {"continue": next}, "items": items}),
            )
            .unwrap()
        };
        let first = page(json!([{"n": 1}, {"skip": true}, {"n": 3}]), "abc");
        assert_eq!(parse_page(&first, &mut c), Ok(Some("abc".into())));
        let last = page(json!([{"n": 4}, {"n": 5}]), "");
        assert_eq!(parse_page(&last, &mut c), Ok(None));
        assert_eq!(c.out, [1, 3, 4, 5]);
        let more = page(json!([{"n": 6}]), "");
        let error = parse_page(&more, &mut c).unwrap_err();
        assert_eq!(error, ListError::TooManyItems { items: 5 });
    }

    #[test]
    fn a_page_of_a_million_items_stops_at_the_cap() {
        let project = |v: Value| v.as_u64();
        let mut c = collect(1000, &project);
        let body = format!("{{\"items\":[{}0]}}", "0,".repeat(1_000_000));
        let error = parse_page(body.as_bytes(), &mut c).unwrap_err();
        assert_eq!(error, ListError::TooManyItems { items: 1000 });
        assert_eq!(c.out.len(), 1000);
        for garbage in ["[]", "{\"items\": 3}", "{\"items\": []} x"] {
            let error = parse_page(garbage.as_bytes(), &mut collect(10, &project)).unwrap_err();
            assert!(matches!(error, ListError::NotAList(_)), "{error}");
        }
    }
}
