//! The write path end to end on the real engine and the real model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_ingest::catalog::{list_documents, stats};
use cairn_ingest::fixtures::{embedder, simple_pdf};
use cairn_ingest::{
    extract, ChunkSettings, Chunker, DocStatus, DocumentInput, IngestConfig, IngestError, Ingestor,
    MediaType, MessageInput, Outcome, Progress,
};
use cairn_models::{Role, Scope};
use cairn_store::{EdgeStore, MemoryStore, StoreConfig};

fn ingestor(dir: &std::path::Path) -> Arc<Ingestor> {
    let e = embedder();
    let store: Arc<dyn MemoryStore> =
        Arc::new(EdgeStore::open(&StoreConfig::new(dir, e.spec().dim)).unwrap());
    let mut config = IngestConfig::for_model(e.spec().max_tokens);
    config.chunk = ChunkSettings {
        max_tokens: 32,
        overlap_tokens: 4,
        whole_document: false,
    };
    config.max_file_bytes = 200_000;
    Arc::new(Ingestor::new(store, e, config).unwrap())
}

fn noop() -> Arc<dyn Fn(Progress) + Send + Sync> {
    Arc::new(|_| {})
}

fn scope() -> Scope {
    Scope::new("acme", "alice", "kb", "agent-1", "s1").unwrap()
}

fn ok(outcomes: &[Outcome], source_suffix: &str) -> cairn_ingest::DocumentReport {
    let o = outcomes
        .iter()
        .find(|o| o.source.ends_with(source_suffix))
        .unwrap_or_else(|| panic!("no outcome for {source_suffix}"));
    match &o.result {
        Ok(r) => r.clone(),
        Err(e) => panic!("{source_suffix} failed: {e}"),
    }
}

const MD: &str = "# Handbook\n\nWelcome to the team handbook.\n\n## Travel\n\nBook trains through the travel desk. Flights need approval from a director. Receipts go to finance within 30 days.\n\n## Security\n\nBadges must be worn at all times. Report a lost badge to security on the same day.\n";
const TXT: &str = "The cafeteria opens at 8am and closes at 3pm. Vegetarian options are available every day. On Fridays the cafeteria serves fish.";

#[tokio::test]
async fn formats_spans_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let md = files.path().join("handbook.md");
    let txt = files.path().join("cafeteria.txt");
    let pdf = files.path().join("policy.pdf");
    std::fs::write(&md, MD).unwrap();
    std::fs::write(&txt, TXT).unwrap();
    let page1 = "Parking policy page one.\nEmployees park in lot B on weekdays.\nVisitors use lot A near the entrance.";
    let page2 = "Parking policy page two.\nBicycle racks are behind building C.\nElectric cars charge in lot B only.";
    std::fs::write(&pdf, simple_pdf(&[page1, page2])).unwrap();

    let ing = ingestor(dir.path());
    let out = ing
        .ingest_documents(
            &scope(),
            vec![
                DocumentInput::file(&md),
                DocumentInput::file(&txt),
                DocumentInput::file(&pdf),
            ],
            noop(),
        )
        .await;
    assert_eq!(out.len(), 3);
    let md_r = ok(&out, "handbook.md");
    assert_eq!(md_r.status, DocStatus::Created);
    assert_eq!(md_r.media_type, "text/markdown");
    assert!(md_r.chunks >= 2, "32-token chunks split the handbook");
    let pdf_r = ok(&out, "policy.pdf");
    assert_eq!(pdf_r.media_type, "application/pdf");

    // Every stored chunk's span maps back to the extracted text exactly.
    let store = ing.store();
    let p = scope().partition();
    let (pages, _) = store
        .scroll(
            &p,
            cairn_store::Filter::new().eq("kind", "chunk"),
            1000,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        pages.len() as u32,
        md_r.chunks + ok(&out, "cafeteria.txt").chunks + pdf_r.chunks
    );
    let pdf_text = extract::extract("p", &std::fs::read(&pdf).unwrap(), MediaType::Pdf).unwrap();
    for h in &pages {
        let pt = &h.point;
        let (a, b) = pt.span.unwrap();
        let full = match pt.media_type.as_deref() {
            Some("text/markdown") => MD.to_string(),
            Some("text/plain") => TXT.to_string(),
            _ => pdf_text.text.clone(),
        };
        let slice: String = full
            .chars()
            .skip(a as usize)
            .take((b - a) as usize)
            .collect();
        assert_eq!(Some(slice.as_str()), pt.text.as_deref());
        match pt.media_type.as_deref() {
            Some("application/pdf") => {
                let page = pt.page.unwrap();
                let text = pt.text.as_deref().unwrap();
                if text.contains("page two") {
                    assert_eq!(page, 2);
                }
                if text.starts_with("Parking policy page one") {
                    assert_eq!(page, 1);
                }
            }
            Some("text/markdown") => {
                let text = pt.text.as_deref().unwrap();
                if text.contains("Badges must be worn") {
                    assert_eq!(pt.heading.as_deref(), Some("Handbook > Security"));
                }
            }
            _ => assert_eq!(pt.page, None),
        }
    }
    assert!(pdf_text
        .text
        .contains("Bicycle racks are behind building C."));
}

#[tokio::test]
async fn idempotent_reingest_and_version_replacement() {
    let dir = tempfile::tempdir().unwrap();
    let ing = ingestor(dir.path());
    let s = scope();
    let input = || {
        vec![DocumentInput::text(
            "notes/handbook.md",
            MD,
            MediaType::Markdown,
        )]
    };
    let first = ing.ingest_documents(&s, input(), noop()).await;
    let r1 = ok(&first, "handbook.md");
    let count1 = ing.store().count_all().await.unwrap();

    let second = ing.ingest_documents(&s, input(), noop()).await;
    let r2 = ok(&second, "handbook.md");
    assert_eq!(r2.status, DocStatus::Unchanged);
    assert_eq!((r2.doc_id.as_str(), r2.version), (r1.doc_id.as_str(), 1));
    assert_eq!(ing.store().count_all().await.unwrap(), count1);

    // New content under the same source: a new version; the old chunks are retired.
    let v2 = MD
        .replace("30 days", "14 days")
        .replace("## Security", "## Safety");
    let third = ing
        .ingest_documents(
            &s,
            vec![DocumentInput::text(
                "notes/handbook.md",
                v2.clone(),
                MediaType::Markdown,
            )],
            noop(),
        )
        .await;
    let r3 = ok(&third, "handbook.md");
    assert_eq!(r3.status, DocStatus::Updated);
    assert_eq!(r3.version, 2);
    assert_ne!(r3.doc_id, r1.doc_id);
    let st = stats(ing.store().as_ref(), &s.partition()).await.unwrap();
    assert_eq!(st.documents, 1);
    assert_eq!(st.chunks as u32, r3.chunks);
    let docs = list_documents(ing.store().as_ref(), &s.partition())
        .await
        .unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(
        (docs[0].doc_id.clone(), docs[0].version),
        (r3.doc_id.clone(), 2)
    );

    // Line-ending and trailing-space differences are not a new version.
    let crlf = v2.replace('\n', "  \r\n");
    let fourth = ing
        .ingest_documents(
            &s,
            vec![DocumentInput::text(
                "notes/handbook.md",
                crlf,
                MediaType::Markdown,
            )],
            noop(),
        )
        .await;
    assert_eq!(ok(&fourth, "handbook.md").status, DocStatus::Unchanged);

    // Another scope is a separate world.
    let other = Scope::new("acme", "bob", "kb", "a", "s").unwrap();
    let st_other = stats(ing.store().as_ref(), &other.partition())
        .await
        .unwrap();
    assert_eq!(st_other.chunks, 0);
}

#[tokio::test]
async fn bad_inputs_get_typed_errors_and_the_batch_continues() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let good = files.path().join("good.txt");
    std::fs::write(&good, TXT).unwrap();
    let corrupt = files.path().join("corrupt.pdf");
    let mut bytes = simple_pdf(&["Some text that will be cut off"]);
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&corrupt, &bytes).unwrap();
    let binary = files.path().join("binary.txt");
    std::fs::write(&binary, [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
    let unknown = files.path().join("image.png");
    std::fs::write(&unknown, [137u8, 80, 78, 71]).unwrap();
    let empty = files.path().join("empty.md");
    std::fs::write(&empty, "   \n").unwrap();
    let huge = files.path().join("huge.txt");
    std::fs::write(&huge, "word ".repeat(50_000)).unwrap();
    let missing = files.path().join("missing.md");

    let ing = ingestor(dir.path());
    let inputs = [&good, &corrupt, &binary, &unknown, &empty, &huge, &missing]
        .into_iter()
        .map(DocumentInput::file)
        .collect();
    let out = ing.ingest_documents(&scope(), inputs, noop()).await;
    assert_eq!(out.len(), 7);
    let err = |suffix: &str| -> &IngestError {
        let o = out.iter().find(|o| o.source.ends_with(suffix)).unwrap();
        o.result
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("{suffix} should fail"))
    };
    assert!(
        matches!(err("corrupt.pdf"), IngestError::Extraction { .. }),
        "{:?}",
        err("corrupt.pdf")
    );
    assert!(matches!(
        err("binary.txt"),
        IngestError::UnsupportedMedia { .. }
    ));
    assert!(matches!(
        err("image.png"),
        IngestError::UnsupportedMedia { .. }
    ));
    assert!(matches!(err("empty.md"), IngestError::Empty { .. }));
    assert!(matches!(err("huge.txt"), IngestError::TooLarge { .. }));
    assert!(matches!(err("missing.md"), IngestError::NotFound { .. }));
    for suffix in ["corrupt.pdf", "binary.txt", "empty.md", "huge.txt"] {
        assert_eq!(
            err(suffix).kind(),
            cairn_models::ErrorKind::BadInput,
            "{suffix}"
        );
    }
    assert_eq!(ok(&out, "good.txt").status, DocStatus::Created);
    let st = stats(ing.store().as_ref(), &scope().partition())
        .await
        .unwrap();
    assert_eq!(st.documents, 1);
}

fn msg(conv: &str, role: Role, content: &str, turn: Option<&str>) -> MessageInput {
    MessageInput {
        conversation_id: conv.into(),
        role,
        content: content.into(),
        ts: None,
        turn_id: turn.map(str::to_string),
        speaker: None,
        metadata: None,
    }
}

#[tokio::test]
async fn messages_are_ordered_verbatim_and_replays_collapse() {
    let dir = tempfile::tempdir().unwrap();
    let ing = ingestor(dir.path());
    let s = scope();
    let batch = vec![
        msg(
            "c1",
            Role::User,
            "My dentist appointment is on Tuesday.",
            Some("t1"),
        ),
        msg(
            "c1",
            Role::Assistant,
            "Noted: dentist on Tuesday.",
            Some("t1"),
        ),
        msg("c1", Role::User, "ok", None),
        msg("c1", Role::User, "ok", None),
    ];
    let r = ing.record_messages(&s, batch.clone()).await.unwrap();
    assert_eq!(
        r.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(r.iter().all(|r| r.created));
    assert_eq!(r[0].reference, "msg:c1/0");

    // Replaying the same batch writes nothing new.
    let again = ing.record_messages(&s, batch).await.unwrap();
    assert!(again.iter().all(|r| !r.created));
    assert_eq!(
        again.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        stats(ing.store().as_ref(), &s.partition())
            .await
            .unwrap()
            .messages,
        4
    );

    // A new message continues the sequence.
    let next = ing
        .record_messages(&s, vec![msg("c1", Role::User, "Thanks!", Some("t2"))])
        .await
        .unwrap();
    assert_eq!(next[0].seq, 4);

    // The same turn with different content is a conflict and writes nothing.
    let err = ing
        .record_messages(
            &s,
            vec![msg(
                "c1",
                Role::User,
                "My dentist appointment is on Friday.",
                Some("t1"),
            )],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, IngestError::Conflict(_)));
    assert_eq!(
        stats(ing.store().as_ref(), &s.partition())
            .await
            .unwrap()
            .messages,
        5
    );

    // Stored verbatim, with trust origins by role.
    let (page, _) = ing
        .store()
        .scroll(
            &s.partition(),
            cairn_store::Filter::new().eq("seq", 1i64),
            10,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        page[0].point.text.as_deref(),
        Some("Noted: dentist on Tuesday.")
    );
    assert_eq!(page[0].point.trust, cairn_models::TrustOrigin::AgentOutput);

    // Invalid input is rejected whole.
    let err = ing
        .record_messages(
            &s,
            vec![
                msg("c2", Role::User, "fine", None),
                msg("bad id", Role::User, "x", None),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, IngestError::InvalidInput(_)));
    assert_eq!(
        stats(ing.store().as_ref(), &s.partition())
            .await
            .unwrap()
            .messages,
        5
    );
}

/// Extracted text or Markdown without pages, as the chunker gets it.
fn plain_doc(text: &str, markdown: bool) -> cairn_ingest::Extracted {
    cairn_ingest::Extracted {
        text: text.to_string(),
        media_type: if markdown {
            MediaType::Markdown
        } else {
            MediaType::Text
        },
        page_starts: vec![],
        warnings: vec![],
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Chunk spans always map back to the exact extracted text, chunks stay within the token
    /// size, and chunking is deterministic.
    #[test]
    fn chunk_spans_map_back(words in proptest::collection::vec("[a-zA-Zéü0-9]{1,12}[.,!?]?", 1..400), md in proptest::bool::ANY) {
        let text = words.join(" ");
        let e = embedder();
        let chunker = Chunker::new(e.tokenizer().clone(), ChunkSettings { max_tokens: 48, overlap_tokens: 8, whole_document: false });
        let doc = plain_doc(&text, md);
        let chunks = chunker.chunk(&doc).unwrap();
        proptest::prop_assert!(!chunks.is_empty());
        for c in &chunks {
            let slice: String = text.chars().skip(c.span.0 as usize).take((c.span.1 - c.span.0) as usize).collect();
            proptest::prop_assert_eq!(&slice, &c.text);
            proptest::prop_assert!(e.count_tokens(&c.text) <= 48);
        }
        proptest::prop_assert_eq!(chunker.chunk(&doc).unwrap(), chunks);
    }

    /// Whatever the text (unbroken runs far past the tokenizer's 100-character word limit,
    /// URLs, base64, no spaces at all, CJK, emoji), no chunk exceeds the token size and an
    /// unbroken run is cut into bounded pieces; the chunks still map back to the text exactly.
    #[test]
    fn hostile_text_is_chunked_within_the_token_size(
        parts in proptest::collection::vec(proptest::prop_oneof![
            "[a-z]{1,12}",
            "x{90,3000}",
            "https://example\\.com/[a-zA-Z0-9/_-]{0,400}",
            "[A-Za-z0-9+/]{60,2000}={0,2}",
            "[\u{4e00}-\u{9fff}]{1,300}",
            "[\u{1F600}-\u{1F64F}\u{200D}\u{FE0F}]{1,60}",
            "[ \n]{1,3}",
        ], 1..24),
        md in proptest::bool::ANY,
    ) {
        let text: String = parts.concat();
        let e = embedder();
        let max_tokens = 48;
        let chunker = Chunker::new(e.tokenizer().clone(), ChunkSettings { max_tokens, overlap_tokens: 8, whole_document: false });
        let doc = plain_doc(&text, md);
        let chunks = chunker.chunk(&doc).unwrap();
        let chars: Vec<char> = text.chars().collect();
        for c in &chunks {
            let slice: String = chars[c.span.0 as usize..c.span.1 as usize].iter().collect();
            proptest::prop_assert_eq!(&slice, &c.text);
            proptest::prop_assert!(e.count_tokens(&c.text) <= max_tokens, "{} tokens", e.count_tokens(&c.text));
            // An unbroken run counts one token per 4 bytes, so no chunk holds more of it
            // than max_tokens * 4 bytes (plus the 32 bytes one ordinary token may span).
            let longest_run = c.text.split_whitespace().map(str::len).max().unwrap_or(0);
            proptest::prop_assert!(longest_run <= max_tokens * 4 + 32, "run of {longest_run} bytes");
        }
        // Nothing but whitespace is dropped between chunks.
        let covered: usize = chunks.iter().map(|c| c.text.split_whitespace().map(str::len).sum::<usize>()).sum();
        let total: usize = text.split_whitespace().map(str::len).sum();
        proptest::prop_assert!(covered >= total, "{covered} of {total} bytes in chunks");
    }
}

/// The cases found by probing: a URL with a 40,000-character tail was one 40,024-character
/// chunk, and a 15 MiB string without a space was one chunk (the model embeds only `[UNK]`);
/// here 2 MiB of the latter, and a run of zero-width characters (no token at all).
#[test]
fn unbroken_tokens_are_cut_into_bounded_chunks() {
    let e = embedder();
    let settings = IngestConfig::for_model(e.spec().max_tokens).chunk;
    let chunker = Chunker::new(e.tokenizer().clone(), settings);
    let cases = [
        format!("see https://example.com/{}", "x".repeat(40_000)),
        "ab".repeat(1 << 20),
        format!("hidden {} text", "\u{200B}".repeat(100_000)),
    ];
    for text in cases {
        let doc = plain_doc(&text, false);
        let started = std::time::Instant::now();
        let chunks = chunker.chunk(&doc).unwrap();
        let longest = chunks.iter().map(|c| c.text.len()).max().unwrap();
        eprintln!(
            "{} bytes -> {} chunks, longest {longest} bytes, {:?}",
            text.len(),
            chunks.len(),
            started.elapsed()
        );
        assert!(chunks.len() > text.len() / (settings.max_tokens * 4 + 64));
        assert!(longest <= settings.max_tokens * 4 + 64, "{longest}");
        for c in &chunks {
            assert!(e.count_tokens(&c.text) <= settings.max_tokens);
        }
        // The chunks, overlap removed by their spans, are the text; between chunks only
        // whitespace may be left out.
        let chars: Vec<char> = text.chars().collect();
        let mut end = 0usize;
        let mut rebuilt = String::new();
        for c in &chunks {
            let (start, stop) = (c.span.0 as usize, c.span.1 as usize);
            if start > end {
                assert!(chars[end..start].iter().all(|c| c.is_whitespace()));
                rebuilt.extend(&chars[end..start]);
            }
            rebuilt.extend(c.text.chars().skip(end.saturating_sub(start)));
            end = end.max(stop);
        }
        rebuilt.extend(&chars[end..]);
        assert_eq!(rebuilt, text);
    }
}

#[tokio::test]
async fn sequence_numbers_are_never_reused_after_deletes_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let s = scope();
    let store = {
        let ing = ingestor(dir.path());
        let r = ing
            .record_messages(
                &s,
                vec![
                    msg("c9", Role::User, "first", Some("a")),
                    msg("c9", Role::User, "second", Some("b")),
                    msg("c9", Role::User, "third", Some("c")),
                ],
            )
            .await
            .unwrap();
        assert_eq!(r.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        // Forget the last two messages.
        ing.store()
            .delete_where(
                &s.partition(),
                cairn_store::Filter::new()
                    .eq("kind", "message")
                    .range("seq", Some(1.0), None),
            )
            .await
            .unwrap();
        Arc::clone(ing.store())
    };
    // A new process (a fresh ingestor on the same store) continues after the high-water mark.
    let e = embedder();
    let ing = Ingestor::new(
        store,
        e.clone(),
        IngestConfig::for_model(e.spec().max_tokens),
    )
    .unwrap();
    let r = ing
        .record_messages(&s, vec![msg("c9", Role::User, "fourth", Some("d"))])
        .await
        .unwrap();
    assert_eq!(
        r[0].seq, 3,
        "msg:c9/1 and msg:c9/2 must not point at new content"
    );
}
