//! Parsers of flag values (durations, sizes, dollars, host rules, run ids, states, labels).

/// Parses `90`, `90s`, `30m`, `2h`, `1h 30m`.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration ({e}); use e.g. 90s, 30m, 2h"))
}

/// An `--allow-host` entry, checked here so a typo fails at submit (exit 2), not in a tool call.
pub(crate) fn parse_host_rule(s: &str) -> Result<String, String> {
    baton_core::net::HostRule::parse(s)
        .map(|rule| rule.to_string())
        .map_err(|e| e.to_string())
}

/// Parses a size: `1048576`, `512MiB`, `2GiB`, `100MB`, `64k`.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{s}' is not a size; use e.g. 512MiB, 2GiB or a number of bytes"))?;
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{s}'; use B, KiB, MiB or GiB"
            ));
        }
    };
    let bytes = value * factor;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("'{s}' is not a positive size"));
    }
    Ok(bytes as u64)
}

/// A positive amount of US dollars: `2.50`, `$0.75`.
pub(crate) fn parse_usd(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let number = t.strip_prefix('$').unwrap_or(t);
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!(
            "'{s}' is not a budget; give a positive amount of US dollars, e.g. 2.50"
        )),
        Err(_) => Err(format!(
            "'{s}' is not an amount of US dollars; give a number such as 2.50"
        )),
    }
}

/// Anthropic's smallest thinking budget, in tokens.
pub(crate) const MIN_THINKING_BUDGET: u32 = 1024;

/// A thinking budget: a whole number of tokens, at least [`MIN_THINKING_BUDGET`].
pub(crate) fn parse_thinking_budget(s: &str) -> Result<u32, String> {
    let tokens: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of tokens; give e.g. 8000"))?;
    if tokens < MIN_THINKING_BUDGET {
        return Err(format!(
            "a thinking budget of {tokens} tokens is below Anthropic's minimum of \
             {MIN_THINKING_BUDGET}; give at least {MIN_THINKING_BUDGET}"
        ));
    }
    Ok(tokens)
}

/// [`parse_duration`], above zero (a zero limit would mean no time at all).
pub(crate) fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "'{s}' is zero; give a positive duration (leave the flag out for the default)"
        ));
    }
    Ok(d)
}

pub(crate) fn parse_run_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the run id is empty; leave --id out for a new unique id".to_owned());
    }
    if s.chars().any(char::is_control) {
        return Err(
            "the run id contains control characters; use letters, digits, - and _".to_owned(),
        );
    }
    Ok(s.to_owned())
}

/// An evaluation id: letters, digits, `-` and `_` (it starts each of its run ids).
pub(crate) fn parse_eval_id(s: &str) -> Result<String, String> {
    crate::eval::suite::check_id("the evaluation id", s)?;
    Ok(s.to_owned())
}

/// `--at-turn N` (from 1) or `each`.
pub(crate) fn parse_at_turn(s: &str) -> Result<super::AtTurn, String> {
    if s == "each" {
        return Ok(super::AtTurn::Each);
    }
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(super::AtTurn::Turn(n)),
        _ => Err(format!("'{s}' is not a turn (1, 2, ...) or `each`")),
    }
}

pub(crate) fn parse_state(s: &str) -> Result<baton_proto::RunState, String> {
    use baton_proto::RunState;
    let all = [
        RunState::Thinking,
        RunState::Executing,
        RunState::AwaitingApproval,
        RunState::Compacting,
        RunState::Verifying,
        RunState::Idle,
        RunState::Completed,
        RunState::Failed,
        RunState::Cancelled,
    ];
    let wanted = s.trim().to_uppercase().replace('-', "_");
    all.into_iter()
        .find(|state| state.as_str_name() == wanted)
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|state| state.as_str_name()).collect();
            format!("unknown state '{s}'; use one of {}", names.join(", "))
        })
}

pub(crate) fn parse_label(s: &str) -> Result<(String, String), String> {
    // Labels are a keyword-list search attribute: `list --label` must be able to query them,
    // and visibility stores (the dev server's SQLite full-text index) choke on quotes and
    // control characters.
    if let Some(c) = s
        .chars()
        .find(|c| matches!(c, '"' | '\'' | '\\') || c.is_control())
    {
        return Err(format!(
            "'{s}' has the character {c:?}, which labels cannot hold (they are queried through \
             Temporal visibility); use letters, digits and punctuation other than quotes and \
             backslashes"
        ));
    }
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("'{s}' is not KEY=VALUE")),
    }
}

/// Longest fairness key the server takes (bytes).
pub(crate) const MAX_FAIRNESS_KEY_BYTES: usize = 64;

/// A fairness key: 1 to 64 bytes, no control characters.
pub(crate) fn parse_fairness_key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the fairness key is empty; give a team or tenant name".to_owned());
    }
    if s.len() > MAX_FAIRNESS_KEY_BYTES {
        return Err(format!(
            "the fairness key is {} bytes; Temporal takes at most {MAX_FAIRNESS_KEY_BYTES} \
             (use a short team or tenant id)",
            s.len()
        ));
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the fairness key has the control character {c:?}; use a plain team or tenant id"
        ));
    }
    Ok(s.to_owned())
}

/// A fairness weight: 0.001 to 1000 (what the server clamps to).
pub(crate) fn parse_fairness_weight(s: &str) -> Result<f32, String> {
    let w: f32 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number; give a weight such as 2 or 0.5"))?;
    if !(0.001..=1000.0).contains(&w) {
        return Err(format!(
            "the fairness weight {w} is out of range: between 0.001 and 1000 (default 1)"
        ));
    }
    Ok(w)
}

/// An RFC 3339 time (`2026-12-01T03:00:00Z`).
pub(crate) fn parse_time(s: &str) -> Result<std::time::SystemTime, String> {
    humantime::parse_rfc3339_weak(s.trim()).map_err(|e| {
        format!("'{s}' is not a time: {e}; write it as RFC 3339, e.g. 2026-12-01T03:00:00Z")
    })
}
