//! Text that cannot lie about itself when shown to a person or a model.
//!
//! Stored memory is kept exactly as written; what is *rendered* (the MemoryPack's Markdown,
//! citation labels) goes through these functions first. Two kinds of characters are the
//! problem: bidirectional controls that reorder what follows (a right-to-left override makes
//! `inv\u{202E}txt.exe` display as `invexe.txt`), and invisible characters that hide text or
//! make two different strings look the same (zero-width spaces, the Unicode *tag* block
//! U+E0000–E007F, which can smuggle an instruction a model reads and a person cannot see).
//!
//! Each such character becomes U+FFFD (`�`): visible, one character for one, so character
//! offsets (a citation's `chars a–b`) stay exact. Body text keeps the joiners and direction
//! marks that real scripts need (ZWNJ in Persian, ZWJ in Indic scripts and emoji, LRM/RLM/ALM
//! in mixed-direction text; marks only attach to neighbouring characters, they do not
//! reorder a run). Names (a source, a heading, a speaker, a turn id) need none of them, so
//! they lose those too: two names that render the same are the same name.

use std::borrow::Cow;

/// What a hidden or reordering character is shown as.
pub const REPLACEMENT: char = '\u{FFFD}';

/// Characters neutralised everywhere: embeddings, overrides and isolates (which reorder a
/// run), invisible separators and operators, the byte-order mark, line and paragraph
/// separators (a line break Markdown's line handling does not see), and tags.
pub fn is_hidden_or_reordering(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200B}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{180E}'
            | '\u{FEFF}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// Characters a name cannot contain beyond [`is_hidden_or_reordering`]: joiners, direction
/// marks, the soft hyphen and the Hangul fillers, all invisible in a short label.
fn is_invisible_in_name(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}' | '\u{061C}' | '\u{200C}'
            ..='\u{200F}' | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}'
    )
}

fn replace_where(s: &str, bad: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&bad) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if bad(c) { REPLACEMENT } else { c })
            .collect(),
    )
}

/// Body text for display: [`is_hidden_or_reordering`] characters become U+FFFD; the
/// character count does not change.
pub fn neutralize_text(s: &str) -> Cow<'_, str> {
    replace_where(s, is_hidden_or_reordering)
}

/// A name for display on one line: control characters become spaces, hidden, reordering and
/// otherwise invisible characters become U+FFFD.
pub fn neutralize_name(s: &str) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() || is_hidden_or_reordering(c) || is_invisible_in_name(c);
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| {
                if c.is_control() {
                    ' '
                } else if bad(c) {
                    REPLACEMENT
                } else {
                    c
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_override_cannot_rename_a_file() {
        assert_eq!(neutralize_name("inv\u{202E}txt.exe"), "inv\u{FFFD}txt.exe");
        assert_eq!(neutralize_text("inv\u{202E}txt.exe"), "inv\u{FFFD}txt.exe");
    }

    #[test]
    fn tags_and_zero_width_are_visible() {
        let smuggled = "ok\u{E0049}\u{E0047}\u{E004E}\u{200B}done";
        assert_eq!(
            neutralize_text(smuggled),
            "ok\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}done"
        );
    }

    #[test]
    fn scripts_keep_their_joiners_in_text_not_in_names() {
        // Persian "mi-khaham" with ZWNJ, an emoji family with ZWJ, Hebrew with an RLM.
        for s in ["می\u{200C}خواهم", "👩\u{200D}👧", "שלום\u{200F} 123"] {
            assert_eq!(neutralize_text(s), s, "{s:?}");
            assert!(neutralize_name(s).contains(REPLACEMENT), "{s:?}");
        }
    }

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(
            neutralize_text("plain text, Ünïcödé, 日本語"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(neutralize_name("docs/a.md"), Cow::Borrowed(_)));
    }

    #[test]
    fn names_lose_line_breaks() {
        assert_eq!(neutralize_name("a\nb\u{2028}c"), "a b\u{FFFD}c");
    }

    proptest! {
        // Offsets into the rendered text are offsets into the stored text, and nothing that
        // can hide or reorder survives.
        #[test]
        fn one_character_for_one(s in "\\PC{0,40}|[a\u{202A}-\u{202E}\u{2066}-\u{2069}\u{200B}-\u{200F}\u{E0000}-\u{E007F} ]{0,40}") {
            let t = neutralize_text(&s);
            let n = neutralize_name(&s);
            prop_assert_eq!(t.chars().count(), s.chars().count());
            prop_assert_eq!(n.chars().count(), s.chars().count());
            prop_assert!(!t.chars().any(is_hidden_or_reordering));
            prop_assert!(!n.chars().any(|c| is_hidden_or_reordering(c) || is_invisible_in_name(c) || c.is_control()));
        }
    }
}
