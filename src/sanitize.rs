//! Keeping text from lock files and /proc from driving a terminal.
//!
//! Anyone who can write a lock file (or name a process) chooses what
//! `holder` prints, so nothing of theirs may reach the terminal raw: not
//! the control characters that move the cursor, recolour or retitle it
//! (C0, DEL, and C1, where U+009B is a one-character CSI), and, for people
//! reading, not the characters that reorder or hide text either (bidi
//! controls, zero-width and invisible characters, tag characters), which
//! can make `rm -rf /` read as something else (CONTRACT §6).

use std::fmt::Write;

/// Bidi controls, zero-width and invisible characters, tag characters:
/// harmless to a terminal's state, but they change what a person reads.
fn hides_or_reorders(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// Text for people: control characters (C0, DEL, C1) and the characters
/// that reorder or hide text become visible escapes (`\n`, `\u{1b}`,
/// `\u{202e}`).
pub fn for_terminal(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() || hides_or_reorders(c)) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || hides_or_reorders(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// JSON whose strings carry no terminal control character raw: serde_json
/// escapes C0 (as JSON requires) but writes DEL and C1 as they are, and
/// `holder --json` is read on terminals too. They are written `\u007f`,
/// `\u009b`: the same string to any JSON reader.
pub fn json<T: serde::Serialize>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, EscapeC1);
    value.serialize(&mut serializer)?;
    // serde_json writes only UTF-8.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

struct EscapeC1;

impl serde_json::ser::Formatter for EscapeC1 {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut plain = 0;
        for (at, c) in fragment.char_indices() {
            if c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c) {
                writer.write_all(&fragment.as_bytes()[plain..at])?;
                write!(writer, "\\u{:04x}", c as u32)?;
                plain = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[plain..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_that_drives_or_fools_a_terminal_survives() {
        let hostile =
            "a\u{1b}[2J\u{7}b\u{9b}c\u{0}\u{7f}d\u{202e}e\u{200b}f\u{feff}g\u{e0041}h\u{2066}";
        let shown = for_terminal(hostile);
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() || hides_or_reorders(c)),
            "{shown:?}"
        );
        assert!(shown.contains("\\u{1b}") && shown.contains("\\u{202e}"));
        assert_eq!(for_terminal("plain café ✓"), "plain café ✓");
    }

    #[test]
    fn json_escapes_del_and_c1_and_still_means_the_same() {
        let value = vec!["x\u{7f}y\u{9b}z\u{80}é\u{1b}".to_owned()];
        let text = json(&value).unwrap();
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        assert!(
            text.contains("\\u007f") && text.contains("\\u009b"),
            "{text}"
        );
        let back: Vec<String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
