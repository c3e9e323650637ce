//! baton's wire contract, generated from `proto/baton/v1/baton.proto`.
//!
//! Every message implements `serde::{Serialize, Deserialize}` in proto3 JSON form with the
//! proto field names as keys (`call_id`, not `callId`), so workflow inputs, signals, queries
//! and activity payloads are readable in the `temporal` CLI and Web UI.

#![allow(missing_docs, clippy::all, unreachable_pub)]

/// Version 1 of the contract.
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/baton.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/baton.v1.serde.rs"));
}

pub use v1::*;
