//! Terminal styling: one rule for colour and spinners everywhere in the CLI, and the spinner.
//!
//! Colour and spinners are on only when stdout is a terminal and `NO_COLOR` is unset or empty
//! (<https://no-color.org>). Anything else (a pipe, a file, CI logs, `NO_COLOR=1`) gets plain
//! text with no escape sequences at all.

use std::{
    ffi::OsString,
    io::{IsTerminal, Write},
};

/// What the output may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Style {
    /// ANSI colours and bold/dim.
    pub(crate) color: bool,
    /// Spinner lines redrawn in place (`\r`).
    pub(crate) spinner: bool,
}

impl Style {
    /// The style for stdout of this process.
    pub(crate) fn detect() -> Self {
        Self::decide(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        )
    }

    /// The rule itself: a terminal, and `NO_COLOR` unset or empty.
    pub(crate) fn decide(stdout_is_tty: bool, no_color: Option<OsString>) -> Self {
        let on = stdout_is_tty && no_color.is_none_or(|v| v.is_empty());
        Self {
            color: on,
            spinner: on,
        }
    }

    /// No colour, no spinner.
    pub(crate) fn plain() -> Self {
        Self {
            color: false,
            spinner: false,
        }
    }

    fn paint(&self, sgr: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    pub(crate) fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    pub(crate) fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub(crate) fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    pub(crate) fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }

    pub(crate) fn cyan(&self, text: &str) -> String {
        self.paint("36", text)
    }
}

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Spinner text is cut to this many characters so that it never wraps (a wrapped line cannot
/// be erased with `\r`).
const MAX_SPINNER_TEXT: usize = 70;
const ERASE_LINE: &str = "\r\x1b[2K";

/// A one-line spinner on stdout. Does nothing unless the style allows spinners; the line is
/// erased before anything else is printed and when the spinner is dropped (e.g. on Ctrl-C or
/// a `--wait-timeout`).
#[derive(Debug)]
pub(crate) struct Spinner {
    enabled: bool,
    shown: bool,
    frame: usize,
}

impl Spinner {
    pub(crate) fn new(style: Style) -> Self {
        Self {
            enabled: style.spinner,
            shown: false,
            frame: 0,
        }
    }

    /// Draws the next frame with `text` (or erases the line when `text` is `None`).
    pub(crate) fn draw(&mut self, text: Option<&str>) {
        if !self.enabled {
            return;
        }
        let Some(text) = text else {
            self.clear();
            return;
        };
        let frame = FRAMES[self.frame % FRAMES.len()];
        self.frame = self.frame.wrapping_add(1);
        let text: String = text.chars().take(MAX_SPINNER_TEXT).collect();
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{ERASE_LINE}\x1b[36m{frame}\x1b[0m {text}");
        let _ = out.flush();
        self.shown = true;
    }

    /// Erases the spinner line, if one is shown.
    pub(crate) fn clear(&mut self) {
        if self.shown {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{ERASE_LINE}");
            let _ = out.flush();
            self.shown = false;
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_and_spinners_need_a_terminal_and_no_no_color() {
        let on = Style {
            color: true,
            spinner: true,
        };
        assert_eq!(Style::decide(true, None), on);
        assert_eq!(Style::decide(true, Some(OsString::new())), on);
        assert_eq!(Style::decide(true, Some("1".into())), Style::plain());
        assert_eq!(Style::decide(true, Some("false".into())), Style::plain());
        assert_eq!(Style::decide(false, None), Style::plain());
    }

    #[test]
    fn plain_style_emits_no_escapes() {
        let s = Style::plain();
        let all = [
            s.bold("a"),
            s.dim("b"),
            s.red("c"),
            s.green("d"),
            s.yellow("e"),
            s.cyan("f"),
        ]
        .concat();
        assert_eq!(all, "abcdef");
        assert!(Style::decide(true, None).red("x").contains('\x1b'));
    }
}
