//! The OpenAPI document (docs/api.md) checked as clients check it: `openapi-spec-validator` says it
//! is valid OpenAPI 3.1, and `schemathesis` runs every documented operation against a live herald
//! with the admin token — no 5xx, and every status, content type and body as documented
//! (tests/tools/openapi/check.py). herald runs in a network namespace of its own (loopback
//! only): schemathesis makes endpoints with any URL, and nothing may leave this machine.

use std::path::Path;
use std::process::Command;

const ADMIN: &str = "openapi-check-admin-token";

fn python_has(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_openapi_document_is_valid_and_every_operation_answers_as_documented() {
    assert!(
        python_has("schemathesis, openapi_spec_validator"),
        "this test needs python3 with schemathesis and openapi-spec-validator: \
         pip install -r tests/tools/openapi/requirements.txt"
    );
    let unshare = Command::new("unshare").args(["-n", "true"]).status();
    assert!(
        unshare.is_ok_and(|s| s.success()),
        "this test runs herald in a network namespace of its own: it needs root and \
         `unshare -n` (util-linux), as CI has"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_tokens = [\"{ADMIN}\"]\n\
             [storage]\npath = {:?}\n\
             [delivery]\nconnect_timeout = \"300ms\"\ntimeout = \"300ms\"\n\
             [catalog.events.\"order.paid\"]\ndescription = \"An order was paid\"\n\
             schema = {{ type = \"object\", required = [\"order_id\"], properties = {{ order_id = {{ type = \"string\" }} }} }}\n\
             sample = {{ order_id = \"o-1\" }}\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = root.join("target/schemathesis");
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c"])
        .arg("ip link set lo up && exec python3 tests/tools/openapi/check.py")
        .current_dir(root)
        .env("HERALD_BIN", env!("CARGO_BIN_EXE_herald"))
        .env("HERALD_CONFIG", &config)
        .env("HERALD_ADMIN_TOKEN", ADMIN)
        .env("HERALD_LOG", dir.path().join("herald.log"))
        .env("SCHEMATHESIS_EXAMPLES", "50")
        .env("SCHEMATHESIS_SECONDS", "170")
        .env("SCHEMATHESIS_REPORT_DIR", &report)
        .output()
        .expect("run tests/tools/openapi/check.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the OpenAPI check failed:\n{text}");
    assert!(
        text.contains("the document is valid OpenAPI 3.1.0"),
        "{text}"
    );
    assert!(
        text.contains("every documented operation answered as documented"),
        "{text}"
    );
}
