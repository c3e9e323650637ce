//! `GIT binary patch` hunks: `literal <size>`, the zlib-deflated content in git's base85,
//! one line per 52 bytes prefixed by its length ('A'..'Z' = 1..26, 'a'..'z' = 27..52), then
//! an empty line.

use std::{io::Write as _, path::PathBuf};

use flate2::{Compression, write::ZlibEncoder};

use super::ChangesError;

/// Git's base85 alphabet (`base85.c`).
const ALPHABET: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
/// Deflated bytes per line.
const LINE_BYTES: usize = 52;

/// Appends a `literal` hunk holding `content` (of the file `path`) to `out`.
pub(super) fn literal(path: &str, content: &[u8], out: &mut Vec<u8>) -> Result<(), ChangesError> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
    let deflated = encoder
        .write_all(content)
        .and_then(|()| encoder.finish())
        .map_err(|e| ChangesError::Io {
            path: PathBuf::from(path),
            detail: format!("cannot compress the binary content: {e}"),
        })?;
    out.extend_from_slice(format!("literal {}\n", content.len()).as_bytes());
    for chunk in deflated.chunks(LINE_BYTES) {
        out.push(length_char(chunk.len()));
        encode_line(chunk, out);
        out.push(b'\n');
    }
    out.push(b'\n');
    Ok(())
}

/// The length prefix of a line of `n` (1..=52) bytes.
fn length_char(n: usize) -> u8 {
    let n = u8::try_from(n).unwrap_or(LINE_BYTES as u8);
    if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 }
}

/// Base85 of `chunk`, zero-padded to a multiple of 4 bytes: 5 characters per 4 bytes, most
/// significant digit first.
fn encode_line(chunk: &[u8], out: &mut Vec<u8>) {
    for group in chunk.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut value = u32::from_be_bytes(word);
        let mut digits = [0u8; 5];
        for digit in digits.iter_mut().rev() {
            *digit = ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        out.extend_from_slice(&digits);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn base85_matches_git() {
        // `git diff --binary` writes an empty file's zlib stream as "HcmV?d00001".
        let mut out = Vec::new();
        encode_line(&[0x78, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01], &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "cmV?d00001");
        assert_eq!(length_char(1), b'A');
        assert_eq!(length_char(26), b'Z');
        assert_eq!(length_char(27), b'a');
        assert_eq!(length_char(52), b'z');
    }
}
