//! Keeping tool output within the size the model is sent.

/// Caps `text` at `max_bytes`: longer text keeps its head (about 2/3 of the budget) and its
/// tail (about 1/3), cut on character boundaries, with a line like
/// `[... 12345 bytes cut from the middle of 40000 ...]` in between. The result, note
/// included, is at most `max_bytes` long unless `max_bytes` is too small to hold the note.
#[must_use]
pub fn cap(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let budget = max_bytes.saturating_sub(note_reserve(text.len()));
    let (head_budget, tail_budget) = split_budget(budget);
    let head_end = text.floor_char_boundary(head_budget);
    let tail_start = text.ceil_char_boundary(text.len() - tail_budget);
    let head = &text[..head_end];
    let tail = &text[tail_start..];
    join_cut(head, tail, tail_start - head_end, text.len())
}

/// `head`, the cut note and `tail`.
pub(crate) fn join_cut(head: &str, tail: &str, cut: usize, total: usize) -> String {
    let note = cut_note(cut, total);
    let mut out = String::with_capacity(head.len() + note.len() + tail.len());
    out.push_str(head);
    out.push_str(&note);
    out.push_str(tail);
    out
}

/// The line put where `cut` bytes of `total` were left out.
pub(crate) fn cut_note(cut: usize, total: usize) -> String {
    format!("\n[... {cut} bytes cut from the middle of {total} ...]\n")
}

/// Bytes to keep free for the note when cutting text of `total` bytes (the note is longest
/// when the cut has as many digits as the total).
pub(crate) fn note_reserve(total: usize) -> usize {
    cut_note(total, total).len()
}

/// Splits a byte budget into the part for the head (2/3) and the part for the tail (1/3).
pub(crate) fn split_budget(budget: usize) -> (usize, usize) {
    let head = budget / 3 * 2 + budget % 3;
    (head, budget - head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(cap("", 10), "");
        assert_eq!(cap("hello", 5), "hello");
        assert_eq!(cap("hello", 100), "hello");
    }

    #[test]
    fn long_text_keeps_head_and_tail_with_a_note() {
        let text: String = (0..40_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let out = cap(&text, 1000);
        assert!(out.len() <= 1000, "{}", out.len());
        let note_start = out.find("\n[... ").unwrap();
        let note_end = out.find(" ...]\n").unwrap() + " ...]\n".len();
        let head = &out[..note_start];
        let tail = &out[note_end..];
        assert!(text.starts_with(head));
        assert!(text.ends_with(tail));
        let cut = text.len() - head.len() - tail.len();
        assert_eq!(
            &out[note_start..note_end],
            format!("\n[... {cut} bytes cut from the middle of 40000 ...]\n")
        );
        // About 2/3 head, 1/3 tail.
        assert!(
            head.len() > tail.len() * 3 / 2,
            "{} vs {}",
            head.len(),
            tail.len()
        );
        assert!(tail.len() > 250, "{}", tail.len());
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let text = "é€😀".repeat(1000);
        for max in [100, 101, 102, 103, 500, 777] {
            let out = cap(&text, max);
            assert!(out.len() <= max, "{max}: {}", out.len());
            assert!(out.contains("bytes cut from the middle of"));
            let head = &out[..out.find("\n[... ").unwrap()];
            assert!(text.starts_with(head));
        }
    }

    #[test]
    fn tiny_budget_still_says_what_was_cut() {
        let out = cap(&"x".repeat(100), 5);
        assert_eq!(out, "\n[... 100 bytes cut from the middle of 100 ...]\n");
    }

    #[test]
    fn budget_split_is_two_thirds_head() {
        assert_eq!(split_budget(0), (0, 0));
        assert_eq!(split_budget(3), (2, 1));
        assert_eq!(split_budget(10), (7, 3));
        assert_eq!(split_budget(16 * 1024), (10923, 5461));
    }
}
