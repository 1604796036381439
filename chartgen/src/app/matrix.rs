//! The vocabulary of `--verify`'s mode matrix, shared by the target's cases (verify.rs) and the
//! Poolers' (pooler/verify.rs): one helm run each and what it must produce.

pub const ADAPTER_API: &str = "autoscaling.cozystack.io/v1alpha1";
pub const ADAPTER_KIND: &str = "ScaleAdapter";

/// One `helm template` run and what it must produce.
pub struct Case {
    pub name: &'static str,
    pub sets: Vec<String>,
    pub keda: bool,
    pub expect: Expect,
    /// The Poolers' pairs (pooler/verify.rs): Some(paused) when they must render, None when
    /// none may.
    pub poolers: Option<bool>,
}

pub enum Expect {
    /// Renders; objects valid; a ScaledObject iff `scaled`, paused iff `paused`.
    Renders { scaled: bool, paused: bool },
    /// The render fails with this text in the message.
    Fails(&'static str),
}
