//! What a failed git command's stderr means: [`GitError::Unavailable`] (will not get better:
//! no such repository or ref, credentials refused, unknown host) or [`GitError::Transient`]
//! (may: refused or reset connections, timeouts, server errors), in words that say what to do.

use super::GitError;

/// A failed command, as classified.
pub(crate) struct Failure<'a> {
    /// The git subcommand (`fetch`, `ls-remote`, `push`).
    pub(crate) action: &'a str,
    pub(crate) url: &'a str,
    /// Already scrubbed of the token.
    pub(crate) stderr: &'a str,
    /// The variable the token came from, when one was used.
    pub(crate) token_env: Option<&'a str>,
    /// Why the host's token was not used (its credential's `repos` leave this one out).
    pub(crate) unscoped: Option<&'a str>,
}

const AUTH: &[&str] = &[
    "authentication failed",
    "could not read username",
    "could not read password",
    "invalid username or password",
    "returned error: 401",
    "returned error: 403",
    "permission denied",
];
const NOT_FOUND: &[&str] = &[
    "repository not found",
    "does not appear to be a git repository",
    "repository not exported",
    "no such repository",
    "returned error: 404",
    "couldn't find remote ref",
    "not our ref",
    // A v0 server asked for a commit no ref points at (the shallow fetch of a sha).
    "unadvertised object",
];
/// Looser words, believed only when nothing says the network failed.
const LOOSELY_NOT_FOUND: &[&str] = &["not found", "no such file or directory"];
const TRANSIENT: &[&str] = &[
    "connection refused",
    "timed out",
    "connection reset",
    "returned error: 5",
    "http 5",
    "rpc failed",
    "early eof",
    "unexpected disconnect",
    "network is unreachable",
    "temporary failure in name resolution",
    "remote end hung up",
];

const NOT_FOUND_ADVICE: &str = "check the URL and the ref (a private repository also needs \
                                credentials in the worker's [git.credentials] settings)";

/// Classifies a failure; the message names the command, the URL, git's own words and what to do.
pub(crate) fn classify(failure: Failure<'_>) -> GitError {
    let Failure {
        action,
        url,
        stderr,
        token_env,
        unscoped,
    } = failure;
    let lower = stderr.to_lowercase();
    let has = |markers: &[&str]| markers.iter().any(|marker| lower.contains(marker));
    let said = detail(stderr);
    let message = |advice: &str| format!("git {action} {url} failed: {said}; {advice}");
    if has(AUTH) {
        let advice = match (token_env, unscoped) {
            (None, Some(why)) => why.to_owned(),
            (Some(env), _) => format!(
                "the credentials were refused: check the token in {env} on the worker (its \
                 access to this repository)"
            ),
            (None, None) => "the repository needs credentials: add a [git.credentials.\"<host>\"] \
                     entry with token_env to the worker settings"
                .to_owned(),
        };
        GitError::Unavailable(message(&advice))
    } else if lower.contains("could not resolve host") {
        GitError::Unavailable(message("check the host name in the URL"))
    } else if has(NOT_FOUND) {
        GitError::Unavailable(message(NOT_FOUND_ADVICE))
    } else if has(TRANSIENT) {
        GitError::Transient(message(
            "the git server could not be reached or failed; it may be down for now",
        ))
    } else if has(LOOSELY_NOT_FOUND) {
        GitError::Unavailable(message(NOT_FOUND_ADVICE))
    } else {
        GitError::Transient(message("an unexpected git failure"))
    }
}

/// git's stderr on one line without its hints, at most 600 characters.
pub(crate) fn detail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("hint:"))
        .map(|line| {
            ["fatal:", "error:"]
                .iter()
                .find_map(|prefix| line.strip_prefix(prefix))
                .unwrap_or(line)
                .trim()
        })
        .filter(|line| !line.is_empty())
        .collect();
    let joined = if lines.is_empty() {
        "no error output".to_owned()
    } else {
        lines.join("; ")
    };
    match joined.char_indices().nth(600) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(stderr: &str, token_env: Option<&str>) -> GitError {
        classify(Failure {
            action: "fetch",
            url: "https://git.example/a.git",
            stderr,
            token_env,
            unscoped: None,
        })
    }

    #[test]
    fn refused_credentials_name_the_variable() {
        let err = of(
            "remote: Invalid username or password.\nfatal: Authentication failed for 'https://git.example/a.git/'\n",
            Some("GIT_TOKEN"),
        );
        let GitError::Unavailable(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains("check the token in GIT_TOKEN"),
            "{message}"
        );
        assert!(message.starts_with("git fetch https://git.example/a.git failed: remote: Invalid username or password.; Authentication failed"), "{message}");
        let err = of(
            "fatal: could not read Username for 'https://git.example': terminal prompts disabled",
            None,
        );
        assert!(
            matches!(&err, GitError::Unavailable(m) if m.contains("[git.credentials.")),
            "{err:?}"
        );
    }

    #[test]
    fn not_found_unknown_host_and_network() {
        for stderr in [
            "remote: Repository not found.\nfatal: repository 'https://git.example/a.git/' not found",
            "fatal: 'x' does not appear to be a git repository",
            "fatal: remote error: access denied or repository not exported: /a.git",
            "fatal: unable to access 'https://git.example/a.git/': The requested URL returned error: 404",
            "error: Server does not allow request for unadvertised object 0b4e10f5",
            "fatal: remote error: upload-pack: not our ref 0b4e10f5",
        ] {
            assert!(
                matches!(of(stderr, None), GitError::Unavailable(m) if m.contains("check the URL")),
                "{stderr}"
            );
        }
        assert!(matches!(
            of("fatal: unable to access 'x': Could not resolve host: git.example", None),
            GitError::Unavailable(m) if m.contains("check the host name")
        ));
        for stderr in [
            "fatal: unable to connect to 127.0.0.1:\n127.0.0.1[0: 127.0.0.1]: errno=Connection refused",
            "fatal: unable to access 'x': The requested URL returned error: 502",
            "fatal: unable to access 'x': Connection timed out after 300000 milliseconds",
            "error: RPC failed; curl 56 Recv failure: Connection reset by peer",
        ] {
            assert!(
                matches!(of(stderr, None), GitError::Transient(_)),
                "{stderr}"
            );
        }
    }

    #[test]
    fn detail_keeps_the_meaningful_lines_and_bounds_them() {
        assert_eq!(detail("hint: a\nfatal: gone\n"), "gone");
        assert_eq!(
            detail("fatal: unable to connect to h:\nh[0: h]: errno=Connection refused\n"),
            "unable to connect to h:; h[0: h]: errno=Connection refused"
        );
        assert_eq!(detail(""), "no error output");
        assert_eq!(
            detail(&format!("fatal: {}", "x".repeat(700)))
                .chars()
                .count(),
            601
        );
    }
}
