//! The command's output: both pipes drained into bounded captures (head and tail of each),
//! rendered into the result under the output cap.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use crate::tools::output::{self, join_cut, note_reserve, split_budget};

/// Bytes of the start of each output stream kept in memory.
const HEAD_KEEP: usize = 256 * 1024;
/// Bytes of the end of each output stream kept in memory (the buffer holding them grows to
/// twice that before it is compacted).
const TAIL_KEEP: usize = 256 * 1024;

/// `status_line`, then the non-empty streams in sections, sharing the output cap.
pub(super) fn render(status_line: &str, stdout: &Capture, stderr: &Capture, cap: usize) -> String {
    const STDOUT: &str = "\n--- stdout ---\n";
    const STDERR: &str = "\n--- stderr ---\n";
    let available = cap.saturating_sub(status_line.len() + STDOUT.len() + STDERR.len());
    let (out_len, err_len) = (stdout.total, stderr.total);
    let (out_budget, err_budget) = if out_len + err_len <= available {
        (available - err_len, available - out_len)
    } else if out_len <= available / 2 {
        (out_len, available - out_len)
    } else if err_len <= available / 2 {
        (available - err_len, err_len)
    } else {
        (available / 2, available - available / 2)
    };

    let mut content = status_line.to_owned();
    for (header, stream, budget) in [(STDOUT, stdout, out_budget), (STDERR, stderr, err_budget)] {
        if stream.total > 0 {
            let text = stream.render(budget);
            content.push_str(header);
            content.push_str(text.strip_suffix('\n').unwrap_or(&text));
        }
    }
    content
}

/// The tasks draining the pipes; aborted if still running when dropped.
pub(super) struct Readers(pub(super) Vec<JoinHandle<()>>);

impl Readers {
    /// Waits for both pipes to reach end of file, at most `grace`. Returns whether they did.
    pub(super) async fn finish(mut self, grace: Duration) -> bool {
        let handles = std::mem::take(&mut self.0);
        let all = futures::future::join_all(handles);
        tokio::time::timeout(grace, all).await.is_ok()
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

pub(super) fn spawn_reader(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    capture: Arc<Mutex<Capture>>,
) -> JoinHandle<()> {
    tokio::spawn(drain(pipe, capture))
}

/// Reads `pipe` to its end, keeping a bounded part of it in `capture`.
async fn drain(mut pipe: impl AsyncRead + Unpin, capture: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lock(&capture).push(&buf[..n]),
        }
    }
}

pub(super) fn lock(capture: &Mutex<Capture>) -> std::sync::MutexGuard<'_, Capture> {
    capture.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One output stream: its start and its end, and how many bytes it had in all.
#[derive(Debug, Default)]
pub(super) struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
}

impl Capture {
    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        if self.head.len() < HEAD_KEEP {
            let n = bytes.len().min(HEAD_KEEP - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if !bytes.is_empty() {
            self.tail.extend_from_slice(bytes);
            if self.tail.len() > 2 * TAIL_KEEP {
                let excess = self.tail.len() - TAIL_KEEP;
                self.tail.drain(..excess);
            }
        }
    }

    fn kept_tail(&self) -> &[u8] {
        &self.tail[self.tail.len().saturating_sub(TAIL_KEEP)..]
    }

    /// The stream as (lossy) UTF-8 text of at most about `budget` bytes, cut in the middle
    /// with a note giving the true sizes.
    fn render(&self, budget: usize) -> String {
        let tail = self.kept_tail();
        let dropped = self.total - self.head.len() - tail.len();
        if dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(tail);
            return output::cap(&String::from_utf8_lossy(&all), budget);
        }
        let (head_budget, tail_budget) =
            split_budget(budget.saturating_sub(note_reserve(self.total)));

        let head_bytes = &self.head[..self.head.len().min(head_budget)];
        let mut head = String::from_utf8_lossy(head_bytes).into_owned();
        head.truncate(head.floor_char_boundary(head_budget));

        let mut tail_bytes = &tail[tail.len() - tail.len().min(tail_budget)..];
        // Do not start in the middle of a character.
        while let Some((&first, rest)) = tail_bytes.split_first() {
            if first & 0b1100_0000 != 0b1000_0000 {
                break;
            }
            tail_bytes = rest;
        }
        let tail = String::from_utf8_lossy(tail_bytes);
        let tail = &tail[tail.ceil_char_boundary(tail.len().saturating_sub(tail_budget))..];

        let cut = self.total.saturating_sub(head.len() + tail.len());
        join_cut(&head, tail, cut, self.total)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_core::tools::{FULL_OUTPUT_CAP_BYTES, OUTPUT_CAP_BYTES};
    use baton_sandbox::{Sandbox, SandboxSettings};
    use pretty_assertions::assert_eq;
    use tempfile::TempDir;

    use super::super::tests::sh;
    use super::*;
    use crate::tools::tests::context;

    #[tokio::test]
    async fn big_output_keeps_a_preview_for_the_model_and_more_for_the_transcript() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 100000 /dev/zero | tr '\\0' a; echo; echo THE-END",
        )
        .await;
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result.full_output.len() > 100_000,
            "{}",
            result.full_output.len()
        );
        assert!(result.full_output.len() <= FULL_OUTPUT_CAP_BYTES);
        assert!(result.full_output.ends_with("THE-END"));
        let small = sh(&context(&dir), "echo hi").await;
        assert!(
            small.full_output.is_empty(),
            "nothing was cut, nothing extra is kept"
        );
    }

    #[tokio::test]
    async fn big_output_is_capped_keeping_head_and_tail() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "echo FIRST; head -c 1000000 /dev/zero | tr '\\0' a; echo; echo LAST",
        )
        .await;
        assert!(!result.is_error);
        assert!(
            result.content.len() <= OUTPUT_CAP_BYTES,
            "{}",
            result.content.len()
        );
        assert!(
            result
                .content
                .starts_with("exit code: 0\n--- stdout ---\nFIRST\naaaa")
        );
        assert!(
            result.content.ends_with("aaaa\nLAST"),
            "{}",
            &result.content[result.content.len() - 50..]
        );
        // The note gives the true size of the stream and of the cut: FIRST\n, the a's, \n, LAST\n.
        let total = 6 + 1_000_000 + 1 + 5;
        let prefix = "exit code: 0\n--- stdout ---\n";
        let note_start = result.content.find("\n[... ").unwrap();
        let note_end = result.content.find(" ...]\n").unwrap() + " ...]\n".len();
        let note = &result.content[note_start..note_end];
        let cut: usize = note["\n[... ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(note, output::cut_note(cut, total));
        let kept = result.content.len() - prefix.len() - note.len();
        // + 1: the stream's final newline is not shown.
        assert_eq!(kept + cut + 1, total);
    }

    #[tokio::test]
    async fn huge_output_is_drained_without_deadlock() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 20000000 /dev/zero | tr '\\0' o; head -c 3000000 /dev/zero | tr '\\0' e >&2; echo done >&2",
        )
        .await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 20000000 ...]")
        );
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 3000005 ...]")
        );
        assert!(
            result.content.ends_with("eeedone"),
            "{}",
            &result.content[result.content.len() - 100..]
        );
        // Both streams get a fair share of the cap.
        let stderr_at = result.content.find("\n--- stderr ---\n").unwrap();
        assert!(stderr_at > OUTPUT_CAP_BYTES / 3, "{stderr_at}");
        assert!(stderr_at < OUTPUT_CAP_BYTES * 2 / 3, "{stderr_at}");
    }

    #[tokio::test]
    async fn small_stream_is_kept_whole_next_to_a_big_one() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 100000 /dev/zero | tr '\\0' o; echo 'error: the one line that matters' >&2; exit 1",
        )
        .await;
        assert!(result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 100000 ...]")
        );
        assert!(
            result
                .content
                .ends_with("ooo\n--- stderr ---\nerror: the one line that matters")
        );
    }

    #[test]
    fn capture_keeps_head_and_tail_and_counts_everything() {
        let mut capture = Capture::default();
        for i in 0..100u8 {
            capture.push(&[b'a' + i % 26; 64 * 1024]);
        }
        assert_eq!(capture.total, 100 * 64 * 1024);
        assert_eq!(capture.head.len(), HEAD_KEEP);
        assert!(capture.tail.len() <= 2 * TAIL_KEEP);
        assert_eq!(capture.kept_tail().len(), TAIL_KEEP);
        assert_eq!(capture.kept_tail().last(), Some(&(b'a' + 99 % 26)));
        let text = capture.render(1000);
        assert!(text.len() <= 1000);
        assert!(text.starts_with("aaaa"));
        assert!(text.ends_with("vvvv"));
        assert!(text.contains(&format!("cut from the middle of {} ...]", 100 * 64 * 1024)));
    }

    #[test]
    fn capture_tail_does_not_start_inside_a_character() {
        let mut capture = Capture::default();
        capture.push(&vec![b'x'; HEAD_KEEP]);
        capture.push("é".repeat(TAIL_KEEP).as_bytes());
        let text = capture.render(301);
        assert!(!text.contains('\u{FFFD}'), "{text}");
        assert!(text.ends_with("éé"));
    }

    #[tokio::test]
    async fn huge_output_of_a_sandboxed_command_is_capped() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.workspace = dir.path().join("ws");
        ctx.sandbox = Sandbox::resolve(None, Arc::new(SandboxSettings::default())).unwrap();
        let result = sh(&ctx, "head -c 20000000 /dev/zero | tr '\\0' o").await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 20000000 ...]")
        );
    }
}
