use super::*;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn load(
    file: Option<&str>,
    env: &[(&str, &str)],
    flags: &[(&'static str, &str)],
) -> Result<Config, ConfigError> {
    let env = vars(env);
    let flags: Vec<(&'static str, String)> =
        flags.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let path = Path::new("/etc/cairn/cairn.toml");
    Config::load(&Sources {
        file: file.map(|text| (path, text)),
        env: &env,
        flags: &flags,
    })
}

#[test]
fn defaults_come_from_nowhere() {
    let c = load(None, &[], &[]).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("./cairn-data"));
    assert_eq!(c.store.sync, SyncPolicy::Always);
    assert_eq!(c.store.disk_reserve_bytes, 64 * MIB);
    assert!(
        c.server(384).unwrap().is_none(),
        "no URL: the embedded store"
    );
    assert!(matches!(
        c.engine_options().unwrap().backend,
        Backend::Embedded
    ));
    assert_eq!(c.embed.batch_size, cairn_embed::DEFAULT_BATCH_SIZE);
    assert_eq!(c.extract, WorkerLimits::default());
    assert_eq!(c.serve.addr.to_string(), "127.0.0.1:7878");
    assert_eq!(c.serve.max_body_bytes, 16 * 1024 * 1024);
    assert!(c.entries().iter().all(|e| e.origin == Origin::Default));
    assert_eq!(c.entries().len(), KEYS.len());
}

const MIB: u64 = 1024 * 1024;

#[test]
fn flags_beat_the_environment_which_beats_the_file() {
    let file = "data_dir = \"/from/file\"\n[store]\nsync = \"os\"\n[embed]\nbatch = 4\n";
    let c = load(Some(file), &[], &[]).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/from/file"));
    assert_eq!(c.store.sync, SyncPolicy::Os);
    assert_eq!(c.embed.batch_size, 4);
    let path = PathBuf::from("/etc/cairn/cairn.toml");
    assert_eq!(c.origin("store.sync"), Origin::File(path.clone()));

    let c = load(Some(file), &[("CAIRN_DATA_DIR", "/from/env")], &[]).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/from/env"));
    assert_eq!(c.origin("data_dir"), Origin::Env("CAIRN_DATA_DIR"));
    assert_eq!(c.origin("store.sync"), Origin::File(path));

    let c = load(
        Some(file),
        &[("CAIRN_DATA_DIR", "/from/env")],
        &[("data_dir", "/from/flag")],
    )
    .unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/from/flag"));
    assert_eq!(c.origin("data_dir"), Origin::Flag("--data-dir"));
    // An empty variable is unset, as before.
    let c = load(Some(file), &[("CAIRN_DATA_DIR", " ")], &[]).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/from/file"));
}

#[test]
fn a_bad_value_is_an_error_naming_the_key_and_its_origin() {
    let e = load(None, &[("CAIRN_SYNC", "sometimes")], &[]).unwrap_err();
    assert_eq!(e.key(), Some("store.sync"));
    let text = e.to_string();
    assert!(
        text.contains("store.sync") && text.contains("CAIRN_SYNC"),
        "{text}"
    );
    assert!(
        text.contains("\"sometimes\"") && text.contains("`always` or `os`"),
        "{text}"
    );

    // Once silently the default: now refused.
    for (var, value, key) in [
        ("CAIRN_EMBED_BATCH", "0", "embed.batch"),
        ("CAIRN_EMBED_BATCH", "eight", "embed.batch"),
        ("CAIRN_QUERY_BATCH", "-1", "embed.query_batch"),
        ("CAIRN_QUERY_WAIT_US", "2ms", "embed.query_wait_us"),
        ("CAIRN_EMBED_CACHE_MAX", "lots", "embed.cache_max_entries"),
        ("CAIRN_ORT_THREADS", "0", "embed.ort_threads"),
        ("CAIRN_EMBED_WORKERS", "0", "embed.workers"),
        ("CAIRN_EMBED_WORKERS", "two", "embed.workers"),
        ("CAIRN_ORT_SPIN", "maybe", "embed.ort_spin"),
        ("CAIRN_DISK_RESERVE_MB", "64MB", "store.disk_reserve_mb"),
        ("CAIRN_QDRANT_SHARDS", "0", "store.qdrant.shards"),
        (
            "CAIRN_QDRANT_READ_CONSISTENCY",
            "most",
            "store.qdrant.read_consistency",
        ),
        ("CAIRN_QDRANT_COLLECTION", "a b", "store.qdrant.collection"),
        ("CAIRN_ADDR", "localhost", "serve.addr"),
        ("CAIRN_MAX_CONNECTIONS", "0", "serve.max_connections"),
        ("CAIRN_EXTRACT_TIMEOUT_SECS", "0", "extract.timeout_secs"),
        ("CAIRN_EXTRACT_TIMEOUT_SECS", "soon", "extract.timeout_secs"),
        ("CAIRN_EXTRACT_WORKERS", "0", "extract.workers"),
        ("CAIRN_EXTRACT_WORKERS", "1.5", "extract.workers"),
        ("CAIRN_EXTRACT_MEMORY_MB", "-1", "extract.memory_mb"),
    ] {
        let e = load(None, &[(var, value)], &[]).unwrap_err();
        assert_eq!(e.key(), Some(key), "{var}={value}: {e}");
        match &e {
            ConfigError::Invalid { origin, .. } => assert_eq!(origin, &Origin::Env(var)),
            other => panic!("{var}={value}: {other:?}"),
        }
    }
    let e = load(Some("[embed]\nbatch = 0\n"), &[], &[]).unwrap_err();
    assert!(
        matches!(
            &e,
            ConfigError::Invalid {
                key: "embed.batch",
                origin: Origin::File(_),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn the_file_refuses_what_it_does_not_know() {
    let e = load(Some("[embed]\nsync = \"os\"\n"), &[], &[]).unwrap_err();
    assert_eq!(e.key(), Some("embed.sync"));
    assert!(e.to_string().contains("did you mean `store.sync`?"), "{e}");
    let e = load(Some("[store\n"), &[], &[]).unwrap_err();
    assert!(matches!(e, ConfigError::File { .. }), "{e:?}");
    let e = load(Some("log = [\"a\"]\n"), &[], &[]).unwrap_err();
    assert!(e.to_string().contains("`log`"), "{e}");
    let e = load(None, &[], &[("no.such", "1")]).unwrap_err();
    assert_eq!(e, ConfigError::NoSuchKey("no.such".into()));
}

#[test]
fn extraction_limits() {
    let c = load(
        None,
        &[
            ("CAIRN_EXTRACT_TIMEOUT_SECS", "2.5"),
            ("CAIRN_EXTRACT_MEMORY_MB", "0"),
            ("CAIRN_EXTRACT_WORKERS", "3"),
            ("CAIRN_EXTRACT_MAX_OUTPUT_MB", "1"),
        ],
        &[],
    )
    .unwrap();
    let l = &c.extract;
    assert_eq!(l.timeout, Duration::from_millis(2500));
    assert_eq!(
        l.cpu_seconds,
        Some(5),
        "the CPU backstop follows the timeout"
    );
    assert_eq!(l.memory_bytes, None);
    assert_eq!((l.max_workers, l.max_output_bytes), (3, 1 << 20));
    let c = load(None, &[("CAIRN_EXTRACT_CPU_SECS", "7")], &[]).unwrap();
    assert_eq!(c.extract.cpu_seconds, Some(7));
    let c = load(None, &[("CAIRN_EXTRACT_CPU_SECS", "0")], &[]).unwrap();
    assert_eq!(c.extract.cpu_seconds, None);
}

#[test]
fn a_server_url_selects_the_server_with_its_settings() {
    let c = load(
        Some("[store.qdrant]\nshards = 3\nread_consistency = \"majority\"\n"),
        &[
            ("CAIRN_QDRANT_URL", "http://127.0.0.1:6334"),
            ("CAIRN_QDRANT_COLLECTION", "t_{dir}"),
            ("CAIRN_QDRANT_API_KEY", "sekret"),
        ],
        &[("data_dir", "/srv/a")],
    )
    .unwrap();
    let s = c.server(384).unwrap().unwrap();
    assert_eq!(s.url, "http://127.0.0.1:6334");
    assert_eq!((s.dim, s.shard_number), (384, Some(3)));
    assert_eq!(s.read_consistency, ReadConsistency::Majority);
    assert!(
        s.collection.starts_with("t_") && s.collection.len() == 18,
        "{}",
        s.collection
    );
    let other = load(
        None,
        &[
            ("CAIRN_QDRANT_URL", "http://127.0.0.1:6334"),
            ("CAIRN_QDRANT_COLLECTION", "t_{dir}"),
        ],
        &[("data_dir", "/srv/b")],
    )
    .unwrap();
    assert_ne!(other.server(384).unwrap().unwrap().collection, s.collection);
    assert!(matches!(
        c.engine_options().unwrap().backend,
        Backend::Server(_)
    ));
    // The key is a secret: `cairn config` says only that it is set.
    let shown = c
        .entries()
        .iter()
        .find(|e| e.key == "store.qdrant.api_key")
        .unwrap();
    assert_eq!(shown.value, "(set)");
    assert!(!c.render().contains("sekret"));
}

#[test]
fn every_key_is_read_and_shown() {
    let env = vars(&[]);
    let sources = Sources::env(&env);
    let layers = Layers::collect(&sources).unwrap();
    let config = layers.parse().unwrap();
    let read = layers.read.borrow();
    for k in KEYS {
        assert!(
            read.contains(k.name),
            "`{}` is in KEYS but never read",
            k.name
        );
        assert_ne!(
            config.show(k),
            "?",
            "`{}` has no line in Config::show",
            k.name
        );
        assert!(k.env.starts_with("CAIRN_"), "{}", k.env);
    }
    let mut names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), KEYS.len(), "a key is listed twice");
}

#[test]
fn render_is_toml_that_loads_back() {
    let c = load(
        None,
        &[("CAIRN_SYNC", "os"), ("CAIRN_QUERY_BATCH", "4")],
        &[],
    )
    .unwrap();
    let text = c.render();
    assert!(text.contains("store.sync = \"os\""), "{text}");
    assert!(text.contains("# env CAIRN_SYNC"), "{text}");
    // Every line is `dotted.key = value  # origin`: the set values make a valid file.
    let file: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (kv, _) = l.split_once("  #").unwrap();
            format!("{}\n", kv.trim_end())
        })
        .collect();
    assert!(
        text.contains("# store.qdrant.url ="),
        "unset values are commented: {text}"
    );
    let back = load(Some(&text), &[], &[]).unwrap();
    assert_eq!(back.store.sync, SyncPolicy::Os, "the output itself loads");
    let back = load(Some(&file), &[], &[]).unwrap();
    assert_eq!(back.store.sync, SyncPolicy::Os);
    assert_eq!(back.embed.query_batch, 4);
}

/// The README's Configuration table is [`markdown_table`] (`UPDATE_README=1` rewrites it).
#[test]
fn readme_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (start, end) = ("<!-- config-table:start -->\n", "<!-- config-table:end -->");
    let a = readme
        .find(start)
        .expect("README has the table's start marker")
        + start.len();
    let b = readme.find(end).expect("README has the table's end marker");
    let table = markdown_table();
    if readme[a..b] != table {
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{table}{}", &readme[..a], &readme[b..]);
            std::fs::write(&path, updated).unwrap();
        } else {
            panic!("README's Configuration table differs from KEYS: run UPDATE_README=1 cargo test --release --workspace --lib readme_table");
        }
    }
}

#[test]
fn rendered_values_are_quoted_unless_numbers_or_booleans() {
    assert_eq!(toml_value("30"), "30");
    assert_eq!(toml_value("-1.5"), "-1.5");
    assert_eq!(toml_value("true"), "true");
    assert_eq!(toml_value("os"), "\"os\"");
    // Names that Rust would parse as floats stay strings (`collection = "inf"`).
    assert_eq!(toml_value("inf"), "\"inf\"");
    assert_eq!(toml_value("nan"), "\"nan\"");
    let c = load(None, &[("CAIRN_QDRANT_COLLECTION", "nan")], &[]).unwrap();
    let back = load(Some(&c.render()), &[], &[]).unwrap();
    assert_eq!(back.store.qdrant.collection, "nan");
}
