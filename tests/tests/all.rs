//! The end-to-end and integration tests of baton, in one test binary (one link of the harness
//! and the SDK instead of one per file). Each module under `suite/` covers one feature; run one
//! with `cargo test -p baton-tests --test all -- <module>::` (e.g. `suite::approvals::`) or a
//! single test by name. `common` holds the helpers the suites share.

mod common;

mod suite {
    mod agent_loop;
    mod anthropic_wire;
    mod approvals;
    mod cli;
    mod context_capacity;
    mod conversations;
    mod cost;
    mod docs;
    mod environments;
    mod eval;
    mod failover;
    mod fleet;
    mod fork;
    mod git_harness;
    mod github;
    mod handoff;
    mod harness;
    mod history_budget;
    mod llama_cpp;
    mod mcp;
    mod network;
    mod openai_wire;
    mod priority;
    mod provider_rate;
    mod providers;
    mod replay;
    mod responses;
    mod retry_budget;
    mod run_traces;
    mod schedules;
    mod security;
    mod security_cli;
    mod store;
    mod streaming;
    mod subagents;
    mod tls;
    mod tools;
    mod verification;
    mod worker_ops;
    mod workspace;
}
