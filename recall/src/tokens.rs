//! Token counting for packs, word by word from a cache shared by every recall.
//!
//! A pack counts tokens many times over: each item's text once, then every header, label
//! and citation line of every candidate cut. Through the model's tokenizer each of those
//! calls normalizes, pre-tokenizes and allocates an encoding; in `cairn bench recall` that
//! was two thirds of the pack's time. BERT's pipeline (bge-small's) splits on whitespace
//! before anything else and every later step works inside one word, so a text's count is
//! the sum of its words' counts ([`cairn_embed::words`]): [`WordTokens`] counts each
//! distinct word once, through the real tokenizer, and adds up cached counts after that. The count is the tokenizer's own,
//! not an estimate (property-tested against it in `recall/tests/recall/pack.rs`).
//!
//! Tokenizers that are not whitespace-first (byte-level BPE, SentencePiece: a word's tokens
//! depend on the space before it) are not cached: every call goes to the tokenizer.

use std::collections::HashMap;
use std::sync::RwLock;

use cairn_embed::words::{counts_by_word, words};

use crate::pack::TokenCounter;

/// Most words kept; past that the cache is emptied and refills with the words in use (a
/// corpus' vocabulary is far smaller; unique strings such as hashes would grow it forever).
const MAX_WORDS: usize = 200_000;
/// Longer words (URLs, digests, base64) are counted without being cached: rarely repeated.
const MAX_CACHED_WORD: usize = 48;

/// A [`TokenCounter`] over a model tokenizer, word counts cached when the tokenizer allows.
#[derive(Debug)]
pub struct WordTokens {
    tokenizer: tokenizers::Tokenizer,
    /// Whether counts add up word by word ([`counts_by_word`]).
    by_word: bool,
    words: RwLock<HashMap<Box<str>, u32>>,
}

impl WordTokens {
    pub fn new(tokenizer: tokenizers::Tokenizer) -> Self {
        let by_word = counts_by_word(&tokenizer);
        WordTokens {
            tokenizer,
            by_word,
            words: RwLock::new(HashMap::new()),
        }
    }

    /// Tokens of one word (no whitespace inside).
    fn word(&self, w: &str) -> usize {
        if w.len() > MAX_CACHED_WORD {
            return self.tokenizer.count(w);
        }
        if let Some(&n) = self.words.read().unwrap_or_else(|e| e.into_inner()).get(w) {
            return n as usize;
        }
        let n = self.tokenizer.count(w);
        let mut cache = self.words.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_WORDS {
            cache.clear();
        }
        cache.insert(w.into(), n as u32);
        n
    }

    /// Distinct words cached (for tests and diagnostics).
    pub fn cached_words(&self) -> usize {
        self.words.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl TokenCounter for WordTokens {
    fn count(&self, text: &str) -> usize {
        if !self.by_word {
            return self.tokenizer.count(text);
        }
        words(text).map(|(a, b)| self.word(&text[a..b])).sum()
    }

    /// Every token of a word ends where the word ends: exact at whitespace, which is where
    /// packs cut (sentence and word boundaries).
    fn token_ends(&self, text: &str) -> Vec<usize> {
        if !self.by_word {
            return self.tokenizer.token_ends(text);
        }
        let mut ends = Vec::with_capacity(text.len() / 4);
        for (a, b) in words(text) {
            let n = self.word(&text[a..b]);
            ends.extend(std::iter::repeat_n(b, n));
        }
        ends
    }

    fn additive(&self) -> bool {
        self.by_word
    }
}
