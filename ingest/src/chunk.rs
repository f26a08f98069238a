//! Token-sized chunking with `text-splitter`, sized by the embedding model's own tokenizer.
//!
//! Every chunk records its character span in the extracted text (so a citation points at the
//! exact passage), its PDF page, and for Markdown its heading path, which is prepended to the
//! text that is embedded (not to the stored text) so a chunk keeps its section's context.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use cairn_embed::words::{counts_by_word, words};
use cairn_models::limits::MAX_HEADING_BYTES;
use text_splitter::{ChunkConfig, ChunkSizer, MarkdownSplitter, TextSplitter};
use tokenizers::Tokenizer;

use crate::extract::{Extracted, MediaType};
use crate::IngestError;

/// Chunk sizes in model tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSettings {
    pub max_tokens: usize,
    pub overlap_tokens: usize,
    /// One chunk per document (the whole text; the model truncates at its max length).
    /// This is how published BEIR figures embed documents; chunked mode is the default.
    pub whole_document: bool,
}

impl ChunkSettings {
    /// Defaults for a model with `model_max_tokens`: 256-token chunks with 32 tokens of
    /// overlap, never more than the model accepts (minus room for special tokens and the
    /// heading path).
    pub fn for_model(model_max_tokens: usize) -> Self {
        let cap = model_max_tokens.saturating_sub(64).max(16);
        ChunkSettings {
            max_tokens: 256.min(cap),
            overlap_tokens: 32.min(cap / 4),
            whole_document: false,
        }
    }

    /// Checks the settings against the model's limit.
    pub fn validate(&self, model_max_tokens: usize) -> Result<(), IngestError> {
        if self.max_tokens == 0 || self.max_tokens + 2 > model_max_tokens {
            return Err(IngestError::InvalidInput(format!(
                "chunk size {} tokens must be between 1 and {} (the model's limit minus special tokens)",
                self.max_tokens,
                model_max_tokens.saturating_sub(2)
            )));
        }
        if self.overlap_tokens >= self.max_tokens {
            return Err(IngestError::InvalidInput(format!(
                "chunk overlap {} must be smaller than the chunk size {}",
                self.overlap_tokens, self.max_tokens
            )));
        }
        Ok(())
    }
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub index: u32,
    /// Exact text of the span.
    pub text: String,
    /// Character span `[start, end)` in the extracted text.
    pub span: (u64, u64),
    pub page: Option<u32>,
    /// Markdown heading path at the chunk's start ("Guide > Install").
    pub heading: Option<String>,
}

impl Chunk {
    /// The text given to the embedding model: heading path, then the chunk.
    pub fn embedding_text(&self) -> String {
        match &self.heading {
            Some(h) => format!("{h}\n\n{}", self.text),
            None => self.text.clone(),
        }
    }
}

/// Splits extracted documents into chunks.
///
/// Cheap to clone: clones share the tokenizer and its word cache (see [`Sizing`]).
#[derive(Debug, Clone)]
pub struct Chunker {
    sizing: Arc<Sizing>,
    settings: ChunkSettings,
}

impl Chunker {
    /// `tokenizer` must have truncation disabled (the embedder's counting tokenizer does).
    pub fn new(tokenizer: Tokenizer, settings: ChunkSettings) -> Self {
        Chunker {
            sizing: Arc::new(Sizing::new(tokenizer)),
            settings,
        }
    }

    pub fn settings(&self) -> ChunkSettings {
        self.settings
    }

    pub fn chunk(&self, doc: &Extracted) -> Result<Vec<Chunk>, IngestError> {
        if self.settings.whole_document {
            return Ok(vec![Chunk {
                index: 0,
                text: doc.text.clone(),
                span: (0, doc.text.chars().count() as u64),
                page: doc.page_of(0),
                heading: None,
            }]);
        }
        let config = ChunkConfig::new(self.settings.max_tokens)
            .with_overlap(self.settings.overlap_tokens)
            .map_err(|e| IngestError::InvalidInput(e.to_string()))?
            .with_sizer(TokenSizer(&self.sizing));
        let splitter = match doc.media_type {
            MediaType::Markdown => Splitter::Markdown(MarkdownSplitter::new(config)),
            MediaType::Text | MediaType::Pdf => Splitter::Text(TextSplitter::new(config)),
        };
        let max_run = self.settings.max_tokens * BYTES_PER_LONG_TOKEN;
        let mut raw: Vec<(usize, String)> = Vec::new();
        if doc.media_type == MediaType::Pdf {
            // Chunks never straddle pages, so a citation's page is exact.
            let chars: Vec<(usize, char)> = doc.text.char_indices().collect();
            let byte_at = |char_idx: usize| chars.get(char_idx).map_or(doc.text.len(), |(b, _)| *b);
            let mut bounds = doc.page_starts.clone();
            if bounds.first() != Some(&0) {
                bounds.insert(0, 0);
            }
            bounds.push(chars.len());
            for w in bounds.windows(2) {
                let (start, end) = (w[0], w[1]);
                let page_text = &doc.text[byte_at(start)..byte_at(end)];
                splitter.split(page_text, start, max_run, &mut raw);
            }
        } else {
            splitter.split(&doc.text, 0, max_run, &mut raw);
        }
        let headings = if doc.media_type == MediaType::Markdown {
            markdown_headings(&doc.text)
        } else {
            Vec::new()
        };
        Ok(raw
            .into_iter()
            .enumerate()
            .map(|(i, (start, text))| {
                let end = start + text.chars().count();
                Chunk {
                    index: i as u32,
                    span: (start as u64, end as u64),
                    page: doc.page_of(start),
                    heading: heading_path_at(&headings, start),
                    text,
                }
            })
            .collect())
    }
}

/// The configured splitter, over the token sizer.
enum Splitter<'a> {
    Text(TextSplitter<TokenSizer<'a>>),
    Markdown(MarkdownSplitter<TokenSizer<'a>>),
}

impl Splitter<'_> {
    /// Appends the chunks of `text` (which starts at character `char_base` of the document)
    /// as (character offset, text).
    ///
    /// The splitter is given the text in pieces (see [`pieces`]): it sizes the first section
    /// of each semantic level whole, so a run of megabytes without whitespace was tokenized
    /// whole again for every chunk cut from it (2 MiB took 885 s); cut first, each piece costs
    /// the same whatever the document's length.
    fn split(&self, text: &str, char_base: usize, max_run: usize, out: &mut Vec<(usize, String)>) {
        for (piece_chars, piece) in pieces(text, max_run) {
            let base = char_base + piece_chars;
            match self {
                Splitter::Text(s) => out.extend(
                    s.chunk_char_indices(piece)
                        .map(|c| (base + c.char_offset, c.chunk.to_string())),
                ),
                Splitter::Markdown(s) => out.extend(
                    s.chunk_char_indices(piece)
                        .map(|c| (base + c.char_offset, c.chunk.to_string())),
                ),
            }
        }
    }
}

/// `text` as consecutive pieces (character offset, piece): ordinary text stays whole, and every
/// run of non-whitespace longer than `max_run` bytes becomes pieces of at most `max_run` bytes,
/// cut at character boundaries. Such a run cannot fit one chunk whatever the tokenizer makes of
/// it (the sizer counts at least one token per [`BYTES_PER_LONG_TOKEN`] bytes of it), so the cut
/// only decides where the splitter must cut anyway; pieces are then split by tokens as usual.
fn pieces(text: &str, max_run: usize) -> Vec<(usize, &str)> {
    let max_run = max_run.max(4);
    let mut out = Vec::new();
    // Start (byte, char) of the piece being built, and the first byte of the current run.
    let (mut piece_byte, mut piece_char) = (0usize, 0usize);
    let mut run: Option<usize> = None;
    for (chars, (byte, c)) in text.char_indices().enumerate() {
        if c.is_whitespace() {
            run = None;
            continue;
        }
        let run_byte = *run.get_or_insert(byte);
        if byte + c.len_utf8() - run_byte > max_run {
            // This character would make the run too long: the piece ends before it (with any
            // text before the run), and the rest of the run starts the next piece.
            out.push((piece_char, &text[piece_byte..byte]));
            (piece_byte, piece_char) = (byte, chars);
            run = Some(byte);
        }
    }
    if piece_byte < text.len() || out.is_empty() {
        out.push((piece_char, &text[piece_byte..]));
    }
    out
}

/// A token whose text spans more bytes than this is a word the tokenizer could not split.
///
/// WordPiece (the BERT-family models Cairn embeds with) maps any run of more than 100
/// characters without whitespace or punctuation to one `[UNK]`: by a plain token count a
/// 40,000-character URL tail or a 15 MiB base64 blob is one token, so the splitter kept it as
/// one chunk that the model embeds as `[UNK]` and `GET …/chunks` returns whole. No vocabulary
/// token of these models is anywhere near this long.
const LONG_TOKEN_BYTES: usize = 32;

/// What such a token counts for: one per this many bytes, about an English subword's length.
const BYTES_PER_LONG_TOKEN: usize = 4;

/// Most words the sizer's cache keeps; past that it is emptied and refills with the words in
/// use (a corpus' vocabulary is far smaller; unique strings such as hashes would grow it
/// forever). At most about 13 MiB (all words 64 bytes long), a few MiB for real text.
const MAX_WORDS: usize = 100_000;
/// Longer words are sized without being cached.
const MAX_CACHED_WORD: usize = 64;

/// The tokenizer that sizes chunks, with a cache of what each word adds to a chunk's size.
///
/// text-splitter sizes many overlapping trial chunks (every level's sections, then binary
/// searches over them), so each word of a document is tokenized many times over:
/// `perf` of `cairn bench ingest` put 3.8 % of the pipeline's samples in the sizer, on the
/// cores the model runs on. When the tokenizer [counts by word](counts_by_word), a chunk's
/// size is computed exactly from per-word figures, each word tokenized once.
#[derive(Debug)]
struct Sizing {
    tokenizer: Tokenizer,
    /// The id of the unknown token, the only one that can span a long run.
    unk: Option<u32>,
    /// Whether [`WordCost`]s add up to a chunk's (see [`counts_by_word`]).
    by_word: bool,
    words: RwLock<HashMap<Box<str>, WordCost>>,
}

/// What one word contributes to [`Sizing::size_whole`]'s terms, from its own encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct WordCost {
    /// Tokens.
    tokens: usize,
    /// Whether one of them is the unknown token.
    unknown: bool,
    /// The tokens counted by [`token_cost`].
    cost: usize,
    /// Bytes of the text the tokens span.
    covered: usize,
}

impl WordCost {
    fn add(&mut self, other: &WordCost) {
        self.tokens += other.tokens;
        self.unknown |= other.unknown;
        self.cost += other.cost;
        self.covered += other.covered;
    }
}

impl Sizing {
    fn new(tokenizer: Tokenizer) -> Self {
        let unk = ["[UNK]", "<unk>"]
            .iter()
            .find_map(|t| tokenizer.token_to_id(t));
        Sizing {
            by_word: counts_by_word(&tokenizer),
            tokenizer,
            unk,
            words: RwLock::new(HashMap::new()),
        }
    }

    /// A chunk's size: [`Sizing::size_whole`]'s figure, from cached words when the tokenizer
    /// allows (the same number: each term of it is a sum over tokens or over non-whitespace
    /// bytes, and every token lies inside one word).
    fn size(&self, chunk: &str) -> usize {
        if !self.by_word {
            return self.size_whole(chunk);
        }
        let mut total = WordCost::default();
        let mut misses = Vec::new();
        {
            let cache = self.words.read().unwrap_or_else(|e| e.into_inner());
            for (a, b) in words(chunk) {
                let word = &chunk[a..b];
                match cache.get(word) {
                    Some(cost) => total.add(cost),
                    None => misses.push(word),
                }
            }
        }
        if !misses.is_empty() {
            let costs: Vec<WordCost> = misses.iter().map(|w| self.word_cost(w)).collect();
            let mut cache = self.words.write().unwrap_or_else(|e| e.into_inner());
            if cache.len() + misses.len() > MAX_WORDS {
                cache.clear();
            }
            for (word, cost) in misses.into_iter().zip(costs) {
                total.add(&cost);
                if word.len() <= MAX_CACHED_WORD {
                    cache.insert(word.into(), cost);
                }
            }
        }
        if plain(chunk, total.tokens, total.unknown) {
            return total.tokens;
        }
        by_length(chunk, total.cost, total.covered)
    }

    /// The figures of one word (or of any text, tokenized whole).
    fn word_cost(&self, word: &str) -> WordCost {
        // A WordPiece tokenizer never fails to encode (unknown text becomes `[UNK]`); should
        // one fail anyway, count the word as one long token of its bytes, which over-counts
        // and so still bounds the chunk.
        let Ok(encoding) = self.tokenizer.encode(word, false) else {
            let n = word.len().div_ceil(BYTES_PER_LONG_TOKEN);
            return WordCost {
                tokens: n,
                unknown: true,
                cost: n,
                covered: word.len(),
            };
        };
        let mut cost = WordCost {
            tokens: encoding.len(),
            unknown: self
                .unk
                .is_some_and(|unk| encoding.get_ids().contains(&unk)),
            ..WordCost::default()
        };
        for &(start, end) in encoding.get_offsets() {
            let bytes = end.saturating_sub(start);
            cost.cost += token_cost(bytes);
            cost.covered += bytes;
        }
        cost
    }

    /// The size from one encoding of the whole chunk: for tokenizers that do not count by
    /// word, and the reference the cached path is tested against.
    fn size_whole(&self, chunk: &str) -> usize {
        // The counting tokenizer has no truncation and no padding (see `Chunker::new`).
        let Ok(fast) = self.tokenizer.encode_fast(chunk, false) else {
            return chunk.len().div_ceil(BYTES_PER_LONG_TOKEN);
        };
        // `encode_fast` skips offsets: only a chunk that needs them pays for them.
        let unknown = self.unk.is_some_and(|unk| fast.get_ids().contains(&unk));
        if plain(chunk, fast.len(), unknown) {
            return fast.len();
        }
        let cost = self.word_cost(chunk);
        by_length(chunk, cost.cost, cost.covered)
    }
}

/// Whether a chunk of `tokens` tokens is sized by its plain token count: unless it holds an
/// unknown token or far more bytes than its tokens could span (text the normalizer drops,
/// such as runs of zero-width characters, makes no token at all); then long tokens count by
/// their length ([`by_length`]).
fn plain(chunk: &str, tokens: usize, unknown: bool) -> bool {
    !unknown && chunk.len() <= (tokens + 1) * LONG_TOKEN_BYTES
}

/// The size of a chunk whose tokens count `cost` by [`token_cost`] and span `covered` bytes:
/// non-whitespace bytes no token covers count like a long token.
fn by_length(chunk: &str, cost: usize, covered: usize) -> usize {
    let text_bytes = chunk
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(char::len_utf8)
        .sum::<usize>();
    cost + text_bytes
        .saturating_sub(covered)
        .div_ceil(BYTES_PER_LONG_TOKEN)
}

/// Sizes chunks in model tokens, counting an unsplittable token by its length.
///
/// Every real token counts at least 1, so a chunk within `max_tokens` by this measure is
/// within it by the tokenizer's own count, whatever the text; and a long token counts enough
/// that the splitter's fallback (graphemes, then characters) cuts inside it. Ordinary text has
/// no token over [`LONG_TOKEN_BYTES`], so its chunks are exactly what a plain token count gives
/// (ids of already-stored chunks do not change).
#[derive(Debug, Clone, Copy)]
struct TokenSizer<'a>(&'a Sizing);

impl ChunkSizer for TokenSizer<'_> {
    fn size(&self, chunk: &str) -> usize {
        self.0.size(chunk)
    }
}

/// The count of one token spanning `bytes` bytes of the text.
fn token_cost(bytes: usize) -> usize {
    if bytes > LONG_TOKEN_BYTES {
        bytes.div_ceil(BYTES_PER_LONG_TOKEN)
    } else {
        1
    }
}

/// (char offset, level, title) of each ATX heading outside fenced code blocks.
fn markdown_headings(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut offset = 0usize;
    let mut in_fence = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
        } else if !in_fence && trimmed.starts_with('#') {
            let level = trimmed.chars().take_while(|&c| c == '#').count();
            let rest = &trimmed[level..];
            if level <= 6 && (rest.starts_with(' ') || rest.trim().is_empty()) {
                let title = rest.trim().trim_end_matches('#').trim().to_string();
                if !title.is_empty() {
                    out.push((offset, level, title));
                }
            }
        }
        offset += line.chars().count();
    }
    out
}

/// The heading path in force at `offset`. A chunk that starts with a heading line takes that
/// heading (the heading is inside it).
fn heading_path_at(headings: &[(usize, usize, String)], offset: usize) -> Option<String> {
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (pos, level, title) in headings {
        if *pos > offset {
            break;
        }
        while stack.last().is_some_and(|(l, _)| *l >= *level) {
            stack.pop();
        }
        stack.push((*level, title));
    }
    if stack.is_empty() {
        None
    } else {
        let path = stack
            .iter()
            .map(|(_, t)| *t)
            .collect::<Vec<_>>()
            .join(" > ");
        Some(cap_heading(path))
    }
}

/// Cuts a heading path to [`MAX_HEADING_BYTES`] (at a character boundary, marked with `…`).
///
/// Cut, not rejected: the heading path is context derived from the document, copied onto
/// (and embedded with) every chunk of its section, while the heading line itself stays
/// verbatim in the chunk that contains it. A demanding user expects a Markdown file with
/// one absurd heading line to be indexed, not refused (refusing would also refuse the same
/// file as `.txt`-equivalent content); what they must not get is that line multiplied by
/// every chunk (a 204 KB heading once made 153 chunks carry it: +45 MB, 38 s). Caller
/// fields that are copied verbatim (metadata, source) are rejected with typed errors
/// instead, since the caller chose them and can shorten them.
fn cap_heading(path: String) -> String {
    if path.len() <= MAX_HEADING_BYTES {
        return path;
    }
    let mut end = MAX_HEADING_BYTES - '…'.len_utf8();
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    tracing::debug!(
        bytes = path.len(),
        limit = MAX_HEADING_BYTES,
        "heading path cut for chunks"
    );
    let mut cut = path[..end].to_string();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_paths() {
        let text =
            "# Guide\nintro\n## Install\nsteps\n```\n# not a heading\n```\n## Use\nrun\n# Other\nx";
        let h = markdown_headings(text);
        assert_eq!(
            h.iter()
                .map(|(_, l, t)| (*l, t.as_str()))
                .collect::<Vec<_>>(),
            vec![(1, "Guide"), (2, "Install"), (2, "Use"), (1, "Other")]
        );
        let at = |needle: &str| heading_path_at(&h, text.find(needle).unwrap());
        assert_eq!(at("intro").as_deref(), Some("Guide"));
        assert_eq!(at("steps").as_deref(), Some("Guide > Install"));
        assert_eq!(at("run").as_deref(), Some("Guide > Use"));
        assert_eq!(at("x").as_deref(), Some("Other"));
    }

    #[test]
    fn long_heading_paths_are_cut() {
        let title = "é".repeat(100_000);
        let text = format!("# {title}\nbody");
        let h = markdown_headings(&text);
        let path = heading_path_at(&h, text.find("body").unwrap()).unwrap();
        assert!(path.len() <= MAX_HEADING_BYTES, "{}", path.len());
        assert!(path.ends_with('…'));
        assert_eq!(
            heading_path_at(&h, 0).as_deref().map(str::len),
            Some(path.len())
        );
    }

    #[test]
    fn settings_respect_model_limit() {
        let s = ChunkSettings::for_model(512);
        assert_eq!(s.max_tokens, 256);
        assert!(s.validate(512).is_ok());
        let s = ChunkSettings::for_model(128);
        assert!(s.max_tokens <= 64 && s.validate(128).is_ok());
        assert!(ChunkSettings {
            max_tokens: 600,
            overlap_tokens: 0,
            whole_document: false,
        }
        .validate(512)
        .is_err());
    }

    #[test]
    fn long_unknown_tokens_count_by_length() {
        let e = crate::fixtures::embedder();
        let sizing = Sizing::new(e.tokenizer().clone());
        assert!(sizing.unk.is_some());
        assert!(sizing.by_word, "bge-small's tokenizer counts by word");
        // Both ways of sizing, twice (the second time from the cache).
        let size = |text: &str| {
            let whole = sizing.size_whole(text);
            assert_eq!(sizing.size(text), whole, "{text:?}");
            assert_eq!(sizing.size(text), whole, "{text:?}");
            whole
        };
        assert_eq!(size("hello world"), e.count_tokens("hello world"));
        // 99 characters are still split into word pieces; 101 are one `[UNK]`.
        let pieces = "x".repeat(99);
        assert_eq!(size(&pieces), e.count_tokens(&pieces));
        let unknown = "x".repeat(101);
        assert_eq!(e.count_tokens(&unknown), 1);
        assert_eq!(size(&unknown), 101usize.div_ceil(BYTES_PER_LONG_TOKEN));
        assert_eq!(size(&format!("see {unknown} now")), 2 + 26);
        // Zero-width characters make no token but still count by their bytes.
        let invisible = "\u{200B}".repeat(400);
        assert_eq!(e.count_tokens(&invisible), 0);
        assert_eq!(size(&invisible), 1200usize.div_ceil(BYTES_PER_LONG_TOKEN));
        // Whitespace alone makes a chunk sparse, without changing its count.
        assert_eq!(size(&format!("a{}b", " ".repeat(200))), 2);
        assert!(sizing.words.read().unwrap().len() >= 4);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The cached, word-by-word size is exactly the size of the whole text's encoding,
        /// whatever the text: every kind of whitespace (including the control characters
        /// BERT's normalizer deletes), words the normalizer empties, unknown tokens, special
        /// tokens written in the text, punctuation, CJK, accents.
        #[test]
        fn cached_size_is_the_whole_texts(parts in proptest::collection::vec(proptest::prop_oneof![
            "[a-zA-Z]{1,12}",
            "[a-z]{90,130}",
            "[éüßİ一二三😀]{1,6}",
            "[.,;:!?()\\[\\]{}'\"-]{1,4}",
            "\\[SEP\\]|\\[UNK\\]|x\\[MASK\\]y",
            "[\u{200B}\u{00AD}\u{0}\u{FFFD}]{1,40}",
            "[ \t\n\r\u{b}\u{c}\u{85}\u{a0}\u{3000}]{1,5}",
        ], 0..60)) {
            let sizing = Sizing::new(crate::fixtures::embedder().tokenizer().clone());
            let text = parts.concat();
            let whole = sizing.size_whole(&text);
            proptest::prop_assert_eq!(sizing.size(&text), whole);
            // Again, now from the cache, and for a slice of it.
            proptest::prop_assert_eq!(sizing.size(&text), whole);
            let cut = text.char_indices().nth(text.chars().count() / 3).map_or(0, |(i, _)| i);
            proptest::prop_assert_eq!(sizing.size(&text[cut..]), sizing.size_whole(&text[cut..]));
        }
    }

    #[test]
    fn pieces_cut_only_long_runs() {
        let text = "ab cd éé";
        assert_eq!(pieces(text, 8), vec![(0, text)]);
        let run = "é".repeat(10); // 20 bytes
        let text = format!("x {run} y");
        let got = pieces(&text, 8);
        // Every piece holds at most 8 bytes of the run, cut at character boundaries, and the
        // pieces are the text in order with their character offsets.
        assert_eq!(got.iter().map(|(_, p)| *p).collect::<String>(), text);
        let mut chars = 0;
        for (offset, piece) in &got {
            assert_eq!(*offset, chars);
            chars += piece.chars().count();
            let longest = piece.split_whitespace().map(str::len).max().unwrap_or(0);
            assert!(longest <= 8, "{piece:?}");
        }
        assert_eq!(got.len(), 3);
    }
}
