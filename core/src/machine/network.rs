//! Hosts a tool was refused because the run's allow list lacks them, when the run asks a human
//! about such hosts (`SandboxPolicy.on_unknown_host = "ask"`): after the batch, one pending
//! "call" [`ALLOW_HOST_TOOL`] per host (decided with `baton approve`/`deny` like any call);
//! approving adds `host:port` to the run's `allowed_hosts` for every later call, and the model
//! is told what was decided before its next turn. Nothing is run again: the model retries.
//! An approved host name reaches only the public addresses it resolves to (the proxy never lets
//! a name open a non-public address, `sandbox/src/net/rules.rs` `HostRule::names`); an approved
//! IP literal is the address the human was shown.

use std::collections::BTreeSet;

use baton_proto::{ToolCall, ToolResult};

use super::{Batch, BatchKind, Disposition, Phase, PlannedCall, RunState, user};

/// The tool name of a host question in `baton pending` and approver rules.
pub const ALLOW_HOST_TOOL: &str = "baton.allow_host";
/// Call ids of host questions: `baton_allow_host_<turn>_<n>`.
pub const ALLOW_HOST_CALL_PREFIX: &str = "baton_allow_host_";
/// At most this many hosts are put to a human after one batch (the rest stay refused).
const MAX_HOSTS_ASKED: usize = 8;

/// The `host:port` entries a call's processes were refused as not on the list, with its id.
pub(super) fn unknown_hosts(result: &ToolResult) -> impl Iterator<Item = (String, String)> + '_ {
    result
        .network_refusals
        .iter()
        .filter(|n| n.kind == "not_allowed")
        .map(|n| (host_entry(&n.host, n.port), result.call_id.clone()))
}

/// `host:port` as an `--allow-host` entry (`[v6]:port` for IPv6 literals).
fn host_entry(host: &str, port: u32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl RunState {
    fn asks_about_hosts(&self) -> bool {
        self.spec
            .sandbox
            .as_ref()
            .is_some_and(|s| s.on_unknown_host() == baton_proto::sandbox_policy::OnUnknownHost::Ask)
    }

    /// After a batch whose calls were refused `hosts` (from [`unknown_hosts`], in call order)
    /// not on the list: pauses for a human when the run asks about them. Returns whether it did.
    pub(super) fn ask_about_hosts(&mut self, hosts: Vec<(String, String)>, now_ms: i64) -> bool {
        if hosts.is_empty() || !self.asks_about_hosts() || !matches!(self.phase, Phase::Thinking) {
            return false;
        }
        let allowed: BTreeSet<&str> = self
            .spec
            .sandbox
            .iter()
            .flat_map(|s| s.allowed_hosts.iter().map(String::as_str))
            .collect();
        let mut seen = BTreeSet::new();
        let hosts: Vec<(String, String)> = hosts
            .into_iter()
            .filter(|(host, _)| !allowed.contains(host.as_str()) && seen.insert(host.clone()))
            .take(MAX_HOSTS_ASKED)
            .collect();
        if hosts.is_empty() {
            return false;
        }
        let mut calls = Vec::with_capacity(hosts.len());
        for (n, (host, call_id)) in hosts.into_iter().enumerate() {
            let call = ToolCall {
                id: format!("{ALLOW_HOST_CALL_PREFIX}{}_{}", self.turn, n + 1),
                name: ALLOW_HOST_TOOL.to_owned(),
                arguments: serde_json::json!({ "host": host, "refused_for": call_id }).to_string(),
                ..Default::default()
            };
            self.approval_requested(&call, now_ms);
            calls.push(PlannedCall {
                call,
                disposition: Disposition::Pending,
            });
        }
        self.note(
            now_ms,
            &format!(
                "the proxy refused {} not on the run's allowed hosts; on_unknown_host = ask: \
                 approve to allow it for the rest of the run, deny to keep it refused",
                calls
                    .iter()
                    .map(|c| host_of(&c.call))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        self.phase = Phase::AwaitingApproval(Batch {
            calls,
            requested_at_ms: now_ms,
            kind: BatchKind::Hosts,
            started: Vec::new(),
            done: Vec::new(),
        });
        true
    }

    /// Every host question is decided: approved hosts join the allow list, and the model hears
    /// what was decided.
    pub(super) fn on_hosts_decided(&mut self, batch: Batch, now_ms: i64) {
        let mut allowed = Vec::new();
        let mut refused = Vec::new();
        for planned in &batch.calls {
            let host = host_of(&planned.call);
            match &planned.disposition {
                Disposition::Run { .. } => allowed.push(host),
                _ => refused.push(host),
            }
        }
        let sandbox = self.spec.sandbox.get_or_insert_with(Default::default);
        for host in &allowed {
            if !sandbox.allowed_hosts.contains(host) {
                sandbox.allowed_hosts.push(host.clone());
            }
        }
        sandbox.network = true;
        let mut told = Vec::new();
        if !allowed.is_empty() {
            told.push(format!(
                "A human allowed your tools to reach {} for the rest of this run: retry what \
                 needed it.",
                allowed.join(", ")
            ));
        }
        if !refused.is_empty() {
            told.push(format!(
                "A human did not allow {}: do not try to reach it again; work without it or \
                 say in your answer what is needed.",
                refused.join(", ")
            ));
        }
        self.note(
            now_ms,
            &format!(
                "hosts decided: allowed [{}], refused [{}]",
                allowed.join(", "),
                refused.join(", ")
            ),
        );
        self.conversation.push(user(&told.join(" "), true));
        self.phase = Phase::Thinking;
    }
}

/// The `host` argument of a host question.
fn host_of(call: &ToolCall) -> String {
    serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|v| v.get("host")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}
