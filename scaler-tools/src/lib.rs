//! The scaler's operator tools: `scaler explain`, `status` and `backtest`. They reuse the
//! server's library (crate scaler: backend client, evaluation, topology, ScaledObject reading)
//! and nothing depends on them but the `scaler` binary.
#![forbid(unsafe_code)]

pub mod backtest;
pub mod explain;
pub mod status;
