//! A scripted stand-in for the Kubernetes API server (tests only), after kube-rs's
//! `ApiServerVerifier`: the code under test runs in a task with a `Client` wired to a
//! `tower_test` mock, and the test answers each request in order, asserting what was sent.
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

pub struct ApiServer(Handle<Request<Body>, Response<Body>>);

/// A client whose every request is answered by the returned [`ApiServer`].
pub fn client() -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer(handle))
}

/// One request the code under test sent.
#[derive(Debug)]
pub struct Sent {
    pub method: String,
    pub path: String,
    pub body: Value,
}

impl ApiServer {
    /// Takes the next request, checks its method and path (query excluded), and answers
    /// `status` with `body`.
    pub async fn expect(&mut self, method: &str, path: &str, status: u16, body: Value) -> Sent {
        let (request, respond) = self.0.next_request().await.expect("no request was sent");
        let sent = Sent {
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
            body: {
                let bytes = request.into_body().collect_bytes().await.unwrap();
                if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap()
                }
            },
        };
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            (method, path),
            "unexpected request {sent:?}"
        );
        respond.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
        sent
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

/// A `Status` failure body, as the API server sends it.
pub fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason} (test)"), "reason": reason, "code": code,
    })
}
