//! Test fixtures (feature `fixtures`): real PDF files written with `lopdf`, so tests never
//! depend on binary files in the repository, and a corpus of hostile inputs ([`hostile`]).

use std::io::Write;

use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document, Object, Stream};

/// A valid PDF with one page per entry of `pages`; each page's text is laid out one line per
/// `\n` in Courier, with the `Tj` operator (which `pdf-extract` reads).
pub fn simple_pdf(pages: &[&str]) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Courier",
    });
    let resources_id = doc.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id },
    });
    let mut kids: Vec<Object> = Vec::new();
    for text in pages {
        let mut ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 10.into()]),
            Operation::new("TL", vec![12.into()]),
            Operation::new("Td", vec![40.into(), 800.into()]),
        ];
        for line in text.lines() {
            ops.push(Operation::new("Tj", vec![Object::string_literal(line)]));
            ops.push(Operation::new("T*", vec![]));
        }
        ops.push(Operation::new("ET", vec![]));
        let content = Content { operations: ops };
        let bytes = content.encode().unwrap_or_default();
        let content_id = doc.add_object(Stream::new(dictionary! {}, bytes));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(page_id.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => count,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
    });
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    // Writing to a Vec cannot fail for I/O reasons.
    let _ = doc.save_to(&mut out);
    out
}

/// The default embedding model, loaded once per test process (tests share its worker).
/// Panics with set-up instructions when the model files are missing.
pub fn embedder() -> cairn_embed::Embedder {
    static EMBEDDER: std::sync::OnceLock<cairn_embed::Embedder> = std::sync::OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            cairn_embed::Embedder::open(&cairn_embed::EmbedConfig::default(), None).unwrap_or_else(
                |e| panic!("cannot load the embedding model ({e}); run scripts/setup.sh first"),
            )
        })
        .clone()
}

// ---------- hostile inputs ----------

/// One hostile input: a file name (its extension gives the media type) and its bytes.
#[derive(Debug, Clone)]
pub struct Hostile {
    /// What it is, in a word (`self-xobject`, `zip-bomb`, …).
    pub name: &'static str,
    pub file_name: String,
    pub bytes: Vec<u8>,
}

/// The hostile-input corpus: inputs that crash, hang or exhaust a naive parser. Each must
/// cost only itself: a typed error (or, for odd but decodable text, a stored document with
/// a warning), never the process. `bomb_bytes` is what the compression bomb inflates to.
pub fn hostile(bomb_bytes: u64) -> Vec<Hostile> {
    let item = |name: &'static str, file_name: &str, bytes: Vec<u8>| Hostile {
        name,
        file_name: file_name.to_string(),
        bytes,
    };
    vec![
        item(
            "self-xobject",
            "self-xobject.pdf",
            self_referencing_xobject_pdf(),
        ),
        item(
            "mutual-xobjects",
            "mutual-xobjects.pdf",
            mutually_recursive_xobjects_pdf(),
        ),
        item(
            "nested-arrays",
            "nested-arrays.pdf",
            nested_arrays_pdf(200_000),
        ),
        item(
            "nested-dicts",
            "nested-dicts.pdf",
            nested_dictionaries_pdf(200_000),
        ),
        item("zip-bomb", "zip-bomb.pdf", compression_bomb_pdf(bomb_bytes)),
        item("truncated", "truncated.pdf", truncated_pdf()),
        item("garbage", "garbage.pdf", garbage_pdf(64 * 1024, 7)),
        item("empty-pdf", "empty.pdf", Vec::new()),
        item("empty-text", "empty.txt", Vec::new()),
        item("invalid-utf8", "invalid-utf8.md", invalid_utf8_text()),
        item("huge-line", "huge-line.txt", huge_single_line(2 << 20)),
    ]
}

/// Assembles a PDF from raw object bodies (object `i + 1` is `objects[i]`; object 1 is the
/// catalog) with a correct cross-reference table. Raw text, because `lopdf`'s writer
/// (recursive) could not write some of these objects itself.
pub fn raw_pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend(body);
        out.extend(b"\nendobj\n");
    }
    let xref = out.len();
    let size = objects.len() + 1;
    out.extend(format!("xref\n0 {size}\n0000000000 65535 f \n").as_bytes());
    for offset in offsets {
        out.extend(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend(
        format!("trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n").as_bytes(),
    );
    out
}

/// A stream object: `dict` holds the entries besides `/Length`.
fn stream_object(dict: &str, content: &[u8]) -> Vec<u8> {
    let mut out = format!("<< {dict} /Length {} >>\nstream\n", content.len()).into_bytes();
    out.extend(content);
    out.extend(b"\nendstream");
    out
}

/// One page (objects 1–5: catalog, pages, page, font, content) with extra page resources
/// and extra page entries, followed by `more` objects (numbered from 6).
fn one_page_pdf(resources: &str, page_extra: &str, content: &[u8], more: Vec<Vec<u8>>) -> Vec<u8> {
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 612 792] >>".to_vec(),
        format!(
            "<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 4 0 R >> {resources} >> \
             /Contents 5 0 R {page_extra} >>"
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>".to_vec(),
        stream_object("", content),
    ];
    objects.extend(more);
    raw_pdf(&objects)
}

const COVER_TEXT: &[u8] = b"BT /F1 12 Tf 72 720 Td (Quarterly report cover page) Tj ET\n";

/// A page that draws Form XObject `X0`, whose own content draws `X0` again: a parser that
/// follows `Do` without a depth limit recurses until the stack overflows.
pub fn self_referencing_xobject_pdf() -> Vec<u8> {
    let mut content = COVER_TEXT.to_vec();
    content.extend(b"/X0 Do\n");
    one_page_pdf(
        "/XObject << /X0 6 0 R >>",
        "",
        &content,
        vec![stream_object(
            "/Type /XObject /Subtype /Form /BBox [0 0 612 792] \
             /Resources << /XObject << /X0 6 0 R >> >>",
            b"/X0 Do",
        )],
    )
}

/// Form XObjects `X0` and `X1` that draw each other.
pub fn mutually_recursive_xobjects_pdf() -> Vec<u8> {
    let mut content = COVER_TEXT.to_vec();
    content.extend(b"/X0 Do\n");
    let form = |other: &str, id: u32| {
        stream_object(
            &format!(
                "/Type /XObject /Subtype /Form /BBox [0 0 612 792] \
                 /Resources << /XObject << /{other} {id} 0 R >> >>"
            ),
            format!("/{other} Do").as_bytes(),
        )
    };
    one_page_pdf(
        "/XObject << /X0 6 0 R >>",
        "",
        &content,
        vec![form("X1", 7), form("X0", 6)],
    )
}

/// Arrays nested `depth` deep (`[[[…]]]`), both in an object the page refers to and as a
/// `TJ` operand in the page's content stream (which the text extractor must parse).
pub fn nested_arrays_pdf(depth: usize) -> Vec<u8> {
    let mut nested = "[".repeat(depth).into_bytes();
    nested.extend("]".repeat(depth).as_bytes());
    let mut content = COVER_TEXT.to_vec();
    content.extend(b"BT /F1 12 Tf ");
    content.extend(&nested);
    content.extend(b" TJ ET\n");
    one_page_pdf("", "/Nested 6 0 R", &content, vec![nested])
}

/// Dictionaries nested `depth` deep (`<< /A << /A … >> >>`), both in an object the page
/// refers to and as the property list of a marked-content operator (`BDC`) in the page's
/// content stream.
pub fn nested_dictionaries_pdf(depth: usize) -> Vec<u8> {
    let mut nested = "<< /A ".repeat(depth).into_bytes();
    nested.extend(b"1");
    nested.extend(" >>".repeat(depth).as_bytes());
    let mut content = COVER_TEXT.to_vec();
    content.extend(b"/Span ");
    content.extend(&nested);
    content.extend(b" BDC EMC\n");
    one_page_pdf("", "/Nested 6 0 R", &content, vec![nested])
}

/// A page whose content stream, compressed twice (`/Filter [/FlateDecode /FlateDecode]`),
/// inflates to `inflated_bytes` (mostly spaces) while the file stays a few KiB: a
/// "zip bomb" for a parser that inflates without a limit.
pub fn compression_bomb_pdf(inflated_bytes: u64) -> Vec<u8> {
    use flate2::write::ZlibEncoder;
    use flate2::Compression;
    // The outer encoder's output feeds the inner one: zlib(zlib(content)).
    let mut encoder = ZlibEncoder::new(
        ZlibEncoder::new(Vec::new(), Compression::best()),
        Compression::best(),
    );
    let block = vec![b' '; 1 << 20];
    let mut left = inflated_bytes.saturating_sub(COVER_TEXT.len() as u64);
    // Writing into a Vec cannot fail.
    encoder.write_all(COVER_TEXT).expect("in-memory write");
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        encoder.write_all(&block[..n]).expect("in-memory write");
        left -= n as u64;
    }
    let compressed = encoder
        .finish()
        .and_then(|inner| inner.finish())
        .expect("in-memory write");
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 612 792] >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
            .to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>".to_vec(),
    ];
    objects.push(stream_object(
        "/Filter [/FlateDecode /FlateDecode]",
        &compressed,
    ));
    raw_pdf(&objects)
}

/// A valid two-page PDF cut off in the middle (no cross-reference table, no trailer).
pub fn truncated_pdf() -> Vec<u8> {
    let mut pdf = simple_pdf(&[
        "Minutes of the board meeting.\nThe budget was approved.",
        "Action items.\nHire two engineers.",
    ]);
    pdf.truncate(pdf.len() * 3 / 5);
    pdf
}

/// A `%PDF` header followed by `len` pseudo-random bytes (deterministic for a `seed`).
pub fn garbage_pdf(len: usize, seed: u64) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n".to_vec();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < len {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend(x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len.max(9));
    out
}

/// Markdown with invalid UTF-8 sequences (a stray continuation byte, a truncated sequence,
/// Latin-1) in otherwise readable text; no NUL bytes, so it is not taken for binary.
pub fn invalid_utf8_text() -> Vec<u8> {
    let mut out = b"# Caf\xe9 menu\n\nThe espresso costs 2\x80 and the \xf0\x9f cake is ".to_vec();
    out.extend(b"made with cr\xe8me fra\xeeche every morning.\n\xff\xfe trailing bytes\n");
    out
}

/// One line of `bytes` bytes without a newline or a space (a single enormous "word").
pub fn huge_single_line(bytes: usize) -> Vec<u8> {
    let pattern = b"abcdefghijklmnopqrstuvwxyz0123456789";
    pattern.iter().copied().cycle().take(bytes).collect()
}
