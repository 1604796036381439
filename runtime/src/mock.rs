//! A scripted stand-in for the Kubernetes API server (tests only), after kube-rs's
//! `ApiServerVerifier`: the code under test runs in a task with a `Client` wired to a
//! `tower_test` mock, and the test answers each request in order, asserting what was sent. The
//! helpers name the steps a scenario is made of (a read, a failure, a conditional write), so a
//! test's script reads as the API traffic it expects.
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

pub struct ApiServer(Handle<Request<Body>, Response<Body>>);

/// A client whose every request is answered by the returned [`ApiServer`].
pub fn client() -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer(handle))
}

/// How long a script waits for the code under test's next request before it fails the test.
const REQUEST_WAIT: Duration = Duration::from_secs(2);

/// One request the code under test sent.
#[derive(Debug)]
pub struct Sent {
    pub method: String,
    pub path: String,
    /// The query string, empty when absent (`watch=true&resourceVersion=...`).
    pub query: String,
    /// The `Content-Type` header (a patch's kind: merge, JSON or apply), empty when absent.
    pub content_type: String,
    pub body: Value,
}

impl ApiServer {
    /// Takes the next request, checks its method and path (query excluded), and answers
    /// `status` with `body`.
    pub async fn expect(&mut self, method: &str, path: &str, status: u16, body: Value) -> Sent {
        let (sent, held) = self.hold(method, path).await;
        held.answer(status, &body);
        sent
    }

    /// Takes the next request and checks its method and path, leaving it unanswered: the code
    /// under test waits on it until [`Held::answer`] (a hung API server while it lives, or a
    /// step taken while a request is in flight).
    pub async fn hold(&mut self, method: &str, path: &str) -> (Sent, Held) {
        let (request, respond) = self.0.next_request().await.expect("no request was sent");
        let (sent, held) = taken(request, respond).await;
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            (method, path),
            "unexpected request {sent:?}"
        );
        (sent, held)
    }

    /// Takes the next request, whatever it is, unanswered: for code that sends several at once
    /// (two watches), whose order the script must not assume. Fails the test when none comes
    /// within two seconds (of real time: not for tests on paused time, where waiting advances
    /// the clock).
    pub async fn next(&mut self) -> (Sent, Held) {
        self.next_within(REQUEST_WAIT)
            .await
            .expect("no request reached the API server")
    }

    /// The next request if one comes within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<(Sent, Held)> {
        let (request, respond) = tokio::time::timeout(wait, self.0.next_request())
            .await
            .ok()?
            .expect("the mock service closed");
        Some(taken(request, respond).await)
    }

    /// Asserts the code under test sends nothing for `wait` (a dry run that must not write).
    pub async fn silent_for(&mut self, wait: Duration) {
        if let Some((sent, _)) = self.next_within(wait).await {
            panic!("an unexpected request was sent: {sent:?}");
        }
    }

    /// A read: the next request is a GET of `path`, answered with `object`.
    pub async fn get(&mut self, path: &str, object: Value) {
        self.expect("GET", path, 200, object).await;
    }

    /// The next request, `method` on `path`, fails with the API server's `reason` (`NotFound`,
    /// `Conflict`, ...) and HTTP `code`.
    pub async fn fail(&mut self, method: &str, path: &str, code: u16, reason: &str) {
        self.expect(method, path, code, status(code, reason)).await;
    }

    /// A create: the next request is a POST to the collection `path`, answered 201 with `object`.
    /// Returns the body sent.
    pub async fn create(&mut self, path: &str, object: Value) -> Value {
        self.expect("POST", path, 201, object).await.body
    }

    /// A write that must be conditional (optimistic concurrency): the next request, `method` on
    /// `path`, carries `resource_version`, the version the code read; answered with `object`.
    /// Returns the body sent, for the scenario's own checks.
    pub async fn conditional(
        &mut self,
        method: &str,
        path: &str,
        resource_version: &str,
        object: Value,
    ) -> Value {
        let sent = self.expect(method, path, 200, object).await;
        assert_eq!(
            sent.body["metadata"]["resourceVersion"], resource_version,
            "not conditional on the version read: {sent:?}"
        );
        sent.body
    }

    /// Asserts the code under test sent nothing more.
    pub fn done(mut self) {
        assert!(
            futures::FutureExt::now_or_never(self.0.next_request())
                .flatten()
                .is_none(),
            "an unexpected request was sent"
        );
    }
}

/// What was sent, read whole, and the request's answer to give.
async fn taken(request: Request<Body>, respond: SendResponse<Response<Body>>) -> (Sent, Held) {
    let sent = Sent {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().unwrap_or_default().to_owned(),
        content_type: request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        body: {
            let bytes = request.into_body().collect_bytes().await.unwrap();
            if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            }
        },
    };
    (sent, Held(respond))
}

/// A request taken and not answered yet (dropping it fails the request).
pub struct Held(SendResponse<Response<Body>>);

impl Held {
    /// Answers `status` with `body`.
    pub fn answer(self, status: u16, body: &Value) {
        self.answer_bytes(status, serde_json::to_vec(body).unwrap());
    }

    /// Answers a watch with its events, one JSON object a line.
    pub fn answer_events(self, events: &[Value]) {
        let mut body = Vec::new();
        for event in events {
            body.extend(serde_json::to_vec(event).unwrap());
            body.push(b'\n');
        }
        self.answer_bytes(200, body);
    }

    fn answer_bytes(self, status: u16, body: Vec<u8>) {
        self.0.send_response(
            Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .unwrap(),
        );
    }
}

/// A list of `kind` (`ClusterList`) at resourceVersion 10, as a LIST answers.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"resourceVersion": "10"},
        "items": items,
    })
}

/// Runs `code` while `script` plays the API server's side of it; returns what `code` returned.
pub async fn scripted<T>(code: impl Future<Output = T>, script: impl Future<Output = ()>) -> T {
    let (result, ()) = tokio::join!(code, script);
    result
}

/// A `Status` failure body, as the API server sends it.
pub fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason} (test)"), "reason": reason, "code": code,
    })
}
