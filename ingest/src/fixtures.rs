//! Test fixtures (feature `fixtures`): real PDF files written with `lopdf`, so tests never
//! depend on binary files in the repository.

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
            cairn_embed::Embedder::open(&cairn_embed::EmbedConfig::from_env(), None).unwrap_or_else(
                |e| panic!("cannot load the embedding model ({e}); run scripts/setup.sh first"),
            )
        })
        .clone()
}
