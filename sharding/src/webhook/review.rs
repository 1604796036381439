//! The slice of `admission.k8s.io/v1` AdmissionReview the webhook reads and writes.
//!
//! Own types rather than `kube::core::admission`: kube 5 builds patches with json-patch 4,
//! while the workspace uses json-patch 5, and the webhook must tell "not an AdmissionReview"
//! (HTTP 400) apart from "a review whose object is malformed" (allowed unchanged).
use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// An incoming review: only `request` is read.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    pub api_version: String,
    pub kind: String,
    pub request: AdmissionRequest,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub operation: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Kept raw and unparsed: a malformed object must not make the whole review unreadable, and
    /// a legal object nested deeper than a JSON tree parser allows must still be admitted (only
    /// its metadata is read; serde_json skips the rest without recursing).
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// Why a body is not an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not an admission.k8s.io/v1 AdmissionReview with a request: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported review {api_version}/{kind}; send admission.k8s.io/v1 AdmissionReview")]
    Version { api_version: String, kind: String },
}

impl AdmissionReview {
    pub fn from_slice(body: &[u8]) -> Result<Self, ReviewError> {
        let review: Self = serde_json::from_slice(body)?;
        if review.api_version != API_VERSION || review.kind != KIND {
            return Err(ReviewError::Version {
                api_version: review.api_version,
                kind: review.kind,
            });
        }
        Ok(review)
    }
}

/// The reply: `{"apiVersion":..,"kind":"AdmissionReview","response":{..}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewResponse {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub response: AdmissionResponse,
}

/// The webhook never denies: `allowed` is always true, with or without a patch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    /// The JSON Patch (RFC 6902) document; `ByteString` serialises as the base64 that
    /// AdmissionReview v1 requires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<ByteString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
}

impl AdmissionResponse {
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: true,
            patch: None,
            patch_type: None,
        }
    }

    pub fn into_review(self) -> ReviewResponse {
        ReviewResponse {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        }
    }
}
