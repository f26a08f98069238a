//! `cairn config` and the configuration layers, on the real binary: defaults < file <
//! environment < flags, each value's origin, and bad values refused with the key named
//! before anything is opened.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// `cairn` with a clean environment (only `vars`), in `cwd`.
fn cairn(cwd: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(cwd)
        .env_clear()
        .envs(vars.iter().copied())
        .args(args)
        .output()
        .unwrap()
}

fn settings(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entry<'a>(config: &'a Value, key: &str) -> &'a Value {
    config["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .unwrap_or_else(|| panic!("no setting {key} in {config}"))
}

const FILE: &str = r#"
data_dir = "/from/file"

[store]
sync = "os"

[embed]
query_batch = 4
cache_max_entries = 1000
"#;

#[test]
fn flags_beat_the_environment_which_beats_the_file_which_beats_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.toml");
    std::fs::write(&file, FILE).unwrap();
    let flag_dir = dir.path().join("from-flag");
    let out = cairn(
        dir.path(),
        &[("CAIRN_QUERY_BATCH", "8")],
        &[
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            flag_dir.to_str().unwrap(),
            "config",
            "--json",
        ],
    );
    let c = settings(&out);
    assert_eq!(c["file"], file.to_str().unwrap());
    let data_dir = entry(&c, "data_dir");
    assert_eq!(data_dir["value"], flag_dir.to_str().unwrap());
    assert_eq!(data_dir["origin"]["source"], "flag");
    assert_eq!(data_dir["origin"]["name"], "--data-dir");
    let sync = entry(&c, "store.sync");
    assert_eq!(sync["value"], "os");
    assert_eq!(sync["origin"]["source"], "file");
    let batch = entry(&c, "embed.query_batch");
    assert_eq!(batch["value"], "8");
    assert_eq!(batch["origin"]["name"], "CAIRN_QUERY_BATCH");
    assert_eq!(entry(&c, "embed.cache_max_entries")["value"], "1000");
    let addr = entry(&c, "serve.addr");
    assert_eq!(addr["value"], "127.0.0.1:7878");
    assert_eq!(addr["origin"]["source"], "default");
    // `config` opens nothing: the data directory is not created.
    assert!(!flag_dir.exists());

    // The text form is TOML with the origin beside each value.
    let out = cairn(
        dir.path(),
        &[],
        &["--config", file.to_str().unwrap(), "config"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("store.sync = \"os\""), "{text}");
    assert!(
        text.contains(&format!("# file {}", file.display())),
        "{text}"
    );
    assert!(text.contains("serve.addr = \"127.0.0.1:7878\""), "{text}");
}

#[test]
fn the_file_is_found_by_variable_or_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[store]\nsync = \"os\"\n").unwrap();
    let c = settings(&cairn(dir.path(), &[], &["config", "--json"]));
    assert_eq!(entry(&c, "store.sync")["value"], "os");
    assert!(c["file"].as_str().unwrap().ends_with("cairn.toml"));

    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[embed]\nbatch = 2\n").unwrap();
    let c = settings(&cairn(
        dir.path(),
        &[("CAIRN_CONFIG", other.to_str().unwrap())],
        &["config", "--json"],
    ));
    assert_eq!(entry(&c, "embed.batch")["value"], "2");
    assert_eq!(
        entry(&c, "store.sync")["value"],
        "always",
        "only one file is read"
    );
}

#[test]
fn a_bad_value_stops_the_command_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let refused = |vars: &[(&str, &str)], args: &[&str], needles: &[&str]| {
        let out = cairn(dir.path(), vars, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
        }
        assert!(!data.exists(), "{args:?} opened the data directory");
    };
    refused(
        &[("CAIRN_SYNC", "sometimes")],
        &["--data-dir", data_arg, "stats"],
        &[
            "store.sync",
            "CAIRN_SYNC",
            "\"sometimes\"",
            "`always` or `os`",
        ],
    );
    // Once a silent fallback to the default.
    refused(
        &[("CAIRN_EMBED_BATCH", "eight")],
        &["--data-dir", data_arg, "stats"],
        &["embed.batch", "CAIRN_EMBED_BATCH"],
    );
    refused(
        &[],
        &["--data-dir", data_arg, "serve", "--max-connections", "none"],
        &["serve.max_connections", "--max-connections"],
    );
    refused(
        &[("CAIRN_LOG", "cairn=loud[")],
        &["--data-dir", data_arg, "stats"],
        &["log"],
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[embed]\nsync = \"os\"\n").unwrap();
    refused(
        &[],
        &[
            "--config",
            bad.to_str().unwrap(),
            "--data-dir",
            data_arg,
            "stats",
        ],
        &["unknown setting `embed.sync`", "did you mean `store.sync`?"],
    );
    refused(
        &[],
        &[
            "--config",
            "/no/such/cairn.toml",
            "--data-dir",
            data_arg,
            "stats",
        ],
        &["/no/such/cairn.toml"],
    );
}
