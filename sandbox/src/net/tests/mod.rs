//! Tests of the network module: rules and addresses (pure tables), decisions with a fake
//! resolver, and the proxy end to end with real loopback servers and the real `curl`.

mod addr;
mod policy;
mod proxy;
mod rules;
mod servers;
