//! `log.format = "json"`: one JSON object per line, fields included, nothing else on stderr.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn json_log_format_emits_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[storage]\npath = {:?}\n[log]\nformat = \"json\"\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    let listening = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no listening line; got {lines:#?}"));
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON object per line ({e}): {line}"));
        assert!(
            v.is_object() && v["level"].is_string() && v["timestamp"].is_string(),
            "{v}"
        );
        lines.push(v.clone());
        if v["message"] == "herald listening" {
            break v;
        }
    };
    assert!(listening["addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    // The generated admin token's file is logged, never the token.
    let token = std::fs::read_to_string(dir.path().join("data/admin.token")).unwrap();
    assert!(lines.iter().all(|l| !l.to_string().contains(token.trim())));
    let _ = child.kill();
    let _ = child.wait();
}
