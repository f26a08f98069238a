//! Token-sized chunking with `text-splitter`, sized by the embedding model's own tokenizer.
//!
//! Every chunk records its character span in the extracted text (so a citation points at the
//! exact passage), its PDF page, and for Markdown its heading path, which is prepended to the
//! text that is embedded (not to the stored text) so a chunk keeps its section's context.

use cairn_models::limits::MAX_HEADING_BYTES;
use text_splitter::{ChunkConfig, MarkdownSplitter, TextSplitter};
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
#[derive(Debug, Clone)]
pub struct Chunker {
    tokenizer: Tokenizer,
    settings: ChunkSettings,
}

impl Chunker {
    /// `tokenizer` must have truncation disabled (the embedder's counting tokenizer does).
    pub fn new(tokenizer: Tokenizer, settings: ChunkSettings) -> Self {
        Chunker {
            tokenizer,
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
            .with_sizer(&self.tokenizer);
        let raw: Vec<(usize, String)> = match doc.media_type {
            MediaType::Markdown => MarkdownSplitter::new(config)
                .chunk_char_indices(&doc.text)
                .map(|c| (c.char_offset, c.chunk.to_string()))
                .collect(),
            MediaType::Text => TextSplitter::new(config)
                .chunk_char_indices(&doc.text)
                .map(|c| (c.char_offset, c.chunk.to_string()))
                .collect(),
            MediaType::Pdf => {
                // Chunks never straddle pages, so a citation's page is exact.
                let splitter = TextSplitter::new(config);
                let chars: Vec<(usize, char)> = doc.text.char_indices().collect();
                let byte_at =
                    |char_idx: usize| chars.get(char_idx).map_or(doc.text.len(), |(b, _)| *b);
                let mut out = Vec::new();
                let mut bounds = doc.page_starts.clone();
                if bounds.first() != Some(&0) {
                    bounds.insert(0, 0);
                }
                bounds.push(chars.len());
                for w in bounds.windows(2) {
                    let (start, end) = (w[0], w[1]);
                    let page_text = &doc.text[byte_at(start)..byte_at(end)];
                    out.extend(
                        splitter
                            .chunk_char_indices(page_text)
                            .map(|c| (start + c.char_offset, c.chunk.to_string())),
                    );
                }
                out
            }
        };
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
}
