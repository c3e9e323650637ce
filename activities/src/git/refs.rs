//! What a remote has (`git ls-remote --symref`) and what a run's `ref` names there: the
//! default branch for "", a branch, a tag (peeled to its commit), or a commit sha.

use super::GitError;

/// The remote's refs as `ls-remote --symref` lists them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Branch `HEAD` points at, when the server says.
    head: Option<String>,
    head_sha: Option<String>,
    /// `(sha, full ref name)` in the server's order, peeled tags (`^{}`) included.
    refs: Vec<(String, String)>,
}

/// What to fetch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wanted {
    Branch(String),
    Tag(String),
    /// A full or abbreviated sha (lowercase).
    Commit(String),
}

const SHOWN: usize = 10;

impl Listing {
    pub(crate) fn parse(output: &str) -> Self {
        let mut listing = Self::default();
        for line in output.lines() {
            let Some((left, name)) = line.split_once('\t') else {
                continue;
            };
            if let Some(target) = left.strip_prefix("ref: ") {
                if name == "HEAD" {
                    listing.head = target.strip_prefix("refs/heads/").map(str::to_owned);
                }
            } else if name == "HEAD" {
                listing.head_sha = Some(left.to_owned());
            } else {
                listing.refs.push((left.to_owned(), name.to_owned()));
            }
        }
        listing
    }

    /// The remote's default branch ("" when it cannot tell).
    pub(crate) fn default_branch(&self) -> String {
        if let Some(head) = &self.head {
            return head.clone();
        }
        // Servers that do not report the symref: the branch at HEAD's commit, `main` or
        // `master` first.
        let Some(sha) = &self.head_sha else {
            return String::new();
        };
        let at_head: Vec<&str> = self
            .branches()
            .filter(|(branch_sha, _)| branch_sha == sha)
            .map(|(_, name)| name)
            .collect();
        ["main", "master"]
            .into_iter()
            .find(|name| at_head.contains(name))
            .or_else(|| at_head.first().copied())
            .unwrap_or_default()
            .to_owned()
    }

    fn branches(&self) -> impl Iterator<Item = (&str, &str)> {
        self.named("refs/heads/")
    }

    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        self.named("refs/tags/")
            .filter(|(_, name)| !name.ends_with("^{}"))
    }

    fn named<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.refs.iter().filter_map(move |(sha, name)| {
            name.strip_prefix(prefix).map(|short| (sha.as_str(), short))
        })
    }

    /// An advertised commit whose sha starts with `prefix` (a tag's peeled commit counts).
    pub(crate) fn commit_starting_with(&self, prefix: &str) -> Option<&str> {
        self.refs
            .iter()
            .filter(|(_, name)| !name.starts_with("refs/tags/") || name.ends_with("^{}"))
            .map(|(sha, _)| sha.as_str())
            .chain(self.head_sha.as_deref())
            .find(|sha| sha.starts_with(prefix))
    }

    /// What `wanted` names on this remote.
    pub(crate) fn resolve(&self, wanted: &str, url: &str) -> Result<Wanted, GitError> {
        let wanted = wanted.trim();
        if wanted.is_empty() {
            let branch = self.default_branch();
            if !branch.is_empty() && self.branches().any(|(_, name)| name == branch) {
                return Ok(Wanted::Branch(branch));
            }
            return Err(GitError::Unavailable(if self.refs.is_empty() {
                format!("{url} has no branches (an empty repository): push a commit to it first")
            } else {
                format!(
                    "cannot tell the default branch of {url}; give a ref ({})",
                    self.summary()
                )
            }));
        }
        let is_branch = |name: &str| self.branches().any(|(_, branch)| branch == name);
        let is_tag = |name: &str| self.tags().any(|(_, tag)| tag == name);
        if let Some(name) = wanted.strip_prefix("refs/heads/")
            && is_branch(name)
        {
            return Ok(Wanted::Branch(name.to_owned()));
        }
        if let Some(name) = wanted.strip_prefix("refs/tags/")
            && is_tag(name)
        {
            return Ok(Wanted::Tag(name.to_owned()));
        }
        if is_branch(wanted) {
            return Ok(Wanted::Branch(wanted.to_owned()));
        }
        if is_tag(wanted) {
            return Ok(Wanted::Tag(wanted.to_owned()));
        }
        if (7..=40).contains(&wanted.len()) && wanted.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(Wanted::Commit(wanted.to_ascii_lowercase()));
        }
        Err(GitError::Unavailable(format!(
            "ref '{wanted}' not found in {url}; {}",
            self.summary()
        )))
    }

    /// "it has branches main, dev and tags v1 (first 10)".
    fn summary(&self) -> String {
        let list = |names: Vec<&str>| {
            let more = names.len() > SHOWN;
            let mut shown = names.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
            if more {
                shown.push_str(&format!(" (first {SHOWN})"));
            }
            shown
        };
        let branches: Vec<&str> = self.branches().map(|(_, name)| name).collect();
        let tags: Vec<&str> = self.tags().map(|(_, name)| name).collect();
        match (branches.is_empty(), tags.is_empty()) {
            (true, true) => "it has no branches or tags".to_owned(),
            (false, true) => format!("it has branches {}", list(branches)),
            (true, false) => format!("it has no branches, and tags {}", list(tags)),
            (false, false) => format!("it has branches {} and tags {}", list(branches), list(tags)),
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const T: &str = "3333333333333333333333333333333333333333";

    fn listing() -> Listing {
        Listing::parse(&format!(
            "ref: refs/heads/main\tHEAD\n{A}\tHEAD\n{B}\trefs/heads/dev\n{A}\trefs/heads/main\n\
             {T}\trefs/tags/v1\n{B}\trefs/tags/v1^{{}}\n"
        ))
    }

    #[test]
    fn names_resolve_to_branches_tags_and_commits() {
        let listing = listing();
        let url = "file:///r.git";
        assert_eq!(listing.resolve("", url), Ok(Wanted::Branch("main".into())));
        assert_eq!(
            listing.resolve("dev", url),
            Ok(Wanted::Branch("dev".into()))
        );
        assert_eq!(
            listing.resolve("refs/heads/dev", url),
            Ok(Wanted::Branch("dev".into()))
        );
        assert_eq!(listing.resolve("v1", url), Ok(Wanted::Tag("v1".into())));
        assert_eq!(
            listing.resolve("ABCDEF1", url),
            Ok(Wanted::Commit("abcdef1".into()))
        );
        assert_eq!(listing.commit_starting_with("22222"), Some(B));
        assert_eq!(listing.commit_starting_with("33333"), None);
        assert_eq!(
            listing.resolve("v9", url),
            Err(GitError::Unavailable(
                "ref 'v9' not found in file:///r.git; it has branches dev, main and tags v1".into()
            ))
        );
        assert_eq!(
            listing.resolve("abc", url),
            Err(GitError::Unavailable(
                "ref 'abc' not found in file:///r.git; it has branches dev, main and tags v1"
                    .into()
            ))
        );
    }

    #[test]
    fn default_branch_without_a_symref_and_empty_repositories() {
        let listing = Listing::parse(&format!(
            "{A}\tHEAD\n{A}\trefs/heads/feature\n{A}\trefs/heads/master\n"
        ));
        assert_eq!(listing.default_branch(), "master");
        let empty = Listing::parse("");
        assert_eq!(
            empty.resolve("", "file:///e.git"),
            Err(GitError::Unavailable(
                "file:///e.git has no branches (an empty repository): push a commit to it first"
                    .into()
            ))
        );
    }

    #[test]
    fn long_lists_are_cut() {
        let lines: String = (0..12)
            .map(|i| format!("{A}\trefs/heads/b{i:02}\n"))
            .collect();
        let Err(GitError::Unavailable(message)) = Listing::parse(&lines).resolve("nope", "u")
        else {
            panic!()
        };
        assert!(
            message.ends_with("b00, b01, b02, b03, b04, b05, b06, b07, b08, b09 (first 10)"),
            "{message}"
        );
    }
}
