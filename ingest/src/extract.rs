//! Text extraction: plain text, Markdown and PDF, with typed errors and warnings.
//!
//! `pdf-extract` panics on many malformed files, so it runs under `catch_unwind` (the
//! workspace keeps `panic = "unwind"`) and a panic becomes [`IngestError::Extraction`].
//! It also silently returns almost no text for some valid PDFs (it ignores the `'` text
//! operator), so a low text yield per page is reported as a warning.
//!
//! `catch_unwind` does not contain a stack overflow, an allocation failure, a hang or a
//! memory blow-up, all of which hostile PDFs cause. [`Extractor::Isolated`] therefore runs
//! the PDF parser in a child process with time and memory limits ([`isolate`]); the pipeline
//! calls [`Extractor::extract`] with the extractor of its [`crate::IngestConfig`]. [`extract`]
//! itself is the in-process path (and what the child runs).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::IngestError;

pub mod isolate;

pub use isolate::{Extractor, IsolatedExtractor, WorkerLimits};

/// What kind of document a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MediaType {
    #[serde(rename = "text/plain")]
    Text,
    #[serde(rename = "text/markdown")]
    Markdown,
    #[serde(rename = "application/pdf")]
    Pdf,
}

impl MediaType {
    pub fn as_str(self) -> &'static str {
        match self {
            MediaType::Text => "text/plain",
            MediaType::Markdown => "text/markdown",
            MediaType::Pdf => "application/pdf",
        }
    }

    /// From a media type string (parameters such as `; charset=utf-8` are ignored).
    pub fn parse(s: &str) -> Option<Self> {
        match s
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "text/plain" => Some(MediaType::Text),
            "text/markdown" | "text/x-markdown" => Some(MediaType::Markdown),
            "application/pdf" => Some(MediaType::Pdf),
            _ => None,
        }
    }

    /// From a file name's extension.
    pub fn from_path(path: &str) -> Option<Self> {
        let ext = path.rsplit('.').next()?.to_ascii_lowercase();
        if !path.contains('.') {
            return None;
        }
        match ext.as_str() {
            "txt" | "text" => Some(MediaType::Text),
            "md" | "markdown" => Some(MediaType::Markdown),
            "pdf" => Some(MediaType::Pdf),
            _ => None,
        }
    }
}

/// Extracted text of one document.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    pub text: String,
    pub media_type: MediaType,
    /// Character offset at which each page starts (PDF only; empty otherwise).
    pub page_starts: Vec<usize>,
    pub warnings: Vec<String>,
}

impl Extracted {
    /// 1-based page of the character at `char_offset` (PDF only).
    pub fn page_of(&self, char_offset: usize) -> Option<u32> {
        if self.page_starts.is_empty() {
            return None;
        }
        let idx = self.page_starts.partition_point(|&s| s <= char_offset);
        Some(idx.max(1) as u32)
    }
}

/// Below this many characters per page on average, a PDF's yield is suspicious.
const LOW_YIELD_CHARS_PER_PAGE: usize = 200;

/// Extracts text from bytes of a known media type, in this process (see [`Extractor`] for
/// the isolated path).
pub fn extract(
    source: &str,
    bytes: &[u8],
    media_type: MediaType,
) -> Result<Extracted, IngestError> {
    let extracted = match media_type {
        MediaType::Text | MediaType::Markdown => {
            if looks_binary(bytes) {
                return Err(IngestError::UnsupportedMedia {
                    source_name: source.to_string(),
                    reason: "binary content (NUL bytes) in a text file".into(),
                });
            }
            let mut warnings = Vec::new();
            let text = match std::str::from_utf8(bytes) {
                Ok(s) => s.to_string(),
                Err(_) => {
                    warnings.push(
                        "invalid UTF-8: decoded lossily (invalid bytes became U+FFFD)".to_string(),
                    );
                    String::from_utf8_lossy(bytes).into_owned()
                }
            };
            Extracted {
                text,
                media_type,
                page_starts: Vec::new(),
                warnings,
            }
        }
        MediaType::Pdf => extract_pdf(source, bytes)?,
    };
    if extracted.text.trim().is_empty() {
        return Err(IngestError::Empty {
            source_name: source.to_string(),
        });
    }
    Ok(extracted)
}

fn looks_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|&b| b == 0)
}

fn extract_pdf(source: &str, bytes: &[u8]) -> Result<Extracted, IngestError> {
    if !bytes.starts_with(b"%PDF") {
        return Err(IngestError::Extraction {
            source_name: source.to_string(),
            reason: "not a PDF file (no %PDF header)".into(),
        });
    }
    let pages = catch_unwind(AssertUnwindSafe(|| {
        pdf_extract::extract_text_from_mem_by_pages(bytes)
    }))
    .map_err(|panic| IngestError::Extraction {
        source_name: source.to_string(),
        reason: format!("PDF parser crashed: {}", panic_message(&panic)),
    })?
    .map_err(|e| IngestError::Extraction {
        source_name: source.to_string(),
        reason: format!("malformed PDF: {e}"),
    })?;

    let mut text = String::new();
    let mut page_starts = Vec::with_capacity(pages.len());
    let mut chars = 0usize;
    for page in &pages {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
            chars += 1;
        }
        page_starts.push(chars);
        text.push_str(page);
        chars += page.chars().count();
    }
    let mut warnings = Vec::new();
    let non_space = text.chars().filter(|c| !c.is_whitespace()).count();
    if !pages.is_empty() && non_space / pages.len() < LOW_YIELD_CHARS_PER_PAGE {
        warnings.push(format!(
            "low text yield: {non_space} characters over {} page(s); the PDF may be scanned \
             or use text operators the extractor ignores",
            pages.len()
        ));
    }
    Ok(Extracted {
        text,
        media_type: MediaType::Pdf,
        page_starts,
        warnings,
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types() {
        assert_eq!(MediaType::from_path("a/b.MD"), Some(MediaType::Markdown));
        assert_eq!(MediaType::from_path("x.pdf"), Some(MediaType::Pdf));
        assert_eq!(MediaType::from_path("x.bin"), None);
        assert_eq!(MediaType::from_path("README"), None);
        assert_eq!(
            MediaType::parse("text/plain; charset=utf-8"),
            Some(MediaType::Text)
        );
    }

    #[test]
    fn lossy_utf8_warns_and_binary_fails() {
        let e = extract("a.txt", b"caf\xe9 ok", MediaType::Text).unwrap();
        assert!(e.text.contains('\u{FFFD}'));
        assert_eq!(e.warnings.len(), 1);
        assert!(matches!(
            extract("b.txt", b"\x00\x01\x02", MediaType::Text),
            Err(IngestError::UnsupportedMedia { .. })
        ));
        assert!(matches!(
            extract("c.txt", b"  \n ", MediaType::Text),
            Err(IngestError::Empty { .. })
        ));
    }

    #[test]
    fn corrupt_pdfs_are_typed_errors_not_panics() {
        let cases: [&[u8]; 4] = [
            b"not a pdf",
            b"%PDF-1.4\n",
            b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF",
            b"%PDF-1.7\n\xff\xfe\x00garbage xref 0 1\n0000000000 65535 f \ntrailer<</Size 1>>startxref 9\n%%EOF",
        ];
        for bytes in cases {
            let r = extract("x.pdf", bytes, MediaType::Pdf);
            assert!(matches!(r, Err(IngestError::Extraction { .. })), "{r:?}");
        }
    }

    #[test]
    fn page_lookup() {
        let e = Extracted {
            text: "aaaa\nbbbb".into(),
            media_type: MediaType::Pdf,
            page_starts: vec![0, 5],
            warnings: vec![],
        };
        assert_eq!(e.page_of(0), Some(1));
        assert_eq!(e.page_of(4), Some(1));
        assert_eq!(e.page_of(5), Some(2));
        assert_eq!(e.page_of(8), Some(2));
    }
}
