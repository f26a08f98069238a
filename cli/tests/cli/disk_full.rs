//! A full disk is a state, not a crash: a real `cairn serve` whose data directory is on a
//! small ext4 filesystem (a loop-mounted image this test creates and removes) is filled up,
//! by another file and by its own writes. Writes answer `507 insufficient_storage`, reads keep
//! answering, the process lives (no SIGBUS from the shard's memory-mapped files, no panic),
//! writes work again as soon as space is freed (no restart), everything acknowledged is still
//! there, and a restart on the full disk either opens or refuses with a message, never dies of
//! a signal.
//!
//! Needs root (mount) and `mkfs.ext4`; elsewhere it says so and passes without running.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::crash::Server;

/// A loop-mounted ext4 image, unmounted and removed on drop.
struct SmallDisk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn create(mib: u64) -> Result<SmallDisk, String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("disk.ext4");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(mib << 20))
            .map_err(|e| e.to_string())?;
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))
            .map_err(|e| format!("mkfs.ext4: {e}"))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount))
        .map_err(|e| format!("mount -o loop: {e}"))?;
        Ok(SmallDisk { mount, _dir: dir })
    }

    /// Writes zeros into `name` until at most `leave` bytes are available (0: until the
    /// filesystem refuses); returns its path.
    fn fill(&self, name: &str, leave: u64) -> PathBuf {
        let path = self.mount.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 256 * 1024];
        while self.available() > leave {
            if f.write_all(&block).and_then(|()| f.sync_data()).is_err() {
                break;
            }
        }
        path
    }

    fn available(&self) -> u64 {
        fs4::available_space(&self.mount).unwrap()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mount)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
    }
}

fn scope() -> Value {
    json!({"tenant": "full", "user": "u", "namespace": "n", "agent": "a", "session": "s"})
}

const Q: &str = "tenant=full&user=u&namespace=n";

/// A document of about 6 KB with distinct content per `i`.
fn document(i: usize) -> Value {
    let text = (0..60)
        .map(|j| format!("Record {i}-{j}: the shipment {i} left warehouse {j} on schedule."))
        .collect::<Vec<_>>()
        .join(" ");
    json!({"scope": scope(), "source": format!("notes/{i}.txt"), "text": text})
}

fn message(id: &str) -> Value {
    json!({"scope": scope(), "messages": [{"conversation_id": "c1", "role": "user",
        "content": format!("Is the disk full? ({id})"), "message_id": id}]})
}

/// `send` that fails the test when the connection drops (the server died).
fn call(
    server: &Server,
    log: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    server.send(method, path, body).unwrap_or_else(|e| {
        panic!(
            "{method} {path}: no answer ({e}): did the server die?\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    })
}

/// Sources of every listed document.
fn listed(server: &Server, log: &Path) -> Vec<String> {
    let (s, v) = call(
        server,
        log,
        "GET",
        &format!("/v1/documents?{Q}&limit=1000"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    v["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["source"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_full_disk_is_a_state_not_a_crash() {
    // Large enough for an empty store's sparse files (about 185 MB apparent) and the reserve.
    let disk = match SmallDisk::create(512) {
        Ok(d) => d,
        Err(why) => {
            eprintln!(
                "SKIPPED a_full_disk_is_a_state_not_a_crash: needs a loop-mounted filesystem ({why})"
            );
            return;
        }
    };
    let data = disk.mount.join("data");
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("serve.log");
    let mut server = Server::try_start(&data, None, &log, &[])
        .unwrap_or_else(|(s, l)| panic!("start: {s}: {l}"));
    let (_, ready) = call(&server, &log, "GET", "/readyz", None);
    let needed = ready["disk"]["needed_bytes"].as_u64().unwrap();
    assert!(needed > 0, "{ready}");

    let mut stored = Vec::new();
    for i in 0..5 {
        let (s, v) = call(&server, &log, "POST", "/v1/documents", Some(&document(i)));
        assert_eq!(s, 200, "{v}");
        stored.push(v["source"].as_str().unwrap().to_string());
    }

    // 1. Another file leaves a little more than a write needs: the server's own writes use
    //    it up until they are refused, before the shard's maps run out of blocks.
    let (_, ready) = call(&server, &log, "GET", "/readyz", None);
    let needed = ready["disk"]["needed_bytes"].as_u64().unwrap();
    let filler = disk.fill("filler", needed + (2 << 20));
    eprintln!(
        "filler 1: {} bytes available, {needed} needed",
        disk.available()
    );
    let mut refused = 0;
    for i in 5..1000 {
        let (s, v) = call(&server, &log, "POST", "/v1/documents", Some(&document(i)));
        match s {
            200 => stored.push(v["source"].as_str().unwrap().to_string()),
            507 => {
                assert_eq!(v["error"]["code"], "insufficient_storage", "{v}");
                refused += 1;
                break;
            }
            other => panic!("document {i} on a filling disk: {other} {v}"),
        }
        assert!(
            server.alive(),
            "the server died: {}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
    assert_eq!(refused, 1, "the writes never filled the disk");

    // 2. Completely full: every write is refused with the stable code, never a dropped
    //    connection, a 500 or a dead process.
    let filler2 = disk.fill("filler2", 0);
    eprintln!("filler 2: {} bytes available", disk.available());
    for i in 1000..1010 {
        let (s, v) = call(&server, &log, "POST", "/v1/documents", Some(&document(i)));
        assert_eq!(s, 507, "document {i} on a full disk: {v}");
        assert_eq!(v["error"]["code"], "insufficient_storage", "{v}");
    }
    let (s, v) = call(
        &server,
        &log,
        "POST",
        "/v1/messages",
        Some(&message("m-full")),
    );
    assert_eq!(s, 507, "message on a full disk: {v}");
    assert!(
        server.alive(),
        "the server died: {}",
        std::fs::read_to_string(&log).unwrap()
    );

    // Reads keep working, and report the disk.
    let now = listed(&server, &log);
    for src in &stored {
        assert!(
            now.contains(src),
            "{src} acknowledged, not listed while full"
        );
    }
    let (s, v) = call(
        &server,
        &log,
        "POST",
        "/v1/recall",
        Some(&json!({"scope": scope(), "query": "Which warehouse did shipment 3 leave?"})),
    );
    assert_eq!(s, 200, "recall on a full disk: {v}");
    let (s, ready) = call(&server, &log, "GET", "/readyz", None);
    assert_eq!(s, 200, "{ready}");
    assert_eq!(ready["disk"]["low"], true, "{ready}");
    let (_, metrics) = call(&server, &log, "GET", "/metrics", None);
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(
        metrics.contains("cairn_data_dir_available_bytes"),
        "{metrics}"
    );
    assert!(metrics.contains("cairn_data_dir_needed_bytes"), "{metrics}");

    // 3. Space freed: the same writes work, without a restart.
    std::fs::remove_file(&filler2).unwrap();
    std::fs::remove_file(&filler).unwrap();
    let (s, v) = call(
        &server,
        &log,
        "POST",
        "/v1/documents",
        Some(&document(2000)),
    );
    assert_eq!(s, 200, "after freeing space: {v}");
    stored.push(v["source"].as_str().unwrap().to_string());
    let (s, v) = call(
        &server,
        &log,
        "POST",
        "/v1/messages",
        Some(&message("m-full")),
    );
    assert_eq!(s, 200, "{v}");

    // 4. Full again, then a restart on the full disk: it opens, or it refuses with a
    //    message; never a signal.
    let filler3 = disk.fill("filler3", 0);
    let status = server.stop();
    assert_eq!(
        status.signal(),
        None,
        "stopped by a signal on a full disk: {status}"
    );
    match Server::try_start(&data, None, &log, &[]) {
        Ok(mut again) => {
            let now = listed(&again, &log);
            for src in &stored {
                assert!(now.contains(src), "{src} lost across the restart");
            }
            assert!(again.alive());
            let status = again.stop();
            assert_eq!(status.signal(), None, "{status}");
        }
        Err((status, log)) => {
            assert_eq!(
                status.signal(),
                None,
                "died of a signal at open: {status}\n{log}"
            );
            assert!(
                log.contains("No space left") || log.contains("storage full"),
                "refused without saying why: {log}"
            );
        }
    }

    // 5. With space again, everything acknowledged opens.
    std::fs::remove_file(&filler3).unwrap();
    let again =
        Server::try_start(&data, None, &log, &[]).unwrap_or_else(|(s, l)| panic!("{s}: {l}"));
    let now = listed(&again, &log);
    for src in &stored {
        assert!(now.contains(src), "{src} lost");
    }
    let status = again.stop();
    assert_eq!(status.signal(), None, "{status}");
}
