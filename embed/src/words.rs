//! Counting tokens word by word.
//!
//! BERT's pipeline (bge-small's) splits on whitespace before anything else, and every later
//! step works inside one word: a text's tokens are its words' tokens, one word after the
//! other. A caller that counts the same words many times (a pack's trial cuts, a splitter's
//! trial chunks) can then tokenize each distinct word once and add up cached figures. The
//! pack's counter (`cairn_recall::tokens::WordTokens`) and the ingest chunker's sizer both
//! do; this module holds what they share: which tokenizers allow it, and where words are.
//!
//! Tokenizers that are not whitespace-first (byte-level BPE, SentencePiece: a word's tokens
//! depend on the space before it) must be asked about whole texts.

use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::Tokenizer;

/// Whether `tokenizer`'s tokens of a text are exactly the tokens of its [`words`], each
/// tokenized alone, in order (without special tokens).
///
/// That needs a whitespace-first pre-tokenizer; a normalizer that works character by
/// character (a pattern replace could join or split words); and no added token that takes
/// the whitespace beside it (`lstrip`/`rstrip`), which would reach across a word boundary.
pub fn counts_by_word(tokenizer: &Tokenizer) -> bool {
    let pre = matches!(
        tokenizer.get_pre_tokenizer(),
        Some(PreTokenizerWrapper::BertPreTokenizer(_) | PreTokenizerWrapper::Whitespace(_))
    );
    let normalizer = matches!(
        tokenizer.get_normalizer(),
        None | Some(
            NormalizerWrapper::BertNormalizer(_)
                | NormalizerWrapper::Lowercase(_)
                | NormalizerWrapper::StripAccents(_)
                | NormalizerWrapper::NFD(_)
                | NormalizerWrapper::NFKD(_)
        )
    );
    let added = tokenizer
        .get_added_tokens_decoder()
        .values()
        .all(|t| !t.lstrip && !t.rstrip);
    pre && normalizer && added
}

/// Whitespace as BERT's normalizer and pre-tokenizer see it: Rust's whitespace except the
/// three control characters the normalizer deletes (so they join, not split, their words).
pub fn is_separator(c: char) -> bool {
    c.is_whitespace() && !matches!(c, '\u{b}' | '\u{c}' | '\u{85}')
}

/// The words of `text` (runs between [separators](is_separator)) as byte ranges.
pub fn words(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start: Option<usize> = None;
    text.char_indices()
        .map(Some)
        .chain(std::iter::once(None))
        .filter_map(move |next| match next {
            Some((i, c)) if is_separator(c) => start.take().map(|s| (s, i)),
            Some((i, _)) => {
                start.get_or_insert(i);
                None
            }
            None => start.take().map(|s| (s, text.len())),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        words(text).map(|(a, b)| &text[a..b]).collect()
    }

    #[test]
    fn words_split_on_whitespace_only() {
        assert_eq!(split("  a bc\n\td.e  "), vec!["a", "bc", "d.e"]);
        assert_eq!(split(""), Vec::<&str>::new());
        assert_eq!(split("x"), vec!["x"]);
        assert_eq!(split("é\u{3000}ü"), vec!["é", "ü"]);
        // Deleted by BERT's normalizer: they join their neighbours.
        assert_eq!(split("a\u{85}b c\u{b}d"), vec!["a\u{85}b", "c\u{b}d"]);
    }
}
