//! `Type=notify` readiness: herald tells systemd READY=1 once storage is open and the listener is
//! bound, and STOPPING=1 when a SIGTERM starts the drain.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn notifies_systemd_when_ready_and_when_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_tokens = [\"systemd-test-admin-token\"]\n[storage]\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1");
    // Ready means listening: the log already has the line with the bound address.
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    assert!(lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("herald listening")));

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let n = socket.recv(&mut buf).expect("STOPPING=1 within 20 s");
    assert_eq!(&buf[..n], b"STOPPING=1");
    // Drain the log so herald never blocks on a full pipe while it stops.
    std::thread::spawn(move || lines.for_each(drop));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
