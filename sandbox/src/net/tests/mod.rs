//! Tests of the network module: decisions with a fake resolver, and the proxy end to end with
//! real loopback servers and the real `curl`. The rules' and addresses' tables are in
//! `baton-core` (`core/src/net/tests/`).

mod policy;
mod proxy;
mod servers;
